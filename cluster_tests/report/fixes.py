"""The fix script: the fix of every cause of the run's reds, collected into ``reports/fixes.sh``
for a person to review and run from the launcher. The suite never runs it.

Each red carries its :class:`~cluster_tests.judge.problem.Problem` (the ``problem`` property,
put there by ``core.outcome``); :func:`render` makes one block per cause (Problems with the same
``key()`` are one cause), in checklist order, commented with the test ids it answers and the
node it runs on; a cause whose fix needs a person (a login the node refuses, a driver, a
firewall policy) is a comment with the fix in words. Commands for a node are run as
``ssh -F <the run's ssh config> [-l <user>] -o BatchMode=yes <node> '<commands>'``, so the
script reaches the nodes exactly as the run did; every host, path and key is shlex-quoted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cluster_tests.core import sections
from cluster_tests.core.testids import LAUNCHER
from cluster_tests.judge.common.fixcmd import q
from cluster_tests.judge.problem import PROPERTY, Fix, Problem

__all__ = ["Fix", "Problem"]

SCRIPT_NAME = "fixes.sh"
#: checklist order of the blocks (by the test module's section)
ORDER = sections.ORDER


# --------------------------------------------------------------------------- the script


class Red(Protocol):
    """What this module reads of a test's outcome (report.summary.Outcome has it)."""

    @property
    def outcome(self) -> str: ...
    @property
    def properties(self) -> dict[str, object]: ...
    @property
    def module(self) -> str: ...
    @property
    def test_id(self) -> str: ...


def problem_of(outcome: Red) -> Problem | None:
    """The Problem a red carries (None for a pass, a skip, or a report without one)."""
    if outcome.outcome not in ("failed", "error"):
        return None
    raw = outcome.properties.get(PROPERTY)
    return Problem.from_json(str(raw)) if raw else None


@dataclass
class Block:
    """One cause: the fixes (commands, or none: a person), and the reds it answers."""

    problem: Problem
    section: int
    tests: list[str]
    fixes: list[Fix] = dataclasses.field(default_factory=list)

    @property
    def commands(self) -> list[Fix]:
        return [f for f in self.fixes if f.commands]


def _section(module: str) -> int:
    stem = Path(module.split("::")[0]).stem
    section = sections.BY_MODULE.get(stem)
    return section.order if section else len(ORDER)


def blocks(outcomes: Iterable[Red]) -> list[Block]:
    """One block per cause (Problems with the same key), in checklist order (then first
    appearance); each lists the ids of the reds it answers. A cause sorts by the checklist item
    of its fix when it has one (an N2 /etc/hosts fix that also answers an S4 pair is an N
    block)."""
    out: dict[tuple, Block] = {}
    for o in outcomes:
        p = problem_of(o)
        if p is None:
            continue
        sec = _section(o.module)
        items = [f.item for f in p.fixes if f.commands and f.item and f.item[0] in ORDER]
        own = ORDER.index(items[0][0]) if items else sec
        b = out.setdefault(p.key(), Block(p, own, []))
        b.section = min(b.section, own)
        for f in p.fixes:
            if f.key() not in {x.key() for x in b.fixes}:
                b.fixes.append(f)
        if o.test_id not in b.tests:
            b.tests.append(o.test_id)
    return sorted(out.values(), key=lambda b: b.section)  # stable: first appearance within


def ssh_prefix(ssh_config: str | None, user: str | None, connect_timeout: float,
               accept_new: bool = False) -> list[str]:
    argv = ["ssh"]
    if ssh_config and Path(ssh_config).is_file():
        argv += ["-F", ssh_config]
    if user:
        argv += ["-l", user]
    argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(connect_timeout))}",
             "-o", f"StrictHostKeyChecking={'accept-new' if accept_new else 'yes'}"]
    return argv


def _comment(text: str) -> list[str]:
    return [("# " + line).rstrip() for line in str(text).splitlines() or [""]]


def render(outcomes: Iterable[Red], ssh: Sequence[str], *, command_line: str = "",
           when: float | None = None) -> tuple[str, int, int]:
    """The script's text, the number of command blocks and of manual blocks."""
    bl = blocks(outcomes)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when or time.time()))
    lines = [
        "#!/usr/bin/env bash",
        f"# fixes.sh: written by cluster_tests on {stamp}, one block per fix of the failed checks,",
        "# in checklist order. Review it, run it from the launcher (where the suite ran), then",
        "# rerun what failed: pytest --lf. The suite never runs it. Each block is idempotent:",
        "# running the script twice changes nothing the second time. Blocks that need a person",
        "# are comments.",
    ]
    if command_line:
        lines += _comment(f"run: {command_line}")
    lines += ["set -u", "failed=0",
              'ct_failed() { echo "fixes.sh: the block for $1 failed (exit $2)" >&2; failed=1; }',
              ""]
    prefix = shlex.join(ssh)
    n_cmd = n_manual = 0
    if not bl:
        lines += ["# nothing to fix: no failed check carried a fix", ""]
    for b in bl:
        p, answers = b.problem, ", ".join(b.tests)
        if b.commands:
            n_cmd += 1
            for f in b.commands:
                item = f"[{f.item}] " if f.item else ""
                lines += _comment(f"--- {item}on {f.where}: {f.what}")
                lines += _comment(f"answers: {answers}")
                if f.note:
                    lines += _comment(f"note: {f.note}")
                script = (" && ".join(f"{{ {c}; }}" for c in f.commands) if len(f.commands) > 1
                          else f.commands[0])
                if f.where == LAUNCHER:
                    lines.append(f"( {script} ) || ct_failed launcher $?")
                else:
                    lines.append(f"{prefix} {q(f.where)} {q(script)} || ct_failed {q(f.where)} $?")
        else:
            n_manual += 1
            item = f"[{p.item}] " if p.item else ""
            where = f" on {p.where}" if p.where else ""
            lines += _comment(f"--- {item}needs a person{where} (not run by this script): "
                              f"{p.facts.get('headline') or p.headline}")
            lines += _comment(f"answers: {answers}")
            for f in b.fixes:
                if f.what:
                    lines += _comment(f"fix: {f.what}")
            if p.fix:
                lines += _comment(f"fix: {p.fix}")
        lines.append("")
    lines.append('exit "$failed"')
    return "\n".join(lines) + "\n", n_cmd, n_manual


def write(path: Path, outcomes: Iterable[Red], ssh: Sequence[str], command_line: str = ""
          ) -> tuple[int, int]:
    text, n_cmd, n_manual = render(list(outcomes), ssh, command_line=command_line)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o755)
    tmp.replace(path)
    return n_cmd, n_manual


def review_line(script: tuple[Path, int, int] | None, cwd: Path) -> str:
    """The verdict's line on the fix script written (its path, its command and manual blocks):
    "review and run reports/fixes.sh (1 of its 2 blocks need a person), then pytest --lf"
    ("" with nothing in it); its path relative to `cwd` where it is under it."""
    if script is None or not script[1] + script[2]:
        return ""
    path, scripted, manual = script
    with contextlib.suppress(ValueError):
        path = path.relative_to(cwd)
    person = (f" ({manual} of its {scripted + manual} blocks need a person)" if manual else "")
    return f"review and run {path}{person}, then pytest --lf"
