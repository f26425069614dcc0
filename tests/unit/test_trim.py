"""report/trim.py in a real pytest session (pytester): pytest's terminal reporter keeps
every passed setup and teardown report for the whole session (two per item); the Trimmer lets go
of those that captured nothing, and of what plugins leave on a finished item; the counts, the
summary line and a failed test's captured teardown output stay as pytest prints them."""

from __future__ import annotations

pytest_plugins = ["pytester"]

CONFTEST = """
import pytest
from cluster_tests.core.pytestprivate import TMPPATH_RESULT
from cluster_tests.report.trim import Trimmer

def pytest_configure(config):
    config.pluginmanager.register(Trimmer(config), "ct_trim")

@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    stats = session.config.pluginmanager.get_plugin("terminalreporter").stats
    kept = [(r.nodeid.split("::")[-1], r.when) for r in stats.get("", [])]
    with open("kept.txt", "w") as out:
        out.write(repr(sorted(kept)))
    left = {"keywords": sorted({k for rs in stats.values() for r in rs
                                for k in getattr(r, "keywords", {})}),
            "cancel_timeout": [i.name for i in session.items if hasattr(i, "cancel_timeout")],
            "tmppath": [i.name for i in session.items if TMPPATH_RESULT in i.stash]}
    with open("left.txt", "w") as out:
        out.write(repr(left))
"""

CHECKS = """
import pytest

@pytest.fixture
def noisy():
    yield
    print("teardown says where it hurts")

@pytest.mark.parametrize("node", ["node1", "node2", "node3"])
def test_quiet(node):
    pass

@pytest.mark.skip(reason="marked")
def test_marked_skip():
    pass

def test_skips_itself():
    pytest.skip("not here")

def test_red(noisy):
    assert False, "red"

def test_green_but_noisy(noisy):
    pass
"""


def test_passed_setup_and_teardown_are_let_go_unless_they_captured_output(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_checks=CHECKS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=4, failed=1, skipped=2)
    # kept: only the teardowns that printed; every quiet setup and teardown was let go
    kept = (pytester.path / "kept.txt").read_text()
    assert kept == repr([("test_green_but_noisy", "teardown"), ("test_red", "teardown")])
    # and a failed test still shows what its teardown printed, as pytest shows it
    result.stdout.fnmatch_lines(["*Captured stdout teardown*", "teardown says where it hurts"])
    # the reports pytest keeps hold only the keywords its skipped summary reads; what plugins
    # left on each item for its own run is gone (pytest-timeout's closure, tmpdir's results)
    left = eval((pytester.path / "left.txt").read_text())  # noqa: S307 - our own repr
    assert left == {"keywords": ["pytestmark", "skip"], "cancel_timeout": [], "tmppath": []}
    # (by those keywords pytest folds a skip marker's reports; a marked function has both)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_checks.py:12: marked",
                                 "SKIPPED [[]1[]] test_checks.py:17: not here"])
