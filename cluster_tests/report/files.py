"""The report files of a run, written at its end beside the JUnit report: the JSON summary
(`summary.json`), `hostfile.healthy` (only when something is red), the fix script (`fixes.sh`),
the HTML report, the history of runs (`history.sqlite`, unless --no-history) and, when asked,
the metrics textfile.  The plugin calls :func:`write_all` once, on the controller; what the
verdict does in Slurm is the plugin's `after_verdict` (core/slurmctl.py), handed in."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from cluster_tests.core.nodetable import NodeTable
from cluster_tests.judge.healthyset import Healthy
from cluster_tests.judge.hostfile.launchargs import LaunchCommand
from cluster_tests.judge.problem import Problem
from cluster_tests.report import fixes as fixes_mod
from cluster_tests.report import healthy as healthy_mod
from cluster_tests.report import history as history_mod
from cluster_tests.report.summary import Recorder

#: what the verdict does outside the reports (Slurm: core/slurmctl.acting): (summary lines,
#: summary.json's part)
AfterVerdict = Callable[[Healthy, list[Problem]], tuple[list[str], dict[str, object]]]


@dataclass(frozen=True)
class HistoryOptions:
    path: Path
    drop: float = 0.7
    window: int = 10

    @classmethod
    def beside(cls, given: Path | None, json_path: Path, drop: float = 0.7,
               window: int = 10) -> HistoryOptions:
        """--history (`given`), else the history file beside the JSON summary."""
        return cls(history_mod.path(given, json_path), drop, window)


#: the report files written at the end of the run (the terminal summary reads them)
WRITTEN_KEY = pytest.StashKey["Written"]()


@dataclass
class Written:
    """What was written, for the terminal summary."""

    json_path: Path | None = None
    html_path: Path | None = None
    #: the fix script, and how many command / manual blocks it has
    fixes: tuple[Path, int, int] | None = None
    #: what the summary ends with: the nodes to launch on now and the launch line
    launch_lines: list[str] = field(default_factory=list)
    #: lines for the summary: a file that could not be written
    notes: list[str] = field(default_factory=list)
    #: the history's warnings (trends, or why it was not written), and its file
    history_lines: list[str] = field(default_factory=list)
    history_path: Path | None = None
    #: what was done (or would be) in Slurm
    slurm_lines: list[str] = field(default_factory=list)
    metrics_path: Path | None = None


def write_all(json_path: Path, recorder: Recorder, facts: NodeTable, meta: Mapping[str, object], *,
              slots: Mapping[str, int], world_multiple: int, hostfile: str | None, ssh: list[str],
              command: str, html_path: Path | None, launch_dir: Path,
              launch: LaunchCommand | None = None,
              history: HistoryOptions | None = None, metrics_path: Path | None = None,
              after_verdict: AfterVerdict | None = None) -> Written:
    """Write every report file of the run; `json_path` names the JSON summary, the others go
    beside it (the HTML report to `html_path` where given). A file that cannot be written is a
    note (`Written.notes`, which the summary shows), never an error of the run."""
    out = Written()
    finished = time.time()
    meta = {**meta, "finished": finished}
    found = healthy_mod.problems(recorder.outcomes.values())
    rtt = recorder.latency_medians(list(slots)) if history is not None else None
    result = healthy_mod.decide(recorder, list(slots), world_multiple, found, rtt)
    extra: dict[str, object] = {"healthy": _healthy(out, json_path.with_name(healthy_mod.FILE_NAME),
                                                 recorder, result, slots, launch_dir,
                                                 hostfile, launch)}
    ran = bool(recorder.outcomes)  # --collect-only, or nothing selected: no verdict to act on
    if after_verdict is not None and ran:
        slurm_json = _after_verdict(out, after_verdict, result, found)
        if slurm_json:
            extra["slurm"] = slurm_json
    series: history_mod.Series = {}
    if history is not None and ran:
        series, extra["history"] = _history(out, history, recorder, facts, meta, slots,
                                            finished, result, rtt)
    def write_json() -> Path:
        recorder.write_json(json_path, facts, meta, extra)
        return json_path

    out.json_path = _attempt(out, f"JSON summary {json_path}", write_json)
    fixes_path = json_path.with_name(fixes_mod.SCRIPT_NAME)
    counted = _attempt(out, f"fix script {fixes_path}", lambda: fixes_mod.write(
        fixes_path, recorder.outcomes.values(), ssh, command))
    if counted:
        out.fixes = (fixes_path, *counted)
    from cluster_tests.report import html as html_report  # jinja2: only when a run ends

    html = html_path or json_path.with_name("cluster_report.html")
    out.html_path = _attempt(out, "HTML report", lambda: html_report.write(
        html, recorder, facts, meta, history=series))
    if metrics_path is not None:
        from cluster_tests.report import metrics  # prometheus_client: only when asked

        out.metrics_path = _attempt(out, f"metrics textfile {metrics_path}", lambda: metrics.write(
            metrics_path, recorder, duration_s=round(finished - recorder.started, 3),
            finished=finished))
    return out


T = TypeVar("T")


def _attempt(out: Written, what: str, write: Callable[[], T]) -> T | None:
    """`write()`'s result, or None and a note in `out` where the file could not be written."""
    try:
        return write()
    except OSError as exc:
        out.notes.append(f"{what} not written: {exc}")
        return None


