"""C2's pairs (pure): the circle schedule of disjoint rounds, the slow pairs against the typical
good pair, the node they have in common, the ids, and C2's share of ``--collective-budget``.
The confirmation of a suspect before it is named is ``judge/collective/confirmation.py``.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


def circle_schedule(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Round-robin "circle method": n-1 rounds of n/2 disjoint pairs (n even), every unordered
    pair exactly once, so each round can run all its pairs at the same time. For odd n a bye
    is added: n rounds of (n-1)/2 pairs, one node idle per round."""
    players: list[str | None] = list(nodes)
    if len(set(nodes)) != len(nodes):
        raise ValueError("duplicate node names")
    if len(players) < 2:
        return []
    if len(players) % 2:
        players.append(None)
    n = len(players)
    rounds = []
    for _ in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = players[i], players[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b))
        rounds.append(pairs)
        players = [players[0], players[-1], *players[1:-1]]  # rotate all but the first
    return rounds


@dataclass(frozen=True)
class SlowPairs:
    median_GBps: float
    threshold_GBps: float
    slow: list[tuple[tuple[str, str], float]]  # slowest first
    suspect: str | None  # node in strictly more slow pairs than any other, if any
    counts: dict[str, int]
    reference_GBps: float = 0.0  # what the threshold is a fraction of
    reference: str = "median"


def upper_median(values: Iterable[float]) -> float:
    """Median of the better half (the middle value included when the count is odd).

    One slow node among n is in n-1 of the n(n-1)/2 pairs, i.e. in 2/n of them: with 3 or 4
    nodes the plain median is itself a slow pair and flags nothing. The better half's median is
    a healthy pair as long as fewer than half of the nodes are slow."""
    ordered = sorted(values)
    return statistics.median(ordered[len(ordered) // 2:])


def flag_slow_pairs(pair_busbw: Mapping[tuple[str, str], float],
                    ratio: float = 0.5, reference: str = "median") -> SlowPairs:
    """Pairs whose busbw is below ``ratio`` x the reference: the median of all pairs, or with
    ``reference="upper_median"`` the median of the better half (see :func:`upper_median`).
    A node common to most slow pairs is the likely slow node; a single slow pair with no
    common node is a link."""
    if not pair_busbw:
        return SlowPairs(0.0, 0.0, [], None, {}, 0.0, reference)
    median = statistics.median(pair_busbw.values())
    if reference == "median":
        ref = median
    elif reference == "upper_median":
        ref = upper_median(pair_busbw.values())
    else:
        raise ValueError(f"unknown reference {reference!r}")
    threshold = ratio * ref
    slow = sorted(((p, bw) for p, bw in pair_busbw.items() if bw < threshold),
                  key=lambda item: item[1])
    suspect, counts = suspect_node(p for p, _ in slow)
    return SlowPairs(median, threshold, slow, suspect, dict(counts), ref, reference)


def suspect_node(pairs: Iterable[tuple[str, str]]) -> tuple[str | None, Counter[str]]:
    """The node common to bad (slow or failing) pairs: in two of them at least and in strictly
    more than any other node (else None: the links are suspect), with each node's count."""
    counts = Counter(node for pair in pairs for node in pair)
    ranked = counts.most_common(2)
    if ranked and ranked[0][1] >= 2 and (len(ranked) == 1 or ranked[0][1] > ranked[1][1]):
        return ranked[0][0], counts
    return None, counts


def pair_id(pair: tuple[str, str]) -> str:
    """Test id of an unordered pair: ``node1<->node2`` (hostfile order)."""
    return f"{pair[0]}<->{pair[1]}"


def budget_shares(budget_s: float, size_seconds: float, c1_sizes: int, c2_rounds: int,
                  c2_sizes: int) -> tuple[float, float]:
    """(C1's seconds per size, C2's seconds per size) under ``--collective-budget``: C1 gets
    half the budget, each C2 round (its pairs run at once) an equal share of the other half,
    every size of a run an equal share of its run's; never more than --collective-size-seconds."""
    c1 = budget_s / 2 / max(1, c1_sizes)
    c2 = budget_s / 2 / max(1, c2_rounds) / max(1, c2_sizes)
    return min(size_seconds, c1), min(size_seconds, c2)


def pair_sizes(sizes: Sequence[int]) -> list[int]:
    """C2's sizes: the largest, after one 16 times smaller (when the sweep has one): the smaller
    one is measured first, so that a link too slow for the largest within its share is stopped
    before even one call of it (the worker predicts from the smaller)."""
    top = max(sizes)
    smaller = [s for s in sizes if s <= top // 16]
    return [max(smaller), top] if smaller else [top]


def common_node_words(pairs: Sequence[tuple[str, str]], kind: str) -> list[str]:
    """['  node3 is in 2 of 2 failing pairs: suspect node3 (...)'], or the links when no node is
    common to the `kind` pairs; [] for fewer than two."""
    if len(pairs) < 2:
        return []
    suspect, counts = suspect_node(pairs)
    if suspect is None:
        return [f"  {len(pairs)} {kind} pair(s) with no node in common: suspect the link(s)"]
    return [f"  {suspect} is in {counts.get(suspect, 0)} of {len(pairs)} {kind} pairs: "
            f"suspect {suspect} (its NIC, link, firewall or load)"]
