"""The checks are shipped as section modules that the plugin collects, and `cluster-tests` runs
them from any directory, the same as `pytest` from the repository (same ids)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import PACKAGE, REPO

HOSTFILE = REPO / "configs" / "hostfile"
CLI = Path(sys.executable).parent / "cluster-tests"


def _ids(out: str) -> list[str]:
    return [line.split("::", 1)[1] for line in out.splitlines() if "::" in line]


def _collect(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*argv, "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--hostfile", str(HOSTFILE)], check=False, cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


@pytest.fixture(scope="module")
def repo_ids() -> list[str]:
    got = _collect([sys.executable, "-m", "pytest"], REPO)
    assert got.returncode == 0, got.stdout + got.stderr
    ids = _ids(got.stdout)
    assert "test_ssh_trust[node1->node2]" in ids and "test_hostfile_syntax" in ids
    return ids


@pytest.mark.parametrize("autoload", [True, False])
def test_cluster_tests_command_runs_the_checklist_anywhere(repo_ids: list[str], tmp_path: Path,
                                                           autoload: bool) -> None:
    # a directory with a test file of its own: the command runs the checklist, not that file
    (tmp_path / "test_mine.py").write_text("def test_mine():\n    pass\n")
    env = {} if autoload else {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    got = _collect([str(CLI)], tmp_path, **env)
    assert got.returncode == 0, got.stdout + got.stderr
    assert _ids(got.stdout) == repo_ids
    assert "test_mine" not in got.stdout
    assert "warning" not in got.stdout.lower(), got.stdout


def test_check_modules_are_not_test_files() -> None:
    """Nothing in the package looks like a test file to pytest, an IDE or coverage."""
    assert not list(PACKAGE.rglob("test_*.py")) and not list(PACKAGE.rglob("*_test.py"))
    # without the plugin, pytest finds no test in them
    got = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "no:cacheprovider", "-p", "no:cluster_tests",
                          str(PACKAGE / "checks")], check=False, cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert "no tests collected" in got.stdout, got.stdout + got.stderr


@pytest.mark.parametrize("equals_form", [False, True])
def test_hostfile_outside_the_repo_keeps_its_rootdir(tmp_path: Path, equals_form: bool) -> None:
    """`pytest --hostfile /elsewhere/hostfile` from the repository: pytest finds its rootdir
    before our option is known and takes the hostfile for a test path (PITFALLS 3); without
    core/rootdir_fix the rootdir would be the hostfile's folder, the ini lost (-ra, timeout,
    junit_family), the ids `hostfile.py::...` and the cache written beside the hostfile."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(HOSTFILE.read_text())
    form = [f"--hostfile={hostfile}"] if equals_form else ["--hostfile", str(hostfile)]
    got = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-m", "hostfile",
                          "-p", "no:cacheprovider", *form], check=False, cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stdout + got.stderr
    assert f"rootdir: {REPO}" in got.stdout and "configfile: pyproject.toml" in got.stdout
    assert "<Module hostfile.py>" in got.stdout, got.stdout
    ids = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "hostfile",
                          "-p", "no:cacheprovider", *form], check=False, cwd=REPO,
                         capture_output=True, text=True, timeout=120).stdout
    assert "cluster_tests/checks/hostfile.py::test_hostfile_syntax" in ids.splitlines(), ids
