"""report/history.py: the SQLite history of runs (schema, migrations, files that are not ours,
locks, two writers), the trends read back from it, and `--history-show`; on runs built here."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from unittest.mock import ANY

import pytest
from records import c1_property

from cluster_tests.judge.problem import PROPERTY, Problem
from cluster_tests.judge.ssh import sshfail
from cluster_tests.report import history as history_mod
from cluster_tests.report.summary import Outcome, Recorder

NODES = ["node1", "node2", "node3"]
PAIRS = [("node1", "node2"), ("node1", "node3"), ("node2", "node3")]


def run(c1: float | None = 1.0, c2: float | dict | None = 1.0, *, red: dict | None = None,
        passed: bool = True, nodes: list[str] = NODES, when: float = 0.0) -> history_mod.RunRecord:
    """One run's record: C1 busbw at 1M, each pair's C2 busbw at 1M, the nodes left out."""
    red = red or {}
    started = when or time.time()
    rec = history_mod.RunRecord(started, started + 5, list(nodes), history_mod.digest(nodes, {}),
                                0, "hostfile")
    rec.results = [(f"test_login[{n}]", "failed" if n in red else "passed",
                    Problem((n,), sshfail.Cause.REFUSED, "x", check=f"test_login[{n}]").to_json()
                    if n in red else None, None) for n in nodes]
    rec.node_stats = {n: (0.1, 0.05, n in red, red.get(n, [])) for n in nodes}
    if c1 is not None:
        rec.c1 = [{"size_bytes": 65536, "busbw_GBps": c1 / 10},
                  {"size_bytes": 1 << 20, "busbw_GBps": c1, "algbw_GBps": c1 * 0.75,
                   "time_us": 100.0}]
        rec.c1_passed = passed
    if c2 is not None:
        values = c2 if isinstance(c2, dict) else {p: c2 for p in PAIRS}
        rec.c2 = {p: (1 << 20, v, passed) for p, v in values.items()}
    return rec


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}


# -- the file ------------------------------------------------------------------------------------


def test_a_new_file_has_the_latest_schema_wal_and_the_suites_application_id(tmp_path):
    path = tmp_path / "reports" / "history.sqlite"
    got = history_mod.record(path, run())
    assert not got.error and got.run == 1
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == history_mod.LATEST == 2
    assert conn.execute("PRAGMA application_id").fetchone()[0] == history_mod.APPLICATION_ID
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT count(*) FROM results").fetchone()[0] == 3
    assert {"c2_pair", "node_runs_node", "runs_digest"} <= tables(path)
    # the Problem as the red carried it, and the numbers
    assert conn.execute("SELECT count(*) FROM c2").fetchone()[0] == 3
    assert conn.execute("SELECT busbw_GBps FROM c1 WHERE size_bytes = 1048576").fetchone()[0] \
        == 1.0
    conn.close()


def test_a_schema_1_file_is_migrated_in_place_and_keeps_its_runs(tmp_path):
    path = tmp_path / "history.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    for sql in history_mod.MIGRATIONS[0]:
        conn.execute(sql)
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO runs (started, finished, digest, nodes, red) "
                 "VALUES (1.0, 2.0, ?, 3, 0)", (history_mod.digest(NODES, {}),))
    conn.execute("INSERT INTO c2 (run, a, b, size_bytes, busbw_GBps, passed) "
                 "VALUES (1, 'node1', 'node2', 1048576, 2.0, 1)")
    conn.close()
    assert "c2_pair" not in tables(path)
    got = history_mod.record(path, run())
    assert not got.error and got.run == 2
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == history_mod.LATEST
    assert conn.execute("SELECT busbw_GBps FROM c2 WHERE run = 1").fetchall() == [(2.0,)]
    conn.close()
    assert "c2_pair" in tables(path)


def test_migrating_twice_is_a_no_op(tmp_path):
    conn = history_mod.connect(tmp_path / "h.sqlite")
    assert history_mod.migrate(conn) == history_mod.LATEST
    assert conn.execute("PRAGMA user_version").fetchone()[0] == history_mod.LATEST
    conn.close()


@pytest.mark.parametrize("kind", ["random bytes", "another program", "newer schema"])
def test_a_file_that_is_not_ours_is_a_warning_and_left_byte_for_byte(tmp_path, kind):
    path = tmp_path / "history.sqlite"
    if kind == "random bytes":
        path.write_bytes(os.urandom(8192))
        said = "is not an SQLite database"
    else:
        conn = sqlite3.connect(path)
        if kind == "another program":
            conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
            said = "is another program's SQLite database (application_id 0x0, tables: photos)"
        else:
            conn.execute(f"PRAGMA application_id = {history_mod.APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {history_mod.LATEST + 5}")
            said = f"has schema {history_mod.LATEST + 5}, newer than this cluster-tests knows"
        conn.commit()
        conn.close()
    before = path.read_bytes()
    got = history_mod.record(path, run())
    assert got.run is None and said in got.error and str(path) in got.error, got.error
    assert got.lines() == [f"warning: history not written: {got.error}"]
    assert path.read_bytes() == before
    assert not path.with_name(path.name + "-wal").exists()


def test_a_locked_file_is_a_warning_then_the_next_run_writes(tmp_path):
    path = tmp_path / "history.sqlite"
    assert not history_mod.record(path, run()).error
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    got = history_mod.record(path, run(), timeout=0.2)
    assert got.run is None and "is locked by another run" in got.error and str(path) in got.error
    holder.execute("ROLLBACK")
    holder.close()
    assert history_mod.record(path, run()).run == 2


def test_two_runs_writing_at_once_both_land(tmp_path):
    path = tmp_path / "history.sqlite"
    assert not history_mod.record(path, run()).error
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a third writer holds the lock a moment
    results: list[history_mod.Recorded] = []
    threads = [threading.Thread(
        target=lambda: results.append(history_mod.record(path, run(), timeout=10)))
        for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    holder.execute("COMMIT")
    holder.close()
    for t in threads:
        t.join()
    assert sorted(r.run or 0 for r in results) == [2, 3], [r.error for r in results]


# -- trends --------------------------------------------------------------------------------------


def test_c1_and_every_pair_below_their_history_warn_with_their_numbers(tmp_path):
    path = tmp_path / "history.sqlite"
    for v in (1.0, 1.1, 0.9, 1.0, 1.05):
        got = history_mod.record(path, run(v, v))
        assert not got.error and not got.trends.drops
    got = history_mod.record(path, run(0.6, {("node1", "node2"): 0.6, ("node1", "node3"): 0.62,
                                   ("node2", "node3"): 0.95}))
    assert [d.what for d in got.trends.drops] == [
        "C1 busbw at 1MB over these 3 nodes", "C2 node1<->node2 busbw at 1MB",
        "C2 node1<->node3 busbw at 1MB"]
    assert all(d.median == 1.0 and d.runs == 5 for d in got.trends.drops)
    assert got.lines()[0] == ("warning: C1 busbw at 1MB over these 3 nodes: 0.6 GB/s, 0.60x its "
                              "median 1 GB/s over its last 5 passing runs (below 0.7x: "
                              "--history-drop)")
    assert got.to_json()["drops"] == [ANY, {"what": "C2 node1<->node2 busbw at 1MB",
                                            "value_GBps": 0.6, "median_GBps": 1.0, "ratio": 0.6,
                                            "runs": 5}, ANY]


def test_failed_runs_another_size_or_node_list_are_not_history(tmp_path):
    path = tmp_path / "history.sqlite"
    for _ in range(3):
        # slow and red: not the figure's normal
        history_mod.record(path, run(0.1, 0.1, passed=False))
    for _ in range(3):
        history_mod.record(path, run(1.0, 1.0, nodes=[*NODES, "node4"]))  # C1 over other nodes
    got = history_mod.record(path, run(0.6, 0.6))
    # C1: no passing run of these 3 nodes yet; the pairs' 3 passing runs were with node4 there
    assert [d.what for d in got.trends.drops] == [f"C2 {a}<->{b} busbw at 1MB" for a, b in PAIRS]
    assert all(d.runs == 3 for d in got.trends.drops)
    got = history_mod.record(path, run(0.6, 0.6), ratio=0.5)
    assert not got.trends.drops


def test_the_window_is_the_last_n_passing_runs(tmp_path):
    got = {}
    for window in (3, 10):
        path = tmp_path / f"history-{window}.sqlite"
        for v in (1.0, 1.0, 1.0, 0.5, 0.5, 0.5):  # oldest first: the last 3 were slow already
            history_mod.record(path, run(v, v))
        got[window] = history_mod.record(path, run(0.4, 0.4), window=window).trends.drops
    assert got[3] == []  # 0.4 against the median 0.5 of the last 3: 0.8x
    assert got[10] and {d.median for d in got[10]} == {0.75} and got[10][0].runs == 6


def test_a_node_red_in_three_of_its_last_five_runs_is_flapping(tmp_path):
    path = tmp_path / "history.sqlite"
    why = ["test_login[node3]: connection refused"]
    for red in ({"node3": why}, {}, {"node3": why}, {}):
        assert not history_mod.record(path, run(red=red)).trends.flapping
    got = history_mod.record(path, run(red={"node3": ["test_ssh_modes[node3]: modes"]}))
    assert [f.text() for f in got.trends.flapping] == [
        "node3 flapping: red in 3 of its last 5 runs (test_ssh_modes[node3]: modes; "
        "test_login[node3]: connection refused)"]


# -- from a Recorder, and back out -----------------------------------------------------------------


def test_a_run_record_reads_the_recorders_outcomes_problems_and_figures():
    rec = Recorder(NODES)
    problem = Problem(("node3",), sshfail.Cause.REFUSED, "node3: refused",
                      check="test_login[node3]")
    rec.outcomes = {o.test_id: o for o in [
        Outcome("test_login[node3]", "test_login", "ssh.py", "failed", "node3: refused",
                node="node3", properties={PROPERTY: problem.to_json()}),
        Outcome("test_ssh_modes[node3]", "test_ssh_modes", "ssh.py", "skipped",
                node="node3", properties={"blocked_by": "test_login[node3]"}),
        Outcome("test_allreduce_pair[node1<->node2]", "test_allreduce_pair", "collective.py",
                "passed", pair=("node1", "node2"),
                properties={"busbw_GBps": "0.25", "size_bytes": "1048576"}, ordered=False),
        Outcome("test_allreduce", "test_allreduce", "collective.py", "passed",
                properties=c1_property({1048576: (7.0, 0.375, 0.5)})),
    ]}
    got = history_mod.run_record(rec, {"node1": {"login": "0.25s"}}, started=1.0, finished=2.0,
                       slots={}, exitstatus=1, source="hostfile",
                       excluded={"node3": ["test_login[node3]: connection refused"]},
                       rtt_ms={"node1": 0.125})
    assert got.red == 1 and got.digest == history_mod.digest(NODES, {})
    login = next(r for r in got.results if r[0] == "test_login[node3]")
    assert Problem.from_json(login[2] or "") == problem
    assert ("test_ssh_modes[node3]", "skipped", None, "test_login[node3]") in got.results
    assert got.node_stats["node1"] == (0.25, 0.125, False, [])
    assert got.node_stats["node3"] == (None, None, True, ["test_login[node3]: connection refused"])
    assert got.c2 == {("node1", "node2"): (1048576, 0.25, True)}
    assert got.c1 == [{"size_bytes": 1048576, "time_us": 7.0, "algbw_GBps": 0.375,
                       "busbw_GBps": 0.5}] and got.c1_passed


def test_show_prints_the_runs_the_nodes_and_the_pairs(tmp_path):
    path = tmp_path / "history.sqlite"
    history_mod.record(path, run(1.0, 1.0, when=1_800_000_000.0))
    history_mod.record(path, run(0.5, {("node1", "node2"): 0.5},
                                 red={"node3": ["test_login[node3]: x"]},
                                 passed=False, when=1_800_000_100.0))
    lines = history_mod.show(path)
    text = "\n".join(lines)
    assert lines[0] == f"History {path}: 2 run(s), schema {history_mod.LATEST}"
    assert "#2 " in lines[2] and "1 red  C1 0.5 GB/s at 1MB" in lines[2]
    assert "#1 " in lines[3] and "green  C1 1 GB/s at 1MB" in lines[3]
    assert "  node3  X .  login 0.10 s, rtt 0.050 ms  (last cause: test_login[node3]: x)" \
        in lines
    assert "  node1  . ." in text
    row = next(ln for ln in lines if ln.strip().startswith("node1<->node2"))
    assert row.split()[1:] == ["0.5*", "1"]
    assert next(ln for ln in lines if ln.strip().startswith("node2<->node3")).split()[1:] \
        == ["-", "1"]


def test_show_of_no_file_or_a_foreign_one_is_an_error_naming_it(tmp_path):
    with pytest.raises(history_mod.HistoryError, match="no history file"):
        history_mod.show(tmp_path / "none.sqlite")
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not sqlite at all" * 10)
    with pytest.raises(history_mod.HistoryError, match=f"{bad} is not an SQLite database"):
        history_mod.show(bad)


def test_series_for_the_plot_oldest_first(tmp_path):
    path = tmp_path / "history.sqlite"
    for v in (1.0, 0.9, 0.8):
        got = history_mod.record(path, run(v, v))
    s = got.series
    assert [r["id"] for r in s["runs"]] == [1, 2, 3]
    assert s["c1"] == {"size_bytes": 1 << 20, "values": {1: 1.0, 2: 0.9, 3: 0.8}}
    assert s["pairs"]["node1<->node2"]["values"] == {1: 1.0, 2: 0.9, 3: 0.8}
    assert json.dumps(s)  # plain data, for the template


def test_a_directory_or_an_unwritable_folder_is_a_warning_too(tmp_path):
    folder = tmp_path / "history.sqlite"
    folder.mkdir()
    got = history_mod.record(folder, run())
    assert got.run is None and got.error.startswith(f"{folder}: ") and folder.is_dir()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    got = history_mod.record(blocker / "history.sqlite", run())  # its folder is a file
    assert got.run is None and str(blocker) in got.error
