"""The history of runs, end to end on a simulated cluster of two nodes: three runs of the
collective checks (the fewest that give a figure its median, trend.MIN_RUNS) on links shaped to
50 Mbit/s (tbf on every node's eth0, so that the figures are the links' and not the two shared
cores'), then every link shaped to 30 Mbit/s (60 %): the fourth run is green by its own measures
and warns that C1 and the pair fell below their history, with the numbers; its metrics textfile,
read with prometheus_client's parser, holds summary.json's outcomes and figures, and its HTML
report's history plot renders in headless Chromium. A fifth run, its history file replaced by
random bytes, ends green as before, with a warning, and the bytes untouched.

Four collective runs (their cost is the workers' start-up, one interpreter importing torch per
rank: hence two nodes, one pair, four workers a run where three nodes start nine): one size (1M,
the largest of test_e2e_collective.py's), its iterations and warm-ups; the fifth run is the
login checks. What a figure's history is keyed by (C1 per size and node set, C2 per pair) does
not depend on the node count: tests/unit/test_history.py."""

from __future__ import annotations

import html
import json
import math
import os
import re

import pytest
from browser import chromium, png_facts
from prometheus_client.parser import text_string_to_metric_families
from suite import run_suite

from cluster_tests.judge.trend import MIN_RUNS
from fixtures.sim import SimCluster

NODES = ("node1", "node2")
PAIRS = ("node1<->node2",)
RUN = ("-m", "collective", "--sizes", "1M", "--iters", "5", "--warmup", "2",
       "--collective-connect-timeout", "20", "--collective-init-timeout", "10",
       "--collective-op-timeout", "30", "--pair-slow-ratio", "0.1")
GREEN = {"test_allreduce": "passed", "test_allreduce_busbw": "skipped",  # no threshold given
         **{f"test_allreduce_pair[{p}]": "passed" for p in PAIRS}}


def tbf(rate: str) -> list[str]:
    return ["dev", "eth0", "root", "tbf", "rate", rate, "burst", "32kbit", "latency", "50ms"]


@pytest.fixture(scope="module")
def sim2(tmp_path_factory):
    with SimCluster(tmp_path_factory.mktemp("sim2history"), nodes=2, slots=1) as cluster:
        yield cluster


