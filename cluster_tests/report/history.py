"""The history of runs: one SQLite file (the standard library's sqlite3), by default
``history.sqlite`` beside the other reports (``--history PATH``, ``--no-history``).

Each run records its time and the digest of its node list; every test id with its outcome and
its Problem (JSON, as the red carried it); per node its login time, median F1 round trip and
whether ``hostfile.healthy`` left it out (and why); C1's busbw per size and C2's busbw per pair.
From it the summary warns, with the numbers, where a figure fell below ``--history-drop`` x its
own median over its last ``--history-window`` passing runs (each C2 pair; C1 over the same node
list), and where a node was red in 3 or more of its last 5 runs (judge/trend.py does the math);
the HTML report plots C1's and each pair's busbw over the recent runs; ``--history-show``
(``cluster-tests history``) prints them.

Safe to share: WAL journal and a busy timeout let two runs write at once; a file that is
locked past the timeout, corrupt, or another program's (not this schema's application id) is a
warning naming it, and is never truncated, rewritten or migrated: the run's verdict and other
reports do not depend on it. The schema is versioned (``PRAGMA user_version``): each step of
:data:`MIGRATIONS` runs once, in order, in its own transaction; a file of a newer schema than
this code knows is left as is.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from cluster_tests.core import testids as ids
from cluster_tests.judge import trend
from cluster_tests.judge.collective.collopts import format_size
from cluster_tests.judge.problem import BLOCKED_BY, PROPERTY
from cluster_tests.report.summary import Recorder

FILE_NAME = "history.sqlite"
#: ``PRAGMA application_id`` of a history file ("ctHi"): a database without it is not ours
APPLICATION_ID = 0x63744869
#: seconds a run waits for another run's write before the history is a warning
BUSY_TIMEOUT = 10.0
#: runs the HTML plot and --history-show cover
RECENT = 20
_HEADER = b"SQLite format 3\x00"

#: The schema, one step per version (``PRAGMA user_version`` = the steps applied). A step is
#: never edited once released: a change is a new step.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: the tables
    (
        f"PRAGMA application_id = {APPLICATION_ID}",
        """CREATE TABLE runs (
               id INTEGER PRIMARY KEY,
               started REAL NOT NULL,
               finished REAL NOT NULL,
               digest TEXT NOT NULL,
               nodes INTEGER NOT NULL,
               exitstatus INTEGER,
               source TEXT,
               red INTEGER NOT NULL)""",
        "CREATE TABLE tests (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
        """CREATE TABLE results (
               run INTEGER NOT NULL REFERENCES runs(id),
               test INTEGER NOT NULL REFERENCES tests(id),
               outcome TEXT NOT NULL,
               problem TEXT,
               blocked_by TEXT,
               PRIMARY KEY (run, test)) WITHOUT ROWID""",
        """CREATE TABLE node_runs (
               run INTEGER NOT NULL REFERENCES runs(id),
               node TEXT NOT NULL,
               login_s REAL,
               rtt_ms REAL,
               red INTEGER NOT NULL,
               causes TEXT,
               PRIMARY KEY (run, node)) WITHOUT ROWID""",
        """CREATE TABLE c1 (
               run INTEGER NOT NULL REFERENCES runs(id),
               size_bytes INTEGER NOT NULL,
               busbw_GBps REAL,
               algbw_GBps REAL,
               time_us REAL,
               passed INTEGER NOT NULL,
               PRIMARY KEY (run, size_bytes)) WITHOUT ROWID""",
        """CREATE TABLE c2 (
               run INTEGER NOT NULL REFERENCES runs(id),
               a TEXT NOT NULL,
               b TEXT NOT NULL,
               size_bytes INTEGER,
               busbw_GBps REAL,
               passed INTEGER NOT NULL,
               PRIMARY KEY (run, a, b)) WITHOUT ROWID""",
    ),
    # 2: the indexes the trend queries read (a pair's, a node's, a node list's last runs)
    (
        "CREATE INDEX c2_pair ON c2 (a, b, run)",
        "CREATE INDEX node_runs_node ON node_runs (node, run)",
        "CREATE INDEX runs_digest ON runs (digest, id)",
    ),
)
LATEST = len(MIGRATIONS)


class HistoryError(Exception):
    """The history file cannot be used (the message names the file and why)."""


# -- what one run records ----------------------------------------------------------------------


@dataclass
class RunRecord:
    started: float
    finished: float
    nodes: list[str]
    digest: str
    exitstatus: int = 0
    source: str = ""
    #: (test id, outcome, Problem JSON or None, blocked_by or None)
    results: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)
    #: node -> (login s, median RTT ms, red, causes)
    node_stats: dict[str, tuple[float | None, float | None, bool, list[str]]] = field(
        default_factory=dict)
    #: C1: one dict per size (size_bytes, busbw_GBps, algbw_GBps, time_us); and whether it passed
    c1: list[dict[str, float]] = field(default_factory=list)
    c1_passed: bool = False
    #: C2: (a, b) -> (size_bytes, busbw_GBps, passed)
    c2: dict[tuple[str, str], tuple[int | None, float | None, bool]] = field(default_factory=dict)

    @property
    def red(self) -> int:
        return sum(1 for _, outcome, _, _ in self.results if outcome in ("failed", "error"))


def digest(nodes: Sequence[str], slots: Mapping[str, int]) -> str:
    """The node list's digest: its hostfile lines (`node slots=N`, in order), SHA-256, 16 hex."""
    text = "".join(f"{n} slots={slots.get(n, 1)}\n" for n in nodes)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _seconds(text: str) -> float | None:
    if text.endswith("s"):
        try:
            return float(text[:-1])
        except ValueError:
            return None
    return None


