"""The report files of a run, written at its end beside the JUnit report: the JSON summary
(`summary.json`), `hostfile.healthy` (only when something is red), the fix script (`fixes.sh`)
and the HTML report.  The plugin calls :func:`write_all` once, on the controller."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster_tests.core.nodetable import NodeTable
from cluster_tests.report import fixes as fixes_mod
from cluster_tests.report import healthy as healthy_mod
from cluster_tests.report.summary import Recorder


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


def write_all(json_path: Path, recorder: Recorder, facts: NodeTable, meta: dict[str, Any], *,
              slots: Mapping[str, int], world_multiple: int, hostfile: str | None, ssh: list[str],
              command: str, html_path: Path | None, invocation_dir: Path) -> Written:
    """Write every report file of the run; `json_path` names the JSON summary, the others go
    beside it (the HTML report to `html_path` where given). A file that cannot be written is a
    note, never an error of the run."""
    out = Written()
    healthy_path = json_path.with_name(healthy_mod.FILE_NAME)
    result = healthy_mod.decide(recorder, list(slots), world_multiple)
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
    try:
        recorder.write_json(json_path, facts, meta,
                            {"healthy": healthy_mod.to_json(result, healthy_path if red else None)})
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
        out.html_path = html_report.write(html, recorder, facts, meta)
    except OSError as exc:
        out.notes.append(f"HTML report not written: {exc}")
    return out
