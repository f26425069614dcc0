"""judge/network/portjudge.py (F1-F4): firewall rule filters, RTT statistics, who is at fault in
a port matrix, and the Problem of each red, on Reach values as netprobe.py reports them (read by
judge/network/portfacts.py)."""

from __future__ import annotations

from cluster_tests.core.testids import Scope
from cluster_tests.judge.network import portjudge as nc
from cluster_tests.judge.network.portfacts import Listening, Reach
from cluster_tests.judge.network.portjudge import NetworkCause

IPTABLES = """-P INPUT ACCEPT
-P FORWARD DROP
-P OUTPUT ACCEPT
-N ufw-input
-N unrelated
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -j ufw-input
-A INPUT -p tcp -m tcp --dport 1024:65535 -j DROP
-A ufw-input -p tcp -m tcp --dport 29500 -j REJECT --reject-with icmp-port-unreachable
-A unrelated -j DROP
-A FORWARD -j DROP
"""


def test_iptables_input_drops_follow_jumps_only_from_input():
    found = nc.iptables_input_drops(IPTABLES)
    assert found == ["-A INPUT -p tcp -m tcp --dport 1024:65535 -j DROP",
                     "-A ufw-input -p tcp -m tcp --dport 29500 -j REJECT --reject-with "
                     "icmp-port-unreachable"]
    assert nc.iptables_input_drops("-P INPUT DROP\n") == ["-P INPUT DROP"]
    assert nc.iptables_input_drops("") == []


NFT = """table inet filter {
\tchain input {
\t\ttype filter hook input priority filter; policy accept;
\t\ttcp dport 1024-65535 counter packets 3 bytes 180 drop
\t}
\tchain output {
\t\ttype filter hook output priority filter; policy accept;
\t\ttcp dport 9 reject
\t}
}
"""


def test_nft_input_drops():
    assert nc.nft_input_drops(NFT) == [
        "table inet filter chain input: tcp dport 1024-65535 counter packets 3 bytes 180 drop"]


def test_rtt_stats_and_outliers():
    assert nc.rtt_stats([]) is None
    s = nc.rtt_stats([1.0, 2.0, 3.0])
    assert s is not None and s.median_ms == 2.0 and s.samples == 3 and s.jitter_ms > 0
    base = [0.2, 0.25, 0.3, 0.22]
    assert nc.is_outlier(5.0, base) and not nc.is_outlier(0.9, base)
    assert not nc.is_outlier(50.0, [0.2])  # one pair is no baseline
    # the limit: 5 x the typical pair, or 2 ms above it where that is more
    assert nc.outlier_limit(3.0) == 15.0 and nc.outlier_limit(0.25) == 2.25
    assert nc.outlier_limit(None) == float("inf")
    assert nc.is_outlier(2.26, 0.25) and not nc.is_outlier(2.25, 0.25)


def _entry(ok: bool, target: str = "n9") -> Reach:
    status = "ok" if ok else "timed out"
    return Reach.read(target, {"addr": "10.0.0.9", "resolve_error": None, "ssh": None,
                               "ports": {"40000": {"status": status, "ms": 0.2, "port": 40000},
                                         "40001": {"status": status, "ms": 0.2, "port": 40001}},
                               "master": None, "rtt_ms": []})


def test_fault_attribution():
    names = ["n1", "n2", "n3"]
    # n3's INPUT drops inbound high ports: every source fails into n3 only
    inbound = nc.PortMatrix("t", results={a: {b: _entry(b != "n3", b) for b in names}
                                          for a in names})
    entry = inbound.reach("n1", "n3")
    assert entry is not None and inbound.reach("n1", "n4") is None
    assert nc.failed_ports(entry) == {40000: "timed out", 40001: "timed out"}
    assert nc.failed_ports(None) == {} and nc.blocked(entry) and not nc.blocked(None)
    assert nc.failing_into(inbound, "n3") == ["n1", "n2"]
    assert not nc.source_at_fault(inbound, "n1", "n3")
    # n3 also loses the replies to its own connections: its whole row fails
    both = nc.PortMatrix("t", results={a: {b: _entry(b != "n3" and a != "n3", b) for b in names}
                                       for a in names})
    assert nc.source_at_fault(both, "n3", "n1")
    assert not nc.source_at_fault(both, "n1", "n3")
    assert "drops the replies" in nc.SOURCE_CAUSE
    assert "3 s" in nc.describe_status("timed out", "n1", "n3", 3.0)


