"""judge/network/ownaddr.py (F7): a node's own gloo address against its peers' connects."""

from __future__ import annotations

from cluster_tests.judge.network import ownaddr
from cluster_tests.measure import launchpy

OWN = {"how": "hostname", "hostname": "node2", "candidates": ["fd00::2", "10.0.0.2"],
       "addr": "fd00::2", "family": 6, "port": 40000, "error": None}


def test_routable_view_is_green_whatever_the_hostname() -> None:
    own = {**OWN, "hostname": "gpu-box-7", "candidates": ["10.0.0.2"], "addr": "10.0.0.2"}
    assert ownaddr.problems("node2", own, {"node1": {"status": "ok"}, "node3": None}) == []
    assert ownaddr.problems("node2", None, {}) == []


def test_a_view_peers_cannot_reach_is_red_on_that_node() -> None:
    (msg,) = ownaddr.problems("node2", OWN, {"node1": {"status": "unreachable"},
                                             "node3": {"status": "ok"}})
    assert msg.startswith("node2: its gloo ranks would advertise fd00::2 (IPv6;")
    assert "resolves there to fd00::2, 10.0.0.2" in msg and "node1 cannot connect" in msg
    assert "node3" not in msg.split("fix:")[0].split("cannot connect")[1]
    assert "fix: on node2: make 'node2' resolve there" in msg


def test_loopback_and_fallback() -> None:
    own = {**OWN, "candidates": ["127.0.1.1"], "addr": "127.0.1.1", "family": 4}
    (msg,) = ownaddr.problems("node2", own, {"node1": {"status": "ok"}})
    assert "a loopback address" in msg and "connect to itself" in msg
    own = {**OWN, "how": "loopback fallback", "candidates": [], "addr": "127.0.0.1",
           "error": "node2 does not resolve"}
    (msg,) = ownaddr.problems("node2", own, {})
    assert "torch falls back to 127.0.0.1" in msg
    (msg,) = ownaddr.problems("node2", {**OWN, "addr": None, "port": None}, {})
    assert "no address to bind" in msg


def test_interactive_lookup_reads_the_last_path() -> None:
    assert launchpy.read_lookup("welcome\n/opt/conda/bin/deepspeed\n") == "/opt/conda/bin/deepspeed"
    assert launchpy.read_lookup("") is None and launchpy.read_lookup(None) is None


def test_gloo_dial_order_decides_red_or_warning() -> None:
    """gloo's tcp pair: the greater address connects.  A loopback view among 10.x peers is never
    dialled (the launch works: a warning); among 192.168.x peers it is (red).  Across families
    the peers always fail."""
    own = {**OWN, "how": "loopback fallback", "hostname": "gpu-07", "candidates": [],
           "addr": "127.0.0.1", "family": 4}
    refused = {"status": "refused"}
    found, latent = ownaddr.judge("node2", own, {"node1": refused, "node3": refused},
                                  {"node1": "10.0.0.1", "node3": "10.0.0.3"})
    assert found == [] and "today no peer dials it" in latent[0] and "fix: on node2" in latent[0]
    found, latent = ownaddr.judge("node2", own, {"node1": refused, "node3": refused},
                                  {"node1": "10.0.0.1", "node3": "192.168.0.3"})
    assert latent == [] and "torch falls back to 127.0.0.1" in found[0]
    found, _ = ownaddr.judge("node2", OWN, {"node1": {"status": "unreachable"}},
                             {"node1": "10.0.0.1"})
    assert "IPv6" in found[0] and ("gloo needs one address family on every rank: node1 advertises "
                                   "IPv4") in found[0]
    assert ownaddr.dials("10.0.0.3", "10.0.0.2") and not ownaddr.dials("10.0.0.1", "10.0.0.2")
    assert ownaddr.dials("10.0.0.1", "fd00::2") and ownaddr.dials(None, "10.0.0.2")


def test_peers_dial_the_address_the_ranks_advertise_where_it_is_routable_ipv4() -> None:
    """F1/F3 connect where the ranks connect: a node's own address (F7's), unless it is a
    loopback, the loopback fallback, none, or IPv6 (the high-port listeners take IPv4)."""
    assert ownaddr.dial_address({"addr": "10.0.0.2", "how": "hostname"}) == "10.0.0.2"
    assert ownaddr.dial_address({"addr": "10.0.0.2", "how": "GLOO_SOCKET_IFNAME=eth0"}) \
        == "10.0.0.2"
    for own in ({"addr": "127.0.1.1", "how": "hostname"},
                {"addr": "127.0.0.1", "how": "loopback fallback"},
                {"addr": "fd00:c7::2", "how": "hostname"}, {"addr": None}, None):
        assert ownaddr.dial_address(own) is None, own
