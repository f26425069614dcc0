"""All-reduce checks C1-C3, launcher side: the verdict (pure).

The worker (``node/allreduce.py``) runs one process per rank and prints JSON event lines;
:func:`collect` turns them into a :class:`CollectiveReport` whose verdict names the ranks (their
host and local rank) that never joined, hung or failed, the busbw formula (nccl-tests'
doc/PERFORMANCE.md), the backend each node's accelerators call for, and C1's busbw against
``--min-busbw`` and a baseline (:func:`judge_busbw`). The seams around it: the options
(``collopts.py``), the rank layout and worker command (``rankplan.py``), the tables
(``colltable.py``), C2's pairs (``pairbw.py``) and their confirmation (``confirmation.py``),
beside this module in judge/collective/. The SSH orchestration is ``measure/allreducerun.py``.

Units: sizes in bytes, times in microseconds, bandwidths in GB/s with 1 GB = 1e9 bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.judge.collective.collopts import format_size
from cluster_tests.judge.collective.rankplan import Rank, describe_ranks

# Exit codes of the worker; keep in step with node/allreduce.py.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_WRONG = 3
EXIT_BACKEND = 4
EXIT_DEVICE = 5
EXIT_CONNECT = 10
EXIT_MISSING = 11
EXIT_INIT = 12
EXIT_COLLECTIVE = 13


# --- bandwidth formula (nccl-tests doc/PERFORMANCE.md) --------------------------------------


_BUSBW = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


def busbw_factor(collective: str, nranks: int) -> float:
    """busbw / algbw for ``collective`` on ``nranks`` ranks, as nccl-tests computes it (the one
    definition; node/allreduce.py keeps a copy of the all-reduce factor, tested to agree).

    ``collective`` may be spelled ``allreduce``, ``all_reduce``, ``AllReduce`` or
    ``all_reduce_perf``. Raises ValueError for an unknown collective or ``nranks < 1``.
    """
    key = re.sub(r"[_\-\s]", "", collective.lower())
    key = key.removesuffix("perf")
    if key not in _BUSBW:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(sorted(_BUSBW))}")
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    return float(_BUSBW[key](nranks))


def allreduce_busbw_factor(nranks: int) -> float:
    """busbw / algbw for all-reduce: 2(n-1)/n. One rank gives 0, as nccl-tests prints."""
    return busbw_factor("allreduce", nranks)


def algbw_gbps(nbytes: int, time_us: float) -> float:
    """Bytes moved per second of one op, in GB/s (1e9 B/s); 0 for a zero time."""
    return nbytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0


# --- report ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SizeRow:
    size_bytes: int
    count: int
    dtype: str
    time_us: float  # slowest rank's average time per op
    algbw_GBps: float
    busbw_GBps: float
    wrong: int  # wrong elements summed over ranks (nccl-tests' #wrong)
    nranks_reported: int
    iters: int | None = None  # timed calls actually made (fewer than asked on a slow link)


@dataclass(frozen=True)
class Stopped:
    """The sweep ended early on a slow link (the worker's ``stopped`` event)."""
    size_bytes: int  # the first size not measured
    op_seconds: float  # its first call, slowest rank
    size_seconds: float  # the per-size budget it exceeded
    skipped: tuple[int, ...]
    predicted: bool = False  # op_seconds scaled from the last size measured (none was run)
    budget_s: float | None = None  # --collective-budget, when its share set size_seconds

    def describe(self) -> str:
        rest = ", ".join(format_size(s) + "B" for s in self.skipped)
        took = (f"would take about {self.op_seconds:.2f} s (scaled from the last size measured)"
                if self.predicted else f"took {self.op_seconds:.2f} s")
        limit = (f"its share of --collective-budget {self.budget_s:g} s"
                 if self.budget_s is not None else "--collective-size-seconds")
        return (f"sweep stopped before {format_size(self.size_bytes)}B: one all_reduce of that "
                f"size {took} (budget {self.size_seconds:g} s per size, {limit}); "
                f"not measured: {rest}")


@dataclass
class CollectiveReport:
    world_size: int
    ranks: list[Rank]
    backend: str | None = None
    timed: str = ""
    iters: int | None = None  # timed calls asked for per size (a slow link may get fewer)
    versions: dict[str, str] = field(default_factory=dict)
    rows: list[SizeRow] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)  # never joined the rendezvous
    silent: list[int] = field(default_factory=list)  # printed nothing at all
    unfinished: list[int] = field(default_factory=list)  # started, never said done or error
    failed: dict[int, tuple[str, str]] = field(default_factory=dict)  # rank -> (stage, message)
    stuck_stage: str | None = None  # stage in which a watchdog fired
    stuck: list[int] = field(default_factory=list)  # ranks that did not reach that stage's end
    exit_codes: dict[int, int | None] = field(default_factory=dict)
    pids: dict[int, int] = field(default_factory=dict)
    stopped: Stopped | None = None  # the sweep ended early: the link is too slow for the sizes
    backends: dict[int, str] = field(default_factory=dict)  # every rank's backend
    devices: dict[int, str] = field(default_factory=dict)  # every rank's device
    init_timeout_s: float | None = None  # the init deadline the ranks used (HCCL: longer)
    capped: dict | None = None  # sizes the ranks' memory could not hold (the worker's event)
    #: rank -> NCCL's INFO lines about transports (the worker's `transport` event; nccllog)
    transport_lines: dict[int, list[str]] = field(default_factory=dict)
    verdict: str = "unknown"  # ok | wrong | missing | hang | failed | incomplete
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    @property
    def max_busbw_GBps(self) -> float:
        return max((row.busbw_GBps for row in self.rows), default=0.0)


