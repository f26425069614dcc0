"""Pure logic of the F checks: interface specs (NCCL/HCCL/gloo syntax), firewall rule filters,
RTT statistics, and who is at fault in a port matrix."""

from __future__ import annotations

from cluster_tests.judge.common.netfacts import Interface
from cluster_tests.judge.network import portjudge as nc


def test_ifspec_nccl_syntax():
    assert nc.parse_ifspec("eth").matches("eth0") and not nc.parse_ifspec("eth").matches("ib0")
    spec = nc.parse_ifspec("eth,ib")
    assert spec.matches("ib1") and spec.matches("eth3") and not spec.matches("enp1")
    exact = nc.parse_ifspec("=eth0")
    assert exact.matches("eth0") and not exact.matches("eth01")
    ex = nc.parse_ifspec("^docker,lo")
    assert ex.exclude and ex.matches("eth0") and not ex.matches("docker0") and not ex.matches("lo")
    exact_ex = nc.parse_ifspec("^=docker0")
    assert exact_ex.exclude and exact_ex.exact
    assert exact_ex.matches("docker1") and not exact_ex.matches("docker0")
    assert nc.parse_ifspec("=eth0,enp0").names == ("eth0", "enp0")


def test_ifspec_gloo_takes_exact_names():
    spec = nc.parse_ifspec("eth", "GLOO_SOCKET_IFNAME")
    assert spec.exact and not spec.matches("eth0") and spec.matches("eth")


def test_matched_usable_interfaces():
    ifaces = {
        "lo": Interface("lo", "UNKNOWN", 65536, ("LOOPBACK", "UP"), ["127.0.0.1/8"]),
        "eth0": Interface("eth0", "UP", 1500, ("UP",), ["10.0.0.1/24"]),
        "eth1": Interface("eth1", "DOWN", 1500, (), []),
    }
    matched = nc.matched_interfaces(nc.parse_ifspec("eth"), ifaces)
    assert [i.name for i in matched] == ["eth0", "eth1"]
    assert [i.name for i in matched if nc.usable(i)] == ["eth0"]
    assert nc.socket_ifname_vars({"NCCL_SOCKET_IFNAME": "eth", "GLOO_SOCKET_IFNAME": " "}) == {
        "NCCL_SOCKET_IFNAME": "eth"}


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


def _entry(ok: bool) -> dict:
    status = "ok" if ok else "timed out"
    return {"addr": "10.0.0.9", "ports": {"40000": {"status": status}, "40001": {"status": status}},
            "master": None, "rtt_ms": []}


def test_fault_attribution():
    names = ["n1", "n2", "n3"]
    # n3's INPUT drops inbound high ports: every source fails into n3 only
    inbound = nc.PortMatrix("t", results={a: {b: _entry(b != "n3") for b in names} for a in names})
    entry = inbound.entry("n1", "n3")
    assert entry is not None
    assert nc.failed_ports(entry) == {40000: "timed out", 40001: "timed out"}
    assert nc.target_at_fault(inbound, "n1", "n3") and not nc.source_at_fault(inbound, "n1", "n3")
    # n3 also loses the replies to its own connections: its whole row fails
    both = nc.PortMatrix("t", results={a: {b: _entry(b != "n3" and a != "n3") for b in names}
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
