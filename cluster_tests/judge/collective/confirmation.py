"""C2's confirmation pass: measure again before blaming (issue 26).

One measurement of a pair is one sample of a shared network: a backup, another job's burst or a
busy core can make a healthy pair slow once. So before C2 names a node, and before it calls a
pair slow, the pairs in question are measured again:

- the node that the slow pairs have in common (:func:`pairbw.suspect_node`), against the two
  nodes that were fastest in this run (each node's best good pair), and
- every other slow pair, itself, once (up to ``cap`` pairs; beyond that a pair keeps the
  verdict of its one measurement, and says so).

Then: the suspect is named only if it is slow with both fast nodes; a slow pair that is slow
again is red; a pair that was slow once and fine on the retry is flaky, a warning with both
numbers, not a red. "Slow" on a retry means what it meant the first time: busbw below the same
threshold, a sweep stopped for its share of the budget, or a run that failed.

Pure: the retries are run by ``measure.allreduce.confirm``; this module plans and judges.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.judge.collective.collopts import format_size
from cluster_tests.judge.collective.collverdict import CollectiveCause, CollectiveReport
from cluster_tests.judge.collective.pairbw import SlowPairs, pair_id, suspect_node
from cluster_tests.judge.problem import Problem

Pair = tuple[str, str]

#: slow pairs measured again at most (the suspect's two retries come on top)
RETRY_CAP = 16
#: rounds the suspect's two retries take (they share the suspect): C2's budget keeps room for them
SUSPECT_ROUNDS = 2


def ordered(a: str, b: str, order: Mapping[str, int]) -> Pair:
    """The pair in hostfile order, as C2's ids and keys are."""
    return (a, b) if order.get(a, 0) <= order.get(b, 0) else (b, a)


@dataclass(frozen=True)
class Plan:
    """What to measure again. ``pairs``: every pair to run again, the suspect's first."""

    suspect: str | None
    partners: tuple[str, ...]  # the fast nodes the suspect is measured against (2, or none)
    pairs: tuple[Pair, ...]
    skipped: tuple[Pair, ...] = ()  # slow pairs over the cap: judged on one measurement

    @property
    def empty(self) -> bool:
        return not self.pairs

    def describe(self) -> str:
        """One line for the terminal: what is measured again, and why."""
        parts = []
        if self.suspect and self.partners:
            parts.append(f"{self.suspect} (in the slow pairs) against "
                         f"{' and '.join(self.partners)} (the fastest in this run)")
        own = [p for p in self.pairs if not (self.suspect and self.suspect in p
                                              and set(p) - {self.suspect} <= set(self.partners))]
        if own:
            parts.append(f"{len(own)} slow pair(s) once more: "
                         + ", ".join(f"{a}<->{b}" for a, b in own))
        return "; ".join(parts)


def plan(bad: Sequence[Pair], good: Mapping[Pair, float], names: Sequence[str],
         cap: int = RETRY_CAP) -> Plan:
    """The retries for C2's ``bad`` pairs (slow, or stopped for the budget), given the busbw of
    the ``good`` ones. The suspect is measured against two nodes fast in this run (those in no
    other slow pair first, then by their best good pair); it has no partners when fewer than
    two such nodes exist, and is then never named: its pairs are judged on their own retries."""
    order = {n: i for i, n in enumerate(names)}
    bad = sorted({ordered(a, b, order) for a, b in bad}, key=lambda p: (order[p[0]], order[p[1]]))
    if not bad:
        return Plan(None, (), ())
    suspect, _ = suspect_node(bad)
    best: dict[str, float] = {}
    for pair, bw in good.items():
        for node in pair:
            best[node] = max(best.get(node, 0.0), bw)
    # a node in another slow pair (not the suspect's) is not a known-good one: last
    other_bad = Counter(n for pair in bad if suspect not in pair for n in pair)
    fast = sorted((n for n in best if n != suspect),
                  key=lambda n: (other_bad[n], -best[n], order.get(n, 0)))
    partners = tuple(fast[:2]) if suspect is not None and len(fast) >= 2 else ()
    pairs: list[Pair] = [ordered(suspect, f, order) for f in partners] if suspect else []
    rest = [p for p in bad if p not in pairs]
    return Plan(suspect, partners, tuple(pairs + rest[:cap]), tuple(rest[cap:]))


