"""What people read: the terminal summary and the JSON summary show exactly the red cell."""

from __future__ import annotations

import json

from suite import run_suite

from cluster_tests.judge.problem import PROPERTY, Problem
from cluster_tests.judge.ssh import sshfail
from cluster_tests.report.summary import Outcome, Recorder


def test_asymmetric_fault_is_exactly_one_red_cell(healthy_sim, tmp_path):
    healthy_sim.remove_authorized_key("node3", from_node="node1")
    r = run_suite(healthy_sim, "-m", "ssh")
    lines = r.output.splitlines()
    top = lines.index(next(ln for ln in lines if ln.startswith("SSH trust (row: from")))
    header, rows = lines[top + 1].split(), [ln.split() for ln in lines[top + 2 : top + 5]]
    assert header == ["node1", "node2", "node3"]
    cells = {(row[0], header[i]): mark for row in rows for i, mark in enumerate(row[1:])}
    assert {k for k, v in cells.items() if v == "X"} == {("node1", "node3")}, r.output
    assert all(v == "." for k, v in cells.items() if k != ("node1", "node3"))
    assert "  node1->node3: public key refused" in lines
    causes = lines[lines.index(next(ln for ln in lines if ln.startswith("Causes (1;"))) + 1:][:2]
    # one cause: the pair's red, and pdsh's leg node1 -> node3 it blocks
    assert causes[0] == ("  node1->node3: public key refused (test_ssh_trust[node1->node3]; "
                         "blocks 1 check)"), causes
    assert causes[1] == ("      fix (fixes.sh): authorize node1's key (id_ed25519.pub) in "
                         "/root/.ssh/authorized_keys"), causes
    summary = json.loads((r.junit.parent / "summary.json").read_text())
    red = {(a, b) for a, row in summary["trust"].items() for b, o in row.items() if o != "passed"}
    assert red == {("node1", "node3")}
    test = next(t for t in summary["tests"] if t["test_id"] == "test_ssh_trust[node1->node3]")
    assert test["pair"] == "node1->node3" and test["outcome"] == "failed"
    assert summary["meta"]["exitstatus"] == 1


def test_fixes_are_deduplicated():
    rec = Recorder(["a", "b"])
    problem = Problem(("a", "b"), sshfail.Cause.AUTH, "a -> b: public key refused",
                      fix="on b: chmod 600 ~/.ssh/authorized_keys")
    for i in range(5):
        rec.outcomes[f"t{i}"] = Outcome(f"t{i}", "t", "m", "failed", problem.text(),
                                        pair=("a", "b"),
                                        properties={PROPERTY: problem.to_json()})
    assert rec.fixes() == ["on b: chmod 600 ~/.ssh/authorized_keys"]
    assert len(rec.causes()) == 1 and rec.causes()[0]["checks"] == [f"t{i}" for i in range(5)]
