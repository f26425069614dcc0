"""judge/network/pairjudge.py's clean flags under --pairs matrix: the bulk reading of a compact
row (`row_flags`, 16.7 M pairs at 4096 nodes) gives, pair by pair, what `clean` gives: RTT
outliers and missing samples, pairs that came back whole, misresolved names, a node to itself
and nodes that are down."""

from __future__ import annotations

import random
from typing import cast

import pytest
from memostub import SessionMemo

from cluster_tests.core.cluster import Cluster
from cluster_tests.judge.common import netfacts
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.network import pairjudge
from cluster_tests.judge.network import portjudge as nc
from cluster_tests.judge.network.portfacts import Compact
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
