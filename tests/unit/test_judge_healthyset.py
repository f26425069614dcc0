"""judge/healthyset.py: which nodes the launch can use right now, from the run's Problems; and the
Problem value itself (judge/problem.py) as it travels in a JUnit property."""

from __future__ import annotations

import ast

import paths

from cluster_tests.core import testids as ids
from cluster_tests.core.testids import Scope
from cluster_tests.judge.healthyset import healthy, scope
from cluster_tests.judge.problem import Fix, Headline, Problem
from cluster_tests.judge.ssh import sshfail

NODES = ["node1", "node2", "node3", "node4"]


def red(check: str, *nodes: str, cause: str = "x", scope: Scope | None = None) -> Problem:
    return Problem(tuple(nodes), Headline(cause), f"{'->'.join(nodes)}: {cause}", scope=scope,
                   check=f"{check}[{'->'.join(nodes)}]")


def test_every_check_says_what_the_launch_needs_of_it():
    """Every check has its TestId in core/testids.py, with its scope."""
    functions = set()
    for path in (paths.PACKAGE / "checks").glob("*.py"):
        functions |= {n.name for n in ast.parse(path.read_text()).body
                      if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    assert set(ids.BY_NAME) == functions
    assert all(isinstance(t.scope, Scope) for t in ids.CHECKS)


def test_a_dead_node_is_excluded_and_rank0_stays():
    got = healthy(NODES, [red(ids.LOGIN.name, "node3", cause="connection refused")])
    assert got.kept == ["node1", "node2", "node4"] and got.rank0 == "node1"
    assert got.excluded == {"node3": ["test_login[node3]: connection refused"]}
    assert got.rank0_moved_from is None


def test_one_bad_pair_drops_exactly_one_node_never_rank0():
    got = healthy(NODES, [red(ids.HIGH_PORTS.name, "node2", "node3"),
                          red(ids.HIGH_PORTS.name, "node3", "node2")])
    assert len(got.kept) == 3 and "node1" in got.kept
    assert len(got.excluded) == 1 and set(got.excluded) <= {"node2", "node3"}
    got = healthy(NODES, [red(ids.HIGH_PORTS.name, "node3", "node1")])
    assert got.kept == ["node1", "node2", "node4"]


def test_the_fewest_nodes_break_every_bad_pair():
    star = [red(ids.REACHABLE.name, "node2", n) for n in ("node3", "node4")] + [
        red(ids.REACHABLE.name, "node2", "node1")]
    assert healthy(NODES, star).kept == ["node1", "node3", "node4"]
    triangle = [red(ids.HIGH_PORTS.name, a, b) for a, b in
                (("node2", "node3"), ("node3", "node4"), ("node4", "node2"))]
    got = healthy(NODES, triangle)
    assert len(got.kept) == 2 and got.kept[0] == "node1"


def test_ssh_trust_matters_from_rank0_only():
    between_others = healthy(NODES, [red(ids.SSH_TRUST.name, "node2", "node3")])
    assert not between_others.changed and between_others.kept == NODES
    from_rank0 = healthy(NODES, [red(ids.SSH_TRUST.name, "node1", "node3")])
    assert from_rank0.kept == ["node1", "node2", "node4"]


def test_a_dead_rank0_moves_rank0_to_the_first_healthy_node():
    got = healthy(NODES, [red(ids.LOGIN.name, "node1"), red(ids.SSH_TRUST.name, "node2", "node4"),
                          red(ids.SSH_TRUST.name, "node3", "node2")])
    assert got.rank0 == "node2" and got.rank0_moved_from == "node1"
    # trust from the new rank 0 now matters; from node3 it still does not
    assert got.kept == ["node2", "node3"]


def test_a_node_that_cannot_be_rank0_stays_as_another_rank():
    got = healthy(NODES, [red(ids.MASTER_PORT.name, "node1", "node1")])  # port taken on node1
    assert got.rank0 == "node2" and got.kept == ["node2", "node1", "node3", "node4"]
    assert got.rank0_moved_from == "node1" and not got.excluded


def test_world_multiple_drops_the_slowest_extra_nodes():
    got = healthy(NODES, [red(ids.LOGIN.name, "node4")], world_multiple=2,
                  slowness={"node1": 9.0, "node2": 5.0, "node3": 1.0})
    assert got.kept == ["node1", "node3"] and got.trimmed == ["node2"]
    assert "multiple of --world-multiple 2" in got.excluded["node2"][0]


def test_checks_the_launch_does_not_need_exclude_nothing():
    got = healthy(NODES,
                  [red(ids.LOGIN.name + "_time", "node2"),
                   red("test_resolve_fast", "node3", "node2")])
    assert not got.changed
    assert scope(red(ids.PDSH.name, "launcher", "node3")) == Scope.FROM_RANK0
    assert healthy(NODES, [red(ids.PDSH.name, "launcher", "node3")]).kept == ["node1", "node2",
                                                                              "node4"]


def test_problem_travels_as_json_and_one_fix_is_one_cause():
    fix = Fix("node3", "authorize node1's key", ("grep -q x f || echo x >> f",), "S4")
    a = Problem(("node1", "node3"), sshfail.Cause.AUTH, "node1 -> node3: refused",
                fix="append it",
                fixes=(fix,), item="S4", scope=Scope.FROM_RANK0,
                check="test_ssh_trust[node1->node3]")
    back = Problem.from_json(a.to_json())
    assert back == a and back is not None and back.fixes[0].commands == fix.commands
    b = Problem(("node1", "node3"), Headline("other words"), "another check said it", fixes=(fix,))
    assert a.key() == b.key()  # the same change fixes both
    refused = Headline("refused")
    assert Problem(("node3",), refused, "m").key() != Problem(("node2",), refused, "m").key()
    assert Problem.from_json("not json") is None
    assert a.text().endswith("\n  fix: append it")


def test_a_cause_no_set_of_nodes_avoids_leaves_no_file_to_launch_on():
    """A `.deepspeed_env` line the launcher exports to every rank, pdsh missing on the launcher:
    leaving nodes out changes nothing, so no healthy set is offered, whatever else is red."""
    env_file = red(ids.DEEPSPEED_ENV.name, "node1", scope=Scope.LAUNCH_WIDE)
    dead = red(ids.LOGIN.name, "node3", cause="connection refused")
    got = healthy(NODES, [dead, env_file])
    assert not got.launchable and got.kept == [] and got.rank0 is None
    assert got.waits_for == [env_file] and got.excluded == {}
    launcher = red(ids.PDSH_INSTALLED.name, ids.LAUNCHER, scope=Scope.LAUNCHER)
    assert healthy(NODES, [launcher]).waits_for == [launcher]
    # the launch's own flags: H5 is launch-wide by its check's scope
    assert scope(red(ids.INCLUDE_EXCLUDE.name)) == Scope.LAUNCH_WIDE
    assert healthy(NODES, [dead]).launchable


def test_the_launch_line_is_the_users_command_with_only_the_hostfile_changed(tmp_path):
    from cluster_tests.judge.hostfile import launchargs as la
    from cluster_tests.report import healthy as healthy_mod

    cmd = la.parse_command(["deepspeed", "--hostfile", "hostfile", "--master_port", "29600",
                            "train.py", "--deepspeed", "ds_config.json"])
    got = healthy(NODES, [red(ids.LOGIN.name, "node3", cause="connection refused")])
    lines = healthy_mod.launch_lines(got, tmp_path / "reports" / "hostfile.healthy",
                                        tmp_path, "hostfile", cmd)
    assert lines[-2:] == [
        "or keep your hostfile: deepspeed --exclude node3 --hostfile hostfile --master_port "
        "29600 train.py --deepspeed ds_config.json",
        "deepspeed --hostfile reports/hostfile.healthy --master_port 29600 train.py "
        "--deepspeed ds_config.json"]
    waits = healthy(NODES, [red(ids.DEEPSPEED_ENV.name, "node1", cause="env file broken",
                                scope=Scope.LAUNCH_WIDE)])
    said = healthy_mod.launch_lines(waits, tmp_path / "h", tmp_path, "hostfile", cmd)
    assert said[0].startswith("Launch now: no set of nodes launches until this is fixed")
    assert said[1:] == ["  test_deepspeed_env[node1]: env file broken"]
    assert healthy_mod.green_lines(3, cmd, "hostfile") == [
        "The launch will work on 3 of 3 nodes: deepspeed --hostfile hostfile --master_port 29600 "
        "train.py --deepspeed ds_config.json"]
