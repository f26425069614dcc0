"""Training smoke (checklist T1, T2): the job's own report, read back from the launcher's log.

The job (``node/train_smoke.py``) prints tagged lines, ``CT_SMOKE {json}``: a ``start``, its
``step`` losses, a ``done`` with the final weights' hash, or an ``error``. In the launcher's log
they may be prefixed with ``host: `` by pdsh and interleaved across ranks. :func:`parse_output`
collects them per rank into a :class:`SmokeResult`, whose ``ok`` is the T1/T2 verdict and whose
``problems()`` say what is wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tests.judge.common.fieldread import by_fields
from cluster_tests.judge.common.probes import opt_text

TAG = "CT_SMOKE"
EXIT_DEADLINE = 3
EXIT_ERROR = 4
DEFAULT_MIN_DROP = 0.25

__all__ = [
    "DEFAULT_MIN_DROP",
    "TAG",
    "JobError",
    "LaunchInfo",
    "RankResult",
    "RankStart",
    "SmokeResult",
    "parse_output",
]


@dataclass(frozen=True)
class RankStart:
    """A rank's ``start`` event: where it runs, on what, set up how."""

    host: str | None = None
    world_size: int | None = None
    local_rank: int | None = None
    backend: str | None = None
    device: str | None = None
    accelerator: str | None = None  # DeepSpeed's accelerator: cuda, npu, cpu
    #: DS_ACCELERATOR as the rank saw it (None: not set)
    ds_accelerator_env: str | None = None
    precision: str | None = None
    optimizer: str | None = None
    bound_device: str | None = None

    @classmethod
    def read(cls, ev: Mapping[str, object]) -> RankStart:
        return by_fields(cls, ev)


@dataclass(frozen=True)
class JobError:
    """A rank's ``error`` event: its deadline (kind "deadline"), or the exception it raised."""

    rank: int
    kind: str | None
    phase: str | None = None
    message: str | None = None
    host: str | None = None
    traceback: str = ""

    @classmethod
    def read(cls, rank: int, ev: Mapping[str, object]) -> JobError:
        return by_fields(cls, ev, rank=rank)

    def line(self) -> str:
        """The event as the job printed it, without its traceback (a diagnosis's evidence)."""
        said = {"event": "error", "host": self.host, "kind": self.kind,
                "message": self.message, "phase": self.phase, "rank": self.rank}
        shown = {k: v for k, v in said.items() if v is not None}
        return f"{TAG} {json.dumps(shown, sort_keys=True)}"


@dataclass
class RankResult:
    rank: int
    host: str | None = None  # pdsh prefix if any, else the host the rank reported
    local_rank: int | None = None
    started: bool = False
    done: bool = False
    first_loss: float | None = None
    last_loss: float | None = None
    losses: list[float] = field(default_factory=list)
    weights_sha256: str | None = None
    errors: list[JobError] = field(default_factory=list)
    start: RankStart = RankStart()

    def loss_fell(self, min_drop: float = DEFAULT_MIN_DROP) -> bool:
        """last < first * (1 - min_drop)."""
        if self.first_loss is None or self.last_loss is None:
            return False
        return self.last_loss < self.first_loss * (1.0 - min_drop)


@dataclass
class LaunchInfo:
    argv: list[str]
    returncode: int | None
    pgid: int
    elapsed_s: float
    timed_out: bool


@dataclass
class SmokeResult:
    ranks: dict[int, RankResult]
    expected_ranks: int | None
    world_size: int | None
    #: each rank's own stacks (all threads), dumped by its watchdog at the deadline
    stacks: dict[int, str] = field(default_factory=dict)
    rank_hosts: dict[int, str] = field(default_factory=dict)  # from the launcher's rank mapping
    min_drop: float = DEFAULT_MIN_DROP
    launch: LaunchInfo | None = None

    @property
    def expected(self) -> int:
        if self.expected_ranks is not None:
            return self.expected_ranks
        if self.world_size is not None:
            return self.world_size
        return len(self.ranks)

    def hosts(self) -> dict[int, str]:
        """Rank -> host: the rank's own word (its events, its pdsh prefix), else the launcher's
        rank mapping (which says "localhost" for a job on one node)."""
        out = dict(self.rank_hosts)
        out.update({r: rr.host for r, rr in self.ranks.items() if rr.host})
        return out

    @property
    def missing_ranks(self) -> list[int]:
        """Expected ranks that never reported done (never started, or died, or hung)."""
        return [r for r in range(self.expected) if r not in self.ranks or not self.ranks[r].done]

    @property
    def not_started_ranks(self) -> list[int]:
        return [r for r in range(self.expected) if r not in self.ranks or not self.ranks[r].started]

    @property
    def loss_not_falling(self) -> list[int]:
        return sorted(
            r for r, rr in self.ranks.items() if rr.done and not rr.loss_fell(self.min_drop)
        )

    @property
    def hashes(self) -> dict[int, str]:
        return {r: rr.weights_sha256 for r, rr in self.ranks.items() if rr.weights_sha256}

    @property
    def hashes_identical(self) -> bool:
        return len(set(self.hashes.values())) == 1

    @property
    def ok(self) -> bool:
        return (
            self.expected > 0
            and not self.missing_ranks
            and not self.loss_not_falling
            and self.hashes_identical
            and not any(rr.errors for rr in self.ranks.values())
            and (self.launch is None or self.launch.returncode == 0)
        )

    def problems(self) -> list[str]:
        out: list[str] = []
        if self.expected == 0:
            out.append(f"no {TAG} output at all: the job never started")
        if self.missing_ranks:
            out.append(f"ranks never reported done: {_fmt_ranks(self.missing_ranks, self)}")
        for r in self.loss_not_falling:
            rr = self.ranks[r]
            out.append(
                f"rank {r} loss did not fall by {self.min_drop:.0%}: "
                f"first {rr.first_loss:.4g}, last {rr.last_loss:.4g}"
            )
        if len(set(self.hashes.values())) > 1:
            groups: dict[str, list[int]] = {}
            for r, h in sorted(self.hashes.items()):
                groups.setdefault(h[:12], []).append(r)
            out.append(f"ranks ended with different weights: {groups}")
        for r, rr in sorted(self.ranks.items()):
            for e in rr.errors:
                out.append(f"rank {r} error {e.kind}: {e.message}")
        if self.launch is not None and self.launch.returncode != 0:
            how = "timed out and was killed" if self.launch.timed_out else "failed"
            out.append(f"launcher {how} (exit code {self.launch.returncode})")
        return out

    def summary(self) -> str:
        if self.ok:
            losses = ", ".join(
                f"r{r}@{rr.host}: {rr.first_loss:.3g}->{rr.last_loss:.3g}"
                for r, rr in sorted(self.ranks.items())
            )
            return f"{self.expected} ranks done, loss fell ({losses}), identical weights"
        return "; ".join(self.problems())


