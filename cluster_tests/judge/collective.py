"""All-reduce checks C1-C3, launcher side: sizes, rank layout, worker command, report.

The worker (``node/allreduce.py``) runs one process per rank and prints JSON event
lines; this module turns those lines into a :class:`CollectiveReport` with an nccl-tests-like
table and a verdict that names the ranks (and their host and local rank) that never joined,
hung, or failed. :func:`run_local` runs the workers as local subprocesses (gloo on 127.0.0.1),
which is what this project's own tests use; the SSH orchestration
(:mod:`cluster_tests.measure.allreduce`) builds on :func:`worker_argv` and :func:`collect`.
Option parsers, the C2 pair table and the busbw threshold/baseline verdict live here too.

Units: sizes in bytes, times in microseconds, bandwidths in GB/s with 1 GB = 1e9 bytes.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster_tests.core import testids as ids

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

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

UNITS_LEGEND = (
    "# units: size in bytes (B), count in elements, time in microseconds (us), "
    "algbw and busbw in GB/s (1 GB = 1e9 B)"
)


# --- sizes -----------------------------------------------------------------------------------


def parse_size(text: str) -> int:
    """``"64K"`` -> 65536. K, M, G are powers of two, as in nccl-tests' ``-b``/``-e``."""
    raw = text.strip().upper().removesuffix("B")
    scale = _UNITS.get(raw[-1:], 1)
    digits = raw[:-1] if scale > 1 else raw
    if not digits.isdigit() or int(digits) == 0:
        raise ValueError(f"bad size {text!r}: expected a positive integer with optional K/M/G")
    return int(digits) * scale


def parse_sizes(text: str) -> list[int]:
    """``"8,1K,64K,1M"`` -> ``[8, 1024, 65536, 1048576]``."""
    sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    if not sizes:
        raise ValueError(f"no sizes in {text!r}")
    return sizes


def format_size(nbytes: int) -> str:
    """Inverse of :func:`parse_size` where exact: 65536 -> ``"64K"``."""
    for suffix in ("G", "M", "K"):
        if nbytes >= _UNITS[suffix] and nbytes % _UNITS[suffix] == 0:
            return f"{nbytes // _UNITS[suffix]}{suffix}"
    return str(nbytes)


BACKENDS = ("auto", "nccl", "hccl", "gloo")


def parse_backend(text: str) -> str:
    """Option type for ``--backend``."""
    value = text.strip().lower()
    if value not in BACKENDS:
        raise ValueError(f"must be one of {', '.join(BACKENDS)}")
    return value


def parse_count(text: str) -> int:
    """Option type for ``--warmup`` (0 allowed)."""
    value = int(text)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def parse_fraction(text: str) -> float:
    """Option type for relative tolerances and ratios: 0 < x < 1."""
    value = float(text)
    if not 0 < value < 1:
        raise ValueError("must be between 0 and 1 (exclusive)")
    return value


def parse_sizes_option(text: str) -> str:
    """Option type for ``--sizes``: validated, kept as text (``"64K,1M"``)."""
    parse_sizes(text)
    return text


def default_sizes(backend: str = "nccl") -> list[int]:
    """Size sweep, factor 4 (nccl-tests' ``-f 4``).

    Accelerators (nccl, hccl): 1K..4G. The verdict is judged at the largest size, and GPUs
    reach their peak busbw only at 1-8 GiB (the 8xA100 sample in tests/data/samples: 222.6 GB/s
    at 256M, 235.2 at 8G; 16M measures latency). The worker drops sizes that do not fit the
    device's free memory (one buffer plus chunk temporaries, the same on every rank), so a
    small device still runs the sizes it can hold. CPU (gloo): 1K..16M. gloo over TCP
    plateaus by a few MB, and larger buffers only make the check slow and memory-hungry on the
    launcher-sized hosts it runs on.
    """
    top = 16 << 20 if backend == "gloo" else 4 << 30
    sizes, size = [], 1 << 10
    while size <= top:
        sizes.append(size)
        size *= 4
    return sizes


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