def test_typical_rtt_is_the_median_without_a_list_of_every_pair():
    import random
    import statistics

    rng = random.Random(7)
    for n in (2, 3, 10, 11, 1001):
        values = [round(rng.uniform(0.05, 3.0), 3) for _ in range(n)]
        assert nc.typical_rtt(iter(values)) == statistics.median(values)  # a generator will do
    assert nc.typical_rtt([1.0, 1.0, 1.0, 9.0]) == 1.0
    mid = nc.typical_rtt([0.5, 0.7])
    assert mid is not None and abs(mid - 0.6) < 1e-12
    assert nc.typical_rtt([]) is None and nc.typical_rtt([0.4]) is None


# -- the reds ----------------------------------------------------------------------------------

#: n1's `connect` entry for n3 as netprobe.py prints it: two high ports dropped, one answered
N3: dict[str, object] = {
    "addr": "10.0.0.3", "resolve_error": None, "master": None, "rtt_ms": [], "ssh": None,
    "ports": {"40001": {"status": "timed out", "ms": 3000.1, "port": 40001},
              "40002": {"status": "timed out", "ms": 3000.2, "port": 40002},
              "40003": {"status": "ok", "ms": 0.2, "port": 40003}}}


def test_f3_red_from_what_netprobe_reached() -> None:
    """F3's red: the failed ports grouped by the node's words, every source failing into b, b's
    rules, the fix as data (rendered once by Problem.text)."""
    reach = Reach.read("n3", N3)
    p = nc.high_ports_problem(reach, "n1", timeout=3.0, into_b=["n1", "n2"], source_fault=False,
                              rules=["iptables: -A INPUT -p tcp -j DROP"], source_addr="10.0.0.1")
    assert p.nodes == ("n1", "n3") and p.cause is NetworkCause.PORTS_DROPPED and p.item == "F3"
    assert p.text().splitlines() == [
        "n1 -> n3 (10.0.0.3): n3 drops new TCP connections on high ports from n1; NCCL/gloo/"
        "HCCL open such ports, and the launch would hang at initialization.",
        "  port 40001, 40002: timed out: no answer within 3 s: packets are dropped (a DROP rule "
        "in n3's INPUT chain, or a security group / firewall in between)",
        "  every node that tried fails into n3 (n1, n2): n3's INPUT is the filter",
        "  DROP/REJECT rules in n3's INPUT:",
        "    iptables: -A INPUT -p tcp -j DROP",
        "  fix: on n3: iptables -I INPUT -p tcp -s 10.0.0.1 -j ACCEPT (or open 1024-65535/tcp "
        "between the cluster's nodes in the firewall in between)"]
    assert "fix" not in p.message
    mine = nc.high_ports_problem(reach, "n1", timeout=3.0, into_b=["n1"], source_fault=True,
                                 rules=None, source_addr="10.0.0.1")
    assert mine.cause is NetworkCause.SOURCE_DROPS and mine.item == "F3"
    assert mine.message.startswith("n1 -> n3 (10.0.0.3): no answer from n3's high ports "
                                   "40001, 40002; n1 reaches none of the nodes' ports")
    assert "could not read n1's firewall rules" in mine.message
    assert mine.fix == ("on n1: iptables -I INPUT 1 -m conntrack --ctstate ESTABLISHED,RELATED "
                        "-j ACCEPT")


def test_f1_red_names_what_sshd_said() -> None:
    reach = Reach.read("n3", {**N3, "ports": {"40001": {"status": "timed out", "port": 40001}},
                              "ssh": {"status": "timed out", "ms": 3000.0}})
    p = nc.unreachable_problem("n1", reach)
    assert p.cause is NetworkCause.UNREACHABLE and p.item == "F1" and p.nodes == ("n1", "n3")
    assert p.message == ("n1 -> n3 (10.0.0.3): n1 reaches neither n3's high ports nor its sshd "
                         "(port 22: timed out).")
    assert p.fix == ("check the route (on n1: ip route get 10.0.0.3) and n3's firewall (on n3: "
                     "iptables -S INPUT)")


def _rank0_entry(status: str, master_addr: str | None = None) -> Reach:
    return Reach.read("n1", {**N3, "addr": "10.0.0.1", "master_addr": master_addr,
                             "master": {"status": status, "ms": 3000.0, "port": 29500}})


