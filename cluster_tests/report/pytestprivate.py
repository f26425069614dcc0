"""The one place where the package uses pytest's private parts (`_pytest`, and pytest-timeout's
attribute on an item), each with why pytest offers no public way to do it.

- **The JUnit writer** (report/junit.py): `--junitxml` is written by `_pytest.junitxml.LogXML`,
  which holds every test's XML element until the session ends (several hundred MB at 4096
  nodes).  pytest has no public hook or class for how the file is written, only for what goes
  into it (`record_property`, `junit_*` ini options).  So report/junit.py subclasses LogXML
  (:data:`LOG_XML`), built with the arguments pytest's junitxml plugin builds its own with,
  and puts it where pytest keeps its writer (:data:`XML_KEY`, read also by `record_property`
  for the JUnit family).  Nothing of pytest's instance is copied or changed: it is unregistered
  (public plugin-manager API) and the new one registered.
- **What a finished item keeps** (report/trim.py): the tmpdir plugin's per-phase results
  (:data:`TMPPATH_RESULT`, a private stash key) and pytest-timeout's `cancel_timeout` closure
  stay on every item for the whole session (300 B an item); neither plugin offers a way to let
  them go.  The terminal reporter's `stats` lists (the public `pytest.TerminalReporter`'s
  attribute) keep every passed setup/teardown report; there is no public way to drop one.

(`pytest --hostfile PATH`, whose PATH pytest's first parse takes for a test path, needs none of
pytest's private parts: core/reparse.py runs the session again through `pytest.main`.)

Where pytest's private parts are not what this was written for (another pytest), each use is
guarded: the JUnit writer stays pytest's own, the items keep what they held; the run behaves
as with pytest alone.  tests/unit/test_pytestprivate.py fails when any of them changes, so
that the guard is not taken silently.
"""

from __future__ import annotations

from typing import Any

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
