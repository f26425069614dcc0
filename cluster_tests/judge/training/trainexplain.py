"""T1/T2: what a training launch came to (:class:`Launch`, filled by measure/trainruns.py) and
its red (:func:`launch_failed`): where, the root causes with their log lines and fixes, the
consequences, ranks on the wrong accelerator, and where the full log is. Pure: a Launch in, a
Problem out."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cluster_tests.core import testids as ids
from cluster_tests.judge.problem import Problem
from cluster_tests.judge.ssh import sshfail
from cluster_tests.judge.training import traindiag as tdiag
from cluster_tests.judge.training import trainresult as tres
from cluster_tests.judge.training.traindiag import TrainCause

#: the line each node's launch shell prints first (node, interpreter), found again in the log
LAUNCH_MARK = "CT_LAUNCH"


class Describes(Protocol):
    """The run's training configuration, as a message names it (measure.training.TrainingConfig)."""

    def describe(self) -> str: ...


@dataclass
class Launch:
    """One run of the job (T1 on one node, or T2) and what came of it."""

    name: str  # "T1-node2", "T2"
    node: str  # where it was started
    nodes: list[str]  # every node it runs on
    expected_ranks: int
    command: str
    text: str = ""
    exit_status: int | None = None
    seconds: float = 0.0
    timed_out: bool = False
    stopped: str | None = None  # the diagnosis kind that made us stop it early, or "cancelled"
    setup_error: str | None = None
    result: tres.SmokeResult | None = None
    #: T2: the `deepspeed` command line as launched (the user's --launch-args resolved)
    line: str = ""
    diagnoses: list[tdiag.Diagnosis] = field(default_factory=list)
    leftovers: dict[str, str] = field(default_factory=dict)  # node -> processes cleanup missed
    log_path: Path | None = None
    accel_problems: list[str] = field(default_factory=list)  # ranks not on their node's accelerator

    @property
    def ok(self) -> bool:
        return (
            self.setup_error is None
            and self.exit_status == 0
            and not self.timed_out
            and self.stopped is None
            and self.result is not None
            and self.result.ok
            and not self.accel_problems
        )



# --------------------------------------------------------------------------- accelerators

#: DeepSpeed's accelerator name on a node with these accelerators (A1's kinds).
EXPECTED_ACCELERATOR = {"nvidia": "cuda", "ascend": "npu", "cpu": "cpu"}


def accelerator_problems(
    result: tres.SmokeResult | None,
    inventories: dict[str, tuple[str, str]],
    forwarded: dict[str, str] | None = None,
) -> list[str]:
    """Ranks that trained on another accelerator than their node has (A1): a GPU node whose job
    ran on DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu from somewhere, or DeepSpeed's
    fallback when CUDA is unusable) trains, and proves nothing about the launch."""
    if result is None:
        return []
    forwarded = forwarded or {}
    by_key: dict[tuple[str, str, str], list[int]] = {}
    for r, rr in sorted(result.ranks.items()):
        start = rr.start
        host = rr.host or start.host
        got = start.accelerator
        if not host or not got or host not in inventories:
            continue
        kind, what = inventories[host]
        want = EXPECTED_ACCELERATOR.get(kind)
        if want is None or got == want:
            continue
        if forwarded.get("DS_ACCELERATOR"):
            why = (f"DS_ACCELERATOR={forwarded['DS_ACCELERATOR']} was passed on from pytest's "
                   f"environment: unset it where pytest runs")
        elif start.ds_accelerator_env:
            why = (f"DS_ACCELERATOR={start.ds_accelerator_env} is set for the ranks on "
                   f"{host} (~/.bashrc or ~/.deepspeed_env): remove it")
        elif want == "cuda":
            why = ("DeepSpeed fell back to its CPU accelerator: torch.cuda is not usable from the "
                   "remote Python (a CPU-only torch build, or a driver the CUDA runtime cannot "
                   f"use; see {ids.ACCELERATORS})")
        else:
            why = ("DeepSpeed did not find torch_npu: CANN's set_env.sh is probably sourced only "
                   "in interactive shells (put it in ~/.bashrc above any early return), or "
                   "torch_npu is not installed in the remote Python")
        by_key.setdefault((host, f"{got} ({start.backend})", f"{what}; {why}"), []).append(r)
    return [
        f"{host}: rank{'s' if len(ranks) > 1 else ''} {','.join(map(str, ranks))} trained on "
        f"{got}, but {host} has {why}"
        for (host, got, why), ranks in by_key.items()
    ]


# --------------------------------------------------------------------------- messages

