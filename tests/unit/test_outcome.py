"""core/outcome.py in a real pytest session (pytester): a blocked check is skipped naming its
root, with the `blocked_by` JUnit property, only while the root runs in the session; a red
carries its Problem as a property; `--lf` reruns the root and what it blocked."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
import pytest
from cluster_tests.core import outcome

def pytest_configure(config):
    config.pluginmanager.register(outcome.Outcomes(config), "ct_outcomes")

def pytest_collection_finish(session):
    session.config.stash[outcome.SELECTED_KEY] = frozenset(i.name for i in session.items)
"""

CHECKS = """
import pytest
from cluster_tests.core import outcome
from cluster_tests.judge.problem import Fix, Problem

SHARED = {}

@pytest.mark.parametrize("node", ["node1", "node3"])
def test_login(node):
    if node == "node3":
        outcome.fail(Problem((node,), "connection refused", "node3: connection refused",
                             fix="start sshd", item="S1"))

@pytest.fixture(scope="session")
def measured():
    # a session-wide measurement that meets the dead node: every asker gets the same skip
    if "err" not in SHARED:
        try:
            outcome.block("test_login[node3]", "node3 refuses connections")
        except BaseException as exc:
            SHARED["err"] = exc
    if "err" in SHARED:
        raise SHARED["err"]

def test_whole_a(measured):
    pass

def test_whole_b(measured):
    pass

@pytest.mark.parametrize("pair", ["node1->node3"])
def test_trust(pair):
    outcome.block("test_login[node3]", "node3 refuses connections")
    pytest.fail("node1 -> node3: connection refused (its own red)")
"""


def _junit(path):
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        kind = next((c.tag for c in case if c.tag in ("failure", "skipped", "error")), "passed")
        out[case.get("name")] = (kind, props)
    return out


@pytest.fixture
def suite(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_checks=CHECKS)
    return pytester


def test_blocked_checks_name_their_root_and_the_red_carries_its_problem(suite):
    xml = suite.path / "junit.xml"
    res = suite.runpytest(f"--junitxml={xml}", "-rs")
    assert "blocked by test_login[node3]: node3 refuses connections" in res.stdout.str()
    res.assert_outcomes(passed=1, failed=1, skipped=3)
    got = _junit(xml)
    assert got["test_login[node3]"][0] == "failure"
    assert '"cause": "connection refused"' in got["test_login[node3]"][1]["problem"]
    for t in ("test_whole_a", "test_whole_b", "test_trust[node1->node3]"):
        assert got[t] == ("skipped", {"blocked_by": "test_login[node3]"}), (t, got[t])


def test_without_its_root_in_the_run_a_check_is_its_own_red(suite):
    xml = suite.path / "junit.xml"
    res = suite.runpytest(f"--junitxml={xml}", "-k", "trust")
    res.assert_outcomes(failed=1)
    kind, props = _junit(xml)["test_trust[node1->node3]"]
    assert kind == "failure" and "blocked_by" not in props
    assert "its own red" in props["problem"]


def test_lf_reruns_the_root_and_what_it_blocked(suite):
    suite.runpytest()
    res = suite.runpytest("--lf", "-v")
    out = res.stdout.str()
    for t in ("test_login[node3]", "test_whole_a", "test_whole_b", "test_trust[node1->node3]"):
        assert t in out, out
    assert "test_login[node1] PASSED" not in out


TEXT_CHECKS = """
import pytest
from cluster_tests.core import outcome
from cluster_tests.judge.problem import listed_problem, node_problems

PROBLEMS = ["X is 'no': nothing works\\n  fix, on node2: set 'X yes'; reload",
            "Y=3 matches no interface\\n  fix, on node1: export Y=eth0 in ~/.bashrc"]

@pytest.mark.parametrize("node", ["node2"])
@pytest.mark.parametrize("how", ["text", "problem"])
def test_several(how, node):
    if how == "problem":
        outcome.fail(node_problems(node, PROBLEMS))
    pytest.fail(f"{node}: " + f"\\n{node}: ".join(PROBLEMS), pytrace=False)

@pytest.mark.parametrize("node", ["node2"])
@pytest.mark.parametrize("how", ["text", "problem"])
def test_listed(how, node):
    if how == "problem":
        outcome.fail(listed_problem(node, "ports", ["a down", "b slow"], "check the cable"))
    pytest.fail(f"{node}: ports:\\n  a down\\n  b slow\\n  fix, on {node}: check the cable",
                pytrace=False)
"""


def test_a_red_built_from_its_text_is_the_red_its_text_made(pytester):
    """judge.problem's node_problems and listed_problem: the same red text, and the same
    Problem (cause, fix, headline), as the check's own pytest.fail of that text made."""
    import json

    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_checks=TEXT_CHECKS)
    xml = pytester.path / "junit.xml"
    pytester.runpytest(f"--junitxml={xml}").assert_outcomes(failed=4)
    messages = {c.get("name"): c.find("failure").get("message")  # type: ignore[union-attr]
                for c in ET.parse(xml).getroot().iter("testcase")}
    got = {name: json.loads(props["problem"]) for name, (_, props) in _junit(xml).items()}
    for test in ("test_several", "test_listed"):
        text, made = f"{test}[text-node2]", f"{test}[problem-node2]"
        assert messages[text] == messages[made]
        assert {**got[text], "check": ""} == {**got[made], "check": ""}
        assert got[made]["fix"].startswith("on node2: ") and got[made]["nodes"] == ["node2"]
