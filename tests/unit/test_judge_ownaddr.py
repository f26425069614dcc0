"""judge/network/ownaddr.py (F7): a node's own gloo address against its peers' connects."""

from __future__ import annotations

from cluster_tests.judge.network import ownaddr
from cluster_tests.judge.network.portfacts import OwnAddress, PortTry
from cluster_tests.judge.network.portjudge import NetworkCause
from cluster_tests.measure import launchpy

#: netprobe.py `_own_address`'s facts as it prints them (a dual-stack node whose hostname
#: resolves to its IPv6 address first)
RAW = {"how": "hostname", "hostname": "node2", "candidates": ["fd00::2", "10.0.0.2"],
       "addr": "fd00::2", "family": 6, "port": 40000, "error": None}
OWN = OwnAddress.read(RAW)


def _own(**changed: object) -> OwnAddress:
    return OwnAddress.read({**RAW, **changed})


def _try(status: str) -> PortTry:
    return PortTry.read({"status": status, "ms": 0.2, "port": 40000})


def test_routable_view_is_green_whatever_the_hostname() -> None:
    own = _own(hostname="gpu-box-7", candidates=["10.0.0.2"], addr="10.0.0.2")
    assert ownaddr.problem("node2", own, {"node1": _try("ok"), "node3": None}) is None
    assert ownaddr.problem("node2", None, {}) is None


def test_a_view_peers_cannot_reach_is_red_on_that_node() -> None:
    p = ownaddr.problem("node2", OWN, {"node1": _try("unreachable"), "node3": _try("ok")})
    assert p is not None and p.cause is NetworkCause.OWN_ADDRESS_UNREACHABLE
    assert p.nodes == ("node2",) and p.item == "F7"
    msg = p.text()
    assert msg.startswith("node2: its gloo ranks would advertise fd00::2 (IPv6;")
    assert "resolves there to fd00::2, 10.0.0.2" in msg and "node1 cannot connect" in msg
    assert "node3" not in msg.split("fix:")[0].split("cannot connect")[1]
    assert "\n  fix: on node2: make 'node2' resolve there" in msg
    assert p.fix.startswith("on node2: make 'node2' resolve there")


def test_loopback_and_fallback() -> None:
    own = _own(candidates=["127.0.1.1"], addr="127.0.1.1", family=4)
    p = ownaddr.problem("node2", own, {"node1": _try("ok")})
    assert p is not None and p.cause is NetworkCause.OWN_ADDRESS_LOOPBACK
    assert "a loopback address" in p.message and "connect to itself" in p.message
    own = _own(how="loopback fallback", candidates=[], addr="127.0.0.1",
               error="node2 does not resolve")
    p = ownaddr.problem("node2", own, {})
    assert p is not None and "torch falls back to 127.0.0.1" in p.message
    p = ownaddr.problem("node2", _own(addr=None, port=None), {})
    assert p is not None and p.cause is NetworkCause.OWN_ADDRESS_NONE
    assert "no address to bind" in p.message


def test_interactive_lookup_reads_the_last_path() -> None:
    assert launchpy.read_lookup("welcome\n/opt/conda/bin/deepspeed\n") == "/opt/conda/bin/deepspeed"
    assert launchpy.read_lookup("") is None and launchpy.read_lookup(None) is None


def test_gloo_dial_order_decides_red_or_warning() -> None:
    """gloo's tcp pair: the greater address connects.  A loopback view among 10.x peers is never
    dialled (the launch works: a warning); among 192.168.x peers it is (red).  Across families
    the peers always fail."""
    own = _own(how="loopback fallback", hostname="gpu-07", candidates=[], addr="127.0.0.1",
               family=4)
    refused = _try("refused")
    found, latent = ownaddr.judge("node2", own, {"node1": refused, "node3": refused},
                                  {"node1": "10.0.0.1", "node3": "10.0.0.3"})
    assert found is None and latent is not None
    assert "today no peer dials it" in latent and "fix: on node2" in latent
    found, latent = ownaddr.judge("node2", own, {"node1": refused, "node3": refused},
                                  {"node1": "10.0.0.1", "node3": "192.168.0.3"})
    assert latent is None and found is not None
    assert "torch falls back to 127.0.0.1" in found.message
    found, _ = ownaddr.judge("node2", OWN, {"node1": _try("unreachable")},
                             {"node1": "10.0.0.1"})
    assert found is not None and found.cause is NetworkCause.OWN_ADDRESS_FAMILY
    assert "IPv6" in found.message and ("gloo needs one address family on every rank: node1 "
                                        "advertises IPv4") in found.message
    assert found.fix.startswith("on node2: make 'node2' resolve there")
    assert ownaddr.dials("10.0.0.3", "10.0.0.2") and not ownaddr.dials("10.0.0.1", "10.0.0.2")
    assert ownaddr.dials("10.0.0.1", "fd00::2") and ownaddr.dials(None, "10.0.0.2")


def test_peers_dial_the_address_the_ranks_advertise_where_it_is_routable_ipv4() -> None:
    """F1/F3 connect where the ranks connect: a node's own address (F7's), unless it is a
    loopback, the loopback fallback, none, or IPv6 (the high-port listeners take IPv4)."""
    assert ownaddr.dial_address(_own(addr="10.0.0.2")) == "10.0.0.2"
    assert ownaddr.dial_address(_own(addr="10.0.0.2", how="GLOO_SOCKET_IFNAME=eth0")) \
        == "10.0.0.2"
    for own in (_own(addr="127.0.1.1"), _own(addr="127.0.0.1", how="loopback fallback"),
                _own(addr="fd00:c7::2"), _own(addr=None), None):
        assert ownaddr.dial_address(own) is None, own
