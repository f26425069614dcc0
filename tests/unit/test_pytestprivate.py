"""core/pytestprivate.py: the private parts of pytest (and pytest-timeout) the package relies
on are what it was written for.  Each use is guarded (another pytest gets pytest's own
behaviour, silently), so this is the test that says when one changed: the JUnit writer, the
tmpdir plugin's key, pytest-timeout's attribute, the terminal reporter's kept reports, a skip
reported at the test's location under pytest's own name, the cache plugin's last-failed set."""

from __future__ import annotations

import inspect

from cluster_tests.core import pytestprivate
from cluster_tests.report import junit

pytest_plugins = ["pytester"]

CONFTEST = """
import pytest
from cluster_tests.core import pytestprivate
from cluster_tests.report import junit

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    pytestprivate.seen["pytests_own"] = type(pytestprivate.junit_writer(config))
    pytestprivate.seen["installed"] = junit.install(config)
    pytestprivate.seen["streaming"] = pytestprivate.junit_writer(config)

def pytest_sessionfinish(session):
    pytestprivate.seen["items"] = list(session.items)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    pytestprivate.seen["kept"] = list(reporter.stats.get("", []))
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
    pytester.makepyfile(test_one="def test_one(tmp_path, record_testsuite_property):\n"
                                 "    record_testsuite_property('run', 'r1')\n")
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
    text = (pytester.path / "out.xml").read_text()
    assert '<testsuite name="cluster"' in text
    assert '<property name="run" value="r1" />' in text  # the suite's own, through the private
    assert all(hasattr(junitxml.LogXML, n) for n in pytestprivate.LOG_XML_METHODS)
    # the terminal reporter keeps the passed setup and teardown reports, last counted last
    kept = seen["kept"]
    assert isinstance(kept, list) and [r.when for r in kept] == ["setup", "teardown"]
    pytestprivate.forget_report(type("R", (), {"stats": {"": kept}})(), kept[-1])
    assert [r.when for r in kept] == ["setup"]


SKIPS = """
import pytest
from cluster_tests.core import pytestprivate

@pytestprivate.named_as_skip
class Blocked(pytestprivate.ItemSkip):
    pass

def stop(why):
    raise Blocked(why)
"""

BLOCKED = """
import blocks

def test_blocked():
    blocks.stop("blocked by test_root: why")
"""

LAST_FAILED = """
import pytest
from cluster_tests.core import pytestprivate

@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    if report.skipped:
        pytestprivate.mark_last_failed(pytest_runtest_logreport.config, report.nodeid)

def pytest_configure(config):
    pytest_runtest_logreport.config = config
"""


def test_a_blocked_skip_reads_as_pytests_own_at_the_tests_location(pytester):
    """`_use_item_location`: the skip points at the test (its def line), not at the library
    line that raised it; named as pytest's own skip: "Skipped: <why>" (report/summary.py reads
    the reason after that prefix)."""
    import pytest

    assert pytestprivate.SKIP_AT_ITEM
    assert pytest.skip.Exception.__module__ == "builtins"
    assert pytest.skip.Exception.__qualname__ == "Skipped"
    pytester.makepyfile(blocks=SKIPS, test_blocked=BLOCKED)
    reports = pytester.inline_run("-p", "no:cacheprovider", "-p", "no:cluster_tests"
                                  ).getreports("pytest_runtest_logreport")
    (skip,) = [r for r in reports if r.skipped]
    path, line, reason = skip.longrepr
    assert (path.endswith("test_blocked.py"), line, reason) == (
        True, 3, "Skipped: blocked by test_root: why")


def test_a_skip_marked_last_failed_is_rerun_by_lf(pytester):
    """The cache plugin's `lastfailed`: a blocked check added to it is rerun by `--lf`."""
    pytester.makeconftest(LAST_FAILED)
    pytester.makepyfile(test_two="import pytest\n\ndef test_ok():\n    pass\n\n"
                                 "def test_blocked():\n    pytest.skip('blocked')\n")
    pytester.runpytest("-p", "no:cluster_tests").assert_outcomes(passed=1, skipped=1)
    rerun = pytester.runpytest("-p", "no:cluster_tests", "--lf", "-v")
    out = rerun.stdout.str()
    assert "test_two.py::test_blocked SKIPPED" in out and "test_ok" not in out, out