def _rel(path: Path | None) -> str:
    if path is None:
        return "(not saved)"
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def _python_line(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith(LAUNCH_MARK):
            return line.strip()
    return None


#: causes whose evidence on a single node begins with the interpreter the launch ran there
_PYTHON_KINDS = (TrainCause.NO_DEEPSPEED, TrainCause.NO_TORCH, TrainCause.NO_MODULE,
                 TrainCause.COMMAND_NOT_FOUND)


def _explain_diag(d: tdiag.Diagnosis, launch: Launch, multi: bool) -> tuple[str, str]:
    """(a root cause's lines: where, what, its log lines; its fix)."""
    node = d.node or launch.node
    head = f"{node}: {d.cause}"
    hint = d.hint
    if multi and d.kind in tdiag.SSH_KINDS:
        src = launch.node
        head = f"{src} -> {node}: {d.cause} (pdsh's ssh leg from the rank-0 node)"
        words = sshfail.leg_words(d.kind)
        if words is not None and words.hint is None and words.cause != sshfail.Cause.FAILED:
            hint = sshfail.pair_fix(words.cause, src, node)
        hint += f"; see {ids.SSH_TRUST.of(src, node)}"
    evidence = list(d.evidence)
    if d.kind in _PYTHON_KINDS and not multi:
        line = _python_line(launch.text)
        if line:
            evidence.insert(0, line)
    ev = "".join(f"\n    {e[:300]}" for e in evidence)
    return f"  {head}{ev}", hint


def _headline(launch: Launch, config: Describes) -> str:
    """What ran where, and how it ended."""
    multi = launch.name == "T2"
    if multi:
        what = (
            f"T2: the training smoke job failed through `deepspeed --hostfile` started on "
            f"{launch.node} ({launch.expected_ranks} ranks on {', '.join(launch.nodes)}; "
            f"{config.describe()})"
        )
    else:
        what = (
            f"{launch.node}: the training smoke job failed on {launch.node} alone "
            f"({launch.expected_ranks} rank{'s' if launch.expected_ranks != 1 else ''}; "
            f"{config.describe()})"
        )
    if launch.setup_error:
        how = f"before it started: {launch.setup_error}"
    elif launch.stopped:
        how = f"stopped after {launch.seconds:.1f} s, as soon as the log showed the cause"
        if multi:
            how += " (the other ranks would have waited in rendezvous)"
    elif launch.timed_out:
        how = f"killed at its deadline after {launch.seconds:.1f} s"
    else:
        how = f"exit status {launch.exit_status} after {launch.seconds:.1f} s"
    return f"{what}, {how}:"


def _consequences(rest: Sequence[tdiag.Diagnosis], launch: Launch, multi: bool) -> list[str]:
    """The consequences of the root causes, in one line."""
    if not rest:
        return []
    by_cause: dict[str, list[str]] = {}
    for d in rest:
        nodes = by_cause.setdefault(d.cause, [])
        where = d.node or ("" if multi else launch.node)
        if where and where not in nodes:
            nodes.append(where)
    then = "; ".join(
        f"{cause} ({', '.join(nodes)})" if nodes else cause
        for cause, nodes in list(by_cause.items())[:4]
    )
    return [f"  then: {then}"]


def explain(launch: Launch, config: Describes) -> tuple[list[str], list[str]]:
    """A failed launch's lines (where, the causes with their log lines, the consequences in
    one line, where the full log is) and the fix of each root cause, in their order."""
    multi = launch.name == "T2"
    lines = [_headline(launch, config)]
    roots, rest = tdiag.root_causes(launch.diagnoses)
    fixes: list[str] = []
    for d in roots[:6]:
        said, fix = _explain_diag(d, launch, multi)
        lines.append(said)
        if len(roots) > 1 and not fix.startswith("on "):
            fix = f"on {d.node or launch.node}: {fix}"
        fixes.append(fix)
    lines += _consequences(rest, launch, multi)
    if not roots and launch.result is not None and not launch.setup_error:
        lines += [f"  {p}" for p in launch.result.problems()]
    lines += [f"  {p}" for p in launch.accel_problems]
    if launch.line:
        lines.append(f"  launched as: {launch.line}")
    lines.append(f"  full log: {_rel(launch.log_path)}")
    return lines, list(dict.fromkeys(fixes))


def cause(launch: Launch) -> TrainCause:
    """The cause of a failed launch: its first root cause (as :func:`short_cause` says it)."""
    if launch.setup_error:
        return TrainCause.SETUP_FAILED
    roots, _ = tdiag.root_causes(launch.diagnoses)
    if roots:
        return roots[0].kind
    if launch.result is not None and launch.result.problems():
        return TrainCause.RESULT
    if launch.accel_problems:
        return TrainCause.WRONG_ACCELERATOR
    return TrainCause.LAUNCH_FAILED


def launch_failed(launch: Launch, config: Describes, after: Sequence[str] = ()) -> Problem:
    """The red of a launch that did not pass (T1 on its node, or T2): :func:`explain`'s lines,
    then `after` (where the ranks were at their deadline), and the root causes' fixes."""
    lines, fixes = explain(launch, config)
    multi = launch.name == "T2"
    roots, _ = tdiag.root_causes(launch.diagnoses)
    where = (tuple(dict.fromkeys(d.node for d in roots if d.node)) if multi
             else (launch.node,))
    return Problem(where, cause(launch), "\n".join([*lines, *after]), fix="; ".join(fixes),
                   item=(ids.TRAIN_MULTI_NODE if multi else ids.TRAIN_SINGLE_NODE).item)


def options_refused(error: str) -> Problem:
    """The red of training options the checks cannot use (ConfigError: which, and why)."""
    return Problem((), TrainCause.BAD_OPTIONS, error, item=ids.TRAIN_SINGLE_NODE.item)


def filter_refused(error: str) -> Problem:
    """T2's red when DeepSpeed would refuse the launch's --include/--exclude."""
    return Problem((), TrainCause.FILTER_REFUSED,
                   f"DeepSpeed will refuse the launch's resource filter: {error}",
                   fix="make --launch-include/--launch-exclude name only hostfile hosts and "
                       "existing slot indices", item=ids.TRAIN_MULTI_NODE.item)


def short_cause(launch: Launch) -> str:
    """One line: the first root cause of a failed launch (for T2's skip message)."""
    if launch.setup_error:
        return launch.setup_error.splitlines()[0][:200]
    roots, _ = tdiag.root_causes(launch.diagnoses)
    if roots:
        return roots[0].cause
    if launch.result is not None and launch.result.problems():
        return launch.result.problems()[0]
    if launch.accel_problems:
        return launch.accel_problems[0]
    return f"exit status {launch.exit_status}"
