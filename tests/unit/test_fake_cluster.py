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


def _run(tmp_path: Path, pairs: str, extra: tuple[str, ...] = (), dead: int = 0,
         nodes: int = NODES, block: str = "", flaky: str = "", path: str = ""
         ) -> tuple[subprocess.CompletedProcess[str], ET.Element]:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"node{i} slots=2\n" for i in range(1, nodes + 1)))
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "bench"), path]))
    env["FAKE_DEAD"] = str(dead)
    env["FAKE_BLOCK"] = block
    env["FAKE_FLAKY"] = flaky
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
    # and the command leaves (core/leave.leave: without freeing its objects one by one) with the
    # session's status, after every other exit handler, a plugin's included
    (tmp_path / "late_exit.py").write_text(
        "import atexit, pathlib\n"
        "def pytest_configure(config):\n"
        "    atexit.register(pathlib.Path('exit-handler-ran').write_text, 'yes')\n")
    proc, root = _run(tmp_path, "ring", dead=4, extra=("-p", "late_exit"), path=str(tmp_path))
    failed = sorted(c.get("name") or "" for c in _cases(root)
                    if c.find("failure") is not None or c.find("error") is not None)
    assert failed == ["test_login[node4]", "test_login[node8]"], proc.stdout[-4000:]
    causes = json.loads((tmp_path / "summary.json").read_text())["causes"]
    assert len(causes) == 2, causes
    assert proc.returncode == 1 and (tmp_path / "exit-handler-ran").read_text() == "yes"
    last = proc.stdout.rstrip().splitlines()[-1]  # what it printed last came out whole
    assert last.startswith("2 failed, ") and last.endswith("s"), proc.stdout[-300:]


def _kinds(root: ET.Element) -> dict[str, tuple[str, dict[str, str]]]:
    out = {}
    for case in _cases(root):
        props = {p.get("name") or "": p.get("value") or "" for p in case.iter("property")}
        kind = next((c.tag for c in case if c.tag in ("failure", "skipped", "error")), "passed")
        out[case.get("name") or ""] = (kind, props)
    return out


def test_beyond_the_all_pairs_limit_one_blocked_pair_is_named_under_both_nodes(tmp_path: Path
                                                                             ) -> None:
    """40 nodes, --pairs auto (all pairs only up to 32): F1/F3 measure every ordered pair and
    report per node. One pair dropped on the way (node7 -> node35's high ports: FAKE_BLOCK) is
    one red, on *->node35, naming node7; node7->* is blocked naming that red; nothing else is
    red; and a -k that leaves the red out makes node7->* its own red."""
    from cluster_tests.core.pairs import AUTO_ALL_MAX

    nodes = 40
    assert nodes > AUTO_ALL_MAX
    proc, root = _run(tmp_path, "auto", nodes=nodes, block="node7>node35")
    got = _kinds(root)
    reds = sorted(n for n, (kind, _) in got.items() if kind in ("failure", "error"))
    assert reds == ["test_high_ports[*->node35]"], proc.stdout[-4000:]
    problem = json.loads(got["test_high_ports[*->node35]"][1]["problem"])
    assert problem["nodes"] == ["node7", "node35"], problem
    assert "node35 drops new TCP connections on high ports from node7" in problem["message"]
    assert got["test_high_ports[node7->*]"][0] == "skipped"
    assert got["test_high_ports[node7->*]"][1]["blocked_by"] == "test_high_ports[*->node35]"
    # every node's two items, for F1 and F3; no pair items of theirs
    for check in ("test_high_ports", "test_reachable"):
        mine = [n for n in got if n.startswith(check + "[")]
        assert len(mine) == 2 * nodes, (check, len(mine))
        assert f"{check}[node35->*]" in mine and f"{check}[*->node35]" in mine
    assert "test_ssh_trust[node1->node2]" in got and "test_ssh_trust[node1->node5]" not in got
    pairs = json.loads((tmp_path / "summary.json").read_text())["meta"]["pairs"]
    assert pairs["mode"] == "matrix" and pairs["requested"] == "auto", pairs
    assert pairs["per_node"] is True
    # the full matrix in the JSON: a row of marks per node, and every pair's RTT but the dropped
    matrix = json.loads((tmp_path / "summary.json").read_text())["port_matrix"]
    row = matrix["rows"]["test_high_ports"]["node7"]
    assert row == "." * 34 + "x" + "." * 5 and matrix["order"][34] == "node35", matrix
    assert sum(r.count("x") for r in matrix["rows"]["test_high_ports"].values()) == 1
    rtt = [row.split() for row in matrix["rtt_ms_rows"].values()]
    assert len(rtt) == nodes and sum(v != "-" for r in rtt for v in r) == nodes * nodes - 1
    assert matrix["rtt_ms_rows"]["node7"].split()[34] == "-"  # node7 -> node35: no RTT
    # F1 warns once that node7 -> node35's RTT was not measured (sshd answers, no high port)
    assert proc.stdout.count("node7 -> node35: reaches node35:22 but none of its high ports") == 1

    # the red's item left out by -k: node7's own item is the red, naming the pair
    (tmp_path / "k").mkdir()
    proc, root = _run(tmp_path / "k", "auto", ("-k", "high_ports and node7"), nodes=nodes,
                      block="node7>node35")
    got = _kinds(root)
    assert sorted(got) == ["test_high_ports[*->node7]", "test_high_ports[node7->*]"], sorted(got)
    assert got["test_high_ports[*->node7]"][0] == "passed"
    assert got["test_high_ports[node7->*]"][0] == "failure", proc.stdout[-3000:]
    assert "node7 -> node35" in got["test_high_ports[node7->*]"][1]["problem"]


