"""F7: a node's own address as its torch.distributed gloo ranks take it (pure).

Without ``GLOO_SOCKET_IFNAME``, torch (``makeDefaultDevice``) and gloo (``lookupAddrForHostname``)
resolve the node's own hostname (``gethostname()``) with ``getaddrinfo(AF_UNSPEC, SOCK_STREAM)``
and bind the first result that binds; that address is what the rank advertises to every peer
through the store.  If none binds, torch warns and falls back to 127.0.0.1.  With
``GLOO_SOCKET_IFNAME`` the named interface's address is used (F5 judges the name).
``MASTER_ADDR`` plays no part in it (torch reads it only for the TCPStore every rank dials,
which H3/F2 judge): a rank's environment setting it leaves this address where it is.

The node probe (netprobe.py ``listen``) binds a listener on exactly that address, and every peer
connects to it (``connect``).  Who dials whom: in gloo's tcp pair (``Pair::connect``) the side
whose own address is greater (the address bytes compared) connects, the smaller one listens; so
an unusable address breaks the launch where a peer with a greater address must dial it (and
always across address families), and only waits for such a peer otherwise (a warning: a
127.0.0.1 fallback among 10.x peers works, among 192.168.x peers it does not).
"""

from __future__ import annotations

import ipaddress
from typing import Any


def _family(addr: str) -> str:
    return "IPv6" if ":" in addr else "IPv4"


def dials(peer_addr: str | None, addr: str) -> bool:
    """Does a gloo rank advertising `peer_addr` connect to one advertising `addr` (gloo: the
    greater address connects)?  Across families, or unknown: assume it does."""
    if not peer_addr:
        return True
    try:
        a = ipaddress.ip_address(peer_addr.split("%")[0])
        b = ipaddress.ip_address(addr.split("%")[0])
    except ValueError:
        return True
    return a.version != b.version or a.packed > b.packed


def judge(node: str, own: dict[str, Any] | None, peers: dict[str, dict[str, Any] | None],
          peer_addrs: dict[str, str | None]) -> tuple[list[str], list[str]]:
    """(problems, warnings) of `node`'s own gloo address: problems where a peer that will dial it
    cannot, warnings where only peers that will not dial it (gloo's order) cannot."""
    found = problems(node, own, peers)
    if not found or own is None or not own.get("addr") or not own.get("port"):
        return found, []
    addr = own["addr"]
    others = sorted(p for p, a in peer_addrs.items() if a and (":" in a) != (":" in addr))
    if others:  # gloo's device refuses pairs of two families outright, on every rank
        head, _, fix = found[0].partition("\n  fix: ")
        return [f"{head}\n  gloo needs one address family on every rank: {', '.join(others)} "
                f"advertise{'s' if len(others) == 1 else ''} "
                f"{_family(peer_addrs[others[0]] or '')}, "
                f"so every rank stops at init (`ss1.ss_family == ss2.ss_family`)\n  fix: {fix}"], []
    failing = [p for p, r in peers.items() if r is not None and r.get("status") != "ok"]
    routable = (own.get("how") != "loopback fallback"
                and not ipaddress.ip_address(addr.split("%")[0]).is_loopback)
    if routable and not failing:
        return found, []
    dialers = [p for p in (failing or [p for p in peers if peers[p] is not None])
               if dials(peer_addrs.get(p), addr)]
    if dialers:
        return found, []
    return [], [f"{found[0].split(chr(10))[0]}\n  today no peer dials it (gloo: the greater "
                f"address connects, and every peer's is below {addr}), so the launch works; a "
                f"node with a greater address would hang there.\n  fix: "
                + found[0].split("fix: ", 1)[-1]]


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
                 "nodes share" if host else
                 f"on {node}: set GLOO_SOCKET_IFNAME to an interface with an address "
                 "the peers reach")
    if addr is None or not own.get("port"):
        return [f"{node}: its gloo ranks have no address to bind ({view}; "
                f"{own.get('error') or '; '.join(own.get('bind_errors') or []) or 'none binds'}): "
                f"init_process_group fails there.\n  fix: {hosts_fix}"]
    if how == "loopback fallback" or ipaddress.ip_address(addr.split("%")[0]).is_loopback:
        why = ("so torch falls back to 127.0.0.1" if not own.get("candidates") else
               "none of those addresses binds, so torch falls back to 127.0.0.1"
               if how == "loopback fallback" else
               f"the first that binds is {addr}, a loopback address")
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


def dial_address(own: dict[str, Any] | None) -> str | None:
    """The address its peers dial for a node's ranks (F1/F3's connections), from its listener's
    own-address facts: the address its gloo ranks advertise, where it is a routable IPv4 address
    (the high-port listeners take IPv4); None otherwise (loopback, none, IPv6: F7 judges it,
    and F1/F3 fall back to where the node's name leads)."""
    addr = (own or {}).get("addr")
    if not addr or ":" in addr or (own or {}).get("how") == "loopback fallback":
        return None
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return None
    return None if ip.is_loopback or ip.is_unspecified else addr
