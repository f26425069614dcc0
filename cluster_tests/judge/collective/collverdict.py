"""All-reduce checks C1-C3, launcher side: the verdict (pure).

The worker (``node/allreduce.py``) runs one process per rank and prints JSON event lines;
:func:`collect` turns them into a :class:`CollectiveReport` whose verdict names the ranks (their
host and local rank) that never joined, hung or failed, the busbw formula (nccl-tests'
doc/PERFORMANCE.md), the backend each node's accelerators call for, and C1's busbw against
``--min-busbw`` and a baseline (:func:`judge_busbw`). The seams around it: the options
(``collopts.py``), the rank layout and worker command (``rankplan.py``), C2's pairs
(``pairbw.py``) and their confirmation (``confirmation.py``), beside this module in
judge/collective/. The SSH orchestration is ``measure/allreducerun.py``; the tables are
``report/colltable.py``.

Units: sizes in bytes, times in microseconds, bandwidths in GB/s with 1 GB = 1e9 bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.judge.collective.collopts import format_size
from cluster_tests.judge.collective.rankplan import Rank, WorkerOptions, describe_ranks
from cluster_tests.judge.common import stacks as S
from cluster_tests.judge.common.probes import (
    flag,
    integer,
    number,
    opt_text,
    text,
    text_map,
)
from cluster_tests.judge.network import portjudge as nc
from cluster_tests.judge.network.portjudge import PortMatrix
from cluster_tests.judge.problem import Problem, Root, SectionCause

#: One JSON event line of a worker (node/allreduce.py `emit`), as it came.
Event = Mapping[str, object]

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


class CollectiveCause(SectionCause, items=("C",)):
    """What a C1/C2 red is (Problem.cause): first the report's failure kinds (its verdicts),
    then what else stops or spoils a run."""

    MISSING = "ranks never joined the rendezvous"
    HANG = "ranks stuck past a stage deadline"
    FAILED = "ranks failed"
    INCOMPLETE = "ranks never reported completion"
    WRONG = "wrong elements"
    NOT_RUN = "all-reduce could not run"
    NODE_DOWN = "node unreachable"
    PORTS_BLOCKED = "ports found blocked"
    LEFTOVER = "workers may still run"
    SOCKET_FALLBACK = "NCCL on TCP sockets where RDMA is there"
    WRONG_BACKEND = "not the launch's backend"
    BASELINE_UNREADABLE = "busbw baseline unreadable"
    BUSBW_LOW = "busbw below its threshold"
    SLOW_PAIR = "slow pair"
    PAIR_TOO_SLOW = "pair too slow for its share of the budget"


#: the cause of a failed run, by the report's verdict
VERDICT_CAUSE = {"missing": CollectiveCause.MISSING, "hang": CollectiveCause.HANG,
                 "failed": CollectiveCause.FAILED, "incomplete": CollectiveCause.INCOMPLETE,
                 "wrong": CollectiveCause.WRONG}


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


@dataclass(frozen=True)
class Capped:
    """Sizes the ranks' memory could not hold (the worker's ``capped`` event)."""

    cap_bytes: int  # the largest buffer every rank can hold
    skipped: tuple[int, ...]
    where: str  # where the figure comes from ("cuda:0 free ... of ... B", "host MemAvailable")


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
    capped: Capped | None = None  # sizes the ranks' memory could not hold
    #: rank -> NCCL's INFO lines about transports (the worker's `transport` event; nccllog)
    transport_lines: dict[int, list[str]] = field(default_factory=dict)
    verdict: str = "unknown"  # ok | wrong | missing | hang | failed | incomplete
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"


_STAGE_END = {"connect": "joined", "rendezvous": "joined", "init": "init_ok",
              "collective": "done"}


def _rows(events_by_rank: Mapping[int, Sequence[Event]], world: int) -> list[SizeRow]:
    per_size: dict[int, list[Event]] = {}
    for events in events_by_rank.values():
        for ev in events:
            if ev.get("event") == "result":
                per_size.setdefault(integer(ev.get("size_bytes")), []).append(ev)
    rows = []
    factor = allreduce_busbw_factor(world)
    for size in sorted(per_size):
        results = per_size[size]
        time_us = max(number(ev.get("time_us")) for ev in results)
        algbw = algbw_gbps(size, time_us)
        rows.append(SizeRow(
            size_bytes=size, count=integer(results[0].get("count")),
            dtype=text(results[0].get("dtype")), time_us=time_us, algbw_GBps=algbw,
            busbw_GBps=algbw * factor, wrong=sum(integer(ev.get("wrong")) for ev in results),
            nranks_reported=len(results),
            iters=min((integer(ev.get("iters")) for ev in results if "iters" in ev),
                      default=None)))
    return rows


def _started(report: CollectiveReport, rank: int, ev: Event) -> None:
    """A rank's `start` event: its backend, device, deadlines, versions, pid."""
    backend = opt_text(ev.get("backend"))
    report.backend = report.backend or backend
    if backend:
        report.backends[rank] = backend
        report.devices[rank] = text(ev.get("device"))
    init = ev.get("init_timeout_s")
    if isinstance(init, (int, float)) and not isinstance(init, bool):
        report.init_timeout_s = max(report.init_timeout_s or 0.0, float(init))
    report.timed = report.timed or text(ev.get("timed"))
    if report.iters is None and "iters" in ev:
        report.iters = integer(ev.get("iters"))
    report.versions = report.versions or dict(text_map(ev.get("versions")))
    if "pid" in ev:
        report.pids[rank] = integer(ev.get("pid"))


