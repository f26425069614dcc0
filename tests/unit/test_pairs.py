"""Pair selection (--pairs): counts, coverage, determinism of the seed.  Pure, no cluster."""

from __future__ import annotations

import pytest

from cluster_tests.core import pairs as pairs_mod


def names(n: int) -> list[str]:
    return [f"node{i}" for i in range(1, n + 1)]


@pytest.mark.parametrize("value,mode,k,seed", [
    ("all", "all", 0, 0), ("RING", "ring", 0, 0), ("auto", "auto", 0, 0),
    ("sample:10", "sample", 10, 0), ("sample:10:7", "sample", 10, 7),
    ("sample:0:3", "sample", 0, 3),
])
def test_parse(value, mode, k, seed):
    assert pairs_mod.parse_spec(value) == pairs_mod.PairSpec(mode, k, seed)


@pytest.mark.parametrize("bad",
                         ["", "some", "sample", "sample:", "sample:x", "sample:-1", "sample:1:2:3",
                                 "sample:1:y"])
def test_parse_rejects(bad):
    with pytest.raises(ValueError):
        pairs_mod.parse_spec(bad)


def test_normalize_is_canonical():
    assert pairs_mod.normalize(" Ring ") == "ring"
    assert pairs_mod.normalize("sample:5") == "sample:5:0"
    assert pairs_mod.normalize("auto") == "auto"


@pytest.mark.parametrize("n", [1, 2, 3, 4, 16, 33])
def test_all_is_every_ordered_pair(n):
    got = pairs_mod.select(names(n), pairs_mod.PairSpec("all"))
    assert len(got) == n * n == len(set(got))
    assert got[0] == ("node1", "node1")


def test_auto_switches_at_the_limit():
    assert pairs_mod.PairSpec("auto").resolved(pairs_mod.AUTO_ALL_MAX).mode == "all"
    assert pairs_mod.PairSpec("auto").resolved(pairs_mod.AUTO_ALL_MAX + 1).mode == "matrix"
    big = names(pairs_mod.AUTO_ALL_MAX + 1)
    assert pairs_mod.select(big, pairs_mod.PairSpec("auto")) == pairs_mod.ring_pairs(big)


def test_ring_of_three_is_exact():
    assert pairs_mod.select(names(3), pairs_mod.PairSpec("ring")) == [
        ("node1", "node2"), ("node1", "node3"),
        ("node2", "node1"), ("node2", "node3"),
        ("node3", "node1"), ("node3", "node2"),
    ]


def test_small_rings():
    assert pairs_mod.ring_pairs(names(1)) == [("node1", "node1")]
    assert pairs_mod.ring_pairs(names(2)) == [("node1", "node2"), ("node2", "node1")]
    assert pairs_mod.ring_pairs([]) == []


@pytest.mark.parametrize("n", [4, 5, 16, 64, 1024])
def test_ring_counts_and_coverage(n):
    ns = names(n)
    got = pairs_mod.ring_pairs(ns)
    assert len(got) == len(set(got)) == 2 * n
    s = set(got)
    for i, a in enumerate(ns):
        succ = ns[(i + 1) % n]
        assert (a, succ) in s and (succ, a) in s
    # every node is a source of two pairs and a target of two, never of itself
    assert all(a != b for a, b in got)
    for a in ns:
        assert sum(1 for x, _ in got if x == a) == 2 == sum(1 for _, y in got if y == a)


def test_sample_includes_the_ring_and_k_more():
    ns = names(64)
    ring = set(pairs_mod.ring_pairs(ns))
    got = pairs_mod.select(ns, pairs_mod.PairSpec("sample", 100, 1))
    assert len(got) == len(set(got)) == len(ring) + 100
    assert ring <= set(got)
    assert got == sorted(got, key=lambda p: (ns.index(p[0]), ns.index(p[1])))


def test_sample_is_deterministic_per_seed():
    ns = names(50)
    a = pairs_mod.select(ns, pairs_mod.PairSpec("sample", 200, 7))
    b = pairs_mod.select(ns, pairs_mod.PairSpec("sample", 200, 7))
    c = pairs_mod.select(ns, pairs_mod.PairSpec("sample", 200, 8))
    assert a == b
    assert a != c and len(a) == len(c)


def test_sample_caps_at_all_pairs():
    ns = names(5)
    assert sorted(pairs_mod.select(ns, pairs_mod.PairSpec("sample", 1000, 3))) == sorted(
        pairs_mod.select(ns, pairs_mod.PairSpec("all")))
    assert pairs_mod.select(ns, pairs_mod.PairSpec("sample", 0, 3)) == pairs_mod.ring_pairs(ns)


def test_sample_on_a_big_cluster_is_cheap():
    ns = names(1024)
    got = pairs_mod.select(ns, pairs_mod.PairSpec("sample", 5000, 0))
    assert len(got) == 2 * 1024 + 5000


def test_selection_targets_and_meta():
    sel = pairs_mod.Selection.make(names(3), pairs_mod.PairSpec("auto"))
    assert sel.spec.mode == "all" and sel.requested == "auto"
    assert sel.targets["node2"] == ["node1", "node2", "node3"]
    assert sel.meta(3) == {"mode": "all", "requested": "auto", "pairs": 9, "all_pairs": 9}
    assert "all (auto), 9 of 9" in sel.describe(3)
    ring = pairs_mod.Selection.make(names(4), pairs_mod.PairSpec("ring"))
    assert ring.targets["node3"] == ["node2", "node4"]
    assert ring.targets["node1"] == ["node2", "node4"]


