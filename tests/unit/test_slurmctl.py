"""core/slurmctl.py: what the summary says and what runs, with a stand-in `scontrol` on the PATH
that replays real captures of Slurm 22.05.8 (tests/data/samples/scontrol-show-node-22.05.8.json:
its stdout, stderr and exit status for `show node -o` and `update`) and logs its arguments. The
real Slurm is tests/e2e/test_e2e_slurm.py's."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from unittest.mock import ANY

import paths
import pytest

from cluster_tests.core import slurmctl
from cluster_tests.core import testids as ids
from cluster_tests.judge.healthyset import healthy
from cluster_tests.judge.problem import Headline, Problem
from cluster_tests.judge.ssh import sshfail

SAMPLE = paths.SAMPLES / "scontrol-show-node-22.05.8.json"
CAPTURES = {r["name"]: r for r in json.loads(SAMPLE.read_text())["captures"]}
NODES = ["node1", "node2", "node3"]
LOGIN3 = Problem(("node3",), sshfail.Cause.REFUSED, "node3: refused", check="test_login[node3]")

STAND_IN = f"""#!{sys.executable}
import json, os, sys
captures = {{r["name"]: r for r in json.load(open({str(SAMPLE)!r}))["captures"]}}
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
name = os.environ["FAKE_SHOW" if sys.argv[1:3] == ["show", "node"] else "FAKE_UPDATE"]
r = captures[name]
sys.stdout.write(r["stdout"]); sys.stderr.write(r["stderr"]); sys.exit(r["rc"])
"""


@pytest.fixture
def scontrol(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "scontrol"
    tool.write_text(STAND_IN)
    tool.chmod(0o755)
    log = tmp_path / "calls.jsonl"

    def env(show: str, update: str = "update_drain_node3") -> dict[str, str]:
        return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log),
                "FAKE_SHOW": show, "FAKE_UPDATE": update}

    def calls() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return env, calls


def after(environ: dict[str, str], problems: list[Problem], *, drain: bool = False,
          resume: bool = False, outcome=lambda _t: None) -> slurmctl.Report:
    return slurmctl.after_verdict(NODES, healthy(NODES, problems), problems, drain=drain,
                                  resume=resume, outcome=outcome, environ=environ)


def test_without_the_flags_nothing_changes_and_the_lines_are_printed(scontrol):
    env, calls = scontrol
    pair = Problem(("node1", "node2"), Headline("ports dropped"), "x",
                   check=f"{ids.HIGH_PORTS.name}[node1->node2]")
    got = after(env("show_node_o_idle"), [LOGIN3, pair])
    assert calls() == [["show", "node", "-o"]]  # read, never updated
    assert got.lines == [
        "Slurm: nothing changed (no --slurm-drain / --slurm-resume); they would run:",
        '  scontrol update NodeName=node3 State=DRAIN Reason="cluster-tests: '
        'test_login[node3]: connection refused"',
        "  node2: left out only to break a bad pair (test_high_ports[node1->node2]: ports "
        "dropped): not drained"]
    assert got.json["ran"] is False
    # green again: the resume line, and the administrator's drain named
    got = after(env("show_node_o_drained"), [], outcome={"test_login[node3]": "passed"}.get)
    assert got.lines == [
        "Slurm: nothing changed (no --slurm-drain / --slurm-resume); they would run:",
        "  scontrol update NodeName=node3 State=RESUME",
        "  node2: drained in Slurm for another reason (maintenance): not the suite's, left as is"]
    assert len(calls()) == 2


def test_the_drain_runs_scontrol_update_with_the_reason_as_one_word(scontrol):
    env, calls = scontrol
    got = after(env("show_node_o_idle"), [LOGIN3], drain=True)
    assert calls() == [["show", "node", "-o"],
                       ["update", "NodeName=node3", "State=DRAIN",
                        "Reason=cluster-tests: test_login[node3]: connection refused"]]
    assert got.lines == ["Slurm (--slurm-drain):",
                         '  drained node3: scontrol update NodeName=node3 State=DRAIN '
                         'Reason="cluster-tests: test_login[node3]: connection refused"']
    assert got.json["results"] == [{"command": got.lines[1].split(": ", 1)[1], "ok": True}]


def test_a_green_run_without_flags_says_nothing(scontrol):
    env, calls = scontrol
    assert after(env("show_node_o_idle"), []).lines == []


def test_permission_denied_is_a_line_and_nothing_else(scontrol):
    env, calls = scontrol
    got = after(env("show_node_o_idle", update="update_denied"), [LOGIN3], drain=True)
    assert got.lines == [
        "Slurm (--slurm-drain):",
        "  FAILED to drain node3: permission denied (run as root or as Slurm's SlurmUser) "
        "(slurm_update error: Invalid user id): scontrol update NodeName=node3 State=DRAIN "
        'Reason="cluster-tests: test_login[node3]: connection refused"']
    assert got.json["results"] == [{"command": ANY, "ok": False, "error": ANY}]


@pytest.mark.parametrize(("show", "said"), [
    ("show_node_o_no_controller", "no Slurm controller answers (`scontrol show node -o`: "
                                  "slurm_load_node error: Unable to contact slurm controller "
                                  "(connect failure))"),
    ("no_configuration", "no Slurm configuration here (slurm.conf, SLURM_CONF)"),
])
def test_no_controller_or_no_configuration_is_a_line_with_the_flags_silence_without(
        scontrol, show, said):
    env, calls = scontrol
    got = after(env(show), [LOGIN3], resume=True)
    assert len(got.lines) == 1 and got.lines[0].startswith(
        "Slurm (--slurm-resume): cannot read the nodes' state: " + said), got.lines
    assert got.lines[0].endswith(": nothing drained or resumed")
    assert after(env(show), [LOGIN3]).lines == []
    assert calls() == [["show", "node", "-o"]] * 2


def test_no_scontrol_on_the_path(tmp_path):
    env = {"PATH": str(tmp_path)}
    assert after(env, [LOGIN3]).lines == []
    assert after(env, [LOGIN3], drain=True, resume=True).lines == [
        "Slurm (--slurm-drain --slurm-resume): scontrol is not on the PATH: nothing drained or "
        "resumed"]


def test_the_captured_errors_are_classified():
    for name, kind in (("update_denied", "permission denied"),
                       ("update_unknown", "Slurm knows no such node"),
                       ("update_no_controller", "no Slurm controller answers"),
                       ("show_unknown_node", "Slurm knows no such node"),
                       ("update_drain_noreason", "scontrol failed (exit 1)")):
        r = CAPTURES[name]
        assert r["rc"] != 0 and slurmctl.classify(r["stderr"] + r["stdout"], r["rc"]).startswith(
            kind), name