def _fold(report: CollectiveReport, rank: int, ev: Event, rendezvous: dict[str, object]) -> None:
    """One event of one rank into the report (`rendezvous`: the first `missing_ranks` event)."""
    kind = ev.get("event")
    if kind == "start":
        _started(report, rank, ev)
    elif kind == "stopped" and report.stopped is None:
        report.stopped = Stopped(
            size_bytes=integer(ev.get("size_bytes")), op_seconds=number(ev.get("op_seconds")),
            size_seconds=number(ev.get("size_seconds")),
            skipped=tuple(integer(x) for x in _list(ev.get("skipped"))),
            predicted=flag(ev.get("predicted")))
    elif kind == "capped" and report.capped is None:
        report.capped = Capped(integer(ev.get("cap_bytes")),
                               tuple(integer(x) for x in _list(ev.get("skipped"))),
                               text(ev.get("where")))
    elif kind == "transport":
        report.transport_lines[rank] = [str(x) for x in _list(ev.get("lines"))]
    elif kind == "missing_ranks":
        if not rendezvous:
            rendezvous.update(ev)
    elif kind == "error":
        report.failed[rank] = (str(ev.get("stage")), str(ev.get("message")))
        if ev.get("timeout") and report.stuck_stage is None:
            report.stuck_stage = str(ev.get("stage"))


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def collect(events_by_rank: Mapping[int, Sequence[Event]], ranks: Sequence[Rank],
            exit_codes: Mapping[int, int | None] | None = None) -> CollectiveReport:
    """Fold every rank's events into one report with a verdict and an actionable message."""
    world = len(ranks)
    report = CollectiveReport(world_size=world, ranks=list(ranks),
                              exit_codes=dict(exit_codes or {}))
    rendezvous: dict[str, object] = {}
    for r in ranks:
        events = events_by_rank.get(r.rank, [])
        kinds = {ev.get("event") for ev in events}
        if not events:
            report.silent.append(r.rank)
        for ev in events:
            _fold(report, r.rank, ev, rendezvous)
        if events and "done" not in kinds and "error" not in kinds:
            report.unfinished.append(r.rank)
    report.rows = _rows(events_by_rank, world)
    if rendezvous:
        report.missing = sorted(integer(n) for n in _list(rendezvous.get("missing")))
    if report.stuck_stage in ("init", "collective"):
        end = _STAGE_END[report.stuck_stage]
        report.stuck = [r.rank for r in ranks if r.rank not in report.failed
                        and not any(ev.get("event") == end
                                    for ev in events_by_rank.get(r.rank, []))]
    _judge(report, rendezvous)
    return report


