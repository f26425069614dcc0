"""F checks end to end on the simulated cluster: real listeners, real firewall rules."""

from __future__ import annotations

import re

from suite import run_suite

NET = ("-m", "network")


def _ours_left(sim) -> list[str]:
    """Listeners other than sshd, and netprobe processes, left on any node."""
    left = []
    for nd in sim.nodes:
        ss = sim.exec(nd.name, ["ss", "-Hltnp"]).stdout
        left += [f"{nd.name}: {ln}" for ln in ss.splitlines() if ln.strip() and "sshd" not in ln]
    left += [str(p) for p in sim.processes()
             if '"listen"' in p.cmdline or '"connect"' in p.cmdline]
    return left


def test_healthy_network_is_green_and_leaves_nothing(healthy_sim):
    result = run_suite(healthy_sim, *NET)
    assert result.returncode == 0, result.describe()
    assert "test_high_ports[node1->node3]" in result.passed
    assert "test_master_port[node3->node1]" in result.passed, \
        result.message("test_master_port[node3->node1]")
    assert "test_reachable[node2->node1]" in result.passed
    assert float(result.properties["test_reachable[node2->node1]"]["rtt_ms"]) > 0
    assert _ours_left(healthy_sim) == []


def test_high_ports_dropped_on_node3(healthy_sim):
    """A stateless rule dropping every high port (22 stays open) on node3: connections into node3
    time out, and so do node3's own (the replies to its ephemeral ports are high ports too)."""
    healthy_sim.iptables("node3",
                         ["-A", "INPUT", "-p", "tcp", "--dport", "1024:65535", "-j", "DROP"])
    result = run_suite(healthy_sim, *NET)
    into = {"test_high_ports[node1->node3]", "test_high_ports[node2->node3]",
            "test_high_ports[node3->node3]"}
    out_of = {"test_high_ports[node3->node1]", "test_high_ports[node3->node2]",
              "test_reachable[node3->node1]", "test_reachable[node3->node2]",
              "test_reachable[node3->node3]", "test_master_port[node3->node1]"}
    # one cause, node3's own rule: one red (F4 on node3), every pair it breaks blocked by it
    assert result.failed == {"test_firewall_rules[node3]"}, result.describe()
    by = {t: p["blocked_by"] for t, p in result.properties.items() if "blocked_by" in p}
    assert {t: by.get(t) for t in into | out_of} == {t: "test_firewall_rules[node3]"
                                                      for t in into | out_of}, by
    msg = result.message("test_firewall_rules[node3]")
    assert re.search(r"node1 -> node3: ports \d+, \d+", msg), msg
    assert "node3 -> node1: the replies to node3's own connections" in msg
    assert "--dport 1024:65535 -j DROP" in msg and "fix: on node3" in msg
    print(f"suite run with node3 dropping high ports: {result.seconds:.1f} s")
    assert _ours_left(healthy_sim) == []


def test_stateful_firewall_drops_only_inbound(healthy_sim):
    """With replies accepted (conntrack), exactly the pairs INTO node3 are red."""
    healthy_sim.iptables("node3", ["-A", "INPUT", "-m", "conntrack", "--ctstate",
                                   "ESTABLISHED,RELATED", "-j", "ACCEPT"])
    healthy_sim.iptables("node3",
                         ["-A", "INPUT", "-p", "tcp", "--dport", "1024:65535", "-j", "REJECT"])
    result = run_suite(healthy_sim, *NET)
    assert result.failed == {"test_firewall_rules[node3]"}, result.describe()
    for a in ("node1", "node2", "node3"):
        assert result.properties[f"test_high_ports[{a}->node3]"]["blocked_by"] == \
            "test_firewall_rules[node3]"
    msg = result.message("test_firewall_rules[node3]")
    assert "node2 -> node3: ports" in msg and "REJECT" in msg, msg
    assert "replies" not in msg  # conntrack accepts them
    assert "test_high_ports[node3->node1]" in result.passed
    assert _ours_left(healthy_sim) == []


def test_socket_ifname_names_a_missing_interface(healthy_sim):
    for nd in healthy_sim.nodes:
        healthy_sim.append_bashrc(nd.name, "export NCCL_SOCKET_IFNAME==eth0\n")
    healthy_sim.append_bashrc("node2", "export NCCL_SOCKET_IFNAME=ib\n")
    result = run_suite(healthy_sim, *NET)
    assert result.failed == {"test_socket_ifname[node2]"}, result.describe()
    msg = result.message("test_socket_ifname[node2]")
    assert "NCCL_SOCKET_IFNAME=ib (name prefixes ib) matches no interface" in msg
    assert "eth0" in msg and "export NCCL_SOCKET_IFNAME==eth0" in msg
    assert "test_socket_ifname_route[node1->node2]" in result.passed
    assert "test_socket_ifname_route[node2->node1]" in result.ids("skipped")


def test_pairs_matrix_names_one_dropped_pair_under_both_nodes(healthy_sim):
    """--pairs matrix (what auto becomes beyond 32 nodes): F1/F3 measure every ordered pair
    and report per node (node->*, *->node). node3's firewall drops node1 alone (stateful: its
    own connections' replies pass): with F4 in the run, the cause is node3's rule, and both
    nodes' F3 items are blocked by it; without F4, the red is *->node3 naming node1, and
    node1->* is blocked by that red. Nothing else is red."""
    node1 = healthy_sim.node("node1").address
    healthy_sim.iptables("node3", ["-A", "INPUT", "-m", "conntrack", "--ctstate",
                                   "ESTABLISHED,RELATED", "-j", "ACCEPT"])
    healthy_sim.iptables("node3", ["-A", "INPUT", "-s", node1, "-p", "tcp", "--dport",
                                   "1024:65535", "-j", "DROP"])
    result = run_suite(healthy_sim, *NET, "--pairs", "matrix")
    assert result.failed == {"test_firewall_rules[node3]"}, result.describe()
    for item in ("test_high_ports[node1->*]", "test_high_ports[*->node3]"):
        assert result.properties[item]["blocked_by"] == "test_firewall_rules[node3]", item
        assert "node1 -> node3" in result.message(item)
    assert {"test_high_ports[node2->*]", "test_high_ports[node3->*]",
            "test_high_ports[*->node1]", "test_reachable[node2->*]"} <= result.passed
    assert "test_high_ports[node1->node3]" not in result.properties  # no pair items
    assert "node1 -> node3: ports" in result.message("test_firewall_rules[node3]")

    result = run_suite(healthy_sim, "-k", "high_ports", "--pairs", "matrix")
    assert result.failed == {"test_high_ports[*->node3]"}, result.describe()
    msg = result.message("test_high_ports[*->node3]")
    assert "node1 -> node3" in msg and f"-s {node1} -j ACCEPT" in msg, msg
    assert result.properties["test_high_ports[node1->*]"]["blocked_by"] == \
        "test_high_ports[*->node3]"
    assert result.properties["test_high_ports[node1->*]"]["row"] == "..x"
    assert _ours_left(healthy_sim) == []
