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
from typing import Any

from cluster_tests.core.nodetable import NodeTable
from cluster_tests.judge.healthyset import Healthy
from cluster_tests.judge.problem import Problem
from cluster_tests.report import fixes as fixes_mod
from cluster_tests.report import healthy as healthy_mod
from cluster_tests.report import history as history_mod
from cluster_tests.report.summary import Recorder

#: what the verdict does outside the reports (Slurm): (summary lines, summary.json's part)
AfterVerdict = Callable[[Healthy, list[Problem]], tuple[list[str], dict[str, Any]]]


@dataclass(frozen=True)
class HistoryOptions:
    path: Path
    drop: float = 0.7
    window: int = 10


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


def write_all(json_path: Path, recorder: Recorder, facts: NodeTable, meta: dict[str, Any], *,
              slots: Mapping[str, int], world_multiple: int, hostfile: str | None, ssh: list[str],
              command: str, html_path: Path | None, invocation_dir: Path,
              history: HistoryOptions | None = None, metrics_path: Path | None = None,
              after_verdict: AfterVerdict | None = None) -> Written:
    """Write every report file of the run; `json_path` names the JSON summary, the others go
    beside it (the HTML report to `html_path` where given). A file that cannot be written is a
    note, never an error of the run."""
    out = Written()
    finished = time.time()
    meta = {**meta, "finished": finished}
    healthy_path = json_path.with_name(healthy_mod.FILE_NAME)
    nodes = list(slots)
    found = healthy_mod.problems(recorder.outcomes.values())
    rtt = recorder.latency_medians(nodes) if history is not None else None
    result = healthy_mod.decide(recorder, nodes, world_multiple, found, rtt)
    red = any(o.outcome in ("failed", "error") for o in recorder.outcomes.values())
    try:
        if red:
            healthy_mod.write(healthy_path, result, dict(slots))
        else:
            healthy_path.unlink(missing_ok=True)  # a green run leaves no stale file behind
    except OSError as exc:
        out.notes.append(f"{healthy_path} not written: {exc}")
    out.launch_lines = healthy_mod.launch_lines(
        result, healthy_path, invocation_dir, hostfile) if red else []
    extra: dict[str, Any] = {"healthy": healthy_mod.to_json(result, healthy_path if red else None)}
    ran = bool(recorder.outcomes)  # --collect-only, or nothing selected: no verdict to act on
    if after_verdict is not None and ran:
        try:
            out.slurm_lines, slurm_json = after_verdict(result, found)
        except Exception as exc:  # noqa: BLE001 - never the verdict's or the reports' end
            out.slurm_lines, slurm_json = [f"Slurm: not done: {type(exc).__name__}: {exc}"], {
                "error": str(exc)}
        if slurm_json:
            extra["slurm"] = slurm_json
    series: dict[str, Any] = {}
    if history is not None and ran:
        began = time.monotonic()
        rec = history_mod.run_record(
            recorder, facts, started=recorder.started, finished=finished, slots=slots,
            exitstatus=int(meta.get("exitstatus", 0)), source=str(meta.get("node_source", "")),
            excluded=result.excluded, rtt_ms=rtt or {})
        built = time.monotonic() - began
        recorded = history_mod.record(history.path, rec, ratio=history.drop,
                                      window=history.window)
        recorded.seconds += built  # the whole step: the record built, written, read back
        out.history_lines = recorded.lines()
        out.history_path = recorded.path
        series = recorded.series
        extra["history"] = recorded.to_json()
    try:
        recorder.write_json(json_path, facts, meta, extra)
        out.json_path = json_path
    except OSError:
        pass
    fixes_path = json_path.with_name(fixes_mod.SCRIPT_NAME)
    try:
        n_cmd, n_manual = fixes_mod.write(fixes_path, recorder.outcomes.values(), ssh, command)
        out.fixes = (fixes_path, n_cmd, n_manual)
    except OSError:
        pass
    from cluster_tests.report import html as html_report  # jinja2: only when a run ends

    html = html_path or json_path.with_name("cluster_report.html")
    try:
        out.html_path = html_report.write(html, recorder, facts, meta, history=series)
    except OSError as exc:
        out.notes.append(f"HTML report not written: {exc}")
    if metrics_path is not None:
        from cluster_tests.report import metrics  # prometheus_client: only when asked

        try:
            out.metrics_path = metrics.write(metrics_path, recorder,
                                             duration_s=round(finished - recorder.started, 3),
                                             finished=finished)
        except OSError as exc:
            out.notes.append(f"metrics textfile {metrics_path} not written: {exc}")
    return out