def _judge(report: CollectiveReport, rendezvous: Mapping[str, object]) -> None:
    ranks = report.ranks
    wrong = sum(row.wrong for row in report.rows)
    if report.missing:
        timeout = rendezvous.get("timeout_s")
        within = (f" within {timeout:g} s" if isinstance(timeout, (int, float))
                  and not isinstance(timeout, bool) else "")
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


def _wrong_backends(report: CollectiveReport, accelerators: Mapping[str, tuple[str, str]]
                    ) -> dict[tuple[str, str, str], list[int]]:
    """(host, backend it ran, why that is wrong) -> its ranks, for the hosts A1 has looked at."""
    wrong: dict[tuple[str, str, str], list[int]] = {}
    for r in report.ranks:
        got = report.backends.get(r.rank)
        if got is None or r.host not in accelerators:
            continue
        kind, what = accelerators[r.host]
        want = EXPECTED_BACKEND.get(kind)
        if want and got != want:
            wrong.setdefault((r.host, got, f"{what}: the launch runs {want}"), []).append(r.rank)
    return wrong


def backend_problems(report: CollectiveReport,
                     accelerators: Mapping[str, tuple[str, str]]) -> list[str]:
    """Ranks whose backend is not the one their node's accelerators call for.

    ``accelerators``: host -> (A1 kind: nvidia/ascend/cpu, description such as "8 GPUs"), for
    the hosts A1 has looked at. Every rank reports its backend; ranks that disagree among
    themselves are a problem whatever A1 knows."""
    out: list[str] = []
    for (host, got, why), ranks in _wrong_backends(report, accelerators).items():
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


def busbw_problem(report: CollectiveReport, verdict: BusbwVerdict) -> Problem | None:
    """C1's red when the judged busbw is below --min-busbw or the baseline's floor."""
    if verdict.ok or not verdict.judged:
        return None
    return Problem(
        (), CollectiveCause.BUSBW_LOW,
        f"all-reduce over {report.world_size} ranks ({report.backend}): {verdict.message}",
        fix=f"run `-k {ids.ALLREDUCE_PAIR}` to find the slow node or link; check the NIC speed "
            f"and that {report.backend} uses the fast interface "
            f"(NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME)", item=ids.ALLREDUCE_BUSBW.item)


def baseline_unreadable(path: str, error: str) -> Problem:
    """C1's red when --busbw-baseline cannot be read (`error`: why)."""
    return Problem((), CollectiveCause.BASELINE_UNREADABLE,
                   f"--busbw-baseline {path}: cannot read it: {error}",
                   fix=f"write one with --busbw-record {path} on a healthy run",
                   item=ids.ALLREDUCE_BUSBW.item)


# --- a run over the remote layer, and why it failed --------------------------------------------


@dataclass
class RemoteRun:
    """One all-reduce run over some nodes (measure/allreducerun.py runs it): the report plus
    what the nodes' channels said."""

    report: CollectiveReport
    nodes: list[str]
    master: str
    master_addr: str
    port: int
    options: WorkerOptions
    seconds: float = 0.0
    stderr: dict[str, list[str]] = field(default_factory=dict)
    channel_exit: dict[str, int | None] = field(default_factory=dict)
    unconfirmed: dict[str, dict[int, int]] = field(default_factory=dict)  # node -> rank -> pid
    start_errors: dict[str, str] = field(default_factory=dict)
    python: str = "python3"
    stacks: dict[int, str] = field(default_factory=dict)  # rank -> faulthandler dump(s)
    native: dict[int, str] = field(default_factory=dict)  # rank -> py-spy dump --native
    natives_due: set[int] = field(default_factory=set)  # ranks whose py-spy frames are to come
    #: rank -> its TCP connections when its stack was taken
    sockets: dict[int, S.Sockets] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.master_addr}:{self.port}"


