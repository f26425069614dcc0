"""The benchmarks' in-process fake cluster (bench/fake_transport.py) stays a healthy cluster:
every check the collection bench runs passes or skips for a reason of its own (no accelerator,
no RDMA, no --output-dir...), never fails and never is blocked.  Without this, a new check whose
facts the fake does not answer turns the bench (bench/collection.py) into a measurement of
thousands of reds instead of a healthy run.

The fake answers probes from facts recorded on the simulated cluster (bench/fake_facts.json,
`python bench/fake_transport.py --record STATE_DIR`); when this test fails after a new check or
probe section, re-record them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from paths import REPO

NODES = 8


def _run(tmp_path: Path, pairs: str, extra: tuple[str, ...] = (),
         dead: int = 0) -> tuple[subprocess.CompletedProcess[str], ET.Element]:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"node{i} slots=2\n" for i in range(1, NODES + 1)))
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = str(REPO / "bench")
    env["FAKE_DEAD"] = str(dead)
    junit = tmp_path / "junit.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "fake_transport", "-p", "no:cacheprovider",
         "--hostfile", str(hostfile), "-m", "not collective and not training", "--pairs", pairs,
         "-q", "-rfs", "--junitxml", str(junit), *extra, str(REPO / "cluster_tests")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert junit.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, ET.parse(junit).getroot()


def _cases(root: ET.Element) -> list[ET.Element]:
    return list(root.iter("testcase"))


def test_healthy_fake_cluster_is_green(tmp_path: Path) -> None:
    proc, root = _run(tmp_path, "ring")
    cases = _cases(root)
    failed = [c.get("name") for c in cases
              if c.find("failure") is not None or c.find("error") is not None]
    assert not failed, (f"{len(failed)} reds on a healthy fake cluster: "
                        f"{failed[:20]}\n{proc.stdout[-4000:]}")
    blocked = [c.get("name") for c in cases
               if (s := c.find("skipped")) is not None and "blocked by" in (s.get("message") or "")]
    assert not blocked, f"blocked on a healthy fake cluster: {blocked[:20]}"
    assert proc.returncode == 0, proc.stdout[-4000:]
    passed = [c for c in cases if all(c.find(k) is None for k in ("failure", "error", "skipped"))]
    # every per-node and per-pair check that can pass on a CPU-only node did: at least one item
    # per node of each of SSH login, F1 (ports) and the rehearsal
    for check in ("test_login[", "test_high_ports[", "test_launch_rehearsal["):
        assert sum(1 for c in passed if (c.get("name") or "").startswith(check)) >= NODES, check
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary.get("causes", []) == [], summary.get("causes")


def test_dead_nodes_are_one_red_each(tmp_path: Path) -> None:
    """The bench's dead-node mode (FAKE_DEAD=4: node4 and node8 time out) gives what a real run
    with two powered-off nodes gives: one red per dead node (its login), nothing else red."""
    proc, root = _run(tmp_path, "ring", dead=4)
    failed = sorted(c.get("name") or "" for c in _cases(root)
                    if c.find("failure") is not None or c.find("error") is not None)
    assert failed == ["test_login[node4]", "test_login[node8]"], proc.stdout[-4000:]
    causes = json.loads((tmp_path / "summary.json").read_text())["causes"]
    assert len(causes) == 2, causes
