"""C2's confirmation pass (judge/collective/confirmation.py): who is measured again, and what the
retries say."""

from __future__ import annotations

from cluster_tests.judge.collective import confirmation

THREE = ["node1", "node2", "node3"]


def retry(pair: tuple[str, str], bw: float, threshold: float = 0.5) -> confirmation.Retry:
    return confirmation.retry_from(pair, True, bw, None, None, threshold)


def test_the_common_node_is_measured_against_the_two_fast_nodes() -> None:
    bad = [("node2", "node1"), ("node2", "node3")]  # any order: keyed in hostfile order
    plan = confirmation.plan(bad, {("node1", "node3"): 1.0}, THREE)
    assert plan.suspect == "node2"
    assert plan.partners == ("node1", "node3")
    assert plan.pairs == (("node1", "node2"), ("node2", "node3"))
    assert plan.skipped == ()
    assert "node2 (in the slow pairs) against node1 and node3" in plan.describe()


def test_named_only_when_slow_with_both() -> None:
    bad = [("node1", "node2"), ("node2", "node3")]
    plan = confirmation.plan(bad, {("node1", "node3"): 1.0}, THREE)
    both = {p: retry(p, 0.01) for p in plan.pairs}
    c = confirmation.judge(plan, both, bad, THREE)
    assert c.confirmed == "node2"
    assert {v.state for v in c.verdicts.values()} == {"confirmed"}
    assert all(v.red for v in c.verdicts.values())
    line = c.suspect_line()
    assert line.startswith("confirmed: measured again, node2 is slow with node1 (0.010 GB/s) "
                           "and node3 (0.010 GB/s), both fast in this run: suspect node2"), line

    one = {("node1", "node2"): retry(("node1", "node2"), 0.9),
           ("node2", "node3"): retry(("node2", "node3"), 0.01)}
    c = confirmation.judge(plan, one, bad, THREE)
    assert c.confirmed is None
    assert c.verdicts[("node1", "node2")].state == "flaky"
    assert not c.verdicts[("node1", "node2")].red
    assert c.verdicts[("node2", "node3")].state == "slow-again"
    assert "node2 is not named" in c.suspect_line()
    assert "fine when measured again: 0.900 GB/s" in c.verdicts[("node1", "node2")].note


def test_a_single_slow_pair_is_measured_again_itself() -> None:
    bad = [("node1", "node2")]
    good = {("node1", "node3"): 1.0, ("node2", "node3"): 1.1}
    plan = confirmation.plan(bad, good, THREE)
    assert plan.suspect is None and plan.partners == ()
    assert plan.pairs == (("node1", "node2"),)
    c = confirmation.judge(plan, {("node1", "node2"): retry(("node1", "node2"), 0.8)}, bad, THREE)
    assert c.verdicts[("node1", "node2")].state == "flaky"
    c = confirmation.judge(plan, {("node1", "node2"): retry(("node1", "node2"), 0.1)}, bad, THREE)
    assert c.verdicts[("node1", "node2")].state == "slow-again"
    assert c.suspect_line() == ""


def test_partners_are_the_fastest_nodes_and_other_slow_pairs_follow() -> None:
    names = [f"n{i}" for i in range(6)]
    # a ring: n2 slow with both neighbours, and one other slow link n4<->n5
    bad = [("n1", "n2"), ("n2", "n3"), ("n4", "n5")]
    good = {("n0", "n1"): 1.0, ("n3", "n4"): 2.0, ("n5", "n0"): 1.5}
    plan = confirmation.plan(bad, good, names)
    assert plan.suspect == "n2"
    # n3's best good pair is 2.0; n4 has 2.0 too but is in another slow pair: n0 (1.5) next
    assert plan.partners == ("n3", "n0")
    assert plan.pairs[:2] == (("n2", "n3"), ("n0", "n2"))
    assert plan.pairs[2:] == (("n1", "n2"), ("n4", "n5"))
    retries = {p: retry(p, 0.01) for p in plan.pairs}
    c = confirmation.judge(plan, retries, bad, names)
    assert c.confirmed == "n2"
    assert c.verdicts[("n4", "n5")].state == "slow-again"
    assert c.verdicts[("n1", "n2")].state == "confirmed"