def _healthy(out: Written, path: Path, recorder: Recorder, result: Healthy,
             slots: Mapping[str, int], launch_dir: Path, hostfile: str | None,
             command: LaunchCommand | None) -> dict[str, object]:
    """hostfile.healthy (only when something is red and leaving nodes out gives a launch that
    works: no stale file is left behind otherwise) and the launch lines; its part of
    summary.json."""
    red = recorder.red
    written = red and result.launchable
    if written:
        _attempt(out, str(path), lambda: healthy_mod.write(path, result, dict(slots)))
    else:
        _attempt(out, str(path), lambda: path.unlink(missing_ok=True))
    if red:
        out.launch_lines = healthy_mod.launch_lines(result, path, launch_dir, hostfile, command)
    elif recorder.outcomes:
        out.launch_lines = healthy_mod.green_lines(len(slots), command, hostfile)
    return healthy_mod.to_json(result, path if written else None)


def _after_verdict(out: Written, act: AfterVerdict, result: Healthy, found: list[Problem]
                   ) -> dict[str, object]:
    """What the verdict does in Slurm: its lines in `out`, its part of summary.json."""
    try:
        out.slurm_lines, slurm_json = act(result, found)
    except Exception as exc:  # noqa: BLE001 - never the verdict's or the reports' end
        out.slurm_lines, slurm_json = [f"Slurm: not done: {type(exc).__name__}: {exc}"], {
            "error": str(exc)}
    return slurm_json


def _history(out: Written, history: HistoryOptions, recorder: Recorder, facts: NodeTable,
             meta: Mapping[str, object], slots: Mapping[str, int], finished: float,
             result: Healthy, rtt: dict[str, float] | None
             ) -> tuple[history_mod.Series, dict[str, object]]:
    """The run added to the history: its warnings in `out`; (the plot's series, summary.json's
    part)."""
    began = time.monotonic()
    status = meta.get("exitstatus", 0)
    rec = history_mod.run_record(
        recorder, facts, started=recorder.started, finished=finished, slots=slots,
        exitstatus=int(status) if isinstance(status, int | float | str) else 0,
        source=str(meta.get("node_source", "")),
        excluded=result.excluded, rtt_ms=rtt or {})
    built = time.monotonic() - began
    recorded = history_mod.record(history.path, rec, ratio=history.drop, window=history.window)
    recorded.seconds += built  # the whole step: the record built, written, read back
    out.history_lines = recorded.lines()
    out.history_path = recorded.path
    return recorded.series, recorded.to_json()
