"""After the verdict, on a run built here: the metrics textfile (read back with prometheus_client's
own parser), the HTML history plot, and report/files.py writing every report whatever the
history file is."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from records import c1_property

from cluster_tests.judge.problem import PROPERTY, Headline, Problem
from cluster_tests.report import files, metrics
from cluster_tests.report import history as history_mod
from cluster_tests.report import html as html_report
from cluster_tests.report.summary import Outcome, Recorder

NODES = ["node1", "node2", "node3"]
#: a cause with everything the text format must escape: quotes, a backslash, a newline
ODD = 'line "one"\\ two\nthree'


def recorder() -> Recorder:
    rec = Recorder(list(NODES))
    problem = Problem(("node3",), Headline(ODD), "node3: refused", check="test_login[node3]")
    outcomes = [
        Outcome("test_login[node1]", "test_login", "cluster_tests/checks/ssh.py", "passed",
                node="node1"),
        Outcome("test_login[node3]", "test_login", "cluster_tests/checks/ssh.py", "failed",
                "node3: refused", node="node3", properties={PROPERTY: problem.to_json()}),
        Outcome("test_ssh_trust[node1->node3]", "test_ssh_trust", "cluster_tests/checks/ssh.py",
                "skipped", "blocked", pair=("node1", "node3"),
                properties={"blocked_by": "test_login[node3]"}),
        Outcome("test_gpu_health[node1]", "test_gpu_health", "cluster_tests/checks/health.py",
                "skipped", "no GPU", node="node1"),
        Outcome("test_pdsh[launcher->node1]", "test_pdsh", "cluster_tests/checks/ssh.py",
                "passed"),
        Outcome("test_allreduce_pair[node1<->node2]", "test_allreduce_pair",
                "cluster_tests/checks/collective.py", "passed", pair=("node1", "node2"),
                properties={"busbw_GBps": "0.005432", "size_bytes": "1048576"}, ordered=False),
        Outcome("test_allreduce", "test_allreduce", "cluster_tests/checks/collective.py",
                "passed", properties=c1_property({65536: (1.0, 0.0033, 0.0044),
                                                  1048576: (1.0, 0.004, 0.0053)})),
    ]
    rec.outcomes = {o.test_id: o for o in outcomes}
    return rec


def test_metrics_textfile_holds_every_outcome_and_figure_escaped_by_the_library(tmp_path):
    path = metrics.write(tmp_path / "ct.prom", recorder(), duration_s=12.5, finished=1.8e9)
    text = path.read_text()
    assert '\\"one\\"\\\\ two\\nthree' in text  # the exposition format's escapes
    assert not list(tmp_path.glob("ct.prom.*"))  # the temporary file was renamed over it
    families = {f.name: f for f in text_string_to_metric_families(text)}
    checks = {(s.labels["check"], s.labels["node"], s.labels["pair"]): s
              for s in families["cluster_tests_check_passed"].samples}
    assert checks[("test_login", "node3", "")].value == 0.0
    assert checks[("test_login", "node3", "")].labels["cause"] == ODD  # parsed back whole
    assert checks[("test_login", "node3", "")].labels["section"] == "ssh"
    assert checks[("test_login", "node1", "")].value == 1.0
    blocked = checks[("test_ssh_trust", "", "node1->node3")]
    assert (blocked.value, blocked.labels["outcome"], blocked.labels["cause"]) == (
        0.0, "blocked", "blocked by test_login[node3]")
    assert ("test_gpu_health", "node1", "") not in checks  # not applicable: no sample
    assert ("test_pdsh", "", "launcher->node1") in checks
    c1 = {s.labels["size_bytes"]: s.value
          for s in families["cluster_tests_allreduce_busbw_bytes_per_second"].samples}
    assert c1 == {"65536": pytest.approx(0.0044e9), "1048576": pytest.approx(0.0053e9)}
    (c2,) = families["cluster_tests_allreduce_pair_busbw_bytes_per_second"].samples
    assert c2.labels == {"pair": "node1<->node2", "a": "node1", "b": "node2",
                         "size_bytes": "1048576"} and c2.value == pytest.approx(0.005432e9)
    counts = {s.labels["outcome"]: s.value for s in families["cluster_tests_run_checks"].samples}
    assert counts == {"passed": 4, "failed": 1, "blocked": 1, "skipped": 1}
    assert families["cluster_tests_run_duration_seconds"].samples[0].value == 12.5
    assert families["cluster_tests_run_end_time_seconds"].samples[0].value == 1.8e9


def test_history_plot_draws_c1_and_each_pair_over_the_runs():
    series: history_mod.Series = {"runs": [{"id": i, "started": 0} for i in (4, 5, 6)],
              "c1": {"size_bytes": 1 << 20, "values": {4: 1.0, 5: 1.0, 6: 0.6}},
              "pairs": {"node1<->node2": {"size_bytes": 1 << 20, "values": {4: 2.0, 6: 1.0}},
                        "node1<->node3": {"size_bytes": 1 << 20, "values": {5: 2.0, 6: 2.0}}}}
    plot = html_report.history_plot(series)
    assert plot is not None
    names = [s["name"] for s in plot.series]
    assert names == ["C1 at 1MB", "C2 node1<->node2", "C2 node1<->node3"]  # slid most first
    assert [t for _, t in plot.xticks] == ["#4", "#5", "#6"]
    c1 = plot.series[0]["points"]
    assert [p["x"] for p in c1] == [plot.x0, (plot.x0 + plot.x1) / 2, plot.x1]
    assert c1[2]["y"] > c1[0]["y"]  # lower busbw: lower on the plot (larger y)
    assert len(plot.series[1]["points"]) == 2  # a pair not in run 5 has no point there
    assert html_report.history_plot({}) is None


def _write(tmp_path: Path, history: files.HistoryOptions | None, **kw) -> files.Written:
    return files.write_all(
        tmp_path / "summary.json", recorder(), {}, {"exitstatus": 1},  # type: ignore[arg-type]
        slots={n: 1 for n in NODES}, world_multiple=1, hostfile=None, ssh=["ssh"],
        command="pytest", html_path=None, launch_dir=tmp_path, history=history, **kw)


def test_every_report_is_written_and_the_same_whatever_the_history_file(tmp_path):
    good = _write(tmp_path / "a", files.HistoryOptions(tmp_path / "a" / "history.sqlite"),
                  metrics_path=tmp_path / "a" / "ct.prom")
    assert good.history_lines == [] and good.json_path and good.html_path and good.metrics_path
    page = good.html_path.read_text()
    assert '<svg id="plot-history"' in page and "<script" not in page
    bad = tmp_path / "b" / "history.sqlite"
    bad.parent.mkdir()
    noise = os.urandom(4096)
    bad.write_bytes(noise)
    broken = _write(tmp_path / "b", files.HistoryOptions(bad))
    assert broken.history_lines == [f"warning: history not written: {bad} is not an SQLite "
                                    f"database (it does not start with SQLite's header; "
                                    f"corrupt, or another file): left as is"]
    assert bad.read_bytes() == noise
    a = json.loads((tmp_path / "a" / "summary.json").read_text())
    b = json.loads((tmp_path / "b" / "summary.json").read_text())
    for key in ("causes", "allreduce", "pairs"):
        assert a[key] == b[key], key
    assert a["causes"] and {**a["healthy"], "file": ""} == {**b["healthy"], "file": ""}
    assert [t["outcome"] for t in a["tests"]] == [t["outcome"] for t in b["tests"]]
    assert b["history"]["error"] and a["history"]["run"] == 1
    assert (tmp_path / "b" / "hostfile.healthy").read_text() == \
        (tmp_path / "a" / "hostfile.healthy").read_text() == "node1 slots=1\nnode2 slots=1\n"
    assert "plot-history" not in broken.html_path.read_text()  # type: ignore[union-attr]


def test_no_history_writes_no_file(tmp_path):
    got = _write(tmp_path, None)
    assert got.history_path is None and not list(tmp_path.glob("*.sqlite*"))
    assert "history" not in json.loads((tmp_path / "summary.json").read_text())


def test_the_slurm_step_gets_the_verdict_and_its_lines_go_to_the_summary(tmp_path):
    seen = []

    def act(healthy, problems):
        seen.append((list(healthy.excluded), [p.check for p in problems]))
        return ["Slurm: x"], {"ran": False}

    got = _write(tmp_path, None, after_verdict=act)
    assert seen == [(["node3"], ["test_login[node3]"])]
    assert got.slurm_lines == ["Slurm: x"]
    assert json.loads((tmp_path / "summary.json").read_text())["slurm"] == {"ran": False}
    assert history_mod.FILE_NAME == "history.sqlite"


def test_a_slurm_step_that_breaks_is_a_line_and_the_reports_are_written(tmp_path):
    def act(healthy, problems):
        raise RuntimeError("scontrol vanished")

    got = _write(tmp_path, None, after_verdict=act)
    assert got.slurm_lines == ["Slurm: not done: RuntimeError: scontrol vanished"]
    assert got.json_path and got.html_path and (tmp_path / "hostfile.healthy").exists()


def test_cluster_tests_history_prints_the_file_and_names_a_bad_one(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "history.sqlite"
    rec = history_mod.RunRecord(1.8e9, 1.8e9 + 3, NODES, history_mod.digest(NODES, {}),
                                node_stats={n: (0.2, 0.1, False, []) for n in NODES})
    got = history_mod.record(path, rec)
    assert got.run == 1
    cli = Path(sys.executable).parent / "cluster-tests"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTER_TESTS_")}
    shown = subprocess.run([str(cli), "history", "--history", str(path), "-p",
                            "no:cacheprovider"], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path, env=env, check=False)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == f"History {path}: 1 run(s), schema {history_mod.LATEST}"
    assert "  node1  ." in shown.stdout
    path.write_bytes(b"\0" * 512)
    bad = subprocess.run([str(cli), "--history-show", "--history", str(path)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
                         check=False)
    assert bad.returncode == 4 and f"{path} is not an SQLite database" in bad.stderr


def test_a_run_where_nothing_ran_records_nothing_and_touches_no_slurm(tmp_path):
    def act(healthy, problems):
        raise AssertionError("no verdict: nothing to act on")

    got = files.write_all(
        tmp_path / "summary.json", Recorder(list(NODES)), {}, {},  # type: ignore[arg-type]
        slots={n: 1 for n in NODES}, world_multiple=1, hostfile=None, ssh=["ssh"],
        command="pytest --collect-only", html_path=None, launch_dir=tmp_path,
        history=files.HistoryOptions(tmp_path / "history.sqlite"), after_verdict=act)
    assert got.slurm_lines == [] and got.history_lines == []
    assert not (tmp_path / "history.sqlite").exists()


def test_a_report_that_cannot_be_written_is_a_note_never_silence(tmp_path):
    """The reports' directory cannot be written (a file stands where it should be: mode bits
    would not stop root, which runs these tests): every report the run writes there is a note,
    the JSON summary and the fix script included, and the run's verdict still stands."""
    blocked = tmp_path / "reports"
    blocked.write_text("not a directory\n")
    got = files.write_all(
        blocked / "summary.json", recorder(), {}, {"exitstatus": 1},  # type: ignore[arg-type]
        slots={n: 1 for n in NODES}, world_multiple=1, hostfile=None, ssh=["ssh"],
        command="pytest", html_path=None, launch_dir=tmp_path,
        metrics_path=blocked / "ct.prom")
    assert (got.json_path, got.fixes, got.html_path, got.metrics_path) == (None,) * 4
    said = {note.split(" not written: ")[0]: note for note in got.notes}
    assert list(said) == [str(blocked / "hostfile.healthy"),
                          f"JSON summary {blocked}/summary.json", f"fix script {blocked}/fixes.sh",
                          "HTML report", f"metrics textfile {blocked}/ct.prom"]
    assert all(note.endswith(f": '{blocked}'") for note in got.notes), got.notes  # the OSError
    # the launch lines are still the verdict's (the nodes to launch on now)
    assert any("node3" in line for line in got.launch_lines), got.launch_lines