@dataclass(frozen=True)
class ClosedPort:
    """A high port of `target` that `source` could not reach (F3's port matrix)."""

    source: str
    target: str
    port: int
    status: str  # in the probe's words: "timed out", "refused", ...


@dataclass(frozen=True)
class PortsSeen:
    """What this session's network checks (F3) found of a run's nodes; `ran` False: none ran."""

    ran: bool
    closed: tuple[ClosedPort, ...] = ()


def network_words(seen: PortsSeen, nodes: Sequence[str]) -> str:
    """What the F checks found about ``nodes`` this session, else how to find out."""
    if seen.closed:
        shown = [f"{c.source}->{c.target} port {c.port}: {c.status}" for c in seen.closed]
        more = f" (+{len(shown) - 4} more)" if len(shown) > 4 else ""
        return ("the network checks (F) of this session found closed ports: "
                + "; ".join(shown[:4]) + more)
    if seen.ran:
        return ("the network checks (F) of this session found every probed port open for "
                f"{', '.join(nodes)}")
    return ("no network checks ran in this session: run `pytest -m network` to test every port "
            "between the nodes in each direction")


def involved_nodes(run: RemoteRun) -> list[str]:
    """Nodes of the ranks that never joined, hung, failed or stayed silent, in hostfile order."""
    rep = run.report
    if rep.missing:
        bad = set(rep.missing) | {r for r, (stage, _) in rep.failed.items() if stage == "connect"}
    elif rep.verdict == "hang":
        bad = set(rep.stuck) | set(rep.silent) | set(rep.unfinished)
    else:
        bad = set(rep.failed) | set(rep.silent) | set(rep.unfinished)
    hosts = {r.host for r in rep.ranks if r.rank in bad} | set(run.start_errors)
    return [n for n in run.nodes if n in hosts]


def _own_store_unreachable(run: RemoteRun) -> bool:
    """Rank 0 could not connect to the store it created on its own node: it said so, or, its
    own words not in before the others were stopped, its stack was still in our connect step
    once a peer's connect had failed.  Creating the store and connecting to it on the node's
    own address takes milliseconds, unless a firewall on that node drops the connection; so
    which of the two connect deadlines speaks first no longer decides the fix."""
    rep = run.report
    if rep.failed.get(0, ("", ""))[0] == "connect":
        return True
    if 0 in rep.failed or not any(stage == "connect" for stage, _ in rep.failed.values()):
        return False
    thread = S.main_thread(S.parse(run.stacks.get(0, "")))
    return thread is not None and any(
        f.func == "connect" and f.file.rsplit("/", 1)[-1] == "allreduce.py" for f in thread.frames)


def _stage_fix(run: RemoteRun, nodes: Sequence[str]) -> str | None:
    """The fix when a rank failed before any network step: its device, or its Python."""
    rep = run.report
    if any(stage == "device" for stage, _ in rep.failed.values()):
        bad = {x.host for x in rep.ranks if rep.failed.get(x.rank, ("",))[0] == "device"}
        where = ", ".join(n for n in run.nodes if n in bad) or "the nodes"
        return (f"the accelerator did not come up on {where} (not a network problem): check "
                f"`nvidia-smi` / `npu-smi info` there for a device in error or held by another "
                f"process, and the driver's log (dmesg); see {ids.ACCELERATORS}")
    if any(stage == "setup" for stage, _ in rep.failed.values()):
        return (f"on {', '.join(nodes) or 'the nodes'}: make the accelerator usable from the "
                f"remote Python in a non-interactive shell (the rank errors above say what is "
                f"missing), or pass --backend explicitly")
    return None


