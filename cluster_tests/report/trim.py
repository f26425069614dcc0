"""What the session lets go of once a test is done, that pytest and its plugins would keep to
its end: 190,000 items at 4096 nodes make every byte an item count.  What this touches of
pytest's private parts, and why, is in core/pytestprivate.py."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from cluster_tests.core.pytestprivate import forget_item_leftovers, forget_report


class Trimmer:
    """A plugin (one per session)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None
                                ) -> Generator[None, object, object]:
        """Once an item has run, what plugins left on it for its own run goes: pytest-timeout's
        cancel closure, the tmpdir plugin's per-phase results (read by tmp_path's teardown, left
        on every item that has none): 300 B an item, for the whole session."""
        try:
            return (yield)
        finally:
            forget_item_leftovers(item)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Once the terminal reporter has counted it, a passed setup or teardown with nothing
        captured is let go: pytest keeps every one for the whole session (two per item, 380,000
        at 4096 nodes), reads them only to print a failed test's captured teardown output, and
        looks through all of them for each failed test (quadratic on a red cluster)."""
        if report.when == "call" or not report.passed or report.sections:
            # kept (pytest's stats, to the end): its copy of the item's keywords (300 B an item)
            # is read only for the skipped summary's folding, which asks for these two
            report.keywords = {k: 1 for k in ("skip", "pytestmark") if k in report.keywords}
            return
        forget_report(self.config.pluginmanager.get_plugin("terminalreporter"), report)
