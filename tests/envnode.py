"""Section E's node scripts run here as a node runs them, for the judges' unit tests
(tests/unit/test_judge_envvars.py, test_judge_launchlegs.py, test_judge_jit.py): envprobe.py's
sections, and the rehearsal's stand-in for the launch (node/rehearse.py), with this machine's
interpreter, torch and deepspeed. A run may see `read_only` as a read-only mount (in a mount
namespace of its own: root writes anywhere else)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from cluster_tests import node
from cluster_tests.core.cluster import BOOTSTRAP, PROBE_MARK

REHEARSAL_MARK = "CT_REHEARSAL:"


def _argv(argv: list[str], read_only: Path | None) -> list[str]:
    if read_only is None:
        return argv
    # (the tools by their paths here: the run's own PATH may be one that finds nothing)
    mount, sh = shutil.which("mount"), shutil.which("sh")
    ro = f"{mount} --bind {read_only} {read_only} && {mount} -o remount,bind,ro {read_only}"
    return [str(shutil.which("unshare")), "--mount", "--propagation", "private", str(sh), "-c",
            f'{ro} && exec "$@"', "sh", *argv]


def _run(argv: list[str], stdin: bytes | None, cwd: Path | None,
         env: Mapping[str, str] | None, read_only: Path | None) -> str:
    proc = subprocess.run(_argv(argv, read_only), input=stdin, capture_output=True, timeout=300,
                          check=True, cwd=cwd, env={**os.environ, **(env or {})})
    return proc.stdout.decode()


def last(output: str, mark: str) -> dict:
    """The JSON of the last line of `output` that starts with `mark`."""
    lines = [ln for ln in output.splitlines() if ln.startswith(mark)]
    assert lines, output[-2000:]
    return json.loads(lines[-1][len(mark):])


def envprobe(section: str, *, cwd: Path | None = None, env: Mapping[str, str] | None = None,
             read_only: Path | None = None, **params: object) -> object:
    """envprobe.py's answer for `section`."""
    out = _run([sys.executable, "-c", BOOTSTRAP, json.dumps({"sections": [section], **params})],
               node.source("envprobe.py"), cwd, env, read_only)
    return last(out, PROBE_MARK)[section]


def rehearse(cwd: Path, *, env: Mapping[str, str] | None = None,
             read_only: Path | None = None) -> str:
    """What node/rehearse.py prints where the launch would run `deepspeed.launcher.launch`, in
    `cwd` (its `CT_STEP:` lines, then its `CT_REHEARSAL:` report)."""
    return _run([sys.executable, "-u", "-c", node.source("rehearse.py").decode()], None, cwd,
                env, read_only)