def run_record(recorder: Recorder, facts: Mapping[str, Mapping[str, str]], *, started: float,
               finished: float, slots: Mapping[str, int], exitstatus: int, source: str,
               excluded: Mapping[str, Sequence[str]], rtt_ms: Mapping[str, float]) -> RunRecord:
    """What the run records, from the Recorder (the tests' outcomes and properties), the node
    table (login times), hostfile.healthy's left-out nodes and the nodes' median RTTs."""
    nodes = list(recorder.nodes)
    rec = RunRecord(started, finished, nodes, digest(nodes, slots), exitstatus, source)
    for o in recorder.outcomes.values():
        problem = o.properties.get(PROPERTY) if o.outcome in ("failed", "error") else None
        blocked = o.properties.get(BLOCKED_BY) if o.outcome == "skipped" else None
        rec.results.append((o.test_id, o.outcome, str(problem) if problem else None,
                            str(blocked) if blocked else None))
    for n in nodes:
        rec.node_stats[n] = (_seconds(facts.get(n, {}).get("login", "")), rtt_ms.get(n),
                             n in excluded, list(excluded.get(n, ())))
    c1 = recorder.by_function(ids.ALLREDUCE.name)
    rec.c1 = recorder.allreduce_sizes()
    rec.c1_passed = bool(c1) and c1[0].outcome == "passed"
    bw = recorder.pair_bandwidth()
    for o in recorder.by_function(ids.ALLREDUCE_PAIR.name):
        if o.pair:
            size = o.properties.get("size_bytes")
            rec.c2[o.pair] = (int(str(size)) if str(size or "").isdigit() else None, bw.get(o.pair),
                              o.outcome == "passed")
    return rec


# -- the file ------------------------------------------------------------------------------------