@dataclass(frozen=True)
class Retry:
    """One pair measured again: its busbw at the largest size it reached (None: no number)."""

    pair: Pair
    busbw_GBps: float | None
    slow: bool
    why: str = ""  # what made it slow besides the number: a stopped sweep, a failure

    def describe(self) -> str:
        got = f"{self.busbw_GBps:.3f} GB/s" if self.busbw_GBps is not None else "no busbw"
        return f"{got}{' (' + self.why + ')' if self.why else ''}"


@dataclass(frozen=True)
class PairVerdict:
    """What the confirmation says of one of C2's slow pairs."""

    state: str  # "confirmed" (the suspect's), "slow-again", "flaky" or "once" (not retried)
    retry: Retry | None
    note: str  # the words for the pair's message

    @property
    def red(self) -> bool:
        return self.state != "flaky"


@dataclass(frozen=True)
class Confirmation:
    plan: Plan
    retries: dict[Pair, Retry]
    confirmed: str | None  # the suspect, slow with both fast nodes
    verdicts: dict[Pair, PairVerdict] = field(default_factory=dict)

    def partner_retries(self) -> list[Retry]:
        s = self.plan.suspect
        return [r for p, r in self.retries.items()
                if s in p and set(p) - {s} <= set(self.plan.partners)] if s else []

    def suspect_line(self) -> str:
        """'node2 is slow with node1 (0.004 GB/s) and node3 (0.005 GB/s), both fast in this
        run: suspect node2 ...' or why the suspect was not named ('' when there was none)."""
        s = self.plan.suspect
        if not s:
            return ""
        if not self.plan.partners:
            return (f"{s} is common to the slow pairs, but fewer than two nodes were fast in "
                    f"this run to confirm it against: not named")
        with_ = " and ".join(f"{_other(r.pair, s)} ({r.describe()})"
                             for r in self.partner_retries())
        if self.confirmed:
            return (f"confirmed: measured again, {s} is slow with {with_}, both fast in this run: "
                    f"suspect {s} (its NIC, link, firewall or load)")
        return (f"not confirmed: measured again, {s} got {with_} with nodes fast in this run: "
                f"{s} is not named")


def _other(pair: Pair, node: str) -> str:
    return pair[1] if pair[0] == node else pair[0]


def judge(p: Plan, retries: Mapping[Pair, Retry], bad: Sequence[Pair],
          names: Sequence[str]) -> Confirmation:
    """The verdict of every slow pair after the retries (see the module's docstring)."""
    order = {n: i for i, n in enumerate(names)}
    s = p.suspect
    partner = [retries[ordered(s, f, order)] for f in p.partners
               if ordered(s, f, order) in retries] if s else []
    confirmed = s if s and len(partner) == 2 and all(r.slow for r in partner) else None
    verdicts: dict[Pair, PairVerdict] = {}
    for a, b in bad:
        pair = ordered(a, b, order)
        retry = retries.get(pair)
        if confirmed and confirmed in pair:
            verdicts[pair] = PairVerdict("confirmed", retry, "")
        elif retry is None:
            verdicts[pair] = PairVerdict(
                "once", None, f"not measured again (more than {RETRY_CAP} slow pairs): "
                              "judged on one measurement")
        elif retry.slow:
            verdicts[pair] = PairVerdict("slow-again", retry,
                                         f"slow again when measured again: {retry.describe()}")
        else:
            verdicts[pair] = PairVerdict("flaky", retry,
                                         f"fine when measured again: {retry.describe()}")
    return Confirmation(p, dict(retries), confirmed, verdicts)


