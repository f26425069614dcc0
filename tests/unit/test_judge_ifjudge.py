"""judge/network/ifjudge.py (F5, F6): the interfaces NCCL/GLOO/HCCL_SOCKET_IFNAME select (NCCL's
list syntax), the route between two nodes against them, the MTU across the nodes; on a real
node's `ip -o link` / `ip -o addr` (tests/data/samples) and a real `ip -o route get` run by
node/probe.py's `routes` section on this machine."""

from __future__ import annotations

import json

from paths import SAMPLES

from cluster_tests import node
from cluster_tests.judge.common.facts import Command
from cluster_tests.judge.common.netfacts import Interface, parse_interfaces
from cluster_tests.judge.network import ifjudge
from cluster_tests.judge.network.portfacts import read_routes
from cluster_tests.judge.network.portjudge import NetworkCause
from cluster_tests.judge.problem import Root

#: a real node's interfaces: lo, eth0 10.137.169.3 (and IPv6), docker0 172.17.0.1, a veth,
#: eth1 192.168.7.3 and its peer (no IPv4)
_IP = json.loads((SAMPLES / "ip-o-addr-link-docker0-dualstack.json").read_text())[
    "captures"]["eth0, eth1 and docker0"]
HERE = parse_interfaces(_IP["link"], _IP["addr"])


def test_ifspec_nccl_syntax() -> None:
    parse = ifjudge.parse_ifspec
    assert parse("eth").matches("eth0") and not parse("eth").matches("ib0")
    spec = parse("eth,ib")
    assert spec.matches("ib1") and spec.matches("eth3") and not spec.matches("enp1")
    exact = parse("=eth0")
    assert exact.matches("eth0") and not exact.matches("eth01")
    ex = parse("^docker,lo")
    assert ex.exclude and ex.matches("eth0") and not ex.matches("docker0") and not ex.matches("lo")
    exact_ex = parse("^=docker0")
    assert exact_ex.exclude and exact_ex.exact
    assert exact_ex.matches("docker1") and not exact_ex.matches("docker0")
    assert parse("=eth0,enp0").names == ("eth0", "enp0")
    assert ifjudge.nccl_list_prefix(" ^=mlx5_0:1") == (True, True, "mlx5_0:1")


def test_ifspec_gloo_takes_exact_names() -> None:
    spec = ifjudge.parse_ifspec("eth", "GLOO_SOCKET_IFNAME")
    assert spec.exact and not spec.matches("eth0") and spec.matches("eth")


def test_selected_interfaces_are_up_with_an_address_and_not_lo() -> None:
    ifaces = {
        "lo": Interface("lo", "UNKNOWN", 65536, ("LOOPBACK", "UP"), ["127.0.0.1/8"]),
        "eth0": Interface("eth0", "UP", 1500, ("UP",), ["10.0.0.1/24"]),
        "eth1": Interface("eth1", "DOWN", 1500, (), []),
    }
    matched = ifjudge.matched_interfaces(ifjudge.parse_ifspec("eth"), ifaces)
    assert [i.name for i in matched] == ["eth0", "eth1"]
    assert [i.name for i in ifjudge.selected(ifjudge.parse_ifspec("eth"), ifaces)] == ["eth0"]
    assert ifjudge.selected(ifjudge.parse_ifspec("lo"), ifaces) == []
    assert ifjudge.socket_ifname_vars({"NCCL_SOCKET_IFNAME": "eth", "GLOO_SOCKET_IFNAME": " "}) == {
        "NCCL_SOCKET_IFNAME": "eth"}
    # the real node: eth matches eth0, eth1 and eth1peer; eth1peer has no IPv4 but a link-local
    # IPv6 address, so it is usable too
    assert {i.name for i in ifjudge.selected(ifjudge.parse_ifspec("eth"), HERE)} == {
        "eth0", "eth1", "eth1peer"}


def _miss(var: str, value: str, fits: tuple[str, ...] | None = None) -> ifjudge.Miss:
    return ifjudge.Miss(var, value, ifjudge.parse_ifspec(value, var), fits)


def test_socket_ifname_red_names_the_interfaces_and_the_fix() -> None:
    assert ifjudge.judge_socket_ifname("node3", "node1", [], HERE) is None
    p = ifjudge.judge_socket_ifname("node3", "node1", [_miss("NCCL_SOCKET_IFNAME", "ib")], HERE)
    assert p is not None and p.cause is NetworkCause.IFNAME_UNUSABLE
    assert p.nodes == ("node3",) and p.item == "F5"
    assert p.message.startswith("node3: NCCL_SOCKET_IFNAME=ib (name prefixes ib) matches no "
                                "interface.\n  interfaces on node3: lo (up, mtu 65536, ")
    assert "eth0 (up, mtu 1500, 10.137.169.3/24 fd00:c7::3/64" in p.message
    assert p.fix == ("on node3: export NCCL_SOCKET_IFNAME==eth0 in ~/.bashrc above any early "
                     "return (or unset it)")
    assert p.text().endswith("\n  fix: " + p.fix)
    # exported by the launch from rank 0: the fix is rank 0's ~/.deepspeed_env; two variables,
    # one red, each its own line
    two = ifjudge.judge_socket_ifname("node3", "node1", [
        _miss("NCCL_SOCKET_IFNAME", "ib", fits=("node2",)),
        _miss("GLOO_SOCKET_IFNAME", "eth", fits=())], HERE)
    assert two is not None
    assert "(exported to every rank by deepspeed from node1's environment or ~/.deepspeed_env; " \
           "it fits node2)" in two.message
    assert "\nnode3: GLOO_SOCKET_IFNAME=eth (exact names eth)" in two.message
    assert "it fits no node" in two.message
    assert two.fix == ("on node1: set NCCL_SOCKET_IFNAME==eth0 in ~/.deepspeed_env (or unset it "
                       "there); on node1: set GLOO_SOCKET_IFNAME=eth0 in ~/.deepspeed_env (or "
                       "unset it there)")