def _check_header(path: Path) -> None:
    """A file that is there and not empty must start with SQLite's header (read here, before
    sqlite3 opens it: nothing is ever written to a file that is not ours)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    with path.open("rb") as f:
        head = f.read(len(_HEADER))
    if head != _HEADER:
        raise HistoryError(f"{path} is not an SQLite database (it does not start with SQLite's "
                           f"header; corrupt, or another file): left as is")


def connect(path: Path, *, write: bool = True, timeout: float = BUSY_TIMEOUT
            ) -> sqlite3.Connection:
    """The history at `path`, checked (ours, or new) and migrated to :data:`LATEST`; read-only
    with `write=False` (then it must exist)."""
    path = Path(path)
    try:
        _check_header(path)
        if write:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None)
        else:
            if not path.exists():
                raise HistoryError(f"{path}: no history file")
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                                   timeout=timeout, isolation_level=None)
        try:
            app = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            if app != APPLICATION_ID and (app or version or tables):
                raise HistoryError(
                    f"{path} is another program's SQLite database (application_id {app:#x}, "
                    f"tables: {', '.join(tables[:6]) or 'none'}), not a cluster-tests history: "
                    f"left as is")
            if version > LATEST:
                raise HistoryError(f"{path} has schema {version}, newer than this cluster-tests "
                                   f"knows ({LATEST}): left as is (upgrade cluster-tests)")
            if write:
                conn.execute("PRAGMA journal_mode = WAL")
                migrate(conn, version)
            elif version < LATEST:
                raise HistoryError(f"{path} has schema {version}; a run of this cluster-tests "
                                   f"migrates it to {LATEST}")
        except BaseException:
            conn.close()
            raise
        return conn
    except sqlite3.Error as exc:
        raise HistoryError(_said(path, exc)) from None
    except OSError as exc:  # not a file (a directory), no permission on it or its folder
        raise HistoryError(f"{path}: {exc.strerror or exc}") from None


def _said(path: Path, exc: sqlite3.Error) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return f"{path} is locked by another run (still after {BUSY_TIMEOUT:g} s): {text}"
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return f"{path} is corrupt ({text}): left as is"
    return f"{path}: {text}"


def migrate(conn: sqlite3.Connection, version: int | None = None) -> int:
    """Apply the steps of MIGRATIONS after `version` (the file's user_version), each in its own
    transaction with its new version number; returns the version reached."""
    if version is None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    for step in range(version, LATEST):
        conn.execute("BEGIN IMMEDIATE")
        try:
            # a second run may have migrated it while this one waited for the lock
            if conn.execute("PRAGMA user_version").fetchone()[0] > step:
                conn.execute("ROLLBACK")
                continue
            for sql in MIGRATIONS[step]:
                conn.execute(sql)
            conn.execute(f"PRAGMA user_version = {step + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return LATEST


def _insert(conn: sqlite3.Connection, rec: RunRecord) -> int:
    conn.execute("BEGIN IMMEDIATE")
    try:
        cur = conn.execute(
            "INSERT INTO runs (started, finished, digest, nodes, exitstatus, source, red) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (rec.started, rec.finished, rec.digest, len(rec.nodes), rec.exitstatus, rec.source,
             rec.red))
        run = cur.lastrowid
        assert run is not None
        conn.executemany("INSERT OR IGNORE INTO tests (name) VALUES (?)",
                         ((t,) for t, _, _, _ in rec.results))
        test_ids = dict(conn.execute("SELECT name, id FROM tests"))
        conn.executemany(
            "INSERT OR REPLACE INTO results (run, test, outcome, problem, blocked_by) "
            "VALUES (?, ?, ?, ?, ?)",
            ((run, test_ids[t], outcome, problem, blocked)
             for t, outcome, problem, blocked in rec.results))
        conn.executemany(
            "INSERT INTO node_runs (run, node, login_s, rtt_ms, red, causes) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            ((run, n, login, rtt, int(red), json.dumps(causes) if causes else None)
             for n, (login, rtt, red, causes) in rec.node_stats.items()))
        conn.executemany(
            "INSERT INTO c1 (run, size_bytes, busbw_GBps, algbw_GBps, time_us, passed) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            ((run, int(r["size_bytes"]), r.get("busbw_GBps"), r.get("algbw_GBps"),
              r.get("time_us"), int(rec.c1_passed)) for r in rec.c1))
        conn.executemany(
            "INSERT INTO c2 (run, a, b, size_bytes, busbw_GBps, passed) VALUES (?, ?, ?, ?, ?, ?)",
            ((run, a, b, size, bw, int(ok)) for (a, b), (size, bw, ok) in rec.c2.items()))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return run


# -- trends ----------------------------------------------------------------------------------------


@dataclass
class Trends:
    drops: list[trend.Drop] = field(default_factory=list)
    flapping: list[trend.Flapping] = field(default_factory=list)

    def lines(self) -> list[str]:
        return ([f"warning: {d.text()}" for d in self.drops]
                + [f"warning: {f.text()}" for f in self.flapping])


def _c1_size(rec: RunRecord) -> tuple[int, float] | None:
    rows = [r for r in rec.c1 if r.get("busbw_GBps") is not None]
    if not rows:
        return None
    last = rows[-1]
    return int(last["size_bytes"]), float(last["busbw_GBps"])


def trends(conn: sqlite3.Connection, run: int, rec: RunRecord, *, ratio: float = trend.DROP,
           window: int = trend.WINDOW) -> Trends:
    """This run's figures against the earlier runs' (run ids below `run`)."""
    out = Trends()
    c1 = _c1_size(rec)
    if c1 is not None:
        size, value = c1
        past = [v for (v,) in conn.execute(
            "SELECT c1.busbw_GBps FROM c1 JOIN runs r ON r.id = c1.run WHERE r.digest = ? AND "
            "c1.size_bytes = ? AND c1.passed = 1 AND c1.run < ? ORDER BY c1.run DESC LIMIT ?",
            (rec.digest, size, run, window))]
        d = trend.drop(f"C1 busbw at {format_size(size)}B over these {len(rec.nodes)} nodes",
                       value, past, ratio=ratio, window=window)
        if d is not None:
            out.drops.append(d)
    for (a, b), (pair_size, pair_value, _ok) in rec.c2.items():
        if pair_value is None:
            continue
        past = [v for (v,) in conn.execute(
            "SELECT busbw_GBps FROM c2 WHERE a = ? AND b = ? AND size_bytes IS ? AND passed = 1 "
            "AND run < ? ORDER BY run DESC LIMIT ?", (a, b, pair_size, run, window))]
        what = f"C2 {a}<->{b} busbw" + (f" at {format_size(pair_size)}B" if pair_size else "")
        d = trend.drop(what, pair_value, past, ratio=ratio, window=window)
        if d is not None:
            out.drops.append(d)
    out.flapping = trend.flapping(node_runs(conn, rec.nodes, trend.FLAP_RUNS, before=run + 1))
    return out


def node_runs(conn: sqlite3.Connection, nodes: Iterable[str], last: int, *,
              before: int | None = None) -> dict[str, list[tuple[bool, list[str]]]]:
    """Each node's last `last` runs (newest first; runs below `before`): (red, causes)."""
    wanted = list(nodes)
    if not wanted:
        return {}
    limit = before if before is not None else 1 << 62
    out: dict[str, list[tuple[bool, list[str]]]] = {n: [] for n in wanted}
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS wanted_nodes (node TEXT PRIMARY KEY)")
    conn.execute("DELETE FROM wanted_nodes")
    conn.executemany("INSERT OR IGNORE INTO wanted_nodes VALUES (?)", ((n,) for n in wanted))
    rows = conn.execute(
        "SELECT node, red, causes FROM (SELECT n.node, n.red, n.causes, ROW_NUMBER() OVER "
        "(PARTITION BY n.node ORDER BY n.run DESC) AS k FROM node_runs n JOIN wanted_nodes w "
        "ON w.node = n.node WHERE n.run < ?) WHERE k <= ? ORDER BY node, k", (limit, last))
    for node, red, causes in rows:
        out[node].append((bool(red), json.loads(causes) if causes else []))
    return out


# -- recording a run -----------------------------------------------------------------------------


class SeriesRun(TypedDict):
    id: int
    started: float


class SeriesLine(TypedDict):
    """One polyline of the history plot: busbw (GB/s) per run id, at one message size."""

    size_bytes: int | None
    values: dict[int, float]


class Series(TypedDict, total=False):
    """The history plot's data (:func:`series`; empty where the node list has no run yet)."""

    runs: list[SeriesRun]
    c1: SeriesLine
    pairs: dict[str, SeriesLine]


@dataclass
class Recorded:
    """What recording did: the warnings for the summary, the plot's series, or the error."""

    path: Path
    run: int | None = None
    trends: Trends = field(default_factory=Trends)
    series: Series = field(default_factory=Series)
    error: str = ""
    #: what recording took (connecting, migrating, writing, reading the trends back)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        if self.error:
            return [f"warning: history not written: {self.error}"]
        return self.trends.lines()

    def to_json(self) -> dict[str, object]:
        return {"file": str(self.path), "run": self.run, "error": self.error or None,
                "seconds": round(self.seconds, 3),
                "warnings": [d.text() for d in self.trends.drops]
                + [f.text() for f in self.trends.flapping],
                "drops": [{"what": d.what, "value_GBps": d.value, "median_GBps": d.median,
                           "ratio": round(d.ratio, 4), "runs": d.runs} for d in self.trends.drops],
                "flapping": [{"node": f.node, "red": f.red, "runs": f.runs,
                              "causes": list(f.causes)} for f in self.trends.flapping]}


def record(path: Path, rec: RunRecord, *, ratio: float = trend.DROP, window: int = trend.WINDOW,
           timeout: float = BUSY_TIMEOUT, recent: int = RECENT) -> Recorded:
    """Add the run to the history at `path` and read its trends and the plot's series back. Any
    failure is the result's `error`, never an exception: the run goes on without its history."""
    out = Recorded(Path(path))
    began = time.monotonic()
    try:
        conn = connect(out.path, timeout=timeout)
    except HistoryError as exc:
        out.error = str(exc)
        return out
    try:
        out.run = _insert(conn, rec)
        out.trends = trends(conn, out.run, rec, ratio=ratio, window=window)
        out.series = series(conn, rec.digest, recent)
    except sqlite3.Error as exc:
        out.error = _said(out.path, exc)
    except OSError as exc:
        out.error = f"{out.path}: {exc}"
    finally:
        conn.close()
        out.seconds = time.monotonic() - began
    return out


# -- reading it back: the plot, --history-show ---------------------------------------------------


def series(conn: sqlite3.Connection, digest_: str, recent: int = RECENT) -> Series:
    """The plot's data: the last `recent` runs of this node list (oldest first), C1's busbw at
    the newest run's largest size, and each pair's C2 busbw at its newest size."""
    runs = [(r, started) for r, started in conn.execute(
        "SELECT id, started FROM runs WHERE digest = ? ORDER BY id DESC LIMIT ?",
        (digest_, recent))][::-1]
    if not runs:
        return {}
    ids_ = [r for r, _ in runs]
    lo = ids_[0]
    newest_c1 = conn.execute(
        "SELECT c1.size_bytes FROM c1 JOIN runs r ON r.id = c1.run WHERE r.digest = ? AND "
        "c1.busbw_GBps IS NOT NULL ORDER BY c1.run DESC, c1.size_bytes DESC LIMIT 1",
        (digest_,)).fetchone()
    c1: dict[int, float] = {}
    if newest_c1 is not None:
        c1 = {r: v for r, v in conn.execute(
            "SELECT c1.run, c1.busbw_GBps FROM c1 JOIN runs r ON r.id = c1.run WHERE r.digest = ? "
            "AND c1.size_bytes = ? AND c1.run >= ?", (digest_, newest_c1[0], lo))}
    pairs: dict[str, dict[int, float]] = {}
    sizes: dict[str, int | None] = {}
    for run, a, b, size, bw in conn.execute(
            "SELECT c2.run, a, b, size_bytes, busbw_GBps FROM c2 JOIN runs r ON r.id = c2.run "
            "WHERE r.digest = ? AND c2.run >= ? AND busbw_GBps IS NOT NULL ORDER BY c2.run DESC",
            (digest_, lo)):
        key = f"{a}<->{b}"
        sizes.setdefault(key, size)  # the newest run's size
        if size == sizes[key]:
            pairs.setdefault(key, {})[run] = bw
    return {"runs": [{"id": r, "started": s} for r, s in runs],
            "c1": {"size_bytes": newest_c1[0] if newest_c1 else None, "values": c1},
            "pairs": {k: {"size_bytes": sizes[k], "values": v} for k, v in sorted(pairs.items())}}


def path(given: Path | None, beside: Path) -> Path:
    """The history file: --history (`given`), else history.sqlite beside `beside` (the JSON
    summary, the JUnit report: reports/ by default)."""
    return given if given is not None else beside.with_name(FILE_NAME)


def print_recent(path: Path, runs: int = 10) -> int:
    """`cluster-tests history` (--history-show): the recent runs printed; the exit status (4:
    the history cannot be read, said on stderr)."""
    try:
        lines = show(path, runs)
    except HistoryError as exc:
        print(f"cluster-tests history: {exc}", file=sys.stderr)
        return 4
    print("\n".join(lines))
    return 0


def show(path: Path, runs: int = 10) -> list[str]:
    """The recent runs, per node and per pair, as text (``--history-show``)."""
    conn = connect(Path(path), write=False)
    try:
        return _show(conn, Path(path), runs)
    except sqlite3.Error as exc:
        raise HistoryError(_said(Path(path), exc)) from None
    finally:
        conn.close()


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _num(v: float | None, fmt: str = "{:.4g}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _show(conn: sqlite3.Connection, path: Path, count: int) -> list[str]:
    total = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
    lines = [f"History {path}: {total} run(s), schema {LATEST}"]
    recent = list(conn.execute(
        "SELECT id, started, finished, digest, nodes, red FROM runs ORDER BY id DESC LIMIT ?",
        (count,)))
    if not recent:
        return lines + ["  no run recorded yet"]
    lines.append(f"Recent runs (newest first, {len(recent)} of {total}):")
    for run, started, finished, dig, nodes, red in recent:
        c1 = conn.execute("SELECT size_bytes, busbw_GBps FROM c1 WHERE run = ? "
                          "ORDER BY size_bytes DESC LIMIT 1", (run,)).fetchone()
        c1_text = (f"  C1 {_num(c1[1])} GB/s at {format_size(c1[0])}B" if c1 and c1[1] else "")
        lines.append(f"  #{run} {_when(started)} ({finished - started:.1f} s) {nodes} nodes "
                     f"[{dig}]: " + (f"{red} red" if red else "green") + c1_text)
    lo = recent[-1][0]
    marks: dict[str, dict[int, tuple[int, float | None, float | None, str | None]]] = {}
    for run, node, red, login, rtt, causes in conn.execute(
            "SELECT run, node, red, login_s, rtt_ms, causes FROM node_runs WHERE run >= ? "
            "ORDER BY run DESC", (lo,)):
        marks.setdefault(node, {})[run] = (red, login, rtt, causes)
    order = [r for r, *_ in recent]
    if marks:
        lines.append("Nodes (one mark per run, newest first: . kept, X left out of "
                     "hostfile.healthy, - not in the run; the newest login s and median RTT ms):")
        width = max(len(n) for n in marks)
        for node in sorted(marks):
            seen = marks[node]
            row = " ".join("-" if r not in seen else ("X" if seen[r][0] else ".") for r in order)
            newest = seen[max(seen)]
            why: list[str] = next((json.loads(c) for r in order
                                   if r in seen and (c := seen[r][3])), [])
            lines.append(f"  {node.ljust(width)}  {row}  login {_num(newest[1], '{:.2f}')} s, "
                         f"rtt {_num(newest[2], '{:.3f}')} ms"
                         + (f"  (last cause: {'; '.join(why)[:160]})" if why else ""))
    bw: dict[str, dict[int, tuple[float | None, int]]] = {}
    for run, a, b, value, passed in conn.execute(
            "SELECT run, a, b, busbw_GBps, passed FROM c2 WHERE run >= ? ORDER BY run DESC",
            (lo,)):
        bw.setdefault(f"{a}<->{b}", {})[run] = (value, passed)
    if bw:
        lines.append("Pairs, C2 busbw GB/s per run (newest first; * not passed, - not in the run):")
        width = max(len(k) for k in bw)
        for key in sorted(bw):
            cells = []
            for r in order:
                got = bw[key].get(r)
                cells.append("-" if got is None else _num(got[0]) + ("" if got[1] else "*"))
            lines.append(f"  {key.ljust(width)}  " + " ".join(c.rjust(7) for c in cells))
    return lines


__all__ = ["FILE_NAME", "HistoryError", "LATEST", "MIGRATIONS", "Recorded", "RunRecord",
           "connect", "digest", "migrate", "record", "run_record", "series", "show", "trends"]
