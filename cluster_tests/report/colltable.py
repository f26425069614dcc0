"""C1's and C2's tables, as nccl-tests prints them, each from the typed record the collective
checks put on their tests: the one renderer of each table, whether the tests ran in this
process or in pytest-xdist's workers (the controller has their reports only).

- :class:`AllReduceResult` (property ``allreduce``, on C1's test and on each C2 pair's): one
  run, what its table shows (per size: time, algbw, busbw, #wrong; what was timed, the notes of
  a slowed, stopped or capped sweep, the transport of each node, the verdict).  summary.json's
  per-size rows, the HTML plot, the history and the metrics read it too.
- :class:`PairResult` (property ``allreduce_pair``, on each C2 pair's test): the pair's row in
  C2's table and its line in the confirmation block, with what C2 judged of all its pairs
  together (:class:`PairsJudged`: the slow pairs' threshold, the suspect).

Each record is JSON in its property (a JUnit property is text) and read back whole
(`from_json`); no report reads a figure out of a property's name.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar, TypeVar

from cluster_tests.judge.collective import confirmation, nccllog
from cluster_tests.judge.collective.collopts import UNITS_LEGEND, format_size
from cluster_tests.judge.collective.collverdict import (
    Capped,
    CollectiveReport,
    RemoteRun,
    SizeRow,
    Stopped,
)
from cluster_tests.judge.collective.pairbw import SlowPairs, pair_id

Pair = tuple[str, str]


R = TypeVar("R", bound="_Record")


class _Record:
    """A record carried as JSON in a test's property (a JUnit property is text), read back
    whole."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))  # type: ignore[call-overload]

    @classmethod
    def from_json(cls: type[R], raw: object) -> R | None:
        """The record of a property's value (None: not one this version wrote)."""
        try:
            return cls._read(json.loads(str(raw)))
        except (ValueError, TypeError, KeyError):
            return None

    @classmethod
    def _read(cls: type[R], d: dict[str, Any]) -> R:
        raise NotImplementedError


@dataclass(frozen=True)
class SizeResult:
    """One size of a sweep (nccl-tests' row): the slowest rank's average time per op."""

    size_bytes: int
    count: int
    dtype: str
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    wrong: int
    #: timed calls made (fewer than the run's `iters` on a slow link)
    iters: int | None = None

    @classmethod
    def of(cls, row: SizeRow) -> SizeResult:
        return cls(row.size_bytes, row.count, row.dtype, row.time_us, row.algbw_GBps,
                   row.busbw_GBps, row.wrong, row.iters)


@dataclass(frozen=True)
class AllReduceResult(_Record):
    """One all-reduce run as its table shows it."""

    PROPERTY: ClassVar[str] = "allreduce"

    world_size: int
    backend: str | None
    versions: dict[str, str]
    #: what was timed (the worker's words)
    timed: str
    #: timed calls asked for per size
    iters: int | None
    rows: tuple[SizeResult, ...]
    verdict: str
    message: str
    stopped: Stopped | None = None
    capped: Capped | None = None
    #: (node, the transports its ranks chose), in the run's order
    transports: tuple[tuple[str, str], ...] = ()
    nodes: tuple[str, ...] = ()
    #: the rendezvous, host:port
    master: str = ""

    @classmethod
    def of(cls, report: CollectiveReport, nodes: Sequence[str] = (),
           master: str = "") -> AllReduceResult:
        return cls(
            report.world_size, report.backend, dict(report.versions), report.timed,
            report.iters,
            tuple(SizeResult.of(r) for r in report.rows),
            report.verdict, report.message, report.stopped, report.capped,
            tuple((host, t.describe())
                  for host, t in nccllog.by_node(report.transport_lines, report.ranks).items()),
            tuple(nodes), master)

    @classmethod
    def of_run(cls, run: RemoteRun) -> AllReduceResult:
        return cls.of(run.report, run.nodes, run.where)

    @classmethod
    def _read(cls, d: dict[str, Any]) -> AllReduceResult:
        stopped, capped = d.get("stopped"), d.get("capped")
        return cls(
            int(d["world_size"]), d.get("backend"), dict(d.get("versions") or {}),
            str(d.get("timed") or ""), d.get("iters"),
            tuple(SizeResult(**r) for r in d.get("rows") or ()),
            str(d["verdict"]), str(d.get("message") or ""),
            Stopped(**{**stopped, "skipped": tuple(stopped["skipped"])}) if stopped else None,
            Capped(**{**capped, "skipped": tuple(capped["skipped"])}) if capped else None,
            tuple((str(h), str(t)) for h, t in d.get("transports") or ()),
            tuple(d.get("nodes") or ()), str(d.get("master") or ""))