def _init_hang_fix(run: RemoteRun, who: str) -> str:
    if run.report.backend == "hccl":
        return (f"HCCL links the NPUs through their own RoCE NICs (not the host interface) and "
                f"listens on ports 60000-60015 of every node (HCCL_IF_BASE_PORT moves them): "
                f"open those ports between the NPU NICs of {who} and {run.master}, and check "
                f"each NIC with `hccn_tool -i <id> -net_health -g`, `hccn_tool -i <id> -link -g` "
                f"and `hccn_tool -i <id> -ip -g` (see {ids.ASCEND_ENV.module} "
                f"{ids.ASCEND_ENV.item}); HCCL_IF_IP / "
                f"HCCL_SOCKET_IFNAME choose the host interface of its rendezvous")
    return (f"communicator init opens its own connections between every pair of nodes on "
            f"ephemeral high ports, on the interface the hostname resolves to: open high "
            f"ports both ways on {who}, or set GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME to the "
            f"cluster interface; `-k {ids.ALLREDUCE_PAIR}` names the node whose pairs hang")


def run_fix(run: RemoteRun, nodes: Sequence[str]) -> str:
    """The fix of a failed run, in words (`nodes`: :func:`involved_nodes`)."""
    rep = run.report
    who = ", ".join(n for n in nodes if n != run.master) or ", ".join(nodes) or "the nodes"
    early = _stage_fix(run, nodes)
    if early is not None:
        return early
    if _own_store_unreachable(run):
        return (f"{run.master} cannot reach its own rendezvous store at {run.where} (rank 0 "
                f"listens, then connects to it like every rank): a firewall on {run.master} "
                f"drops connections to port {run.port}: check `iptables -S INPUT` / "
                f"`nft list ruleset` on {run.master}")
    if rep.verdict == "missing" or any(s == "connect" for s, _ in rep.failed.values()):
        return (f"let {who} reach {run.master} at {run.where} over TCP, replies included (a DROP "
                f"of high ports in a node's INPUT chain also drops the replies to that node's own "
                f"connections): check `iptables -S INPUT` / `nft list ruleset` on {who} and "
                f"{run.master}")
    if rep.verdict == "hang" and rep.stuck_stage == "init":
        return _init_hang_fix(run, who)
    if any(run.channel_exit.get(n) == 127 for n in nodes):
        return (f"the remote Python '{run.python}' was not found on "
                f"{who} by a non-interactive ssh shell: pass --remote-python /path/to/python, or "
                f"put it on PATH in ~/.bashrc above any early 'return'")
    if rep.verdict == "hang":
        return (f"a rank on {who} stalled mid-transfer: run `-k {ids.ALLREDUCE_PAIR}` to find the "
                "slow node or link")
    return f"read the rank errors above; on {who}: {run.options.backend} backend, torch install"


_FABRIC_LINE = ("NCCL WARN", "NCCL ERROR", "HCCL", "EI00", "EJ00", "ProcessGroupNCCL")


def fabric_lines(stderr: Sequence[str], limit: int = 4) -> list[str]:
    """The communication library's own warnings and errors in a node's worker stderr (NCCL
    WARN lines, HCCL/CANN error codes), whatever the supervisor's exit status: the last
    ``limit`` distinct ones. (The NCCL_DEBUG=INFO log and its parser are separate.)"""
    seen: list[str] = []
    for line in stderr:
        said = line.strip()
        if said and any(mark in said for mark in _FABRIC_LINE) and said not in seen:
            if "NCCL INFO" in said:
                continue
            seen.append(said[:300])
    return seen[-limit:]


def _rank_lines(run: RemoteRun, nodes: Sequence[str]) -> list[str]:
    """Each failed rank's own words, the ranks that never finished, the nodes' own words."""
    rep = run.report
    lines = []
    for r, (stage, msg) in sorted(rep.failed.items()):
        if rep.missing and stage == "rendezvous":
            continue  # the waiting side of "never joined": the first line says it
        rank = next(x for x in rep.ranks if x.rank == r)
        lines.append(f"  rank {r} ({rank.host} local {rank.local_rank}) [{stage}]: {msg}")
    if rep.unfinished and rep.verdict != "hang":
        lines.append(f"  never finished: {describe_ranks(rep.unfinished, rep.ranks)}")
    for node, err in run.start_errors.items():
        lines.append(f"  {node}: could not start the workers: {err}")
    for node in nodes or run.nodes:
        said = fabric_lines(run.stderr.get(node, []))
        if said:
            lines.append(f"  {node} NCCL/HCCL said: " + " | ".join(said))
    for node in nodes:
        status = run.channel_exit.get(node)
        tail = [ln for ln in run.stderr.get(node, []) if ln][-4:]
        if tail and (status not in (0, None) or set(rep.silent) & {
                r.rank for r in rep.ranks if r.host == node}):
            lines.append(f"  {node} (exit {status}) said: " + " | ".join(tail))
    return lines


