"""Every check's path keeps the layer order check -> measure -> judge -> outcome.

The path of a check is read statically by tests/checkpaths.py (`python tests/checkpaths.py`
prints it, check by check): its test function, every function of checks/ it reaches
(transitively), and one level into measure/ and judge/, as calls from one (module, function) to
another. The rule, call by call and value by value:

1. A measuring function (measure/) calls measure/, core/ (not core/outcome.py) and judge/, and of
   judge/ only what is not a verdict: never a function whose return annotation names a
   `Problem` or a `Root` (judge/problem.py), nor those classes. It gathers facts (judge/ holds
   the parsers and the fact types it fills), never decides, and never ends a test.
2. A judge (judge/) calls judge/ only, and the dependency-free constants core/testids.py and
   core/sections.py: no measuring, no cluster, no outcome.
3. A check (checks/) calls every layer, but a verdict never goes back into measuring: no value
   bound from a verdict call (=, :=, for; and what is made from such a name), nor a verdict
   call itself, is an argument of a measure/ call. So the measure a judge reads comes first.
4. No module of measure/ imports core/outcome.py or calls outcome's or pytest's functions that
   end a test (skip, fail, xfail, exit), on a check's path or not.

A call on a value (`m.reach(a, b)`) is not followed, nor is a judge's or a measure's own call
past the first level; tests/unit/test_layers.py holds the import side (judge/ imports neither
measure/ nor core.cluster, through any chain).
"""

from __future__ import annotations

import checkpaths as cp
import pytest

CHECKS = cp.checks()


def test_every_check_is_read() -> None:
    assert len(CHECKS) > 45
    for check_module, test in CHECKS:
        files = cp.files_on(cp.path_of(check_module, test))
        assert f"cluster_tests/checks/{check_module}.py" in files, test


@pytest.mark.parametrize(("check_module", "test"), CHECKS, ids=[t for _, t in CHECKS])
def test_the_path_keeps_the_layer_order(check_module: str, test: str) -> None:
    assert cp.breaks(check_module, test) == []


def test_no_measuring_module_ends_a_test() -> None:
    assert cp.measure_ends() == []


def test_the_ssh_trust_path_is_check_measure_judge_outcome() -> None:
    """S4 as the issue read it: its path's files, by layer."""
    hops = cp.path_of("ssh", "test_ssh_trust")
    files = cp.files_on(hops)
    assert {"cluster_tests/checks/ssh.py", "cluster_tests/measure/sshpairs.py",
            "cluster_tests/measure/sshroot.py", "cluster_tests/judge/ssh/legroot.py",
            "cluster_tests/judge/ssh/sshmodes.py", "cluster_tests/core/outcome.py"} <= set(files)
    assert {h.callee_layer for h in hops if h.caller == "measure.sshroot"} <= {
        cp.MEASURE, cp.JUDGE, cp.CORE}


# -- the rule fails on a real violation -----------------------------------------------------------

#: measure/sshroot.py as it was: it probed again and ended the calling check itself
SSHROOT_THAT_BLOCKS = '''
from cluster_tests.core import outcome
from cluster_tests.core import testids as ids
from cluster_tests.judge.ssh import sshfail
from cluster_tests.measure import ports


def block_by_root(cluster, a, b, cause):
    err = cluster.login_error(b)
    if err is not None and sshfail.same_node_cause(err.cause, cause):
        outcome.block(ids.LOGIN.of(b), sshfail.node_state(b, err.cause))
    ports.port_matrix(cluster)
'''
CHECK_THAT_CALLS_IT = '''
from cluster_tests.measure import sshroot


def test_planted(cluster, pair):
    a, b = pair
    sshroot.block_by_root(cluster, a, b, None)
'''


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch):
    def plant(name: str, source: str) -> None:
        monkeypatch.setitem(cp.PLANTED, name, source)
    return plant


def test_a_measuring_module_that_ends_the_test_breaks_the_rule(planted) -> None:
    planted("measure.sshroot", SSHROOT_THAT_BLOCKS)
    planted("checks.planted", CHECK_THAT_CALLS_IT)
    found = cp.breaks("planted", "test_planted")
    assert found == ["measure.sshroot.block_by_root -> core.outcome.block (line 11): a measuring "
                     "function calls the outcome layer (it ends, blocks or asks about tests)"]
    assert "measure/sshroot.py: imports core.outcome" in cp.measure_ends()


def test_a_measuring_module_that_judges_breaks_the_rule(planted) -> None:
    planted("measure.sshroot", '''
from cluster_tests.judge.ssh import sshmodes


def problem(cluster, node):
    return sshmodes.slow_login(node, cluster.login_seconds(node), 1.0)
''')
    planted("checks.planted", '''
from cluster_tests.measure import sshroot


def test_planted(cluster, node):
    sshroot.problem(cluster, node)
''')
    assert cp.breaks("planted", "test_planted") == [
        "measure.sshroot.problem -> judge.ssh.sshmodes.slow_login (line 6): a measuring "
        "function judges (it calls a judge that returns a verdict)"]


def test_a_judge_that_measures_breaks_the_rule(planted) -> None:
    planted("judge.ssh.legroot", '''
from cluster_tests.measure import sshroot


def roots(cluster, a, b):
    return sshroot.sshd_config(cluster, b)
''')
    planted("checks.planted", '''
from cluster_tests.judge.ssh import legroot


def test_planted(cluster, pair):
    legroot.roots(cluster, *pair)
''')
    assert cp.breaks("planted", "test_planted") == [
        "judge.ssh.legroot.roots -> measure.sshroot.sshd_config (line 6): a judge calls the "
        "measure layer"]


def test_a_check_that_hands_a_verdict_to_measuring_breaks_the_rule(planted) -> None:
    """A helper of checks/ reached from the test, a verdict bound to a name, then a name made
    from it, handed to measure/."""
    planted("checks.planted", '''
from cluster_tests.judge.network import portjudge as nc
from cluster_tests.measure import ports


def test_planted(cluster, pair):
    _helper(cluster, *pair)


def _helper(cluster, a, b):
    reach = ports.port_matrix(cluster).reach(a, b)
    red = nc.unreachable_problem(a, reach)
    node = red.nodes[0]
    ports.drop_rules(cluster, node)
    ports.drop_rules(cluster, a)
''')
    assert cp.breaks("planted", "test_planted") == [
        "planted.py:14: _helper hands a verdict to measure.ports.drop_rules"]


def test_a_verdict_read_only_by_the_outcome_keeps_the_rule(planted) -> None:
    planted("checks.planted", '''
from cluster_tests.core import outcome
from cluster_tests.judge.network import portjudge as nc
from cluster_tests.measure import ports


def test_planted(cluster, pair):
    a, b = pair
    reach = ports.port_matrix(cluster).reach(a, b)
    rules = ports.drop_rules(cluster, a)
    if nc.source_at_fault(ports.port_matrix(cluster), a, b):
        outcome.fail(nc.source_fault_problem(a, b, "x", "y", rules, "F1"))
    outcome.fail(nc.unreachable_problem(a, reach))
''')
    assert cp.breaks("planted", "test_planted") == []
