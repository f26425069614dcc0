"""The all-reduce's rank layout (pure): ranks assigned to hosts in hostfile order (as DeepSpeed
does), their description in messages ('ranks 0-3 (node1 local 0-3)'), and each worker's command
line (``node/allreduce.py``'s arguments).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster_tests.judge.collective.collopts import default_sizes


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
