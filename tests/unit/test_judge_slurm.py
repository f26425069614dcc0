"""judge/slurm.py: Slurm's nodes read from real `scontrol show node -o` output (Slurm 22.05.8 on
the simulated cluster, tests/data/samples/scontrol-show-node-22.05.8.json), hostfile names mapped
to NodeNames, and what the verdict drains and resumes, on Problems built here."""

from __future__ import annotations

import json

import paths
import pytest

from cluster_tests.core import testids as ids
from cluster_tests.judge import slurm
from cluster_tests.judge.healthyset import healthy
from cluster_tests.judge.problem import Headline, Problem

CAPTURES = {r["name"]: r for r in json.loads(
    (paths.SAMPLES / "scontrol-show-node-22.05.8.json").read_text())["captures"]}
NODES = ["node1", "node2", "node3"]


def slurm_nodes(name: str) -> list[slurm.SlurmNode]:
    return slurm.parse_show_node(CAPTURES[name]["stdout"])


def red(check: str, *nodes: str, cause: str = "x", **kw) -> Problem:
    return Problem(tuple(nodes), Headline(cause), f"{'->'.join(nodes)}: {cause}",
                   check=f"{check}[{'->'.join(nodes)}]", **kw)


LOGIN3 = red(ids.LOGIN.name, "node3", cause="connection refused")


# -- reading scontrol ---------------------------------------------------------------------------


def test_show_node_one_line_per_node_with_state_and_reason_without_its_stamp():
    got = {n.name: n for n in slurm_nodes("show_node_o_drained")}
    assert list(got) == NODES
    assert got["node1"].state == "IDLE" and not got["node1"].drained and got["node1"].reason == ""
    assert got["node2"].state == "IDLE+DRAIN" and got["node2"].drained
    assert got["node2"].reason == "maintenance" and not got["node2"].ours  # "[root@...]" gone
    assert got["node3"].reason == "cluster-tests: test_login[node3]: connection refused"
    assert got["node3"].ours and slurm.drained_for(got["node3"].reason) == "test_login[node3]"
    assert got["node3"].addr.startswith("10.") and got["node3"].hostname == "node3"


def test_show_node_states_draining_and_not_responding():
    got = {n.name: n for n in slurm_nodes("show_renamed_drained")}
    assert got["gpu1"].state == "MIXED+DRAIN" and got["gpu1"].drained and got["gpu1"].ours
    assert got["gpu1"].reason.endswith("authorized_keys writable by others")
    resumed = {n.name: n for n in slurm_nodes("show_node_o_one_drained")}["node3"]
    assert resumed.state == "IDLE+NOT_RESPONDING" and not resumed.drained and not resumed.down


def test_only_the_first_word_makes_a_reason_the_suites():
    assert slurm.is_ours("cluster-tests: test_login[n]: refused")
    assert not slurm.is_ours("maintenance after cluster-tests: found it")
    assert not slurm.is_ours("cluster-tests:x")  # NHC's rule: the whole first word
    assert not slurm.is_ours("")


# -- names ---------------------------------------------------------------------------------------


def test_names_map_by_nodename_then_nodehostname_then_nodeaddr():
    renamed = slurm_nodes("show_renamed_idle")
    addr = next(n.addr for n in renamed if n.name == "gpu2")
    got = slurm.map_names(["node1", addr, "gpu3", "node9"], renamed)
    assert {k: v.name for k, v in got.found.items()} == {"node1": "gpu1", addr: "gpu2",
                                                         "gpu3": "gpu3"}
    assert got.unknown == ["node9"] and not got.ambiguous


def test_a_name_two_slurm_nodes_share_is_not_guessed():
    two = [slurm.SlurmNode("a", "host1", "10.0.0.1"), slurm.SlurmNode("b", "host1", "10.0.0.2")]
    got = slurm.map_names(["host1", "a", "host1.example"], two)
    assert got.ambiguous == {"host1": ["a", "b"]} and got.found["a"].name == "a"
    assert got.unknown == ["host1.example"]  # no short-name or DNS guess


# -- what the verdict drains ---------------------------------------------------------------------


def test_a_nodes_own_cause_drains_it_a_pair_or_the_launcher_drains_nothing():
    problems = [LOGIN3,
                red(ids.HIGH_PORTS.name, "node1", "node2", cause="ports dropped"),
                red(ids.PDSH.name, ids.LAUNCHER, "node4", cause="pdsh not installed")]
    nodes = [*NODES, "node4", "node5"]
    h = healthy(nodes, problems)
    v = slurm.verdict(h, problems)
    assert set(v.drain) == {"node3"} and v.drain["node3"] is LOGIN3
    assert v.spared["node2"] == ("left out only to break a bad pair "
                                 "(test_high_ports[node1->node2]: ports dropped)")
    assert v.spared["node4"] == ("left out for a cause on the launcher "
                                 "(test_pdsh[launcher->node4]: pdsh not installed)")
    assert "node1" not in v.spared and "node5" not in v.spared  # kept


def test_a_shared_cause_and_world_multiple_drain_nothing():
    lock = red(ids.JIT_OPS.name, "node1", cause="stale build lock", breaks=("node2",))
    h = healthy(NODES, [lock])
    v = slurm.verdict(h, [lock])
    assert not v.drain
    assert v.spared["node2"].startswith("left out for a cause it shares with node1 "
                                        "(test_jit_ops[node1]: stale build lock)")
    trimmed = healthy(NODES, [], world_multiple=2)
    assert slurm.verdict(trimmed, []).spared == {
        trimmed.trimmed[0]: "dropped only to keep a multiple of --world-multiple"}


