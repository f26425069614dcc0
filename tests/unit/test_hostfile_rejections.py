"""Every kind of hostfile DeepSpeed 0.19's `_parse_hostfile` rejects ends the suite in H1's red
naming the line (or a one-line usage error), never a pytest INTERNALERROR: each kind alone in a
file and mixed with good lines.  No cluster is needed: only the H section runs, and names that
do not resolve fail fast."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO

from cluster_tests.judge.hostfile import hostparse as hf

GOOD = "good-a slots=1\ngood-b slots=1\n"

#: kind -> (bad line(s), text that H1 or the usage error must show). What DeepSpeed itself does
#: with the line is asserted against its own parser in test_deepspeed_rejects_it.
KINDS = {
    "no slots": ("node1\n", "line"),
    "slots not a number": ("node1 slots=x\n", "not a number"),
    "slots misspelt": ("node1 slot=2\n", "node1 slot=2"),
    "no host": ("slots=2\n", "slots=2"),
    "negative slots": ("node1 slots=-1\n", "node1 slots=-1"),
    "host twice": ("node1 slots=1\nnode1 slots=2\n", "already on line"),
}


def _run(path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--hostfile", str(path), "-m", "hostfile", "-q",
         "-p", "no:cacheprovider", "--timeout-connect", "1", "--junitxml", str(path) + ".xml"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("kind", list(KINDS))
def test_deepspeed_rejects_it(kind):
    runner = pytest.importorskip("deepspeed.launcher.runner")
    bad, _ = KINDS[kind]
    for text in (bad, GOOD + bad):
        with pytest.raises(ValueError):
            runner._parse_hostfile(text.splitlines(keepends=True))
        assert not hf.parse_hostfile_text(text, "h").deepspeed_accepts


@pytest.mark.parametrize("mixed", [False, True], ids=["alone", "mixed"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_h1_red_names_the_line_never_a_crash(tmp_path, kind, mixed):
    bad, said = KINDS[kind]
    text = (GOOD + bad) if mixed else bad
    path = tmp_path / "hostfile"
    path.write_text(text)
    proc = _run(path)
    out = proc.stdout + proc.stderr
    assert "INTERNALERROR" not in out and "Traceback" not in out, out[-3000:]
    assert proc.returncode in (1, 4), out[-3000:]  # tests failed / usage error
    if proc.returncode == 1:
        assert "FAILED cluster_tests/checks/hostfile.py::test_hostfile_syntax" in out, out[-3000:]
        lineno = len(text.splitlines())
        assert f"{path}:{lineno}:" in out or f"{path}: deepspeed" in out, out[-3000:]
        assert said in out, out[-3000:]


def test_only_comments_is_a_usage_error(tmp_path):
    path = tmp_path / "hostfile"
    path.write_text("# nothing here\n\n")
    proc = _run(path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "has no hosts, only comments and blank lines" in proc.stdout + proc.stderr
