"""The suite's own `record_property` (report/recordprop.py) in real pytest sessions: it is
the one tests get, it records what pytest's records (report, JUnit), for the right test, with
pytest's warning where the JUnit family drops properties, and a test that takes it builds no
FixtureDef for `request` (pytest's own builds three a test)."""

from __future__ import annotations

import re

pytest_plugins = ["pytester"]

CHECKS = """
import pytest
from _pytest import fixtures

BUILT = []
_init = fixtures.RequestFixtureDef.__init__

def _counting(self, request):
    BUILT.append((request.node.name, request.fixturename))
    _init(self, request)

fixtures.RequestFixtureDef.__init__ = _counting

@pytest.mark.parametrize("node", ["node1", "node2", "node3"])
def test_rtt(node, record_property):
    record_property("node_seen", node)
    record_property("rtt_ms", 0.25)

def test_which_fixture(request):
    defs = request._fixturemanager.getfixturedefs("record_property", request.node)
    assert defs[-1].func.__module__ == "cluster_tests.report.recordprop"

def test_built_no_request_fixturedef():
    # (the direct parameter `node` builds its own, in pytest: not this fixture's)
    assert {f for n, f in BUILT if n.startswith("test_rtt")} == {"node"}
"""


def test_record_property_is_the_plugins_and_records_for_each_test(pytester):
    pytester.makepyfile(test_checks=CHECKS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--junitxml=out.xml",
                                          "-o", "junit_family=xunit1")
    result.assert_outcomes(passed=5)
    xml = (pytester.path / "out.xml").read_text()
    for node in ("node1", "node2", "node3"):
        case = re.search(rf'<testcase [^>]*name="test_rtt\[{node}\]".*?</testcase>', xml, re.S)
        assert case is not None
        assert f'<property name="node_seen" value="{node}" />' in case.group(0)
        assert '<property name="rtt_ms" value="0.25" />' in case.group(0)
    assert "incompatible with junit_family" not in result.stdout.str()


def test_record_property_warns_as_pytests_where_junit_drops_properties(pytester):
    pytester.makepyfile(test_checks=CHECKS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--junitxml=out.xml",
                                          "-o", "junit_family=xunit2", "-k", "test_rtt")
    result.assert_outcomes(passed=3)
    assert result.stdout.str().count(
        "record_property is incompatible with junit_family 'xunit2'") >= 1