class _FakeCluster:
    names = ["a", "b"]

    def __init__(self, value):
        self.value = value

    def cached(self, key):
        assert key == pairs_mod.MEMO_KEY
        return self.value


def test_targets_of_without_a_selection_is_everyone():
    assert pairs_mod.targets_of(_FakeCluster(None), "a") == ["a", "b"]
    sel = pairs_mod.Selection.make(["a", "b", "c"], pairs_mod.PairSpec("ring"))
    assert pairs_mod.targets_of(_FakeCluster(sel), "c") == ["a", "b"]


def test_matrix_is_the_ring_with_every_pair_measured_for_the_per_node_checks():
    assert pairs_mod.parse_spec("Matrix") == pairs_mod.PairSpec("matrix")
    assert pairs_mod.normalize("matrix") == "matrix"
    ns = ["a", "b", "c", "d"]
    sel = pairs_mod.Selection.make(ns, pairs_mod.PairSpec("matrix"))
    assert sel.per_node and not pairs_mod.Selection.make(ns, pairs_mod.PairSpec("ring")).per_node
    assert list(sel.pairs) == pairs_mod.ring_pairs(ns)  # S4, N1, F5, D2, C2: the ring
    cluster = _FakeCluster(sel)
    cluster.names = ns
    assert pairs_mod.targets_of(cluster, "a") == ["b", "d"]
    assert pairs_mod.targets_of(cluster, "a", per_node=True) == ns  # the port matrix: every peer
    ring = _FakeCluster(pairs_mod.Selection.make(["a", "b", "c", "d"], pairs_mod.PairSpec("ring")))
    assert pairs_mod.targets_of(ring, "a", per_node=True) == ["b", "d"]
    assert "F1/F3: all 16, reported per node" in sel.describe(4)
    items = pairs_mod.node_items(ns)
    assert len(items) == 2 * len(ns)
    assert ("c", pairs_mod.ANY) in items and (pairs_mod.ANY, "c") in items
    assert pairs_mod.expand(("c", pairs_mod.ANY), ns) == [("c", x) for x in ns]
    assert pairs_mod.expand((pairs_mod.ANY, "c"), ns) == [(x, "c") for x in ns]
    assert pairs_mod.expand(("a", "b"), ns) == [("a", "b")]

    @pairs_mod.per_node
    def check() -> None: ...
    assert pairs_mod.is_per_node(check) and not pairs_mod.is_per_node(test_parse)


def test_unordered_and_rounds():
    ns = names(6)
    ring = pairs_mod.ring_pairs(ns)
    un = pairs_mod.unordered(ns, ring)
    assert un == [("node1", "node2"), ("node1", "node6"), ("node2", "node3"), ("node3", "node4"),
                  ("node4", "node5"), ("node5", "node6")]
    rs = pairs_mod.rounds(un)
    assert sorted(p for r in rs for p in r) == sorted(un)
    for r in rs:  # no node twice in a round
        flat = [x for p in r for x in p]
        assert len(flat) == len(set(flat))
    assert len(rs) <= 3
    ring = pairs_mod.unordered(names(1025), pairs_mod.ring_pairs(names(1025)))
    assert len(pairs_mod.rounds(ring)) <= 3


class _Cluster:
    def __init__(self, n, spec):
        self.names = names(n)
        self.sel = pairs_mod.Selection.make(self.names, spec) if spec else None

    def cached(self, key):
        return self.sel


def test_node_pairs_follow_the_selection():
    assert len(pairs_mod.node_pairs(_Cluster(5, pairs_mod.PairSpec("all")))) == 10
    assert len(pairs_mod.node_pairs(_Cluster(5, None))) == 10
    # circle method
    assert len(pairs_mod.node_pair_rounds(_Cluster(6, pairs_mod.PairSpec("all")))) == 5
    ring = _Cluster(40, pairs_mod.PairSpec("auto"))  # > 32 nodes: ring
    assert len(pairs_mod.node_pairs(ring)) == 40
    assert len(pairs_mod.node_pair_rounds(ring)) == 2


def test_names_to_resolve_all_where_all_pairs_else_what_the_launch_and_pairs_need():
    small = _Cluster(5, pairs_mod.PairSpec("all"))
    assert pairs_mod.names_to_resolve(small, "node3") == small.names
    assert pairs_mod.names_to_resolve(_Cluster(5, None), "node3") == names(5)
    big = _Cluster(40, pairs_mod.PairSpec("auto"))  # matrix: the ring for N1, F5 and the rest
    assert pairs_mod.names_to_resolve(big, "node1") == big.names  # rank 0: pdsh resolves every host
    # rank 0's name, its own, its ring targets (node9, node11) and the sources reaching it
    assert pairs_mod.names_to_resolve(big, "node10") == ["node1", "node9", "node10", "node11"]
    sample = _Cluster(40, pairs_mod.PairSpec("sample", 30, 1))
    assert sample.sel is not None
    for node in sample.names:
        got = set(pairs_mod.names_to_resolve(sample, node))
        assert {a for a, b in sample.sel.pairs if b == node} <= got, node
        assert set(sample.sel.targets.get(node, [])) <= got and {"node1", node} <= got