def test_a_connect_that_times_out_once_is_tried_again_not_blamed(tmp_path: Path) -> None:
    """Confirm before blaming: node7 -> node8's high ports and ssh time out on the first try
    only (a SYN lost once, FAKE_FLAKY). The pair is tried again at once and answers: no red, no
    block, one warning naming the pair. (test_beyond_the_all_pairs_limit_one_blocked_pair_is_
    named_under_both_nodes: a drop that stays is still red after its second try.)"""
    proc, root = _run(tmp_path, "auto", nodes=40, flaky="node7>node8")
    got = _kinds(root)
    reds = sorted(n for n, (kind, _) in got.items() if kind in ("failure", "error"))
    assert not reds, proc.stdout[-4000:]
    assert got["test_ssh_trust[node7->node8]"][0] == "passed"
    assert got["test_high_ports[node7->*]"][0] == "passed"
    assert got["test_high_ports[*->node8]"][0] == "passed"
    assert proc.stdout.count("node7 -> node8: a connection to node8's high ports timed out, "
                             "and answered when tried again") == 1, proc.stdout[-4000:]


def test_beyond_the_all_pairs_limit_a_dead_node_blocks_its_own_items_only(tmp_path: Path
                                                                        ) -> None:
    """40 nodes (--pairs matrix), every 10th dead (FAKE_DEAD=10): one red per dead node (its
    login); its own F1/F3 items are blocked by it; every live node's items pass, leaving the
    dead peers out (marked 's' in their rows), instead of every item being blocked."""
    nodes, dead = 40, ("node10", "node20", "node30", "node40")
    proc, root = _run(tmp_path, "auto", nodes=nodes, dead=10)
    got = _kinds(root)
    reds = sorted(n for n, (kind, _) in got.items() if kind in ("failure", "error"))
    assert reds == sorted(f"test_login[{n}]" for n in dead), proc.stdout[-4000:]
    for check in ("test_high_ports", "test_reachable"):
        for n in dead:
            for item in (f"{check}[{n}->*]", f"{check}[*->{n}]"):
                assert got[item][0] == "skipped", (item, got[item])
                assert got[item][1]["blocked_by"] == f"test_login[{n}]", (item, got[item])
        live = [n for n in (f"node{i}" for i in range(1, nodes + 1)) if n not in dead]
        for n in live:
            assert got[f"{check}[{n}->*]"][0] == "passed", (check, n, got[f"{check}[{n}->*]"])
            assert got[f"{check}[*->{n}]"][0] == "passed", (check, n, got[f"{check}[*->{n}]"])
    row = json.loads((tmp_path / "summary.json").read_text())["port_matrix"]["rows"][
        "test_high_ports"]["node1"]
    assert [i + 1 for i, c in enumerate(row) if c == "s"] == [10, 20, 30, 40], row
    assert set(row) == {".", "s"}