def test_history_warns_when_every_link_falls_to_60_percent(sim2, tmp_path):
    history = tmp_path / "history.sqlite"
    for node in NODES:
        sim2.tc(node, ["qdisc", "add", *tbf("50mbit")])
    for i in range(MIN_RUNS):
        r = run_suite(sim2, *RUN, "--history", str(history))
        assert r.outcomes == GREEN, r.describe()
        assert "warning: C" not in r.output, r.output[-3000:]  # no drop: it is their normal
        print(f"run {i + 1}: {r.seconds:.1f} s")
    for node in NODES:  # 60 % of the rate before (undone back to 50 Mbit/s, then removed)
        sim2.tc(node, ["qdisc", "replace", *tbf("30mbit")],
                undo=["qdisc", "replace", *tbf("50mbit")])
    metrics = tmp_path / "cluster-tests.prom"
    last = run_suite(sim2, *RUN, "--history", str(history), "--metrics-textfile",
                     str(metrics))
    print(f"run {MIN_RUNS + 1}: {last.seconds:.1f} s")
    assert last.outcomes == GREEN, last.describe()
    summary = json.loads((last.junit.parent / "summary.json").read_text())
    drops = {d["what"]: d for d in summary["history"]["drops"]}
    assert set(drops) == {"C1 busbw at 1MB over these 2 nodes",
                          *(f"C2 {p} busbw at 1MB" for p in PAIRS)}, summary["history"]
    for d in drops.values():
        assert d["runs"] == MIN_RUNS and 0.45 < d["ratio"] < 0.7, d  # 30 of 50 Mbit/s: about 0.6
    assert drops["C1 busbw at 1MB over these 2 nodes"]["value_GBps"] == \
        summary["allreduce"]["sizes"][-1]["busbw_GBps"]
    for p in PAIRS:
        assert drops[f"C2 {p} busbw at 1MB"]["value_GBps"] == \
            summary["allreduce"]["pair_busbw_GBps"][p]
    warnings = [ln for ln in last.output.splitlines() if ln.startswith("warning: C")]
    assert len(warnings) == 1 + len(PAIRS), last.output[-3000:]
    for line in warnings:
        assert re.fullmatch(r"warning: C[12] (node\d<->node\d )?busbw at 1MB( over these 2 "
                            r"nodes)?: [\d.e-]+ GB/s, 0\.\d\dx its median [\d.e-]+ GB/s over its "
                            rf"last {MIN_RUNS} passing runs \(below 0\.7x: --history-drop\)",
                            line), line
    assert f"history ({history})" in last.output

    # the metrics textfile: summary.json's outcomes and figures
    families = {f.name: f for f in text_string_to_metric_families(metrics.read_text())}
    checks = {s.labels["check"] + (f"[{s.labels['pair'] or s.labels['node']}]"
                                   if s.labels["pair"] or s.labels["node"] else ""): s
              for s in families["cluster_tests_check_passed"].samples}
    expected = {t["test_id"]: t["outcome"] for t in summary["tests"]}
    assert {t for t, o in expected.items() if o != "skipped"} == set(checks)
    for test_id, sample in checks.items():
        assert sample.value == (1.0 if expected[test_id] == "passed" else 0.0)
        assert sample.labels["section"] == "collective"
    c1 = {int(s.labels["size_bytes"]): s.value
          for s in families["cluster_tests_allreduce_busbw_bytes_per_second"].samples}
    assert c1 == {int(r["size_bytes"]): r["busbw_GBps"] * 1e9
                  for r in summary["allreduce"]["sizes"]}
    c2 = {s.labels["pair"]: s.value
          for s in families["cluster_tests_allreduce_pair_busbw_bytes_per_second"].samples}
    assert c2 == {p: v * 1e9 for p, v in summary["allreduce"]["pair_busbw_GBps"].items()}
    meta = summary["meta"]
    assert families["cluster_tests_run_end_time_seconds"].samples[0].value == meta["finished"]
    assert math.isclose(families["cluster_tests_run_duration_seconds"].samples[0].value,
                        meta["duration_s"])

    # the plot, in a real browser: C1 and each pair over the four runs
    page = last.junit.parent / "cluster_report.html"
    shot = tmp_path / "history.png"
    res = chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1200,2400")
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    width, height, variety = png_facts(shot)
    assert (width, height) == (1200, 2400) and variety > 50
    dom = chromium(page, tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    # the page's own console: no error, no uncaught exception, nothing it failed to load
    said = [ln for ln in dom.stderr.splitlines() if ":CONSOLE" in ln or "net::ERR" in ln]
    assert said == [], said
    plot = dom.stdout.split('<svg id="plot-history"', 1)[1].split("</svg>", 1)[0]
    lines = [(html.unescape(name), points) for name, points in re.findall(
        r'<polyline class="series history" data-series="([^"]+)" points="([^"]+)"', plot)]
    assert sorted(name for name, _ in lines) == sorted(
        ["C1 at 1MB", *(f"C2 {p}" for p in PAIRS)]), lines
    for _, points in lines:
        ys = [float(xy.split(",")[1]) for xy in points.split()]
        assert len(ys) == MIN_RUNS + 1 and ys[-1] > max(ys[:-1])  # the last lowest (SVG y down)
    text = page.read_text()
    assert "<script" not in text and not re.search(r"""(src|href)\s*=\s*["']?\w+:""", text)

    # a fifth run on a history file of random bytes (the fast login checks: what a broken
    # history file must not change is any verdict; the same outcomes with a good file and a
    # corrupt one, report by report: tests/unit/test_after_verdict.py)
    noise = os.urandom(1 << 16)
    history.write_bytes(noise)
    broken = run_suite(sim2, "-m", "ssh", "-k", "test_login and not time", "--history",
                       str(history))
    print(f"run {MIN_RUNS + 2}: {broken.seconds:.1f} s")
    assert broken.returncode == 0 and broken.outcomes == {
        f"test_login[{n}]": "passed" for n in NODES}, broken.describe()
    assert (f"warning: history not written: {history} is not an SQLite database (it does not "
            f"start with SQLite's header; corrupt, or another file): left as is"
            in broken.output.splitlines()), broken.output[-3000:]
    assert history.read_bytes() == noise
    assert json.loads((broken.junit.parent / "summary.json").read_text())["history"]["error"]
    assert (broken.junit.parent / "cluster_report.html").exists()