# --- ranks -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rank:
    rank: int
    host: str
    local_rank: int


def assign_ranks(slots: Mapping[str, int] | Iterable[tuple[str, int]]) -> list[Rank]:
    """Global ranks as DeepSpeed and torchrun assign them: node by node in hostfile order,
    local ranks 0..slots-1 within a node."""
    items = slots.items() if isinstance(slots, Mapping) else slots
    ranks: list[Rank] = []
    for host, count in items:
        if count < 0:
            raise ValueError(f"negative slot count for {host}: {count}")
        ranks.extend(Rank(len(ranks), host, local) for local in range(count))
    return ranks


def _spans(numbers: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2,5,7-8"."""
    out: list[str] = []
    values = sorted(set(numbers))
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(out)


def describe_ranks(numbers: Iterable[int], ranks: Sequence[Rank]) -> str:
    """``"ranks 4-7 (node3 local 0-3)"``; ranks unknown to ``ranks`` are listed bare."""
    wanted = sorted(set(numbers))
    by_rank = {r.rank: r for r in ranks}
    per_host: dict[str, list[int]] = {}
    for n in wanted:
        if n in by_rank:
            per_host.setdefault(by_rank[n].host, []).append(by_rank[n].local_rank)
    where = "; ".join(f"{host} local {_spans(locals_)}" for host, locals_ in per_host.items())
    noun = "rank" if len(wanted) == 1 else "ranks"
    return f"{noun} {_spans(wanted)}" + (f" ({where})" if where else "")


# --- worker command --------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerOptions:
    sizes: Sequence[int] = field(default_factory=lambda: default_sizes("gloo"))
    backend: str = "auto"
    dtype: str = "float32"
    warmup: int = 5
    iters: int = 20
    connect_timeout: float = 30.0
    init_timeout: float = 60.0
    op_timeout: float = 300.0
    size_seconds: float = 10.0
    budget_s: float | None = None  # --collective-budget, when its share lowered size_seconds


def worker_argv(python: str, script_path: str | Path, rank: Rank, world_size: int,
                master_addr: str, port: int, options: WorkerOptions, *,
                visible_devices: str = "", local_size: int = 0) -> list[str]:
    """The worker's command line as an argument list (quote it once, where it meets a shell).
    ``visible_devices`` (the node's slot ids, as DeepSpeed's launch.py puts them in
    CUDA_VISIBLE_DEVICES) and ``local_size`` (ranks on the node) are passed only when given."""
    extra = (["--visible-devices", visible_devices] if visible_devices else []) + (
        ["--local-size", str(local_size)] if local_size else [])
    return [
        python, str(script_path),
        "--rank", str(rank.rank), "--world-size", str(world_size),
        "--local-rank", str(rank.local_rank), "--label", rank.host,
        "--master-addr", master_addr, "--master-port", str(port),
        "--backend", options.backend, "--dtype", options.dtype,
        "--sizes", ",".join(str(s) for s in options.sizes),
        "--warmup", str(options.warmup), "--iters", str(options.iters),
        "--connect-timeout", f"{options.connect_timeout:g}",
        "--init-timeout", f"{options.init_timeout:g}",
        "--op-timeout", f"{options.op_timeout:g}",
        "--size-seconds", f"{options.size_seconds:g}",
        *extra,
    ]


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


def _header_line(*cols: str) -> str:
    widths = (11, 12, 8, 6, 10, 8, 8, 7)
    return "#" + " ".join(f"{c:>{w}}" for c, w in zip(cols, widths, strict=False))


def format_table(report: CollectiveReport) -> str:
    """nccl-tests-style table, with a units legend and a line stating what was timed."""
    lines = [
        (f"# all_reduce: {report.world_size} ranks, backend {report.backend}, "
        f"versions {json.dumps(report.versions, sort_keys=True)}"),
        f"# timed: {report.timed or 'unknown'}",
        UNITS_LEGEND,
        _header_line("size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"),
        _header_line("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]
    for row in report.rows:
        lines.append(
            f"{row.size_bytes:12d} {row.count:12d} {row.dtype:>8} {'sum':>6} {row.time_us:10.2f}"
            f" {row.algbw_GBps:8.2f} {row.busbw_GBps:8.2f} {row.wrong:7d}")
    if report.rows:
        avg = statistics.fmean(row.busbw_GBps for row in report.rows)
        lines.append(f"# Avg bus bandwidth    : {avg:.3f} GB/s")
    fewer = [row for row in report.rows
             if row.iters is not None and report.iters is not None and row.iters < report.iters]
    if fewer:
        lines.append("# slow link: fewer timed calls at " + ", ".join(
            f"{format_size(row.size_bytes)}B ({row.iters})" for row in fewer)
            + " to stay within --collective-size-seconds (or its share of --collective-budget)")
    if report.stopped is not None:
        lines.append(f"# {report.stopped.describe()}")
    if report.capped:
        skipped = ", ".join(format_size(int(x)) + "B" for x in report.capped.get("skipped", []))
        lines.append(f"# not run for lack of memory: {skipped} (largest buffer every rank can "
                     f"hold: {report.capped.get('cap_bytes')} B; {report.capped.get('where')})")
    from cluster_tests.judge import nccllog

    lines += nccllog.table_lines(report.transport_lines, report.ranks)
    lines.append(f"# verdict: {report.verdict}: {report.message}")
    return "\n".join(lines)


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
            f"{b}: {describe_ranks([r for r, x in report.backends.items() if x == b], report.ranks)}"
            for b in used)
        out.append(f"the ranks did not all choose the same backend ({parts})")
    return out


# --- pairwise (C2) ---------------------------------------------------------------------------


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


def format_pairs_table(reports: Mapping[tuple[str, str], CollectiveReport],
                       errors: Mapping[tuple[str, str], str] | None = None,
                       slow: SlowPairs | None = None) -> str:
    """C2 table: one line per pair, busbw at the pair's (single) size, slow pairs marked."""
    slow_pairs = {p for p, _ in slow.slow} if slow else set()
    lines = ["# C2: all-reduce per node pair, 1 rank per node, largest size only; " + UNITS_LEGEND[2:],
             f"#{'pair':>27} {'size':>12} {'time':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>7}  verdict",
             f"#{'':>27} {'(B)':>12} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7}"]
    for pair in sorted(set(reports) | set(errors or {})):
        rep = reports.get(pair)
        if rep is None or not rep.rows:
            why = (errors or {}).get(pair) or (rep.message if rep else "no result")
            lines.append(f"{pair_id(pair):>28} {'-':>12} {'-':>10} {'-':>8} {'-':>8} {'-':>7}  "
                         f"{rep.verdict if rep else 'error'}: {why[:100]}")
            continue
        row = rep.rows[-1]
        verdict = ("SLOW (sweep stopped)" if rep.stopped is not None
                   else "SLOW" if pair in slow_pairs else rep.verdict)
        lines.append(f"{pair_id(pair):>28} {row.size_bytes:12d} {row.time_us:10.2f} "
                     f"{row.algbw_GBps:8.2f} {row.busbw_GBps:8.2f} {row.wrong:7d}  {verdict}")
    if slow and slow.reference_GBps:
        lines.append(f"# slow = busbw below {slow.threshold_GBps:.3f} GB/s "
                     f"({slow.threshold_GBps / slow.reference_GBps:g} x the {slow.reference.replace('_', ' ')} "
                     f"{slow.reference_GBps:.3f} GB/s); suspect node: {slow.suspect or 'none'}")
    return "\n".join(lines)


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
                            f"with like (--sizes {','.join(format_size(s) for s in sorted(base_rows))})")
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
