"""The checks are shipped as section modules that the plugin collects, and `cluster-tests` runs
them from any directory, the same as `pytest` from the repository (same ids)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from paths import PACKAGE, REPO

from cluster_tests.core import reparse

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
    core/reparse the rootdir would be the hostfile's folder, the ini lost (-ra, timeout,
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


def _run(form: list[str], cwd: Path, out: Path) -> tuple[list[str], dict[str, object]]:
    """A real run of the hostfile checks on nodes that do not resolve (red at once, no network):
    (its output, timings and report paths left out; what its reports say)."""
    got = subprocess.run([sys.executable, "-m", "pytest", "-m", "hostfile", "-p",
                          "no:cacheprovider", *form, f"--junitxml={out}/junit.xml",
                          "--timeout-connect", "2"], check=False, cwd=cwd,
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 1, got.stdout + got.stderr
    text = (got.stdout + got.stderr).replace(str(out), "OUT")
    if out.is_relative_to(cwd):  # (the verdict names the fix script relative to cwd)
        text = text.replace(str(out.relative_to(cwd)), "OUT")
    lines = [re.sub(r" in [0-9.]+s( \(.*\))? =+$", "", line) for line in text.splitlines()
             if not line.startswith(("platform ", "cachedir"))]
    cases = ET.parse(out / "junit.xml").getroot().iter("testcase")
    junit = {(c.get("classname"), c.get("name")): sorted(
        (p.get("name"), p.get("value")) for p in c.iter("property")) for c in cases}
    command = next(line for line in (out / "fixes.sh").read_text().splitlines()
                   if line.startswith("# run: "))
    summary = json.loads((out / "summary.json").read_text())
    return lines, {"junit": junit, "command": command, "causes": summary["causes"]}


@pytest.mark.parametrize("where", ["repo", "elsewhere"])
def test_hostfile_flag_and_its_value_run_as_the_equals_form(tmp_path: Path, where: str) -> None:
    """`pytest --hostfile /abs/path` behaves as `pytest --hostfile=/abs/path`, which pytest's
    first parse cannot misread (core/reparse runs the session again in that form), from the
    repository (its ini: -ra, junit_family xunit1, the timeout) and from elsewhere (no ini):
    the same header, summary, short test summary, JUnit properties and reports; the fix script
    names the command as typed."""
    hostfile = tmp_path / "nodes" / "hostfile"
    hostfile.parent.mkdir()
    hostfile.write_text("ct-no-such-node-1.invalid slots=2\nct-no-such-node-2.invalid slots=2\n")
    cwd = REPO if where == "repo" else tmp_path
    split, split_reports = _run(["--hostfile", str(hostfile)], cwd, tmp_path / "split")
    equals, equals_reports = _run([f"--hostfile={hostfile}"], cwd, tmp_path / "equals")
    assert split == equals
    assert {**split_reports, "command": ""} == {**equals_reports, "command": ""}
    assert str(split_reports["command"]).startswith(
        f"# run: pytest -m hostfile -p no:cacheprovider --hostfile {hostfile} --junitxml=")
    text = "\n".join(split)
    assert "cluster summary" in text and "verdict: causes and launch now" in text
    junit = split_reports["junit"]
    assert isinstance(junit, dict)
    node_props = [dict(props) for (_, name), props in junit.items()
                  if name.startswith("test_hostname_matches[")]
    assert node_props and all(p.get("node") for p in node_props), junit
    if where == "repo":
        assert f"rootdir: {REPO}" in text and "configfile: pyproject.toml" in text
        assert "timeout: 600.0s" in text  # the ini's
        assert "PytestWarning" not in text
    else:
        assert f"rootdir: {tmp_path}" in text and "configfile" not in text
        assert "PytestWarning" not in text  # no junit_family: record_property warns of none
    # under the ini's -ra as under pytest's -rfE: a check that does not apply is counted as
    # such, never a SKIPPED line of its own
    assert "SKIPPED" not in text and " not applicable" in text


@pytest.mark.parametrize(("typed", "joined"), [
    (["--hostfile", "{d}/hostfile", "-m", "ssh"], ["--hostfile={d}/hostfile", "-m", "ssh"]),
    (["--hostfile={d}/hostfile"], None),  # one token already
    (["--hostfile", "{d}/absent"], None),  # pytest's first parse ignores a path that is not
    (["--ssh-config", "ssh_config", "--quick", "hostfile"], ["--ssh-config=ssh_config",
                                                            "--quick", "hostfile"]),
    (["-k", "hostfile", "--", "--hostfile", "{d}/hostfile"], None),
    (["--pairs", "ring", "--output-dir", "{d}"], ["--pairs", "ring", "--output-dir={d}"]),
])
def test_joined_takes_only_the_suites_options_with_a_path_for_a_value(
        tmp_path: Path, typed: list[str], joined: list[str] | None) -> None:
    (tmp_path / "hostfile").write_text("node1 slots=1\n")
    (tmp_path / "ssh_config").write_text("")
    fill = [a.replace("{d}", str(tmp_path)) for a in typed]
    want = None if joined is None else [a.replace("{d}", str(tmp_path)) for a in joined]
    assert reparse.joined(fill, tmp_path) == want


def test_what_follows_the_double_dash_is_the_launch_command() -> None:
    from cluster_tests import cli

    assert cli.pytest_args(["-m", "ssh", "--", "deepspeed", "--hostfile", "h", "t.py", "--x",
                            "a b"]) == ["-p", cli.PLUGIN, "-m", "ssh",
                                        "--launch=deepspeed --hostfile h t.py --x 'a b'"]
    assert cli.pytest_args(["history"]) == ["-p", cli.PLUGIN, "--history-show"]


def test_the_launch_command_names_the_hostfile_and_the_header_says_the_launch(
        tmp_path: Path) -> None:
    """`cluster-tests -- deepspeed --hostfile H ...` from a project directory: the hostfile is
    the launch's (relative to that directory), the header states the command, the launch
    directory (the current one) and the .deepspeed_env read there; the suite's own options
    that disagree with the command are refused."""
    (tmp_path / "hostfile").write_text(HOSTFILE.read_text())
    (tmp_path / ".deepspeed_env").write_text("NCCL_DEBUG=INFO\n")
    launch = ["--", "deepspeed", "--hostfile", "hostfile", "train.py", "--lr", "1"]
    got = subprocess.run([str(CLI), "--collect-only", "-p", "no:cacheprovider", *launch],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert got.returncode == 0, got.stdout + got.stderr
    assert f"nodes from hostfile {tmp_path / 'hostfile'}" in got.stdout
    assert "launch: deepspeed --hostfile hostfile train.py --lr 1" in got.stdout
    assert (f"launch directory: {tmp_path}; .deepspeed_env read here: "
            f"{tmp_path / '.deepspeed_env'}") in got.stdout
    for mine, said in ((["--master-port", "29700"], "--master-port 29700 and"),
                       (["--hostfile", str(HOSTFILE)], "disagree")):
        refused = subprocess.run(
            [str(CLI), "--collect-only", "-p", "no:cacheprovider", *mine, "--", "deepspeed",
             "--hostfile", "hostfile", "--master_port", "29600", "train.py"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
        assert refused.returncode == 4 and said in refused.stderr, refused.stderr