@dataclass(frozen=True)
class PairsJudged:
    """What C2 judged of its pairs together (the same on each pair's record): the slow pairs'
    threshold, and the confirmation pass (its retries, at most `RETRY_CAP` and the suspect's
    two, in the order they ran)."""

    #: busbw below this is slow: a ratio of the reference (the typical good pair)
    threshold_GBps: float = 0.0
    reference: str = "median"
    reference_GBps: float = 0.0
    #: the node the table names: the confirmed one where the slow pairs were measured again
    suspect: str | None = None
    #: whether slow pairs were measured again (the confirmation block is shown)
    confirming: bool = False
    #: each pair measured again, with what its retry gave
    retries: tuple[tuple[Pair, str], ...] = ()
    #: the confirmation's word on its suspect ("" when there was none to confirm)
    suspect_line: str = ""
    confirmed: str | None = None

    @classmethod
    def of(cls, slow: SlowPairs, confirmed: confirmation.Confirmation) -> PairsJudged:
        plan = confirmed.plan
        retries = []
        for pair in plan.pairs:
            again, v = confirmed.retries.get(pair), confirmed.verdicts.get(pair)
            what = ("SLOW" if again.slow else "ok") if again else "not run"
            tag = {"flaky": "  -> FLAKY (slow once)", "slow-again": "  -> SLOW twice",
                   "confirmed": "  -> SLOW (suspect confirmed)"}.get(v.state, "") if v else ""
            retries.append((pair, f"retry: {again.describe() if again else '-'}  {what}{tag}"))
        return cls(slow.threshold_GBps, slow.reference, slow.reference_GBps,
                   confirmed.confirmed if not plan.empty else slow.suspect, not plan.empty,
                   tuple(retries), confirmed.suspect_line() if plan.suspect else "",
                   confirmed.confirmed)

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> PairsJudged:
        got = cls(**d)  # type: ignore[arg-type]
        return replace(got, retries=tuple(((str(a), str(b)), str(said))
                                          for (a, b), said in got.retries))


@dataclass(frozen=True)
class PairResult(_Record):
    """One C2 pair as its table shows it."""

    PROPERTY: ClassVar[str] = "allreduce_pair"

    pair: Pair
    #: the largest size it reached (None: no size measured, or not run)
    row: SizeResult | None
    #: the table's verdict: ok, SLOW, SLOW (sweep stopped), the run's, or error (not run)
    verdict: str
    #: why there is no row
    why: str = ""
    #: slow, and not measured again (over the confirmation's cap): its place among those pairs
    not_retried: int | None = None
    judged: PairsJudged = field(default_factory=PairsJudged)

    @classmethod
    def of(cls, pair: Pair, run: RemoteRun | BaseException | None, slow: SlowPairs,
           confirmed: confirmation.Confirmation) -> PairResult:
        """`pair`'s record: its run (or why it was not run), C2's slow pairs and the
        confirmation pass."""
        judged = PairsJudged.of(slow, confirmed)
        skipped = confirmed.plan.skipped
        at = skipped.index(pair) if pair in skipped else None
        rep = run.report if isinstance(run, RemoteRun) else None
        if rep is None or not rep.rows:
            why = (str(run) if isinstance(run, BaseException) else "") or (
                rep.message if rep else "no result")
            return cls(pair, None, rep.verdict if rep else "error", why, at, judged)
        verdict = ("SLOW (sweep stopped)" if rep.stopped is not None
                   else "SLOW" if pair in {p for p, _ in slow.slow} else rep.verdict)
        return cls(pair, SizeResult.of(rep.rows[-1]), verdict, "", at, judged)

    @classmethod
    def _read(cls, d: dict[str, Any]) -> PairResult:
        a, b = d["pair"]
        return cls((str(a), str(b)), SizeResult(**d["row"]) if d.get("row") else None,
                   str(d["verdict"]), str(d.get("why") or ""), d.get("not_retried"),
                   PairsJudged.from_dict(d.get("judged") or {}))


# --- the tables ---------------------------------------------------------------------------------


def _header_line(*cols: str) -> str:
    widths = (11, 12, 8, 6, 10, 8, 8, 7)
    return "#" + " ".join(f"{c:>{w}}" for c, w in zip(cols, widths, strict=False))


