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
    # counted as blocked, not skipped: no SKIPPED line per blocked check under -rs
    assert res.parseoutcomes() == {"passed": 1, "failed": 1, "blocked": 3}, res.stdout.str()
    assert "SKIPPED" not in res.stdout.str()
    got = _junit(xml)
    assert all("blocked by test_login[node3]: node3 refuses connections" in
               ET.tostring(case, encoding="unicode") for case in ET.parse(xml).getroot().iter(
                   "testcase") if case.get("name") in ("test_whole_a", "test_trust[node1->node3]"))
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


UNJUDGED_CHECKS = """
import pytest

@pytest.mark.parametrize("node", ["node2"])
def test_site(node):
    assert node == "node1", f"{node}: /data is not mounted\\n  fix: mount it"
"""


def test_a_red_no_judge_made_is_its_own_text_and_names_no_fix(pytester):
    """A red that did not fail with a Problem (a site check's assertion): its Problem is its
    text as it is, its first line the cause, on its node, with no fix read out of the text."""
    import json

    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_checks=UNJUDGED_CHECKS)
    xml = pytester.path / "junit.xml"
    pytester.runpytest(f"--junitxml={xml}").assert_outcomes(failed=1)
    got = {name: json.loads(props["problem"]) for name, (_, props) in _junit(xml).items()}
    p = got["test_site[node2]"]
    assert p["nodes"] == ["node2"] and p["fix"] == "" and p["fixes"] == []
    assert p["cause"].startswith("AssertionError: node2: /data is not mounted"), p
    assert "fix: mount it" in p["message"] and p["check"] == "test_site[node2]"


PER_NODE_CHECKS = """
import warnings

import pytest
from cluster_tests.core import outcome
from cluster_tests.judge.problem import Problem

NODES = ["node1", "node2", "node3", "node4"]
# node4 drops node2 (its side: the red is on *->node4); node3's own side fails everything it
# starts (the red is on node3->*); node1 -> node2 is blocked by a root; node2 -> node3 is slow
def one(a, b):
    if (a, b) == ("node2", "node4"):
        outcome.fail(Problem((a, b), "ports dropped", f"{a} -> {b}: dropped", fix=f"on {b}: open"))
    if a == "node3" and b != "node3":
        outcome.fail(Problem((a, b), "replies dropped", f"{a} -> {b}: no replies",
                             fix=f"on {a}: accept"))
    if (a, b) == ("node1", "node2"):
        outcome.block("test_login[node2]", "node2 half dead")
    if (a, b) == ("node2", "node3"):
        warnings.warn(UserWarning(f"{a} -> {b}: slow"))

def owner(t):
    a, b = t.pair
    return f"test_ports[{a}->*]" if a == "node3" else f"test_ports[*->{b}]"

@pytest.mark.parametrize("node", ["node2"])
def test_login(node):
    pass

ITEMS = [(n, "*") for n in NODES] + [("*", n) for n in NODES]

@pytest.mark.parametrize("pair", ITEMS, ids=[f"{a}->{b}" for a, b in ITEMS])
def test_ports(pair):
    a, b = pair
    pairs = [(a, x) for x in NODES] if b == "*" else [(x, b) for x in NODES]
    tried = [outcome.attempt(p, one) for p in pairs]
    me = f"test_ports[{a}->{b}]"
    outcome.conclude(pair, tried, lambda t: None if owner(t) == me else owner(t),
                     warn=b == "*")
"""


def test_per_node_items_one_red_per_pair_named_under_both_nodes(pytester):
    """outcome.attempt / conclude (the per-node items of --pairs matrix): a failing pair is red
    on the item that owns it and blocked, naming that red, on the other item of the pair; a
    pair's block blocks its items; warnings come once; the rest passes."""
    import json

    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_checks=PER_NODE_CHECKS)
    xml = pytester.path / "junit.xml"
    res = pytester.runpytest(f"--junitxml={xml}", "-rs", "-W", "always")
    got = _junit(xml)
    reds = sorted(n for n, (kind, _) in got.items() if kind == "failure")
    assert reds == ["test_ports[*->node4]", "test_ports[node3->*]"], got
    # node3 -> *: its three failing peers in one red, on node3, with each pair's text
    node3 = json.loads(got["test_ports[node3->*]"][1]["problem"])
    assert node3["nodes"] == ["node3"] and node3["check"] == "test_ports[node3->*]"
    assert node3["message"].startswith("node3 -> *: 3 of 4 pairs fail (node1, node2, node4)")
    assert sorted(map(tuple, node3["pairs"])) == [("node3", "node1"), ("node3", "node2"),
                                                  ("node3", "node4")]
    # *->node4: node2's red alone (node3's is node3's), as the pair's own Problem
    node4 = json.loads(got["test_ports[*->node4]"][1]["problem"])
    assert node4["nodes"] == ["node2", "node4"] and node4["message"] == "node2 -> node4: dropped"
    # the other end of each red is blocked by it, naming the pair
    assert got["test_ports[node2->*]"] == ("skipped", {"blocked_by": "test_ports[*->node4]"})
    assert got["test_ports[*->node1]"][1]["blocked_by"] == "test_ports[node3->*]"
    assert got["test_ports[*->node2]"][1]["blocked_by"] == "test_login[node2]"  # its first
    assert got["test_ports[node1->*]"] == ("skipped", {"blocked_by": "test_login[node2]"})
    out = res.stdout.str()
    said = "\n".join(f"{(c.get('message') or '')} {c.text or ''}"
                     for c in ET.parse(xml).getroot().iter("skipped"))
    assert "blocked by test_ports[*->node4]: node2 -> node4: dropped (3 other pairs fine)" in said
    assert "blocked by test_login[node2]: node1 -> node2: node2 half dead (3 other pairs" in said
    assert node3["fix"] == "on node3: accept"  # said once, after the three pairs
    assert got["test_ports[*->node3]"][0] == "passed"  # node2 -> node3 is slow, not broken
    assert out.count("node2 -> node3: slow") == 1, out
