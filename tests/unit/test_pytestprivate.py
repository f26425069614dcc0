"""report/pytestprivate.py: the private parts of pytest (and pytest-timeout) the package relies
on are what it was written for.  Each use is guarded (another pytest gets pytest's own
behaviour, silently), so this is the test that says when one changed: the JUnit writer, the
tmpdir plugin's key, pytest-timeout's attribute."""

from __future__ import annotations

import inspect

from cluster_tests.report import junit, pytestprivate

pytest_plugins = ["pytester"]

CONFTEST = """
import pytest
from cluster_tests.report import junit, pytestprivate

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    pytestprivate.seen["pytests_own"] = type(pytestprivate.junit_writer(config))
    pytestprivate.seen["installed"] = junit.install(config)
    pytestprivate.seen["streaming"] = pytestprivate.junit_writer(config)

def pytest_sessionfinish(session):
    pytestprivate.seen["items"] = list(session.items)
"""


def test_the_private_parts_are_what_the_package_was_written_for(pytester, monkeypatch):
    # the JUnit writer: pytest's class has what the subclass overrides and reads, and pytest
    # builds it from the settings the streaming one is built from (junitxml.pytest_configure)
    from _pytest import junitxml

    assert pytestprivate.LOG_XML is junitxml.LogXML and junit.streaming_class() is not None
    assert list(inspect.signature(junitxml.LogXML).parameters)[2:] == [
        "suite_name", "logging", "report_duration", "family", "log_passing_tests"]
    source = inspect.getsource(junitxml.pytest_configure)
    assert all(f'config.getini("{name}")' in source for name in pytestprivate.JUNIT_INI)
    # in a real session: installed in place of pytest's own, with its settings, where pytest
    # keeps its writer; the tmpdir plugin's results and pytest-timeout's closure on the item
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_one="def test_one(tmp_path):\n    pass\n")
    seen: dict[str, object] = {}
    monkeypatch.setattr(pytestprivate, "seen", seen, raising=False)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:cluster_tests",
                                          "--junitxml=out.xml", "--timeout=60",
                                          "-o", "junit_suite_name=cluster")
    result.assert_outcomes(passed=1)
    assert seen["pytests_own"] is junitxml.LogXML and seen["installed"] is True
    streaming = seen["streaming"]
    assert type(streaming).__mro__[1] is junitxml.LogXML
    assert getattr(streaming, "suite_name", None) == "cluster"
    items = seen["items"]
    assert isinstance(items, list)
    (item,) = items
    assert pytestprivate.TMPPATH_RESULT is not None and pytestprivate.TMPPATH_RESULT in item.stash
    assert callable(item.__dict__.get(pytestprivate.CANCEL_TIMEOUT))
    assert '<testsuite name="cluster"' in (pytester.path / "out.xml").read_text()
