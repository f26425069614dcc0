"""The suite's own `record_property` (report/recordprop.py) in real pytest sessions: it is
the one tests get, it records what pytest's records (report, JUnit), for the right test, under
every JUnit family with no warning (pytest's own warns once per test under xunit2, its
default), and a test that takes it builds no FixtureDef for `request` (pytest's own builds
three a test)."""

from __future__ import annotations

import re

import pytest

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


@pytest.mark.parametrize("family", ["xunit2", None])
def test_properties_are_written_under_xunit2_and_the_default_family_without_warnings(
        pytester, family):
    pytester.makepyfile(test_checks=CHECKS)
    ini = ("-o", f"junit_family={family}") if family else ()
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--junitxml=out.xml",
                                          *ini, "-k", "test_rtt")
    result.assert_outcomes(passed=3)
    assert "PytestWarning" not in result.stdout.str()
    assert "warnings" not in result.stdout.lines[-1]
    xml = (pytester.path / "out.xml").read_text()
    assert xml.count('<property name="rtt_ms" value="0.25" />') == 3
