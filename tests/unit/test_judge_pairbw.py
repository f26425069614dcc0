"""C2 (judge/collective/pairbw.py): the circle schedule of node pairs, the slow pairs and the node
they share, the budget shares."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster_tests.judge.collective import collopts as copts
from cluster_tests.judge.collective import pairbw as pb


@given(st.integers(min_value=2, max_value=40))
def test_circle_schedule_covers_every_pair_once(n: int) -> None:
    nodes = [f"n{i}" for i in range(n)]
    rounds = pb.circle_schedule(nodes)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen: list[frozenset[str]] = []
    for pairs in rounds:
        assert len(pairs) == n // 2
        members = [node for pair in pairs for node in pair]
        assert len(members) == len(set(members))  # disjoint within a round
        seen.extend(frozenset(p) for p in pairs)
    assert len(seen) == len(set(seen))
    assert set(seen) == {frozenset(p) for p in combinations(nodes, 2)}


def test_circle_schedule_edge_cases() -> None:
    assert pb.circle_schedule([]) == [] and pb.circle_schedule(["a"]) == []
    assert pb.circle_schedule(["a", "b"]) == [[("a", "b")]]
    with pytest.raises(ValueError):
        pb.circle_schedule(["a", "a"])


def test_flag_slow_pairs_names_the_slow_node() -> None:
    nodes = [f"node{i}" for i in range(1, 7)]
    matrix = {pair: (6.0 if "node4" in pair else 22.0 + i % 3)
              for i, pair in enumerate(p for rnd in pb.circle_schedule(nodes) for p in rnd)}
    result = pb.flag_slow_pairs(matrix)
    assert {frozenset(p) for p, _ in result.slow} == {
        frozenset(("node4", other)) for other in nodes if other != "node4"}
    assert result.suspect == "node4"
    assert result.threshold_GBps == 0.5 * result.median_GBps

    one_link = dict.fromkeys(combinations(nodes, 2), 20.0)
    one_link[("node1", "node2")] = 3.0
    result = pb.flag_slow_pairs(one_link)
    assert [p for p, _ in result.slow] == [("node1", "node2")]
    assert result.suspect is None  # a link, not a node


def test_suspect_node_one_rule_for_slow_and_failing_pairs() -> None:
    """C2's one suspect rule (flag_slow_pairs' suspect, and the failing pairs' note in the
    check): in two bad pairs at least, and in strictly more than any other node."""
    assert pb.suspect_node([("a", "c"), ("b", "c")])[0] == "c"
    assert pb.suspect_node([("a", "b")])[0] is None  # one pair: a link
    assert pb.suspect_node([("a", "b"), ("c", "d")])[0] is None  # no node in common
    assert pb.suspect_node([("a", "b"), ("a", "c"), ("b", "c")])[0] is None  # a tie
    assert pb.suspect_node([("a", "b"), ("b", "c")])[1] == {"a": 1, "b": 2, "c": 1}
    assert pb.common_node_words([("n1", "n3"), ("n2", "n3")], "failing") == [
        "  n3 is in 2 of 2 failing pairs: suspect n3 (its NIC, link, firewall or load)"]
    assert pb.common_node_words([("n1", "n2"), ("n3", "n4")], "slow") == [
        "  2 slow pair(s) with no node in common: suspect the link(s)"]
    assert pb.common_node_words([("n1", "n2")], "slow") == []


def test_budget_shares_split_c1_and_c2_rounds_and_sizes() -> None:
    from cluster_tests.judge.collective import pairbw as pb

    # 30 s: C1 15 s over 8 sizes; C2 15 s over 3 rounds of 2 sizes
    c1, c2 = pb.budget_shares(30.0, 10.0, 8, 3, 2)
    assert c1 == 15.0 / 8 and c2 == 2.5
    # never above --collective-size-seconds
    assert pb.budget_shares(1000.0, 10.0, 8, 3, 2) == (10.0, 10.0)


def test_pair_sizes_measure_a_smaller_size_first() -> None:
    from cluster_tests.judge.collective import pairbw as pb

    assert pb.pair_sizes(copts.parse_sizes("1K,4K,16K,64K,256K,1M,4M,16M")) == [1 << 20, 16 << 20]
    assert pb.pair_sizes([65536, 1 << 20]) == [65536, 1 << 20]
    assert pb.pair_sizes([1 << 20]) == [1 << 20]
    assert pb.pair_sizes([1 << 19, 1 << 20]) == [1 << 20]
