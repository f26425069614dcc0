"""One import per node (issue 24): the rehearsal's report carries E3's versions, read from the
import it already made, and they are exactly what envprobe.py's `versions` section reports (the
probe E3 falls back on where the rehearsal did not run), for real with this machine's
interpreter, torch and deepspeed."""

from __future__ import annotations

import json
import subprocess
import sys

from cluster_tests import node

REHEARSAL_MARK = "CT_REHEARSAL:"
PROBE_MARK = "CT_PROBE_JSON:"


def _last(text: str, mark: str) -> dict:
    lines = [ln for ln in text.splitlines() if ln.startswith(mark)]
    assert lines, text[-2000:]
    return json.loads(lines[-1][len(mark):])


def test_rehearsal_reports_the_versions_the_e3_probe_reports(tmp_path):
    rehearsed = subprocess.run([sys.executable, "-u", "-c", node.source("rehearse.py").decode()],
                               capture_output=True, text=True, check=False, cwd=tmp_path,
                               timeout=300)
    probed = subprocess.run([sys.executable, "-c", node.source("envprobe.py").decode(),
                             json.dumps({"sections": ["versions"]})],
                            capture_output=True, text=True, check=False, cwd=tmp_path,
                            timeout=300)
    mine = _last(rehearsed.stdout, REHEARSAL_MARK)["versions"]
    theirs = _last(probed.stdout, PROBE_MARK)["versions"]
    assert mine == theirs
    assert mine["torch"] and mine["deepspeed"] and mine["torch_error"] is None


def test_a_torch_that_does_not_import_is_reported_as_e3_reports_it(tmp_path):
    """A `torch` that raises on import (a stray copy shadowing the real one, in the launch
    directory): no versions of torch, and the error, from the one import."""
    (tmp_path / "torch.py").write_text("raise ImportError('broken torch build')\n")
    rehearsed = subprocess.run([sys.executable, "-u", "-c", node.source("rehearse.py").decode()],
                               capture_output=True, text=True, check=False, cwd=tmp_path,
                               timeout=300)
    v = _last(rehearsed.stdout, REHEARSAL_MARK)["versions"]
    assert v["torch"] is None and v["cuda"] is None
    assert "broken torch build" in v["torch_error"]


def test_the_rehearsal_tells_the_installed_package_from_a_stray_copy(tmp_path):
    """E3's `owned`: whether the module imported is a file its distribution's RECORD lists (read
    as one line of RECORD, not as 16,000 path objects). The real torch and deepspeed of this
    interpreter are; a `torch` package in the launch directory, which shadows it, is not."""
    def packages(cwd):
        run = subprocess.run([sys.executable, "-u", "-c", node.source("rehearse.py").decode()],
                             capture_output=True, text=True, check=False, cwd=cwd, timeout=300)
        return _last(run.stdout, REHEARSAL_MARK)["packages"]

    real = packages(tmp_path)
    assert real["torch"]["owned"] is True and real["deepspeed"]["owned"] is True, real
    stray = tmp_path / "stray"
    (stray / "torch").mkdir(parents=True)
    (stray / "torch" / "__init__.py").write_text("__version__ = '0.0.1'\n")
    shadowed = packages(stray)["torch"]
    assert shadowed["file"] == str(stray / "torch" / "__init__.py")
    assert shadowed["owned"] is False and shadowed["version"] == "0.0.1", shadowed
