"""The one place where the package uses pytest's private parts (`_pytest`, private arguments and
attributes, and pytest-timeout's attribute on an item), each with why pytest offers no public
way to do it.

- **The JUnit writer** (report/junit.py): `--junitxml` is written by `_pytest.junitxml.LogXML`,
  which holds every test's XML element until the session ends (several hundred MB at 4096
  nodes).  pytest has no public hook or class for how the file is written, only for what goes
  into it (`record_property`, `junit_*` ini options).  So report/junit.py subclasses LogXML
  (:data:`LOG_XML`), built with the arguments pytest's junitxml plugin builds its own with,
  and puts it where pytest keeps its writer (:data:`XML_KEY`, read also by `record_property`
  for the JUnit family).  Nothing of pytest's instance is copied or changed: it is unregistered
  (public plugin-manager API) and the new one registered.  What the subclass relies on of
  LogXML is :data:`LOG_XML_METHODS` and :data:`LOG_XML_ATTRS`; its global properties come
  through :func:`junit_global_properties`.
- **What a finished item keeps** (report/trim.py): the tmpdir plugin's per-phase results
  (:data:`TMPPATH_RESULT`, a private stash key) and pytest-timeout's `cancel_timeout` closure
  stay on every item for the whole session (300 B an item); neither plugin offers a way to let
  them go.  The terminal reporter's `stats` lists (the public `pytest.TerminalReporter`'s
  attribute) keep every passed setup/teardown report; there is no public way to drop one
  (:func:`forget_report`).
- **A blocked check reads as pytest's own skip** (core/outcome.py): :class:`ItemSkip` is
  pytest's skip exception raised with `_use_item_location=True` (what `pytest.skip` inside a
  test does through a marker: the report points at the test, not at the line of the library
  that raised it; `pytest.skip()` has no public argument for it), and :func:`named_as_skip`
  gives the subclass the name pytest's own outcome exceptions show (`Skipped: ...`: their
  `__module__` is "builtins"), so that the reason reads as every other skip's.
- **`pytest --lf` reruns what a red blocked** (core/outcome.py): the cache plugin's last-failed
  set holds only failures; :func:`mark_last_failed` adds a blocked check's node id to it (the
  `lfplugin`'s `lastfailed` dict, written to the cache at the session's end).  pytest offers no
  public hook to say that a skipped test is to be rerun.

(`pytest --hostfile PATH`, whose PATH pytest's first parse takes for a test path, needs none of
pytest's private parts: core/reparse.py runs the session again through `pytest.main`.)

Where pytest's private parts are not what this was written for (another pytest), each use is
guarded: the JUnit writer stays pytest's own, the items keep what they held, a blocked check's
skip points where pytest's own would, `--lf` reruns the failures only; the run behaves as with
pytest alone.  tests/unit/test_pytestprivate.py fails when any of them changes, so that the
guard is not taken silently.
"""

from __future__ import annotations

import inspect
from typing import Any, TypeVar

import pytest

try:
    from _pytest import junitxml as _junitxml
except ImportError:  # pragma: no cover - pytest always has it
    _junitxml = None  # type: ignore[assignment]

try:
    from _pytest import tmpdir as _tmpdir
except ImportError:  # pragma: no cover
    _tmpdir = None  # type: ignore[assignment]

#: pytest's JUnit writer class (None where pytest has no junitxml)
LOG_XML: type | None = getattr(_junitxml, "LogXML", None)
#: where pytest keeps its JUnit writer in `config.stash` (None where pytest has no junitxml)
XML_KEY: pytest.StashKey[object] | None = getattr(_junitxml, "xml_key", None)
#: where the tmpdir plugin leaves its per-phase results on an item
TMPPATH_RESULT: pytest.StashKey[object] | None = getattr(_tmpdir, "tmppath_result_key", None)
#: the ini options pytest's junitxml plugin builds its writer from, after the path and prefix
#: (`_pytest.junitxml.pytest_configure`), in the order LogXML takes them
JUNIT_INI = ("junit_suite_name", "junit_logging", "junit_duration_report", "junit_family",
             "junit_log_passing_tests")
