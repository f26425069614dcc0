"""The run's terminal summary, as pytest's terminal reporter writes it: the cluster summary (the
SSH trust matrix, the node table, the site checks, notes, the report files written), the
all-reduce tables (report/colltable.py), the verdict (the run's last word, right above pytest's
count) and what was done after it (the history's trends, Slurm, the metrics file).

:class:`SummaryPlugin` feeds the run's reports to the Recorder (registered per run, only where
there is a cluster to summarize); the plugin's `pytest_terminal_summary` hooks call the
sections here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cluster_tests.core.nodetable import NodeTable
from cluster_tests.report import colltable, files
from cluster_tests.report.fixes import review_line
from cluster_tests.report.summary import Recorder

RECORDER_KEY = pytest.StashKey[Recorder]()
#: lines the cluster summary ends with: how the node list was read, a file not written
NOTES_KEY = pytest.StashKey[list[str]]()

RED = "verdict: causes and launch now"
GREEN = "verdict: the launch will work"


def add_notes(config: pytest.Config, lines: list[str]) -> None:
    """Lines for the end of the cluster summary."""
    if lines:
        config.stash[NOTES_KEY] = [*config.stash.get(NOTES_KEY, []), *lines]


class SummaryPlugin:
    """Feeds the run's reports to the Recorder and prints the cluster summary.  `node_facts`:
    what the run learnt of each node (every xdist worker's too), read when the summary is
    printed; `red_lines`: what a red run's verdict ends with (--then-launch's word)."""

    NAME = "cluster_tests_summary"

    def __init__(self, recorder: Recorder, node_facts: Callable[[], NodeTable],
                 red_lines: list[str]) -> None:
        self.recorder = recorder
        self.node_facts = node_facts
        self.red_lines = red_lines

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.recorder.add(report)

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        if not self.recorder.outcomes:
            return
        lines = self.recorder.summary_lines(self.node_facts(),
                                            extra=config.stash.get(NOTES_KEY, []))
        if lines:
            terminalreporter.section("cluster summary")
            for line in lines:
                terminalreporter.line(line)
        written = config.stash.get(files.WRITTEN_KEY, None) or files.Written()
        for name, path in (("JSON summary", written.json_path), ("HTML report", written.html_path)):
            if path is not None:
                terminalreporter.line(f"{name}: {path}")

    def verdict(self, config: pytest.Config) -> list[str]:
        """The run's last lines: a red run's causes, blocked checks per red, the fix script and
        the launch on the healthy nodes; a green run's launch."""
        if not self.recorder.outcomes:
            return []
        written = config.stash.get(files.WRITTEN_KEY, None) or files.Written()
        if not self.recorder.red:  # what could not run here, then the launch
            return self.recorder.not_applicable() + written.launch_lines
        said = review_line(written.fixes, Path(config.invocation_params.dir))
        return self.recorder.verdict_lines(written.launch_lines, said) + self.red_lines


def verdict(terminalreporter: Any, config: pytest.Config) -> None:
    """The verdict's section: the causes, the checks each red blocks, and the launch now
    (hostfile.healthy, the launch line last); on a green run, what could not run here and the
    launch."""
    plugin = config.pluginmanager.get_plugin(SummaryPlugin.NAME)
    if not isinstance(plugin, SummaryPlugin):
        return
    lines = plugin.verdict(config)
    if lines:
        terminalreporter.write_sep("=", RED if plugin.recorder.red else GREEN)
        for line in lines:
            terminalreporter.write_line(line)


def collective(terminalreporter: Any, config: pytest.Config) -> None:
    """C1/C2: the all-reduce bandwidth tables, when a collective check recorded one."""
    recorder = config.stash.get(RECORDER_KEY, None)
    lines = colltable.tables(recorder.allreduce(), recorder.pair_results()) if recorder else []
    if lines:
        terminalreporter.write_sep("=", "all-reduce bandwidth (C1/C2)")
        for line in lines:
            terminalreporter.write_line(line)


def after_verdict(terminalreporter: Any, config: pytest.Config) -> None:
    """After the verdict: the history's warnings (trends, or why it was not written), what was
    done in Slurm (or would be), where the metrics went."""
    written = config.stash.get(files.WRITTEN_KEY, None)
    if written is None:
        return
    if written.history_lines:
        terminalreporter.write_sep("=", f"history ({written.history_path})")
        for line in written.history_lines:
            terminalreporter.write_line(line)
    if written.slurm_lines:
        terminalreporter.write_sep("=", "slurm")
        for line in written.slurm_lines:
            terminalreporter.write_line(line)
    if written.metrics_path is not None:
        terminalreporter.write_line(f"metrics textfile: {written.metrics_path}")