def retry_from(pair: Pair, ok: bool, busbw: float | None, stopped: str | None,
               failure: str | None, threshold: float) -> Retry:
    """A retry's outcome from its run: failed (``ok`` False), stopped for its share of the
    budget, or a busbw to hold against C2's threshold."""
    if not ok:
        return Retry(pair, busbw, True, f"failed: {failure or 'no result'}")
    if stopped:
        return Retry(pair, busbw, True, stopped)
    if busbw is None:
        return Retry(pair, None, True, "no size measured")
    return Retry(pair, busbw, busbw < threshold)


# --- the verdict of one slow pair -------------------------------------------------------------


def slow_words(pair: Pair, report: CollectiveReport, slow: SlowPairs, n_pairs: int) -> str:
    """What C2 measured of a slow pair (or one stopped for its share of the budget), against
    the typical good pair of its `n_pairs`: the first line of its red or of its warning."""
    if report.stopped is not None:
        row = report.rows[-1] if report.rows else None
        got = (f"busbw {row.busbw_GBps:.4f} GB/s at {format_size(row.size_bytes)}B; "
               if row else "")
        return (f"{pair_id(pair)}: too slow for its share of the budget: {got}"
                f"{report.stopped.describe()}"
                + (f"; the typical good pair: {slow.reference_GBps:.3f} GB/s"
                   if slow.reference_GBps else ""))
    mine = dict(slow.slow)[pair]
    row = report.rows[-1]
    others = [bw for p, bw in slow.slow if p != pair]
    return (f"{pair_id(pair)}: busbw {mine:.3f} GB/s at {format_size(row.size_bytes)}B, "
            f"below {slow.threshold_GBps:.3f} GB/s = {slow.threshold_GBps / slow.reference_GBps:g}"
            f" x the typical good pair ({slow.reference_GBps:.3f} GB/s, median of the better half"
            f" of {n_pairs} pairs)"
            + (f"; median of the other slow pairs {statistics.median(others):.3f} GB/s"
               if others else ""))


def flaky_words(first: str, verdict: PairVerdict) -> str:
    """The warning of a pair slow once and fine when measured again (not a red)."""
    return (f"flaky: {first}; {verdict.note}: not a red, but a link to watch (run "
            "`-m collective` again)")


def blame(c: Confirmation, pair: Pair, verdict: PairVerdict) -> list[str]:
    """What the confirmation pass says of a red slow pair: the suspect, confirmed against two
    fast nodes; or the pair's own retry (and why the node it shares was not named)."""
    bad = sorted(c.verdicts)
    s = c.plan.suspect
    counts = f"{s} is in {sum(s in p for p in bad)} of {len(bad)} slow pairs" if s else ""
    if c.confirmed and c.confirmed in pair:
        return [f"  {counts}; {c.suspect_line()}"]
    lines = [f"  {verdict.note}"]
    if s and s in pair:
        return [*lines, f"  {counts}; {c.suspect_line()}"]
    reds = [p for p, v in c.verdicts.items() if v.red]
    if len(reds) >= 2 and suspect_node(reds)[0] is None:
        lines.append(f"  {len(reds)} slow pair(s) with no node in common: suspect the link(s)")
    return lines


def slow_pair(pair: Pair, report: CollectiveReport, first: str, c: Confirmation,
              verdict: PairVerdict) -> Problem | None:
    """C2's red of a slow pair after the confirmation pass (None: flaky, a warning only)."""
    if not verdict.red:
        return None
    a, b = pair
    return Problem(
        pair, CollectiveCause.PAIR_TOO_SLOW if report.stopped is not None
        else CollectiveCause.SLOW_PAIR, "\n".join([first, *blame(c, pair, verdict)]),
        fix=f"compare `ethtool <iface>` speeds and `tc qdisc show` on {a} and {b}; "
            f"iperf3 -s on {a}, iperf3 -c {a} on {b}", item=ids.ALLREDUCE_PAIR.item)
