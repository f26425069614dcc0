"""Runs a person repeats: `-n 2` (pytest-xdist) gives the same verdicts as one process without
probing twice, `--lf` after a fix reruns only what failed and logs in only where it must, and
`-k` picks a node or a pair by the names in the test ids."""

from __future__ import annotations

import json
import os
import subprocess
import time

from suite import PYTEST, REPO, SuiteResult, parse_junit, run_suite


def _summary(r: SuiteResult) -> dict:
    return json.loads((r.junit.parent / "summary.json").read_text())


def test_xdist_same_verdicts_no_double_probing(healthy_sim):
    healthy_sim.remove_authorized_key("node3", from_node="node1")
    one = run_suite(healthy_sim, "-m", "ssh or names", "-n", "0")
    two = run_suite(healthy_sim, "-m", "ssh or names", "-n", "2")
    assert one.failed == {"test_ssh_trust[node1->node3]"}, one.describe()
    assert one.properties["test_pdsh[node1->node3]"]["blocked_by"] == "test_ssh_trust[node1->node3]"
    assert two.outcomes == one.outcomes, two.describe()
    # a check blocked in a worker is blocked on the controller too (JUnit, JSON)
    assert two.properties["test_pdsh[node1->node3]"]["blocked_by"] == "test_ssh_trust[node1->node3]"
    s1, s2 = _summary(one), _summary(two)
    assert (s1["meta"]["xdist_workers"], s2["meta"]["xdist_workers"]) == (0, 2)
    assert "  node1->node3: public key refused" in two.output.splitlines()
    # the controller alone writes the reports, with every worker's results and facts
    assert two.output.count("cluster summary") == 1
    assert {t["test_id"] for t in s2["tests"]} == set(one.outcomes)
    red = {(a, b) for a, row in s2["trust"].items() for b, o in row.items() if o != "passed"}
    assert red == {("node1", "node3")}
    assert [n.get("reachable") for n in s2["nodes"]] == ["yes", "yes", "yes"]
    assert all(n.get("hostname") for n in s2["nodes"])
    # every probe ran once over all the workers: no more than in one process
    assert s2["meta"]["probes_run"] == s1["meta"]["probes_run"], (s1["meta"], s2["meta"])
    assert s2["meta"]["probes_shared"] > 0


def _pytest(sim, tmp, *args: str) -> tuple[SuiteResult, dict]:
    """The suite WITH pytest's cache provider (run_suite turns it off), cache under tmp."""
    junit = tmp / f"junit-{time.monotonic_ns()}.xml"
    argv = [*PYTEST, "--hostfile", str(sim.hostfile), "--ssh-config",
            str(sim.ssh_config), "-o", f"cache_dir={tmp / 'cache'}", f"--junitxml={junit}",
            "-q", "-rA", *args]
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                          errors="replace", timeout=600, check=False)
    r = SuiteResult(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start,
                    junit=junit)
    r.outcomes, r.messages, r.properties, r.classnames = parse_junit(junit)
    return r, json.loads(junit.with_name("summary.json").read_text())


def test_last_failed_reruns_only_the_failed_ids(healthy_sim, tmp_path):
    """--lf reruns the red and the check it blocked (pdsh's leg), and nothing else."""
    healthy_sim.remove_authorized_key("node3", from_node="node1")
    first, s1 = _pytest(healthy_sim, tmp_path, "-m", "ssh")
    assert first.failed == {"test_ssh_trust[node1->node3]"}, first.describe()
    assert first.outcomes["test_pdsh[node1->node3]"] == "skipped"
    assert s1["meta"]["logged_in"] == ["node1", "node2", "node3"]
    healthy_sim.restore()
    again, s2 = _pytest(healthy_sim, tmp_path, "-m", "ssh", "--lf")
    assert again.outcomes == {"test_ssh_trust[node1->node3]": "passed",
                              "test_pdsh[node1->node3]": "passed"}, \
        again.describe()
    # the launcher logged in only to the nodes these ids touch (pdsh runs from node1), once each
    assert s2["meta"]["logged_in"] == ["node1", "node3"]
    assert s2["meta"]["ssh_logins"] == 2


def _collected(sim, *args: str) -> set[str]:
    proc = subprocess.run(
        [*PYTEST, "--hostfile", str(sim.hostfile), "--ssh-config",
         str(sim.ssh_config), "-p", "no:cacheprovider", "--co", "-q", *args],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    return {line.split("::")[-1] for line in proc.stdout.splitlines() if "::" in line}


def test_k_selects_a_node_or_a_pair(sim):
    every = _collected(sim, "-m", "ssh or names or network")
    assert _collected(sim, "-m", "ssh or names or network", "-k", "node3") == {
        t for t in every if "node3" in t}
    assert _collected(sim, "-k", "ssh and node1->node2") == {"test_ssh_trust[node1->node2]",
                                                             "test_pdsh[node1->node2]"}
    assert _collected(sim, "-k", "test_ssh_trust[node2->node1]") == {"test_ssh_trust[node2->node1]"}
    assert _collected(sim, "-m", "names", "-k", "node1->node2") == {
        "test_resolves[node1->node2]", "test_resolve_fast[node1->node2]"}


def test_quick_deselects_the_long_phases(sim):
    quick = _collected(sim, "--quick")
    assert quick and not any(t.startswith(("test_allreduce", "test_train")) for t in quick)
    assert any(t.startswith("test_allreduce") for t in _collected(sim, "-m", "collective"))
