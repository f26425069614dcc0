"""report/junit.py in real pytest sessions (pytester): the JUnit file written test by test is
the document pytest's own writer makes, for every kind of outcome (passed with properties,
failed with captured output, skipped, xfail, errors in setup and teardown, a failure followed
by a teardown error, a collection error, suite properties), and pytest's writer no longer holds
each test's element until the session ends."""

from __future__ import annotations

import re

pytest_plugins = ["pytester"]

STREAMING = """
import pytest
from cluster_tests.report import junit

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    assert junit.install(config)

@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid, location):
    # what the writer holds once a test is done: no element, no reporter
    from cluster_tests.report.junit import _Spooled
    from cluster_tests.core.pytestprivate import junit_writer
    xml = junit_writer(pytest_runtest_logfinish.config)
    held = [e for e in xml.node_reporters_ordered if not isinstance(e, _Spooled)]
    with open("held.txt", "a") as out:
        out.write("%d\\n" % len(held))

def pytest_sessionstart(session):
    pytest_runtest_logfinish.config = session.config
"""

CHECKS = """
import pytest

@pytest.fixture
def noisy():
    print("setting up <&> \\u00e9")
    yield
    print("teardown says where it hurts")

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown broke")

@pytest.fixture
def broken_setup():
    raise RuntimeError("setup broke")

@pytest.mark.parametrize("pair", ["node1->node3", "node2->node1", "a<b&c"])
def test_pairs(pair, record_property):
    record_property("rtt_ms", 0.25)
    record_property("peer", pair)

def test_red(noisy):
    print("call output")
    assert False, "red <here>"

def test_skipped():
    pytest.skip("not on this node: see test_login[node2]")

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False

@pytest.mark.xfail(reason="known")
def test_xpass():
    pass

def test_setup_error(broken_setup):
    pass

def test_red_then_teardown_error(broken_teardown):
    assert False

def test_green_then_teardown_error(broken_teardown):
    pass

def test_suite_property(record_testsuite_property):
    record_testsuite_property("cluster", "16 nodes")
"""


def _normalized(text: str) -> str:
    return re.sub(r' (time|timestamp)="[^"]*"', "", text)


def _junit(pytester, streaming: bool) -> tuple[str, str]:
    if streaming:
        pytester.makeconftest(STREAMING)
    else:
        (pytester.path / "conftest.py").unlink(missing_ok=True)
    pytester.makepyfile(test_checks=CHECKS, test_broken="raise ImportError('no such module')")
    name = "streamed.xml" if streaming else "pytests.xml"
    # without the suite's plugin (installed, so loaded by default), which installs the writer
    # for every session: pytest's own writer, or the streaming one installed by the conftest
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:cluster_tests",
                                          f"--junitxml={name}",
                                          "--continue-on-collection-errors",
                                          "-o", "junit_logging=all")
    return (pytester.path / name).read_text(encoding="utf-8"), result.stdout.str()


def test_the_streamed_file_is_pytests_document(pytester):
    pytests, _ = _junit(pytester, streaming=False)
    streamed, _ = _junit(pytester, streaming=True)
    assert 'name="test_pairs[node1-&gt;node3]"' in pytests  # the cases are all there...
    assert "teardown broke" in pytests and "no such module" in pytests
    assert '<property name="cluster" value="16 nodes"' in pytests
    assert _normalized(streamed) == _normalized(pytests)  # ...and the same, byte for byte
    # no test's element was held once it was done (only the one still running, if any)
    held = [int(n) for n in (pytester.path / "held.txt").read_text().split()]
    assert held and max(held) <= 1


def test_a_pytest_writer_it_was_not_made_for_is_left_in_place(pytester, monkeypatch):
    from cluster_tests.report import junit

    monkeypatch.setattr(junit, "LOG_XML_METHODS",
                        (*junit.LOG_XML_METHODS, "a_method_pytest_never_had"))
    assert junit.streaming_class() is None


def test_a_test_cases_text_is_what_elementtree_writes():
    import random
    import xml.etree.ElementTree as ET

    from cluster_tests.report.junit import serialized

    rng = random.Random(3)
    words = ["", "ok", "a<b", "x & y", 'say "hi"', "tab\there", "line\nnext", "\u00e9\u4e2d",
             "]]>", "'q'", "\r", "->"]

    def element(depth: int) -> ET.Element:
        e = ET.Element(rng.choice(["testcase", "properties", "property", "skipped", "failure"]),
                       {k: rng.choice(words) for k in rng.sample(["name", "value", "message",
                                                                   "classname", "time"], 3)})
        e.text = rng.choice([None, *words])
        e.tail = rng.choice([None, None, *words])
        if depth < 3:
            for _ in range(rng.randint(0, 3)):
                e.append(element(depth + 1))
        return e

    for _ in range(300):
        e = element(0)
        assert serialized(e) == ET.tostring(e, encoding="unicode")
    # what it does not write itself, ElementTree does
    odd = ET.Element("testcase")
    odd.append(ET.Comment("a comment"))
    odd.append(ET.Element("{urn:x}ns"))
    assert serialized(odd) == ET.tostring(odd, encoding="unicode")
