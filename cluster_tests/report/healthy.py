"""``hostfile.healthy``: the nodes the user can launch on right now (judge/healthyset.py decides
which), written beside the other reports when a run ends red, with the launch line that uses it
and the ``--exclude`` equivalent for users who keep their own hostfile."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path

from cluster_tests.judge import healthyset
from cluster_tests.judge.healthyset import Healthy
from cluster_tests.judge.hostfile.launchargs import LaunchCommand
from cluster_tests.judge.problem import Problem
from cluster_tests.report.fixes import problem_of
from cluster_tests.report.summary import Outcome, Recorder

FILE_NAME = "hostfile.healthy"


def problems(outcomes: Iterable[Outcome]) -> list[Problem]:
    """The Problems of the run's reds (each red's own, with its test id)."""
    out = []
    for o in outcomes:
        p = problem_of(o)
        if p is not None:
            out.append(p if p.check else dataclasses.replace(p, check=o.test_id))
    return out


def slowness(recorder: Recorder, nodes: Iterable[str],
             rtt: dict[str, float] | None = None) -> dict[str, float]:
    """A number per node, larger is slower, from the run's own measurements: C2's pair busbw
    (the inverse of the slowest pair a node is in), else F1's round-trip times (the node's
    median RTT to and from its peers, ms; `rtt` where the caller has them already)."""
    nodes = list(nodes)
    wanted = set(nodes)
    bw = recorder.pair_bandwidth()
    if bw:
        lowest: dict[str, float] = {}
        for pair, v in bw.items():  # one pass over the pairs, not one per node
            for n in set(pair) & wanted:
                if v > 0:
                    lowest[n] = min(v, lowest.get(n, v))
        return {n: 1.0 / lowest[n] for n in nodes if n in lowest}
    return rtt if rtt is not None else recorder.latency_medians(nodes)


def decide(recorder: Recorder, nodes: list[str], world_multiple: int = 1,
           found: list[Problem] | None = None, rtt: dict[str, float] | None = None) -> Healthy:
    """hostfile.healthy of the run (`found`: the run's :func:`problems`, where the caller has
    them; `rtt`: the nodes' median RTTs, likewise)."""
    return healthyset.healthy(nodes, problems(recorder.outcomes.values()) if found is None
                                 else found, world_multiple=world_multiple,
                                 slowness=slowness(recorder, nodes, rtt))


def write(path: Path, result: Healthy, slots: Mapping[str, int]) -> None:
    lines = [f"{n} slots={slots.get(n, 1)}" for n in result.kept]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.replace(path)


def _shown(path: Path, cwd: Path) -> str:
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def launch_lines(result: Healthy, path: Path, cwd: Path, hostfile: str | None,
                 command: LaunchCommand | None = None) -> list[str]:
    """What the summary says of the healthy file (of a red run), ending with the launch line:
    the user's own launch command (`command`) with only its hostfile changed, ready to paste in
    the launch directory `cwd`."""
    if result.waits_for:
        lines = ["Launch now: no set of nodes launches until this is fixed (a cause on the "
                 "launcher, or in what it hands every rank; no hostfile.healthy written):"]
        lines += [f"  {p.check or p.item}: {p.cause}" for p in result.waits_for]
        return lines
    if not result.kept:
        return ["Launch now: no node can be launched on (see the causes above)."]
    total = len(result.kept) + len(result.excluded)
    if not result.changed:
        lines = [f"Launch now on all {total} nodes ({_shown(path, cwd)}; rank 0: {result.rank0}): "
                 f"the reds above are not on the launch's path (see docs/CHECKLIST.md, what the "
                 f"launch needs)"]
    else:
        lines = [f"Launch now on {len(result.kept)} of {total} nodes ({_shown(path, cwd)}; "
                 f"rank 0: {result.rank0}); excluded:"]
    for node, why in result.excluded.items():
        lines.append(f"  {node}: {'; '.join(why) or 'excluded'}")
    if result.trimmed:
        lines.append(f"  ({', '.join(result.trimmed)} dropped only to keep a multiple of "
                     f"--world-multiple)")
    if result.rank0_moved_from:
        rerun = ", ".join(t.name for t in healthyset.RANK0_ONLY)
        lines.append(f"Rank 0 moves from {result.rank0_moved_from} to {result.rank0}: its own "
                     f"checks ({rerun}) ran for {result.rank0_moved_from}; rerun them with the new "
                     f"file before launching: pytest --hostfile {_shown(path, cwd)} -k "
                     f"\"{' or '.join(t.name for t in healthyset.RANK0_ONLY)}\"")
    excluded = list(result.excluded)
    if command is not None:
        kept_mine = command.with_exclude(excluded) if excluded and not \
            result.rank0_moved_from else None
        if kept_mine is not None:
            lines.append(f"or keep your hostfile: {kept_mine.line()}")
        lines.append(command.with_hostfile(_shown(path, cwd)).line())
        return lines
    excl = "@".join(excluded)
    mine = f" --hostfile {shlex.quote(hostfile)}" if hostfile else ""
    if excl:
        lines.append(f"or keep your hostfile: deepspeed{mine} --exclude {shlex.quote(excl)} ...")
    lines.append(f"deepspeed --hostfile {shlex.quote(_shown(path, cwd))} ...")
    return lines


def green_lines(nodes: int, command: LaunchCommand | None, hostfile: str | None) -> list[str]:
    """What a green run ends with: the launch works on every node, with its command."""
    line = command.line() if command is not None else (
        f"deepspeed --hostfile {shlex.quote(hostfile)} ..." if hostfile else "deepspeed ...")
    return [f"The launch will work on {nodes} of {nodes} nodes: {line}"]


def to_json(result: Healthy, path: Path | None) -> dict[str, object]:
    return {"file": str(path) if path is not None else None,
            "launchable": result.launchable,
            "waits_for": [{"check": p.check, "cause": str(p.cause), "nodes": list(p.nodes)}
                          for p in result.waits_for],
            "rank0": result.rank0, "rank0_moved_from": result.rank0_moved_from,
            "kept": result.kept,
            "excluded": [{"node": n, "causes": why} for n, why in result.excluded.items()],
            "trimmed_for_world_multiple": result.trimmed,
            "rerun_with_new_rank0": [t.name for t in healthyset.RANK0_ONLY]
            if result.rank0_moved_from else []}


__all__ = ["FILE_NAME", "Healthy", "decide", "green_lines", "launch_lines", "problems", "to_json",
           "write"]
