"""Slurm after the verdict: read the nodes' state (``scontrol show node -o``), then drain and
resume as ``judge/slurm.py`` decides (``--slurm-drain``, ``--slurm-resume``), or, without those
flags, say which ``scontrol`` lines they would run. Nothing here changes the run's verdict or
reports: every failure (no scontrol, no controller, permission denied, an ``scontrol`` error) is
a line of the summary.

The only module that runs ``scontrol update``."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tests.judge import slurm
from cluster_tests.judge.healthyset import Healthy
from cluster_tests.judge.problem import Problem

#: what the verdict does in Slurm, as report/files.py calls it once hostfile.healthy is decided:
#: (summary lines, summary.json's part)
AfterVerdict = Callable[[Healthy, list[Problem]], tuple[list[str], dict[str, object]]]

#: seconds one scontrol may take (a client with no controller gives up after about 9 s itself)
TIMEOUT = 30.0


class SlurmError(Exception):
    """scontrol failed: `kind` says how (permission denied, no controller...), the message is
    what scontrol said."""

    def __init__(self, kind: str, said: str) -> None:
        super().__init__(f"{kind}: {said}" if said else kind)
        self.kind = kind
        self.said = said


def classify(stderr: str, rc: int) -> str:
    """What an scontrol failure is, from its own words (tests/data/samples/scontrol-show-node)."""
    text = stderr.lower()
    if "invalid user id" in text or "permission denied" in text or "access denied" in text:
        return "permission denied (run as root or as Slurm's SlurmUser)"
    if "unable to contact slurm controller" in text or "connection refused" in text:
        return "no Slurm controller answers"
    if "configuration source" in text or "could not establish" in text:
        return "no Slurm configuration here (slurm.conf, SLURM_CONF)"
    if "invalid node name" in text or "not found" in text:
        return "Slurm knows no such node"
    return f"scontrol failed (exit {rc})"


def _run(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> str:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, errors="replace",
                              timeout=timeout, check=False, stdin=subprocess.DEVNULL,
                              env=dict(env) if env is not None else None)
    except subprocess.TimeoutExpired:
        raise SlurmError("no answer", f"`{' '.join(argv[:3])}` still running after "
                         f"{timeout:g} s") from None
    except OSError as exc:
        raise SlurmError("cannot run scontrol", str(exc)) from None
    if proc.returncode != 0:
        said = " ".join(proc.stderr.split())[:300] or " ".join(proc.stdout.split())[:300]
        raise SlurmError(classify(proc.stderr + proc.stdout, proc.returncode), said)
    return proc.stdout


def show_nodes(scontrol: str, timeout: float = TIMEOUT,
               env: Mapping[str, str] | None = None) -> list[slurm.SlurmNode]:
    """Every node Slurm knows, as ``scontrol show node -o`` shows it."""
    return slurm.parse_show_node(_run([scontrol, "show", "node", "-o"], timeout, env))


@dataclass
class Report:
    """What the summary says of Slurm (its lines) and summary.json's `slurm`."""

    lines: list[str] = field(default_factory=list)
    json: dict[str, object] = field(default_factory=dict)


def after_verdict(names: Sequence[str], healthy: Healthy, problems: Sequence[Problem], *,
                  drain: bool, resume: bool, outcome: Callable[[str], str | None],
                  environ: Mapping[str, str] | None = None,
                  timeout: float = TIMEOUT) -> Report:
    """Drain and resume as asked; without either flag, the lines those flags would run (only
    where Slurm answers here, and only when there is something to run)."""
    env = os.environ if environ is None else environ
    asked = drain or resume
    flags = " ".join(f for f, on in (("--slurm-drain", drain), ("--slurm-resume", resume)) if on)
    scontrol = shutil.which("scontrol", path=env.get("PATH"))
    if scontrol is None:
        if not asked:
            return Report()
        return Report([f"Slurm ({flags}): scontrol is not on the PATH: nothing drained or "
                       f"resumed"], {"error": "scontrol not on PATH"})
    try:
        nodes = show_nodes(scontrol, timeout, environ)
    except SlurmError as exc:
        if not asked:
            return Report()  # no Slurm here that answers: nothing to say without the flags
        return Report([f"Slurm ({flags}): cannot read the nodes' state: {exc.kind} "
                       f"(`scontrol show node -o`: {exc.said}): nothing drained or resumed"],
                      {"error": str(exc)})
    got = slurm.plan(names, healthy, problems, nodes, drain=drain or not asked,
                     resume=resume or not asked, outcome=outcome)
    if not asked:
        if not got.actions:
            return Report()
        lines = ["Slurm: nothing changed (no --slurm-drain / --slurm-resume); they would run:"]
        lines += [f"  {a.line}" for a in got.actions]
        lines += [f"  {n}" for n in got.notes]
        return Report(lines, {"ran": False, **slurm.to_json(got)})
    lines = [f"Slurm ({flags}):"]
    done: list[dict[str, object]] = []
    for a in got.actions:
        try:
            _run([scontrol, *a.argv[1:]], timeout, environ)
        except SlurmError as exc:
            lines.append(f"  FAILED to {a.verb} {a.node}: {exc.kind} ({exc.said}): {a.line}")
            done.append({"command": a.line, "ok": False, "error": str(exc)})
            continue
        what = "drained" if a.verb == "drain" else "resumed"
        lines.append(f"  {what} {a.node}: {a.line}")
        done.append({"command": a.line, "ok": True})
    lines += [f"  {n}" for n in got.notes]
    if not got.actions and not got.notes:
        lines.append("  nothing to drain or resume")
    return Report(lines, {"ran": True, **slurm.to_json(got), "results": done})


def acting(names: Sequence[str], *, drain: bool, resume: bool,
           outcome: Callable[[str], str | None]) -> AfterVerdict:
    """What the verdict does in Slurm (:func:`after_verdict`), for report/files.py to call once
    hostfile.healthy is decided; `outcome(test_id)`: how a check ended (None: not run)."""
    def act(healthy: Healthy, problems: list[Problem]) -> tuple[list[str], dict[str, object]]:
        report = after_verdict(names, healthy, problems, drain=drain, resume=resume,
                               outcome=outcome)
        return report.lines, report.json

    return act