_STAGE_END = {"connect": "joined", "rendezvous": "joined", "init": "init_ok",
              "collective": "done"}


def _rows(events_by_rank: Mapping[int, Sequence[dict]], world: int) -> list[SizeRow]:
    per_size: dict[int, list[dict]] = {}
    for events in events_by_rank.values():
        for ev in events:
            if ev.get("event") == "result":
                per_size.setdefault(int(ev["size_bytes"]), []).append(ev)
    rows = []
    factor = allreduce_busbw_factor(world)
    for size in sorted(per_size):
        results = per_size[size]
        time_us = max(float(ev["time_us"]) for ev in results)
        algbw = algbw_gbps(size, time_us)
        rows.append(SizeRow(
            size_bytes=size, count=int(results[0]["count"]), dtype=str(results[0]["dtype"]),
            time_us=time_us, algbw_GBps=algbw, busbw_GBps=algbw * factor,
            wrong=sum(int(ev["wrong"]) for ev in results), nranks_reported=len(results),
            iters=min((int(ev["iters"]) for ev in results if "iters" in ev), default=None)))
    return rows


def collect(events_by_rank: Mapping[int, Sequence[dict]], ranks: Sequence[Rank],
            exit_codes: Mapping[int, int | None] | None = None) -> CollectiveReport:
    """Fold every rank's events into one report with a verdict and an actionable message."""
    world = len(ranks)
    report = CollectiveReport(world_size=world, ranks=list(ranks),
                              exit_codes=dict(exit_codes or {}))
    rendezvous: dict = {}
    for r in ranks:
        events = events_by_rank.get(r.rank, [])
        kinds = {ev.get("event") for ev in events}
        if not events:
            report.silent.append(r.rank)
        for ev in events:
            kind = ev.get("event")
            if kind == "start":
                report.backend = report.backend or ev.get("backend")
                if ev.get("backend"):
                    report.backends[r.rank] = str(ev["backend"])
                    report.devices[r.rank] = str(ev.get("device", ""))
                if isinstance(ev.get("init_timeout_s"), (int, float)):
                    report.init_timeout_s = max(report.init_timeout_s or 0.0,
                                                float(ev["init_timeout_s"]))
                report.timed = report.timed or ev.get("timed", "")
                if report.iters is None and "iters" in ev:
                    report.iters = int(ev["iters"])
                report.versions = report.versions or dict(ev.get("versions", {}))
                if "pid" in ev:
                    report.pids[r.rank] = int(ev["pid"])
            elif kind == "stopped" and report.stopped is None:
                report.stopped = Stopped(
                    size_bytes=int(ev["size_bytes"]), op_seconds=float(ev["op_seconds"]),
                    size_seconds=float(ev["size_seconds"]),
                    skipped=tuple(int(x) for x in ev.get("skipped", [])),
                    predicted=bool(ev.get("predicted")))
            elif kind == "capped" and report.capped is None:
                report.capped = dict(ev)
            elif kind == "transport":
                report.transport_lines[r.rank] = [str(x) for x in ev.get("lines", [])]
            elif kind == "missing_ranks":
                rendezvous = rendezvous or ev
            elif kind == "error":
                report.failed[r.rank] = (str(ev.get("stage")), str(ev.get("message")))
                if ev.get("timeout") and report.stuck_stage is None:
                    report.stuck_stage = str(ev.get("stage"))
        if events and "done" not in kinds and "error" not in kinds:
            report.unfinished.append(r.rank)
    report.rows = _rows(events_by_rank, world)
    if rendezvous:
        report.missing = sorted(int(n) for n in rendezvous.get("missing", []))
    if report.stuck_stage in ("init", "collective"):
        end = _STAGE_END[report.stuck_stage]
        report.stuck = [r.rank for r in ranks if r.rank not in report.failed
                        and not any(ev.get("event") == end
                                    for ev in events_by_rank.get(r.rank, []))]
    _judge(report, rendezvous)
    return report