def table(result: AllReduceResult) -> str:
    """C1's table, nccl-tests' layout, with a units legend, a line stating what was timed, the
    notes of a slowed, stopped or capped sweep, each node's transports, and the verdict."""
    lines = [
        (f"# all_reduce: {result.world_size} ranks, backend {result.backend}, "
         f"versions {json.dumps(result.versions, sort_keys=True)}"),
        f"# timed: {result.timed or 'unknown'}",
        UNITS_LEGEND,
        _header_line("size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"),
        _header_line("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]
    for row in result.rows:
        lines.append(
            f"{row.size_bytes:12d} {row.count:12d} {row.dtype:>8} {'sum':>6} {row.time_us:10.2f}"
            f" {row.algbw_GBps:8.2f} {row.busbw_GBps:8.2f} {row.wrong:7d}")
    if result.rows:
        avg = statistics.fmean(row.busbw_GBps for row in result.rows)
        lines.append(f"# Avg bus bandwidth    : {avg:.3f} GB/s")
    fewer = [row for row in result.rows
             if row.iters is not None and result.iters is not None and row.iters < result.iters]
    if fewer:
        lines.append("# slow link: fewer timed calls at " + ", ".join(
            f"{format_size(row.size_bytes)}B ({row.iters})" for row in fewer)
            + " to stay within --collective-size-seconds (or its share of --collective-budget)")
    if result.stopped is not None:
        lines.append(f"# {result.stopped.describe()}")
    if result.capped:
        skipped = ", ".join(format_size(x) + "B" for x in result.capped.skipped)
        lines.append(f"# not run for lack of memory: {skipped} (largest buffer every rank can "
                     f"hold: {result.capped.cap_bytes} B; {result.capped.where})")
    lines += [f"# transport {host}: {said}" for host, said in result.transports]
    lines.append(f"# verdict: {result.verdict}: {result.message}")
    return "\n".join(lines)


def pairs_table(pairs: Iterable[PairResult]) -> list[str]:
    """C2's table: one line per pair, busbw at the pair's (largest) size, slow pairs marked; then
    the confirmation block, where slow pairs were measured again ([] without pairs)."""
    rows = sorted(pairs, key=lambda p: p.pair)
    if not rows:
        return []
    judged = rows[0].judged
    lines = ["# C2: all-reduce per node pair, 1 rank per node, largest size only; "
             + UNITS_LEGEND[2:],
             f"#{'pair':>27} {'size':>12} {'time':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>7}"
             "  verdict",
             f"#{'':>27} {'(B)':>12} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7}"]
    for p in rows:
        if p.row is None:
            lines.append(f"{pair_id(p.pair):>28} {'-':>12} {'-':>10} {'-':>8} {'-':>8} "
                         f"{'-':>7}  {p.verdict}: {p.why[:100]}")
            continue
        r = p.row
        lines.append(f"{pair_id(p.pair):>28} {r.size_bytes:12d} {r.time_us:10.2f} "
                     f"{r.algbw_GBps:8.2f} {r.busbw_GBps:8.2f} {r.wrong:7d}  {p.verdict}")
    if judged.reference_GBps:
        ref = judged.reference.replace("_", " ")
        lines.append(f"# slow = busbw below {judged.threshold_GBps:.3f} GB/s "
                     f"({judged.threshold_GBps / judged.reference_GBps:g} x the {ref} "
                     f"{judged.reference_GBps:.3f} GB/s); suspect node: "
                     f"{judged.suspect or 'none'}")
    return lines + _confirmation_lines(rows, judged)


def _confirmation_lines(rows: Sequence[PairResult], judged: PairsJudged) -> list[str]:
    """C2 table's confirmation block: every retry with its number, then the outcome."""
    if not judged.confirming:
        return []
    lines = [f"# C2 confirmation: measured again before blaming (slow = below "
             f"{judged.threshold_GBps:.3f} GB/s, as above)"]
    lines += [f"#{a + '<->' + b:>27}  {said}" for (a, b), said in judged.retries]
    if judged.suspect_line:
        lines.append(f"# suspect node: {judged.confirmed or 'none'} ({judged.suspect_line})")
    skipped = sorted((p.not_retried, p.pair) for p in rows if p.not_retried is not None)
    lines += [f"#{a + '<->' + b:>27}  not measured again (cap {confirmation.RETRY_CAP})"
              for _, (a, b) in skipped]
    return lines


def tables(c1: AllReduceResult | None, c2: Iterable[PairResult]) -> list[str]:
    """The all-reduce section of the terminal summary: C1's table, then C2's ([] when no
    collective check recorded one)."""
    lines: list[str] = []
    if c1 is not None:
        lines += [f"C1: all-reduce over every rank ({', '.join(c1.nodes)}), master {c1.master}",
                  table(c1)]
    pairs = pairs_table(c2)
    if pairs and lines:
        lines.append("")
    return lines + pairs


def sizes(result: AllReduceResult | None) -> list[dict[str, float]]:
    """C1's rows for the reports: size_bytes, time_us, algbw_GBps, busbw_GBps (rounded as
    JUnit's figures are)."""
    return [{"size_bytes": r.size_bytes, "time_us": round(r.time_us, 3),
             "algbw_GBps": round(r.algbw_GBps, 6), "busbw_GBps": round(r.busbw_GBps, 6)}
            for r in (result.rows if result is not None else ())]