def explain(run: RemoteRun, what: str, seen: PortsSeen) -> list[str]:
    """The lines of a failed run's red: verdict, the ranks by host and local rank, evidence,
    deadlines and the network checks' findings (the fix is :func:`run_fix`)."""
    rep = run.report
    nodes = involved_nodes(run)
    o = run.options
    if rep.verdict == "failed" and rep.failed:
        stages = sorted({stage for stage, _ in rep.failed.values()})
        head = (f"{describe_ranks(rep.failed, rep.ranks)} failed in stage "
                f"{', '.join(stages)} (details below)")
    else:
        head = rep.message or rep.verdict
    lines = [f"{what}: {head}", *_rank_lines(run, nodes)]
    if rep.missing:
        lines.append(f"  rendezvous server: {run.master} ({run.where}); {', '.join(nodes)} could "
                     f"not join it: {run.master} drops connections to port {run.port}, or "
                     f"{', '.join(nodes)} cannot connect out or get the replies back")
    init = rep.init_timeout_s if rep.init_timeout_s else o.init_timeout
    lines.append(f"  deadlines: connect/rendezvous {o.connect_timeout:g} s, init "
                 f"{init:g} s, collective {o.op_timeout:g} s; master {run.where}")
    lines.append(f"  network: {network_words(seen, nodes or run.nodes)}")
    return lines


def run_failed(run: RemoteRun, what: str, seen: PortsSeen, *, item: str,
               where: tuple[str, ...] | None = None, after: Sequence[str] = ()) -> Problem:
    """The red of a run that did not pass (its report's verdict is not ok): :func:`explain`'s
    lines, then `after` (where the ranks were, the node common to the failing pairs), the fix.
    `where`: the Problem's nodes (C2: the pair); by default the nodes of the failing ranks."""
    nodes = involved_nodes(run)
    return Problem(where if where is not None else tuple(nodes or run.nodes),
                   VERDICT_CAUSE.get(run.report.verdict, CollectiveCause.NOT_RUN),
                   "\n".join([*explain(run, what, seen), *after]),
                   fix=run_fix(run, nodes), item=item)


@dataclass(frozen=True)
class BlockedPair:
    """An ordered pair that F3's port matrix shows blocked on every tested port."""

    source: str
    target: str
    failed: tuple[tuple[int, str], ...]  # (port, how it ended, in the probe's words)
    check: str  # the F3 test of the pair ("test_high_ports[node1->node3]")


def ports_roots(pair: BlockedPair, m: PortMatrix | None,
                rules: Mapping[str, list[str] | None]) -> list[Root]:
    """The reds that hold a blocked pair's cause, in order: the F4 red of the node whose own
    firewall drops it (the port matrix `m` and the rules of the pair's nodes say), then the
    pair's F3 red."""
    src, dst = pair.source, pair.target
    why = f"{dst} takes no connection from {src} on high ports: an all-reduce could only hang"
    node = nc.firewall_at_fault(m, rules, src, dst) if m is not None else None
    first = ([Root(ids.FIREWALL_RULES.of(node), f"{node}'s own firewall drops {src} -> {dst}: "
                                                f"{why}")] if node is not None else [])
    return [*first, Root(pair.check, why)]