def _judge(report: CollectiveReport, rendezvous: Mapping) -> None:
    ranks = report.ranks
    wrong = sum(row.wrong for row in report.rows)
    if report.missing:
        timeout = rendezvous.get("timeout_s")
        within = f" within {timeout:g} s" if isinstance(timeout, (int, float)) else ""
        report.verdict = "missing"
        report.message = (f"{describe_ranks(report.missing, ranks)} never joined the rendezvous"
                          f" at {rendezvous.get('master', '?')}{within}")
    elif report.stuck_stage in ("init", "collective"):
        fired = sorted(r for r, (stage, _) in report.failed.items()
                       if stage == report.stuck_stage)
        what = ("communicator init (init_process_group + first all_reduce)"
                if report.stuck_stage == "init" else "the all-reduce sweep")
        report.verdict = "hang"
        stuck = report.stuck or report.silent or report.unfinished
        fired_on = f"watchdog fired on {describe_ranks(fired, ranks)} in stage {report.stuck_stage}"
        report.message = (
            f"{describe_ranks(stuck, ranks)} stuck in {what}: {fired_on}" if stuck else
            f"every rank timed out in {what} ({fired_on}): no single rank to blame, suspect "
            "the network between them")
    elif report.failed:
        by_stage: dict[str, list[int]] = {}
        for r, (stage, _) in sorted(report.failed.items()):
            by_stage.setdefault(stage, []).append(r)
        report.verdict = "failed"
        report.message = "; ".join(
            f"{describe_ranks(rs, ranks)} failed in stage {stage}: {report.failed[rs[0]][1]}"
            for stage, rs in by_stage.items())
        if report.silent:
            report.message += f"; {describe_ranks(report.silent, ranks)} printed nothing"
    elif report.silent or report.unfinished:
        report.verdict = "incomplete"
        report.message = (f"{describe_ranks(report.silent + report.unfinished, ranks)} "
                          "never reported completion")
    elif wrong:
        bad = [row for row in report.rows if row.wrong]
        report.verdict = "wrong"
        report.message = (f"{wrong} wrong elements at sizes "
                          f"{', '.join(format_size(r.size_bytes) for r in bad)}")
    elif not report.rows:
        report.verdict = "incomplete"
        report.message = report.stopped.describe() if report.stopped else "no results"
    else:
        best = max(report.rows, key=lambda row: row.busbw_GBps)
        report.verdict = "ok"
        report.message = (
            f"all-reduce over {report.world_size} ranks ({report.backend}) correct at "
            f"{len(report.rows)} sizes; peak busbw {best.busbw_GBps:.2f} GB/s at "
            f"{format_size(best.size_bytes)}B")
        if report.stopped is not None:
            report.message += f"; {report.stopped.describe()}"


# --- backend against the node's accelerators -------------------------------------------------

#: The torch.distributed backend a launch uses on a node with these accelerators (A1's kinds).
EXPECTED_BACKEND = {"nvidia": "nccl", "ascend": "hccl", "cpu": "gloo"}