def test_no_suspect_without_two_fast_nodes() -> None:
    bad = [("node1", "node2"), ("node2", "node3")]
    plan = confirmation.plan(bad, {}, THREE)
    assert plan.suspect == "node2" and plan.partners == ()
    assert plan.pairs == (("node1", "node2"), ("node2", "node3"))
    c = confirmation.judge(plan, {p: retry(p, 0.01) for p in plan.pairs}, bad, THREE)
    assert c.confirmed is None
    assert "fewer than two nodes were fast" in c.suspect_line()


def test_over_the_cap_a_pair_is_judged_on_one_measurement() -> None:
    names = [f"n{i}" for i in range(40)]
    bad = [(names[i], names[i + 1]) for i in range(0, 40, 2)]  # 20 disjoint slow links
    plan = confirmation.plan(bad, {}, names, cap=16)
    assert plan.suspect is None
    assert len(plan.pairs) == 16 and len(plan.skipped) == 4
    c = confirmation.judge(plan, {p: retry(p, 0.01) for p in plan.pairs}, bad, names)
    states = [c.verdicts[p].state for p in plan.skipped]
    assert states == ["once"] * 4
    assert "judged on one measurement" in c.verdicts[plan.skipped[0]].note


def test_a_retry_is_slow_when_it_fails_stops_or_falls_below_the_threshold() -> None:
    p = ("node1", "node2")
    assert confirmation.retry_from(p, False, None, None, "rank 1 never joined", 0.5).slow
    stopped = confirmation.retry_from(p, True, 0.9, "sweep stopped before 16MB", None, 0.5)
    assert stopped.slow and "sweep stopped" in stopped.describe()
    assert confirmation.retry_from(p, True, 0.4, None, None, 0.5).slow
    assert not confirmation.retry_from(p, True, 0.6, None, None, 0.5).slow
    assert confirmation.retry_from(p, True, None, None, None, 0.5).slow


def _pair_report(pair: tuple[str, str], time_us: float) -> confirmation.CollectiveReport:
    """The report of a pair's run that measured 1 MiB in `time_us` (the worker's events)."""
    from cluster_tests.judge.collective import collverdict as C
    from cluster_tests.judge.collective import rankplan as rk

    ranks = rk.assign_ranks({pair[0]: 1, pair[1]: 1})
    row = {"event": "result", "size_bytes": 1 << 20, "count": 1 << 18, "dtype": "float32",
           "time_us": time_us, "wrong": 0}
    return C.collect({r.rank: [{"event": "start", "backend": "gloo"}, row, {"event": "done"}]
                      for r in ranks}, ranks)


def test_a_slow_pair_confirmed_is_one_red_on_the_pair_and_a_flaky_one_none() -> None:
    from cluster_tests.judge.collective import collverdict as C
    from cluster_tests.judge.collective import pairbw as pb

    measured = {("node1", "node2"): 0.01, ("node2", "node3"): 0.01, ("node1", "node3"): 1.0}
    slow = pb.flag_slow_pairs(measured, ratio=0.5, reference="upper_median")
    bad = [p for p, _ in slow.slow]
    plan = confirmation.plan(bad, {("node1", "node3"): 1.0}, THREE)
    c = confirmation.judge(plan, {p: retry(p, 0.01) for p in plan.pairs}, bad, THREE)
    pair = ("node1", "node2")
    report = _pair_report(pair, 100_000.0)
    first = confirmation.slow_words(pair, report, slow, len(measured))
    # three nodes: the better half's median is that of 0.01 and 1.0
    assert first == ("node1<->node2: busbw 0.010 GB/s at 1MB, below 0.253 GB/s = 0.5 x the "
                     "typical good pair (0.505 GB/s, median of the better half of 3 pairs); "
                     "median of the other slow pairs 0.010 GB/s")
    red = confirmation.slow_pair(pair, report, first, c, c.verdicts[pair])
    assert red is not None
    assert red.nodes == pair and red.cause == C.CollectiveCause.SLOW_PAIR and red.item == "C2"
    assert "node2 is in 2 of 2 slow pairs; confirmed: measured again, node2 is slow" in red.message
    assert red.fix.startswith("compare `ethtool <iface>` speeds and `tc qdisc show` on node1 "
                              "and node2")
    # measured again and fine: a warning, not a red
    fine = confirmation.judge(plan, {p: retry(p, 0.9) for p in plan.pairs}, bad, THREE)
    assert confirmation.slow_pair(pair, report, first, fine, fine.verdicts[pair]) is None
    assert confirmation.flaky_words(first, fine.verdicts[pair]).startswith(f"flaky: {first}; ")
