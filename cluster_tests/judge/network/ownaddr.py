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
from collections.abc import Mapping, Sequence

from cluster_tests.core import testids as ids
from cluster_tests.judge.common.netfacts import is_loopback
from cluster_tests.judge.network.portfacts import OwnAddress, PortTry, Reach
from cluster_tests.judge.network.portjudge import NetworkCause, PortMatrix
from cluster_tests.judge.problem import Problem


def _family(addr: str) -> str:
    return "IPv6" if ":" in addr else "IPv4"


def _loopback(addr: str) -> bool:
    return ipaddress.ip_address(addr.split("%")[0]).is_loopback


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


def judge(node: str, own: OwnAddress | None, peers: Mapping[str, PortTry | None],
          peer_addrs: Mapping[str, str | None]) -> tuple[Problem | None, str | None]:
    """(the red, the warning) of `node`'s own gloo address: a red where a peer that will dial it
    cannot, a warning where only peers that will not dial it (gloo's order) cannot."""
    found = problem(node, own, peers)
    if found is None or own is None or not own.usable or own.addr is None:
        return found, None
    addr = own.addr
    others = sorted(p for p, a in peer_addrs.items() if a and (":" in a) != (":" in addr))
    if others:  # gloo's device refuses pairs of two families outright, on every rank
        first = peer_addrs[others[0]] or ""
        return Problem(
            found.nodes, NetworkCause.OWN_ADDRESS_FAMILY,
            f"{found.message}\n  gloo needs one address family on every rank: "
            f"{', '.join(others)} advertise{'s' if len(others) == 1 else ''} {_family(first)}, "
            f"so every rank stops at init (`ss1.ss_family == ss2.ss_family`)",
            fix=found.fix, item=found.item), None
    failing = [p for p, r in peers.items() if r is not None and not r.ok]
    routable = own.how != "loopback fallback" and not _loopback(addr)
    if routable and not failing:
        return found, None
    dialers = [p for p in (failing or [p for p in peers if peers[p] is not None])
               if dials(peer_addrs.get(p), addr)]
    if dialers:
        return found, None
    return None, (f"{found.headline}\n  today no peer dials it (gloo: the greater address "
                  f"connects, and every peer's is below {addr}), so the launch works; a node "
                  f"with a greater address would hang there.\n  fix: {found.fix}")


def _view(own: OwnAddress) -> str:
    host = own.hostname
    return (f"`hostname` there is '{host}', which resolves there to "
            f"{', '.join(own.candidates) or 'nothing'}" if host else own.how)


def _hosts_fix(node: str, own: OwnAddress) -> str:
    host = own.hostname
    return (f"on {node}: make '{host}' resolve there to an address its peers reach (the "
            f"/etc/hosts line of '{host}'), or set GLOO_SOCKET_IFNAME to the interface the "
            "nodes share" if host else
            f"on {node}: set GLOO_SOCKET_IFNAME to an interface with an address "
            "the peers reach")


def problem(node: str, own: OwnAddress | None, peers: Mapping[str, PortTry | None]
            ) -> Problem | None:
    """Why peers cannot connect to `node`'s own gloo address (None: they all can).

    ``own``: the listen probe's facts; ``peers``: peer -> its connect to that address (None:
    that peer did not try)."""
    if own is None:
        return None
    view, addr, fix = _view(own), own.addr, _hosts_fix(node, own)
    if addr is None or not own.port:
        why = own.error or "; ".join(own.bind_errors) or "none binds"
        return Problem((node,), NetworkCause.OWN_ADDRESS_NONE,
                       f"{node}: its gloo ranks have no address to bind ({view}; {why}): "
                       f"init_process_group fails there.", fix=fix, item=ids.OWN_ADDRESS.item)
    if own.how == "loopback fallback" or _loopback(addr):
        why = ("so torch falls back to 127.0.0.1" if not own.candidates else
               "none of those addresses binds, so torch falls back to 127.0.0.1"
               if own.how == "loopback fallback" else
               f"the first that binds is {addr}, a loopback address")
        return Problem((node,), NetworkCause.OWN_ADDRESS_LOOPBACK,
                       f"{node}: its gloo ranks would advertise {addr} to their peers ({view}; "
                       f"{why}): every peer would connect to itself, and init_process_group "
                       f"fails on every node.", fix=fix, item=ids.OWN_ADDRESS.item)
    bad = {p: r for p, r in sorted(peers.items()) if r is not None and not r.ok}
    if not bad:
        return None
    said = "; ".join(f"{p}: {r.words}" for p, r in bad.items())
    return Problem((node,), NetworkCause.OWN_ADDRESS_UNREACHABLE,
                   f"{node}: its gloo ranks would advertise {addr} ({_family(addr)}; {view}, the "
                   f"first that binds), and {', '.join(bad)} cannot connect to it ({said}): "
                   f"init_process_group fails on every node.", fix=fix, item=ids.OWN_ADDRESS.item)


def dial_address(own: OwnAddress | None) -> str | None:
    """The address its peers dial for a node's ranks (F1/F3's connections), from its listener's
    own-address facts: the address its gloo ranks advertise, where it is a routable IPv4 address
    (the high-port listeners take IPv4); None otherwise (loopback, none, IPv6: F7 judges it,
    and F1/F3 fall back to where the node's name leads)."""
    addr = own.addr if own is not None else None
    if own is None or not addr or ":" in addr or own.how == "loopback fallback":
        return None
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return None
    return None if ip.is_loopback or ip.is_unspecified else addr


def node_verdict(m: PortMatrix, node: str, into: Sequence[tuple[str, Reach]]
                 ) -> tuple[Problem | None, str | None]:
    """F7's (red, warning) for `node`'s own address, from the port matrix (`into`: the sources
    whose entries into `node` the matrix keeps whole, with what they reached)."""
    if node not in m.listeners:
        return None, None
    own = m.listeners[node].own
    # a peer whose connections into node fail on the high ports too is F3's (the firewall of
    # either end, named there): here only what the address itself breaks
    # (the peers that tried node: with --pairs ring two, not all; judge only reads those)
    if own is None or problem(node, own, {}) is None:
        # the address itself is usable: only a peer that failed it makes a problem, and a
        # compact peer (every port answered, the own address too) did not; the peers with an
        # entry of their own are few under --pairs matrix (4096 a node otherwise)
        tried = {a: r.own for a, r in into if a != node and (not r.failed or r.elsewhere_ok)}
        if problem(node, own, tried) is None:
            return None, None
    # a compact entry (every port answered, its own address too where tried) is read without
    # making the entry: one answer for every compact peer
    compact_own = m.compact_own(node)
    peers: dict[str, PortTry | None] = {}
    for a, row in m.results.items():
        if a == node:
            continue
        if m.compact_of(a, node) is not None:
            peers[a] = compact_own
        elif (r := row.get(node)) is not None and (not r.failed or r.elsewhere_ok):
            peers[a] = r.own
    return judge(node, own, peers, {a: _listened_at(m, a) for a in peers})


def _listened_at(m: PortMatrix, node: str) -> str | None:
    lst = m.listeners.get(node)
    return lst.own.addr if lst is not None and lst.own is not None else None


def loopback_from_hostname(own: OwnAddress | None) -> bool:
    """F7's address is a loopback answer of the hostname's own lookup (not torch's fallback,
    nor GLOO_SOCKET_IFNAME's interface): N3's red (the hostname's loopback line in /etc/hosts)
    holds the cause where N3 runs."""
    return (own is not None and own.addr is not None and own.how == "hostname"
            and is_loopback(own.addr))
