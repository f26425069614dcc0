"""``--metrics-textfile PATH``: the run's verdict and figures in node_exporter's textfile format
(Prometheus' text exposition, written by ``prometheus_client.write_to_textfile``: a temporary
file beside PATH, then renamed over it, so the collector never reads half a file; node_exporter's
``--collector.textfile.directory`` reads files whose name ends in ``.prom``).

Metrics (one sample per check and node or pair; label values escaped by the library):

* ``cluster_tests_check_passed{check, section, node, pair, outcome, cause}``: 1 passed, 0 failed
  or blocked (``outcome`` says which; ``cause`` the Problem's cause, or ``blocked by <red>``);
  a check skipped as not applicable (no such hardware) has no sample;
* ``cluster_tests_allreduce_busbw_bytes_per_second{size_bytes}``: C1, per message size;
* ``cluster_tests_allreduce_pair_busbw_bytes_per_second{pair, a, b, size_bytes}``: C2;
* ``cluster_tests_run_checks{outcome}``: how many checks ended so;
* ``cluster_tests_run_duration_seconds``, ``cluster_tests_run_end_time_seconds``.

busbw is in bytes per second (summary.json's GB/s x 1e9: Prometheus' base units).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cluster_tests.core import sections
from cluster_tests.core import testids as ids
from cluster_tests.judge.problem import BLOCKED_BY, PROPERTY, Problem
from cluster_tests.report.summary import Outcome, Recorder

if TYPE_CHECKING:
    from prometheus_client.core import Metric

PREFIX = "cluster_tests"
GB = 1e9


def _section(module: str) -> str:
    got = sections.BY_MODULE.get(Path(module).stem)
    return got.marker if got is not None else "site"


def _cause(o: Outcome) -> str:
    if o.outcome in ("failed", "error"):
        raw = o.properties.get(PROPERTY)
        p = Problem.from_json(str(raw)) if raw else None
        return (p.cause if p is not None and p.cause else o.headline)[:200]
    blocked = o.properties.get(BLOCKED_BY)
    return f"blocked by {blocked}" if blocked else ""


class _Run:
    """A prometheus_client collector of one finished run (the Recorder's outcomes and numbers)."""

    def __init__(self, recorder: Recorder, duration_s: float, finished: float) -> None:
        self.recorder = recorder
        self.duration_s = duration_s
        self.finished = finished

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        rec = self.recorder
        checks = GaugeMetricFamily(
            f"{PREFIX}_check_passed",
            "1 if the check passed on this node or pair, 0 if it failed or was blocked",
            labels=["check", "section", "node", "pair", "outcome", "cause"])
        seen: set[tuple[str, str, str]] = set()
        counts: dict[str, int] = {}
        for o in rec.outcomes.values():
            blocked = o.outcome == "skipped" and o.properties.get(BLOCKED_BY)
            outcome = "blocked" if blocked else o.outcome
            counts[outcome] = counts.get(outcome, 0) + 1
            if o.outcome == "skipped" and not blocked:
                continue  # not applicable here: no sample, rather than a 0 that alerts
            param = o.test_id[len(o.function) + 1:-1] if "[" in o.test_id else ""
            node, pair = ("", param) if o.pair or "->" in param else (param, "")
            key = (o.function, node, pair)
            if key in seen:
                continue
            seen.add(key)
            checks.add_metric([o.function, _section(o.module), node, pair, outcome, _cause(o)],
                              1.0 if o.outcome == "passed" else 0.0)
        yield checks
        c1 = GaugeMetricFamily(f"{PREFIX}_allreduce_busbw_bytes_per_second",
                               "C1: all-reduce busbw over every rank, per message size",
                               labels=["size_bytes"])
        for row in rec.allreduce_sizes():
            if "busbw_GBps" in row:
                c1.add_metric([str(int(row["size_bytes"]))], row["busbw_GBps"] * GB)
        yield c1
        c2 = GaugeMetricFamily(f"{PREFIX}_allreduce_pair_busbw_bytes_per_second",
                               "C2: all-reduce busbw between two nodes, at the largest size",
                               labels=["pair", "a", "b", "size_bytes"])
        bw = rec.pair_bandwidth()
        for o in rec.by_function(ids.ALLREDUCE_PAIR.name):
            if o.pair in bw:
                a, b = o.pair
                c2.add_metric([f"{a}<->{b}", a, b, str(o.properties.get("size_bytes", ""))],
                              bw[o.pair] * GB)
        yield c2
        runs = GaugeMetricFamily(f"{PREFIX}_run_checks", "checks of the run by outcome",
                                 labels=["outcome"])
        for outcome, n in sorted(counts.items()):
            runs.add_metric([outcome], float(n))
        yield runs
        yield GaugeMetricFamily(f"{PREFIX}_run_duration_seconds",
                                "wall time of the run, from its start to its reports",
                                value=self.duration_s)
        yield GaugeMetricFamily(f"{PREFIX}_run_end_time_seconds",
                                "when the run ended (Unix time)", value=self.finished)


def write(path: Path, recorder: Recorder, *, duration_s: float, finished: float) -> Path:
    """Write the textfile (atomically: a temporary file beside it, renamed over it)."""
    from prometheus_client import write_to_textfile  # only the runs that ask for it import it

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), _Run(recorder, duration_s, finished))
    return path