def test_f2_red_says_which_end_holds_the_cause() -> None:
    rules = {"n2": [], "n1": ["iptables: -A INPUT -p tcp -m tcp --dport 29500 -j DROP"]}
    port = nc.master_leg_problem("n2", _rank0_entry("timed out"), 29500, "n1", 3.0,
                                 source_fault=False, rules=rules)
    assert port.cause is NetworkCause.MASTER_PORT_DROPPED and port.item == "F2"
    assert port.message.startswith("n2 -> n1:29500 (10.0.0.1): the rendezvous port does not "
                                   "answer: timed out: no answer within 3 s")
    assert "  n1's own firewall drops this port: iptables: -A INPUT -p tcp -m tcp --dport " \
           "29500 -j DROP" in port.message
    assert port.fix == "on n1: iptables -I INPUT -p tcp --dport 29500 -j ACCEPT"
    silent = nc.master_leg_problem("n2", _rank0_entry("timed out", "10.9.0.1"), 29500,
                                   "gpu-head", 3.0, source_fault=False, rules=rules)
    assert silent.cause is NetworkCause.MASTER_ADDR_SILENT and silent.fix == ""
    assert silent.message.startswith("n2 -> n1:29500: the launch's --master_addr gpu-head "
                                     "(10.9.0.1) does not answer from n2")
    mine = nc.master_leg_problem("n2", _rank0_entry("timed out"), 29500, "n1", 3.0,
                                 source_fault=True, rules=rules)
    assert mine.cause is NetworkCause.SOURCE_DROPS and mine.item == "F2"
    assert "no answer from the rendezvous port 29500 on n1" in mine.message
    unresolved = Reach.read("n1", {**N3, "master": {"status": "unresolved",
                                                     "error": "Name or service not known"}})
    assert unresolved.master is not None
    p = nc.master_addr_unresolved("n2", "n1", 29500, "gpu-head", unresolved.master)
    assert p.cause is NetworkCause.MASTER_ADDR_UNRESOLVED
    assert "cannot resolve the launch's --master_addr 'gpu-head' (Name or service not known)" \
        in p.message


def test_f4_red_on_the_node_whose_firewall_drops() -> None:
    """n3's INPUT drops the high ports and the master port: every pair into n3 is its red's,
    the pairs list them (hostfile.healthy), and no pair of the others is."""
    names = ["n1", "n2", "n3"]
    listen = {"pid": 7, "ports": [40000, 40001], "hold": 60.0, "own": None}
    m = nc.PortMatrix("t", results={a: {b: _entry(b != "n3", b) for b in names} for a in names},
                      listeners={n: Listening.read({**listen, "master": {
                          "port": 29500, "free": True}} if n == "n3" else listen)
                          for n in names})
    rules: dict[str, list[str] | None] = {"n1": [], "n2": None,
                                          "n3": ["iptables: -A INPUT -p tcp -j DROP"]}
    assert nc.hurt_into(m, "n3") == [("n1", "n3"), ("n2", "n3"), ("n3", "n3")]
    assert nc.firewall_at_fault(m, rules, "n1", "n3") == "n3"
    assert nc.firewall_at_fault(m, rules, "n1", "n2") is None
    pairs = nc.firewall_pairs(m, rules, "n3")
    assert pairs == [("n1", "n3"), ("n2", "n3")]
    hurt = nc.firewall_hurt(m, "n3")
    assert hurt == ["n1 -> n3: ports 40000, 40001", "n2 -> n3: ports 40000, 40001",
                    "n3 -> n3: ports 40000, 40001"]
    p = nc.firewall_problem("n3", hurt, pairs, pairs, rules["n3"] or [])
    assert p.cause is NetworkCause.FIREWALL_DROPS and p.nodes == ("n3",) and p.item == "F4"
    assert p.pairs == (("n1", "n3"), ("n2", "n3")) and p.scope == Scope.PAIR
    assert p.message.startswith("n3: its firewall drops what the launch needs:\n    n1 -> n3: "
                                "ports 40000, 40001")
    assert p.message.endswith("  the DROP/REJECT rules in its INPUT:\n    iptables: -A INPUT "
                              "-p tcp -j DROP")
    assert p.fix.startswith("on n3: delete the rule (iptables -D INPUT <rule spec>)")
