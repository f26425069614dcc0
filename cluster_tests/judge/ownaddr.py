"""F7: a node's own address as its torch.distributed gloo ranks take it (pure).

Without ``GLOO_SOCKET_IFNAME``, torch (``makeDefaultDevice``) and gloo (``lookupAddrForHostname``)
resolve the node's own hostname (``gethostname()``) with ``getaddrinfo(AF_UNSPEC, SOCK_STREAM)``
and bind the first result that binds; that address is what the rank advertises to every peer
through the store.  If none binds, torch warns and falls back to 127.0.0.1.  With
``GLOO_SOCKET_IFNAME`` the named interface's address is used (F5 judges the name).

The node probe (netprobe.py ``listen``) binds a listener on exactly that address, and every peer
connects to it (``connect``): what ``init_process_group`` will do.
"""

from __future__ import annotations

import ipaddress
from typing import Any


def _family(addr: str) -> str:
    return "IPv6" if ":" in addr else "IPv4"


def problems(node: str, own: dict[str, Any] | None, peers: dict[str, dict[str, Any] | None]
             ) -> list[str]:
    """Why peers cannot connect to `node`'s own gloo address (empty: they all can).

    ``own``: the listen probe's facts; ``peers``: peer -> its connect result to that address
    (None: that peer did not try)."""
    if own is None:
        return []
    how = own.get("how") or "hostname"
    host = own.get("hostname")
    view = (f"`hostname` there is '{host}', which resolves there to "
            f"{', '.join(own.get('candidates') or []) or 'nothing'}" if host else how)
    addr = own.get("addr")
    hosts_fix = (f"on {node}: make '{host}' resolve there to an address its peers reach (the "
                 f"/etc/hosts line of '{host}'), or set GLOO_SOCKET_IFNAME to the interface the "
                 f"nodes share" if host else
                 f"on {node}: set GLOO_SOCKET_IFNAME to an interface with an address the peers reach")
    if addr is None or not own.get("port"):
        return [f"{node}: its gloo ranks have no address to bind ({view}; "
                f"{own.get('error') or '; '.join(own.get('bind_errors') or []) or 'none binds'}): "
                f"init_process_group fails there.\n  fix: {hosts_fix}"]
    if how == "loopback fallback" or ipaddress.ip_address(addr.split("%")[0]).is_loopback:
        why = ("none of those addresses binds, so torch falls back to 127.0.0.1"
               if how == "loopback fallback" else f"the first that binds is {addr}, a loopback address")
        return [f"{node}: its gloo ranks would advertise {addr} to their peers ({view}; {why}): "
                f"every peer would connect to itself, and init_process_group fails on every "
                f"node.\n  fix: {hosts_fix}"]
    bad = {p: r for p, r in sorted(peers.items()) if r is not None and r.get("status") != "ok"}
    if not bad:
        return []
    said = "; ".join(f"{p}: {r.get('status')}" for p, r in bad.items())
    return [f"{node}: its gloo ranks would advertise {addr} ({_family(addr)}; {view}, the first "
            f"that binds), and {', '.join(bad)} cannot connect to it ({said}): "
            f"init_process_group fails on every node.\n  fix: {hosts_fix}"]