def ports_blocked(what: str, blocked: Sequence[BlockedPair], *, item: str,
                  where: tuple[str, ...] | None = None) -> Problem:
    """The red of a run not started because the network checks found its ports blocked (when
    the F red that holds the cause is not in this run to block it). `where`: by default the
    nodes that take no connection."""
    shown = "; ".join(f"{b.target} takes no connection from {b.source} ("
                      + ", ".join(f"{port} {status}" for port, status in b.failed)
                      + f"; see {b.check})" for b in blocked[:4])
    more = f" (+{len(blocked) - 4} more)" if len(blocked) > 4 else ""
    if where is None:
        where = tuple(dict.fromkeys(b.target for b in blocked))
    return Problem(where, CollectiveCause.PORTS_BLOCKED,
                   f"{what}: not run: the network checks found that {shown}{more}: an all-reduce "
                   f"could only wait out its rendezvous deadline (--collective-connect-timeout).",
                   fix="open the ports (see those tests' fixes), then rerun `-m collective`",
                   item=item)


def node_down(node: str, *, item: str, where: tuple[str, ...]) -> Problem:
    """The red of a run one of whose nodes could not be logged in to."""
    return Problem(where, CollectiveCause.NODE_DOWN,
                   f"{node} unreachable: see {ids.LOGIN.of(node)}", item=item)


def not_run(what: str, error: str, *, item: str, where: tuple[str, ...]) -> Problem:
    """The red of a run that could not be started at all (`error`: why)."""
    return Problem(where, CollectiveCause.NOT_RUN, f"{what}: could not run: {error}", item=item)


def leftover(runs: Sequence[RemoteRun], *, item: str,
             where: tuple[str, ...] | None = None) -> Problem | None:
    """The red when a node did not confirm that its workers are gone."""
    left = {node: pids for run in runs for node, pids in run.unconfirmed.items()}
    if not left:
        return None
    said = "; ".join(f"{node}: kill {' '.join(map(str, pids.values())) or '(pids unknown)'}"
                     for node, pids in left.items())
    return Problem(where if where is not None else tuple(left), CollectiveCause.LEFTOVER,
                   f"all-reduce workers may still run (their node did not confirm the kill): "
                   f"{said}", item=item)


def wrong_backend(report: CollectiveReport, accelerators: Mapping[str, tuple[str, str]],
                  what: str, *, item: str, where: tuple[str, ...] | None = None
                  ) -> Problem | None:
    """Red when a rank ran a backend other than its node's accelerators call for (issue 17)."""
    problems = backend_problems(report, accelerators)
    if not problems:
        return None
    hosts = {host for host, _, _ in _wrong_backends(report, accelerators)}
    if len(set(report.backends.values())) > 1:  # the ranks disagree: every node they ran on
        hosts |= {r.host for r in report.ranks if r.rank in report.backends}
    return Problem(
        where if where is not None
        else tuple(dict.fromkeys(r.host for r in report.ranks if r.host in hosts)),
        CollectiveCause.WRONG_BACKEND,
        f"{what}: not the launch's backend:\n  " + "\n  ".join(problems),
        fix="on those nodes make the remote Python see the accelerators in a non-interactive "
            "shell (`ssh <node> python3 -c 'import torch; print(torch.cuda.is_available())'`; "
            "on Ascend, CANN's set_env.sh sourced in ~/.bashrc above any early return, and "
            "torch_npu installed), or pass --backend explicitly", item=item)


def socket_fallback(fallbacks: Mapping[str, str]) -> Problem | None:
    """C1's red when ranks on nodes with active RDMA ports went over TCP sockets (nccllog's
    :func:`socket_fallbacks`: node -> what NCCL did and said)."""
    if not fallbacks:
        return None
    return Problem(
        tuple(fallbacks), CollectiveCause.SOCKET_FALLBACK,
        "all-reduce went over TCP sockets where RDMA is there:\n  "
        + "\n  ".join(fallbacks.values()),
        fix=f"unset NCCL_IB_DISABLE / NCCL_NET=Socket; see {ids.IB_HCA} and {ids.MEMLOCK} of "
            "those nodes; install rdma-core (libibverbs) where the ranks run; a container needs "
            "--device=/dev/infiniband and --cap-add=IPC_LOCK", item=ids.ALLREDUCE.items[0])