def test_reason_is_one_line_prefixed_and_bounded():
    p = red(ids.REQUIRED_ENV.name, "node2",
            cause="bashrc\nreturns early " + "x" * 400)
    got = slurm.reason(p)
    assert got.startswith(f"cluster-tests: {p.check}: bashrc returns early x")
    assert "\n" not in got and len(got) == slurm.REASON_MAX and got.endswith("...")


# -- the plan ------------------------------------------------------------------------------------


def test_drain_the_red_node_never_an_administrators_drain():
    h = healthy(NODES, [LOGIN3])
    plan = slurm.plan(NODES, h, [LOGIN3], slurm_nodes("show_node_o_idle"), resume=False)
    assert [a.line for a in plan.actions] == [
        'scontrol update NodeName=node3 State=DRAIN '
        'Reason="cluster-tests: test_login[node3]: connection refused"']
    assert plan.actions[0].argv[-1] == "Reason=cluster-tests: test_login[node3]: connection refused"
    # node2 drained for maintenance and red too: left as is, and said
    both = [LOGIN3, red(ids.LOGIN.name, "node2", cause="connection refused")]
    plan = slurm.plan(NODES, healthy(NODES, both), both, slurm_nodes("show_node_o_drained"),
                  resume=False)
    assert plan.actions == []  # node3 is drained already for the same cause
    assert "node2: drained in Slurm for another reason (maintenance): not the suite's, left " \
           "as is" in plan.notes
    assert "node3: drained already, for the same cause (cluster-tests: test_login[node3]: " \
           "connection refused)" in plan.notes


def test_a_suite_drain_gets_the_new_cause():
    modes = red(ids.SSH_MODES.name, "node3", cause="authorized_keys writable by others")
    plan = slurm.plan(NODES, healthy(NODES, [modes]), [modes], slurm_nodes("show_node_o_drained"),
                  resume=False)
    assert [(a.verb, a.slurm, a.reason) for a in plan.actions] == [
        ("drain", "node3", "cluster-tests: test_ssh_modes[node3]: authorized_keys writable by "
                           "others")]


def test_a_node_slurm_does_not_know_is_named():
    dead = red(ids.LOGIN.name, "node9", cause="connection refused")
    names = [*NODES, "node9"]
    plan = slurm.plan(names, healthy(names, [dead]), [dead], slurm_nodes("show_node_o_idle"))
    assert plan.actions == []
    assert plan.notes == ["node9: Slurm knows no node of this name (no NodeName, NodeHostname "
                          "or NodeAddr node9): not drained"]


def test_the_slurm_name_is_drained_for_a_hostfile_name():
    modes = red(ids.SSH_MODES.name, "node2", cause="x")
    plan = slurm.plan(NODES, healthy(NODES, [modes]), [modes], slurm_nodes("show_renamed_idle"),
                  resume=False)
    assert [(a.node, a.slurm) for a in plan.actions] == [("node2", "gpu2")]
    assert plan.actions[0].line.startswith("scontrol update NodeName=gpu2 State=DRAIN")


def test_resume_only_the_suites_drains_once_their_check_passed_again():
    nodes = slurm_nodes("show_node_o_drained")  # node2: maintenance, node3: the suite's
    green = healthy(NODES, [])
    passed = {"test_login[node3]": "passed"}.get
    plan = slurm.plan(NODES, green, [], nodes, drain=False, outcome=passed)
    assert [(a.verb, a.line) for a in plan.actions] == [
        ("resume", "scontrol update NodeName=node3 State=RESUME")]
    assert plan.notes == ["node2: drained in Slurm for another reason (maintenance): not the "
                          "suite's, left as is"]
    # the check its reason names did not run (-k): not resumed, and said
    plan = slurm.plan(NODES, green, [], nodes, drain=False, outcome=lambda _t: None)
    assert plan.actions == []
    assert "node3: drained by the suite for test_login[node3], which did not run in this run: " \
           "not resumed" in plan.notes
    # still red: stays drained
    plan = slurm.plan(NODES, healthy(NODES, [LOGIN3]), [LOGIN3], nodes, drain=False,
                  outcome={"test_login[node3]": "failed"}.get)
    assert plan.actions == []
    assert any(n.startswith("node3: drained by the suite (cluster-tests: test_login[node3]: "
                            "connection refused) and still left out") for n in plan.notes)


def test_a_node_left_out_to_break_a_pair_is_not_drained_and_the_plan_says_why():
    pair = red(ids.HIGH_PORTS.name, "node2", "node3", cause="ports dropped")
    plan = slurm.plan(NODES, healthy(NODES, [pair]), [pair], slurm_nodes("show_node_o_idle"))
    assert plan.actions == []
    assert plan.notes == ["node3: left out only to break a bad pair "
                          "(test_high_ports[node2->node3]: ports dropped): not drained"]


@pytest.mark.parametrize("text", ['a "quoted" $HOME `x` \\ cause', "it's; rm -rf ~"])
def test_the_printed_line_is_the_argv_as_a_shell_reads_it(text):
    """The summary's line, given to a real POSIX shell, is exactly the words the suite runs."""
    import subprocess

    action = slurm.Action("drain", "node1", "node1", f"cluster-tests: test_login[node1]: {text}")
    words = action.line.removeprefix("scontrol ")
    got = subprocess.run(["sh", "-c", f"printf '%s\\0' {words}"], capture_output=True,
                         check=True).stdout.decode().split("\0")[:-1]
    assert got == action.argv[1:]