def backend_problems(report: CollectiveReport,
                     accelerators: Mapping[str, tuple[str, str]]) -> list[str]:
    """Ranks whose backend is not the one their node's accelerators call for.

    ``accelerators``: host -> (A1 kind: nvidia/ascend/cpu, description such as "8 GPUs"), for
    the hosts A1 has looked at. Every rank reports its backend; ranks that disagree among
    themselves are a problem whatever A1 knows."""
    out: list[str] = []
    wrong: dict[tuple[str, str, str], list[int]] = {}
    for r in report.ranks:
        got = report.backends.get(r.rank)
        if got is None or r.host not in accelerators:
            continue
        kind, what = accelerators[r.host]
        want = EXPECTED_BACKEND.get(kind)
        if want and got != want:
            wrong.setdefault((r.host, got, f"{what}: the launch runs {want}"), []).append(r.rank)
    for (host, got, why), ranks in wrong.items():
        out.append(f"{describe_ranks(ranks, report.ranks)} ran on {got}, but {host} has {why} "
                   f"({ids.ACCELERATORS.item}, {ids.ACCELERATORS.of(host)})")
    used = sorted(set(report.backends.values()))
    if len(used) > 1:
        parts = "; ".join(
            f"{b}: "
            f"{describe_ranks([r for r, x in report.backends.items() if x == b], report.ranks)}"
            for b in used)
        out.append(f"the ranks did not all choose the same backend ({parts})")
    return out


# --- thresholds (C1) -------------------------------------------------------------------------


@dataclass(frozen=True)
class BusbwVerdict:
    ok: bool
    judged: bool  # False: no threshold given, nothing judged
    message: str


def judge_busbw(rows: Sequence[SizeRow], min_busbw: float | None = None,
                baseline: Mapping | None = None, tolerance: float = 0.2,
                stopped: Stopped | None = None) -> BusbwVerdict:
    """busbw at the largest size against ``--min-busbw`` (GB/s) and/or a baseline document
    (:func:`cluster_tests.measure.allreduce.record`'s format) minus a relative tolerance. The
    baseline's row of the same size is used; else its largest size that this run also has.
    A sweep that had to stop early (``stopped``) fails whatever the thresholds: a link on which
    one all-reduce of a modest size takes seconds is not one to train on."""
    if not rows:
        return BusbwVerdict(False, True, "no sizes measured")
    top = rows[-1]
    if stopped is not None:
        return BusbwVerdict(False, True, f"{stopped.describe()}; busbw {top.busbw_GBps:.4f} GB/s "
                            f"at {format_size(top.size_bytes)}B, the largest size measured")
    problems: list[str] = []
    notes: list[str] = []
    where = f"busbw {top.busbw_GBps:.3f} GB/s at {format_size(top.size_bytes)}B"
    if min_busbw is not None:
        (problems if top.busbw_GBps < min_busbw else notes).append(
            f"{where} {'<' if top.busbw_GBps < min_busbw else '>='} --min-busbw {min_busbw:g} GB/s")
    if baseline is not None:
        base_rows = {int(r["size_bytes"]): float(r["busbw_GBps"]) for r in baseline.get("rows", [])}
        mine = {r.size_bytes: r for r in rows}
        common = sorted(set(base_rows) & set(mine))
        if not common:
            problems.append("the baseline shares no message size with this run: compare like "
                            "with like (--sizes "
                            f"{','.join(format_size(s) for s in sorted(base_rows))})")
        else:
            size = top.size_bytes if top.size_bytes in base_rows else common[-1]
            now, then = mine[size].busbw_GBps, base_rows[size]
            floor = then * (1 - tolerance)
            text = (f"busbw {now:.3f} GB/s at {format_size(size)}B vs baseline {then:.3f} GB/s "
                    f"({now / then - 1:+.0%}; tolerance -{tolerance:.0%}, floor {floor:.3f} GB/s)"
                    if then > 0 else f"baseline busbw at {format_size(size)}B is 0")
            (problems if now < floor else notes).append(text)
    if min_busbw is None and baseline is None:
        return BusbwVerdict(True, False, f"{where}; no --min-busbw or --busbw-baseline given")
    return BusbwVerdict(not problems, True, "; ".join(problems or notes))