#: pytest-timeout's attribute on an item: the closure that cancels the item's timer
CANCEL_TIMEOUT = "cancel_timeout"
#: what report/junit.py's subclass relies on in pytest's LogXML: methods, and attributes of an
#: instance
LOG_XML_METHODS = ("node_reporter", "finalize", "pytest_sessionfinish",
                   "_get_global_properties_node")
LOG_XML_ATTRS = ("node_reporters", "node_reporters_ordered", "stats", "cnt_double_fail_tests",
                 "suite_name", "logfile")
#: the private argument of pytest's skip exception that reports a skip at the test's location
ITEM_LOCATION = "_use_item_location"
#: the cache plugin's name in the plugin manager, and its last-failed dict (node id -> True)
LF_PLUGIN, LAST_FAILED = "lfplugin", "lastfailed"

_SKIP: type[BaseException] = pytest.skip.Exception
#: whether pytest's skip exception takes ITEM_LOCATION (else a blocked skip is a plain one)
SKIP_AT_ITEM = ITEM_LOCATION in inspect.signature(_SKIP.__init__).parameters


def junit_writer(config: pytest.Config) -> Any:
    """pytest's JUnit writer for this session (None where there is none: no --junitxml, an
    xdist worker, another pytest)."""
    return config.stash.get(XML_KEY, None) if XML_KEY is not None else None


def replace_junit_writer(config: pytest.Config, old: object, new: object) -> None:
    """`new` in the place of pytest's writer `old`: in the plugin manager and the stash."""
    assert XML_KEY is not None
    config.pluginmanager.unregister(old)
    config.stash[XML_KEY] = new
    config.pluginmanager.register(new)


def forget_item_leftovers(item: pytest.Item) -> None:
    """What plugins left on an item for its own run (its run is over)."""
    item.__dict__.pop(CANCEL_TIMEOUT, None)
    if TMPPATH_RESULT is not None and TMPPATH_RESULT in item.stash:
        del item.stash[TMPPATH_RESULT]


def junit_global_properties(xml: Any) -> Any:
    """LogXML's <properties> element of the session (`record_testsuite_property`), or None."""
    return xml._get_global_properties_node()


def forget_report(reporter: Any, report: pytest.TestReport) -> None:
    """The terminal reporter lets go of `report`, when it is the last one it counted as passed
    setup/teardown (stats[""]: pytest keeps every one to the session's end)."""
    kept = reporter.stats.get("") if reporter is not None else None
    if kept and kept[-1] is report:
        kept.pop()


class ItemSkip(_SKIP):  # type: ignore[valid-type,misc]
    """pytest's skip exception, reported at the test's location (as a skip of the test itself),
    not at the line that raised it."""

    def __init__(self, msg: str) -> None:
        if SKIP_AT_ITEM:
            super().__init__(msg, **{ITEM_LOCATION: True})
        else:  # pragma: no cover - another pytest: a plain skip
            super().__init__(msg)


E = TypeVar("E", bound=type)


def named_as_skip(cls: E) -> E:
    """`cls` (an ItemSkip) named as pytest names its own skip in a report ("Skipped: ...", its
    module "builtins"), so that a subclass's reason reads as every other skip's."""
    cls.__module__ = _SKIP.__module__
    cls.__qualname__ = cls.__name__ = _SKIP.__qualname__
    return cls


def mark_last_failed(config: pytest.Config, nodeid: str) -> None:
    """`nodeid` in the cache plugin's last-failed set, so that `pytest --lf` reruns it (nothing
    where the cache plugin is off: `-p no:cacheprovider`)."""
    plugin = config.pluginmanager.get_plugin(LF_PLUGIN)
    got: dict[str, bool] | None = getattr(plugin, LAST_FAILED, None)
    if isinstance(got, dict):
        got[nodeid] = True
