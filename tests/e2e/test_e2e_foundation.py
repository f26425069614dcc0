"""The suite end to end on the simulated cluster: green when healthy, red with the right ids."""

from __future__ import annotations

import json
import re

from suite import FAST, run_suite


def test_healthy_cluster_is_green(healthy_fast_run):
    """Cost: none of its own (it reads the shared healthy fast-checklist run, conftest.py)."""
    result = healthy_fast_run
    assert result.returncode == 0, result.describe()
    assert "test_login[node1]" in result.passed
    assert "test_ssh_trust[node3->node3]" in result.passed
    assert "test_hostfile_syntax" in result.passed
    assert len(result.passed) > 40


def test_stopped_sshd_reds_exactly_that_node(healthy_sim):
    healthy_sim.stop_sshd("node3")
    result = run_suite(healthy_sim, *FAST)
    assert result.returncode == 1
    assert "connection refused" in result.message("test_login[node3]")
    assert "systemctl start ssh" in result.message("test_login[node3]")
    # one red; everything that needs node3 is blocked by it (pdsh legs too), nothing else is
    assert result.failed == {"test_login[node3]"}, result.describe()
    by = {t: p["blocked_by"] for t, p in result.properties.items() if "blocked_by" in p}
    assert all("node3" in t and root == "test_login[node3]" for t, root in by.items()), by
    assert ({f"test_ssh_trust[node{i}->node3]" for i in (1, 2)}
            | {"test_pdsh[node1->node3]"}) <= set(by)
    assert "test_ssh_trust[node1->node2]" in result.passed
    assert ("blocked by test_login[node3]: node3 refuses connections (sshd not running)"
            in result.message("test_hostname_matches[node3]"))
    # a dead node costs one connect attempt, not one per test (printed; bench/ measures speed)
    print(f"run took {result.seconds:.1f}s with a dead node")
    # the node table says why in words
    nodes = json.loads((result.junit.parent / "summary.json").read_text())["nodes"]
    assert [n["reachable"] for n in nodes if n["name"] == "node3"] == ["NO: connection refused"]


def test_hostfile_given_both_ways_and_anywhere(healthy_sim, tmp_path):
    hostfile = tmp_path / "elsewhere" / "my hostfile"
    hostfile.parent.mkdir()
    hostfile.write_text(healthy_sim.hostfile.read_text())
    for equals_form in (False, True):
        result = run_suite(healthy_sim, "-m", "hostfile", hostfile=hostfile,
                           equals_form=equals_form)
        assert result.returncode == 0, result.describe()
        assert result.passed >= {"test_hostfile_syntax", "test_hostname_matches[node1]"}
        # the rootdir (and so the test names, testpaths and markers) is the repository's,
        # not the hostfile's folder (pytest pre-parses unknown option values as paths)
        assert result.classnames["test_hostfile_syntax"] == "cluster_tests.checks.hostfile"
        pairs = zip(result.classnames.values(), result.outcomes.values(), strict=False)
        assert not any(o == "passed" and "tests/" in c for c, o in pairs)


def test_bad_hostfile_is_a_usage_error(healthy_sim, tmp_path):
    cases = {
        "missing": None,
        "empty": b"",
        "binary": b"node1 slots=1\x00\x01\x02",
    }
    for name, data in cases.items():
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        result = run_suite(healthy_sim, hostfile=path)
        assert result.returncode == 4, (name, result.output)
        assert "Traceback" not in result.output, result.output
        assert re.search(r"ERROR: hostfile .*" + re.escape(str(path)), result.output), result.output


def test_some_bad_lines_still_run(healthy_sim, tmp_path):
    path = tmp_path / "hostfile"
    path.write_text("node1 slots=1\nnode2 slots=x\nnode3 slots=1 \n")
    result = run_suite(healthy_sim, "-m", "hostfile or ssh", hostfile=path)
    assert "test_hostfile_syntax" in result.failed
    assert ":2:" in result.message("test_hostfile_syntax")
    assert "test_login[node1]" in result.passed and "test_login[node3]" in result.passed
    assert not any("node2" in t for t in result.outcomes), "a bad line must not become a node"