def _fmt_ranks(ranks: Sequence[int], res: SmokeResult) -> str:
    parts = []
    for r in ranks:
        host = res.ranks[r].host if r in res.ranks else res.rank_hosts.get(r)
        parts.append(f"{r}@{host}" if host else str(r))
    return ", ".join(parts)


_TAG_RE = re.compile(re.escape(TAG) + r" (?=\{)")
_MAPPING_RE = re.compile(r"global_rank_mapping=defaultdict\(<class 'list'>, (\{.*\})\)")
_MAPPING_ITEM_RE = re.compile(r"'([^']+)': \[([\d, ]*)\]")


def _iter_events(text: str) -> list[tuple[str | None, Mapping[str, object]]]:
    out: list[tuple[str | None, Mapping[str, object]]] = []
    dec = json.JSONDecoder()
    for line in text.splitlines():
        m = _TAG_RE.search(line)
        if not m:
            continue
        prefix = line[: m.start()].strip()
        host: str | None = None
        if prefix.endswith(":"):
            host = prefix[:-1].split()[-1] if prefix[:-1].split() else None
        try:
            obj, _ = dec.raw_decode(line, m.end())
        except ValueError:
            continue
        if isinstance(obj, dict) and "event" in obj:
            out.append((host, obj))
    return out


def _rank_hosts(text: str) -> dict[int, str]:
    mapping: dict[int, str] = {}
    for m in _MAPPING_RE.finditer(text):
        for host, ranks in _MAPPING_ITEM_RE.findall(m.group(1)):
            for r in ranks.split(","):
                if r.strip().isdigit():
                    mapping[int(r)] = host
    return mapping


def parse_output(
    text: str,
    expected_ranks: int | None = None,
    min_drop: float = DEFAULT_MIN_DROP,
) -> SmokeResult:
    """Collect the job's tagged events from a (mixed, possibly pdsh-prefixed) launcher log.

    Verdict (``SmokeResult.ok``): every expected rank (``expected_ranks``, else the world size
    the ranks reported) reported done, with no error event; on each rank the loss fell
    (last < first * (1 - min_drop)); all final-weight hashes are identical.
    """
    ranks: dict[int, RankResult] = {}
    stacks: dict[int, str] = {}
    world: int | None = None
    for host, ev in _iter_events(text):
        r = ev.get("rank")
        if not isinstance(r, int) or r < 0:
            continue
        rr = ranks.setdefault(r, RankResult(rank=r))
        if host and not rr.host:
            rr.host = host
        if ev.get("event") == "start":
            rr.started = True
            rr.start = RankStart.read(ev)
            rr.local_rank = rr.start.local_rank
            rr.host = rr.host or rr.start.host
            if rr.start.world_size is not None:
                world = max(world or 0, rr.start.world_size)
        elif ev.get("event") == "stack" and ev.get("text"):
            stacks[r] = str(ev.get("text"))
        else:
            _ended(rr, ev)
    return SmokeResult(ranks=ranks, expected_ranks=expected_ranks, world_size=world,
                       stacks=stacks, rank_hosts=_rank_hosts(text), min_drop=min_drop)


def _ended(rr: RankResult, ev: Mapping[str, object]) -> None:
    """A rank's `step`, `done` or `error` event."""
    kind, loss = ev.get("event"), _as_float(ev.get("loss"), None)
    if kind == "step" and loss is not None:
        rr.losses.append(loss)
        if rr.first_loss is None:
            rr.first_loss = loss
        rr.last_loss = loss
    elif kind == "done":
        rr.done = True
        rr.first_loss = _as_float(ev.get("first_loss"), rr.first_loss)
        rr.last_loss = _as_float(ev.get("last_loss"), rr.last_loss)
        rr.weights_sha256 = opt_text(ev.get("weights_sha256"))
    elif kind == "error":
        rr.errors.append(JobError.read(rr.rank, ev))


def _as_float(value: object, default: float | None) -> float | None:
    if isinstance(value, bool):
        return default
    return float(value) if isinstance(value, (int, float)) else default
