"""judge/network/pairjudge.py: the clean flags under --pairs matrix (the bulk reading of a
compact row, `row_flags`, 16.7 M pairs at 4096 nodes, gives pair by pair what `clean` gives: RTT
outliers and missing samples, pairs that came back whole, misresolved names, a node to itself
and nodes that are down; measure/ports.py's latency row read alike), and the red that holds a
failing pair's cause, on Reach values as netprobe.py reports them."""

from __future__ import annotations

import random
from typing import cast

import probenode
import pytest
from memostub import SessionMemo
from test_judge_portjudge import _entry

from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster
from cluster_tests.core.testids import LAUNCHER
from cluster_tests.judge.common import netfacts
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.network import pairjudge
from cluster_tests.judge.network import portjudge as nc
from cluster_tests.judge.network.portfacts import Compact
from cluster_tests.judge.problem import Root
from cluster_tests.measure import ports


def _matrix(rng: random.Random, names: list[str]) -> nc.PortMatrix:
    """Compact rows in name order: 5 % of the entries not compact, 5 % without an RTT sample,
    15 % of the RTTs anywhere from 0.1 to 30 ms, the rest 0.3 ms."""
    where = {n: i for i, n in enumerate(names)}
    m = nc.PortMatrix(token="t")
    for a in names:
        m.results[a] = {}
        addrs, rtts = [], []
        for b in names:
            if rng.random() < 0.05:  # not compact: the entry is judged by the pair's check
                addrs.append("-")
                rtts.append("-")
                continue
            addrs.append(f"10.0.0.{where[b] + 1}")
            r = rng.random()
            rtts.append("nan" if r < 0.05 else f"{rng.uniform(0.1, 30.0) if r < 0.2 else 0.3:.3f}")
        m.add_compact(a, names, where,
                      Compact.read({"addr": " ".join(addrs), "rtt_ms": " ".join(rtts)}))
    return m


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("typical", [None, 0.25, 3.0])
def test_a_compact_row_in_bulk_is_each_pair_judged_alone(monkeypatch, seed, typical):
    rng = random.Random(seed)
    names = [f"node{i}" for i in range(1, 41)]
    where = {n: i for i, n in enumerate(names)}
    wrong = {(a, b) for a in names for b in names if rng.random() < 0.02}
    # a node resolves a few names (its ring and rank 0), some of them wrongly
    bases = {a: BaseFacts.read({"resolve": {b: {"addrs": ["10.9.9.9"]}
                                             for b in rng.sample(names, 4)}})
             for a in names}
    monkeypatch.setattr(netfacts, "misresolved",
                        lambda base_a, base_b, b: None if base_a is None else next(
                            ((["10.9.9.9"], "x") for a in names if bases[a] is base_a
                             and (a, b) in wrong and b in base_a.resolve), None))
    m = _matrix(rng, names)
    down = set(rng.sample(names, 3))
    base_of: dict[str, BaseFacts | None] = {n: bases[n] for n in names}
    for a in names:
        if a in down:
            continue
        bulk = pairjudge.row_flags(m, a, m.compact[a], where, base_of, down, typical)
        alone = bytearray(0 if b in down else
                          pairjudge.clean(m, a, b, base_of[a], base_of[b], typical) for b in names)
        assert bulk == alone, a
    # the rows cover every kind of flag
    every = {v for a in names if a not in down
             for v in pairjudge.row_flags(m, a, m.compact[a], where, base_of, down, typical)}
    assert {0, pairjudge.F3_CLEAN | pairjudge.F1_CLEAN} <= every
    if typical is not None:
        assert pairjudge.F3_CLEAN in every  # outliers and missing samples: F3 only


class _Cluster(SessionMemo):
    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.names = names


def test_the_latency_row_read_in_bulk_is_each_pairs_median():
    names = [f"node{i}" for i in range(1, 41)]
    m = _matrix(random.Random(7), names)
    cluster = cast(Cluster, _Cluster(names))  # the memo and the names: what rtt_row reads
    for a in names:
        one_by_one = [ports.median_rtt(m, a, b) for b in names]
        assert ports.rtt_row(cluster, m, a) == " ".join(
            f"{v:.3f}" if v is not None else "-" for v in one_by_one)
    assert ports.rtt_row(cluster, nc.PortMatrix(token="t"), "node1") is None  # nothing measured


def test_the_compact_rtts_counted_in_bulk_are_each_pairs_median_but_a_nodes_own():
    names = [f"node{i}" for i in range(1, 41)]
    m = _matrix(random.Random(11), names)
    want: dict[float, int] = {}
    for a in names:
        for b in names:
            c = m.compact_of(a, b)
            if a != b and c is not None and c[1] == c[1]:
                want[c[1]] = want.get(c[1], 0) + 1
    got = m.compact_rtt_counts()
    assert got == want and sum(got.values()) > 1000
    assert any(m.compact_of(a, a) for a in names)  # some own cells were compact: left out


# -- the red that holds a failing pair's cause ------------------------------------------------


def test_a_node_whose_own_rules_drop_what_fails_into_it_holds_the_pair():
    names = ["n1", "n2", "n3"]
    m = nc.PortMatrix("t", results={a: {b: _entry(b != "n3", b) for b in names} for a in names})
    drop = ["iptables: -A INPUT -p tcp -m tcp --dport 1024:65535 -j DROP"]
    assert pairjudge.firewall_roots(m, {"n1": [], "n3": drop}, "n1", "n3") == [
        Root(ids.FIREWALL_RULES.of("n3"), "n3's own firewall (INPUT) drops n1 -> n3")]
    assert pairjudge.firewall_roots(m, {"n1": [], "n3": []}, "n1", "n3") == []  # in between
    assert pairjudge.firewall_roots(None, {"n3": drop}, "n1", "n3") == []  # no matrix


def test_a_name_resolved_elsewhere_holds_the_pair_only_where_it_was_dialed():
    """n1's /etc/hosts sends n3 to 10.9.9.9 (base facts of node/probe.py, run as on a node)."""
    m = nc.PortMatrix("t")
    a = probenode.base_facts("n1", ("10.0.0.1/24",), hosts="10.9.9.9 n3", names=["n3"])
    b = probenode.base_facts("n3", ("10.0.0.3/24",))
    assert pairjudge.misresolved_roots(m, "n1", "n3", a, b) == [
        Root(ids.RESOLVES.of("n1", "n3"), "n1 resolves n3 to 10.9.9.9, another machine")]
    assert pairjudge.misresolved_roots(m, LAUNCHER, "n3", a, b) == []
    m.dial["n3"] = "10.0.0.3"  # its own address dialed, not its name
    assert pairjudge.misresolved_roots(m, "n1", "n3", a, b) == []


def test_a_slow_pair_is_a_warning_against_the_typical_pair():
    slow = nc.rtt_stats([5.0, 5.2, 4.8])
    assert slow is not None
    assert pairjudge.slow_pair("n1", "n2", slow, 0.25) == (
        "n1 -> n2: TCP handshake 5.00 ms (jitter 0.16 ms) against a typical 0.25 ms between "
        "the other pairs: a slow link or a busy node")
    assert pairjudge.slow_pair("n1", "n1", slow, 0.25) is None  # a node to itself
    assert pairjudge.slow_pair("n1", "n2", slow, None) is None  # no typical pair
    assert pairjudge.slow_pair("n1", "n2", slow, 3.0) is None  # 5 ms: not 5 x 3 ms
