"""The README's own commands, run as it shows them (tests/readme_commands.py names these tests).

- `make demo`: a fresh 3-node simulated cluster, the whole checklist (all-reduces and training
  jobs included) against the launch of examples/train/: green, its last lines the verdict and
  the launch line; nothing of the sim left. About 2-3 minutes of both cores: marker `alone`.
- The developing commands: a 3-node sim brought up from the command line, the fast checklist
  against it, and down (about 20 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from paths import REPO

#: what `make demo` launches (the Makefile's DEMO_LAUNCH, its state directory .sim/demo)
DEMO_LAUNCH = ("deepspeed --hostfile .sim/demo/hostfile examples/train/train.py "
               "--deepspeed_config examples/train/ds_config.json")


def _env() -> dict[str, str]:
    """This test run's environment, less what would make a command think it is a test worker."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTEST_", "CT_SUITE"))}


def _failures(junit: Path) -> list[str]:
    root = ET.parse(junit).getroot()
    return [str(case.get("name")) for case in root.iter("testcase")
            if case.find("failure") is not None or case.find("error") is not None]


@pytest.mark.alone  # the whole checklist, its all-reduces and training jobs: both cores
def test_make_demo_is_green_and_ends_with_the_verdict_and_the_launch_line():
    proc = subprocess.run(["make", "demo"], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=1500, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    last = proc.stdout.splitlines()[-12:]
    assert any("verdict: the launch will work" in ln for ln in last), last
    assert f"The launch will work on 3 of 3 nodes: {DEMO_LAUNCH}" in last, last
    assert "SKIPPED" not in out and "PytestWarning" not in out
    junit = REPO / "reports" / "junit.xml"
    assert _failures(junit) == []
    names = {str(c.get("name")) for c in ET.parse(junit).getroot().iter("testcase")}
    assert {"test_train_multi_node", "test_allreduce", "test_launch_files[node3]"} <= names
    assert_down(REPO / ".sim" / "demo")


def assert_down(state: Path) -> None:
    """The sim of `state` says it is down, and none of its namespaces is left."""
    info = json.loads((state / "cluster.json").read_text())
    assert info["status"] == "down", info
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    assert not [ns for ns in left.stdout.split() if ns.startswith(f"{info['prefix']}-")]


def test_the_developing_commands_bring_up_a_cluster_check_it_and_leave_nothing(tmp_path):
    """`python -m fixtures.sim up --nodes 3 --state DIR`, the fast checklist against it with
    its hostfile and ssh config, then `down`: green, and the sim's own record says down."""
    state = tmp_path / "dev"
    python = str(REPO / ".venv" / "bin" / "python")
    up = subprocess.run([python, "-m", "fixtures.sim", "up", "--nodes", "3", "--state",
                         str(state)], cwd=REPO, env=_env(), capture_output=True, text=True,
                        timeout=300, check=False)
    try:
        assert up.returncode == 0 and "up: 3 nodes" in up.stdout, up.stdout + up.stderr
        junit = tmp_path / "junit.xml"
        run = subprocess.run(
            [str(Path(sys.executable).parent / "pytest"), "--hostfile", f"{state}/hostfile",
             "--ssh-config", f"{state}/ssh_config", "-m", "not collective and not training",
             "-p", "no:cacheprovider", f"--junitxml={junit}"],
            cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600, check=False)
        assert run.returncode == 0, run.stdout[-4000:]
        assert _failures(junit) == []
        assert "The launch will work on 3 of 3 nodes" in run.stdout
    finally:
        down = subprocess.run([python, "-m", "fixtures.sim", "down", "--state", str(state)],
                              cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300,
                              check=False)
    assert down.returncode == 0 and "down in" in down.stdout, down.stdout + down.stderr
    assert_down(state)