def _routes_here(*addrs: str) -> dict[str, Command]:
    """node/probe.py's `routes` section run on this machine, read as the launcher reads it."""
    ns: dict = {"__name__": "ct_probe"}
    exec(compile(node.source("probe.py"), "probe.py", "exec"), ns)  # noqa: S102
    return dict(read_routes(json.loads(json.dumps(ns["section_routes"]({"route_to": addrs})))))


def test_route_against_the_selected_interfaces() -> None:
    routes = _routes_here("127.0.0.1", "not-an-address")
    lo = routes["127.0.0.1"]
    assert lo.ok and " dev lo " in lo.out
    env = {"NCCL_SOCKET_IFNAME": "eth"}
    assert ifjudge.judge_route("a", "b", "127.0.0.1", lo, {"NCCL_SOCKET_IFNAME": ["lo"]},
                               env) is None
    wrong = ifjudge.judge_route("a", "b", "127.0.0.1", lo, {"NCCL_SOCKET_IFNAME": ["eth0"]}, env)
    assert wrong is not None and wrong.cause is NetworkCause.WRONG_INTERFACE
    assert wrong.nodes == ("a", "b") and wrong.message == (
        "a -> b (127.0.0.1): the route leaves a by lo, but NCCL_SOCKET_IFNAME=eth selects eth0: "
        "the library binds one interface and the packets leave by another.")
    assert wrong.fix.startswith("select lo (export NCCL_SOCKET_IFNAME==lo)")
    bad = routes["not-an-address"]
    assert not bad.ok
    none = ifjudge.judge_route("a", "b", "not-an-address", bad, {"NCCL_SOCKET_IFNAME": ["eth0"]},
                               env)
    assert none is not None and none.cause is NetworkCause.NO_ROUTE
    assert none.message.startswith("a -> b (not-an-address): no route (`ip -o route get "
                                   "not-an-address` on a: ")
    assert bad.err.strip()[:40] in none.message
    unasked = ifjudge.judge_route("a", "b", "10.0.0.2", None, {"NCCL_SOCKET_IFNAME": ["eth0"]},
                                  env)
    assert unasked is not None and unasked.cause is NetworkCause.NO_ROUTE


def test_mtu_red_on_the_odd_node_only() -> None:
    mtus: dict[str, tuple[str, int | None]] = {
        "node1": ("eth0", 1500), "node2": ("eth0", 1500), "node3": ("eth0", 9000)}
    assert ifjudge.judge_mtu("node1", mtus, "node1") is None
    p = ifjudge.judge_mtu("node3", mtus, "node1")
    assert p is not None and p.cause is NetworkCause.MTU_MISMATCH and p.item == "F6"
    assert p.message.startswith("node3: eth0 has MTU 9000, most nodes use 1500;")
    assert "    node3            eth0       mtu 9000" in p.message
    assert p.fix == "on node3: ip link set dev eth0 mtu 1500  (and make it persistent)"
    # no majority: rank 0's MTU is the reference
    even = {"node1": ("eth0", 9000), "node2": ("eth0", 1500)}
    assert ifjudge.judge_mtu("node1", even, "node1") is None
    assert ifjudge.judge_mtu("node2", even, "node1") is not None


def test_a_failed_run_is_blocked_by_the_f5_red_of_its_backends_variable():
    """C1/C2: the first node whose ranks get a NCCL_SOCKET_IFNAME that selects nothing there;
    one the launch exports that fits no node is rank 0's red."""
    var = "NCCL_SOCKET_IFNAME"
    fine, own = ifjudge.Pick(None, False, False), ifjudge.Pick("ib", False, False)
    assert ifjudge.ifname_roots(var, {"node1": fine, "node2": own}, "node1") == [
        Root("test_socket_ifname[node2]",
                     "NCCL_SOCKET_IFNAME=ib selects no usable interface on node2")]
    exported = ifjudge.Pick("ib", False, True)
    roots = ifjudge.ifname_roots(var, {"node1": exported, "node2": exported}, "node1")
    assert [r.check for r in roots] == ["test_socket_ifname[node1]"]
    # where it fits somewhere, each node's own red
    roots = ifjudge.ifname_roots(var, {"node1": ifjudge.Pick("ib", True, True),
                                       "node2": exported}, "node1")
    assert [r.check for r in roots] == ["test_socket_ifname[node2]"]
    assert ifjudge.ifname_roots(var, {"node1": fine}, "node1") == []
