#!/usr/bin/env python3
"""What pytest itself costs on big clusters: collection, items, fixtures and reports per node
and per pair, against the in-process fake transport (bench/fake_transport.py: no network, every
probe answered at once with synthetic facts of a healthy cluster).

Not a test: a measurement to quote (README "Speed and scale").  For each (nodes, --pairs) case
it writes a hostfile of N nodes and runs, under /usr/bin/time (wall, peak RSS):

* ``pytest --collect-only`` (start-up + collection + parametrization),
* the whole run ``-m "not collective and not training"`` (collection + every check + terminal,
  JUnit and JSON reports),

then prints items, seconds, MB, the reds and skips of the run (a healthy fake cluster has no
red: tests/unit/test_fake_cluster.py), and the costs per item, per node and per pair (the run's
time above the start-up of a 2-node run, divided).  `--dead K` runs every case again with every
K-th node dead (bench/fake_transport.py's FAKE_DEAD: logins and every peer's connects to it
time out), and prints the ratio of that run's wall time to the healthy one's.  Cases whose item
count is above --max-items are not run; their collection cost is extrapolated from the measured
per-item cost and marked "~".  `--compare ARGS` runs every case again with ARGS added, each
such run right after one without them (so that both see the same load), and prints both medians
and their ratio: `--compare --no-history` is what writing the history costs (on by default, in
history.sqlite beside the JUnit file: the case's history grows by one run per repeat).

    .venv/bin/python bench/collection.py [--cases 64:all,256:ring,256:sample:5000,1024:ring,...]
        [--repeat 1] [--max-items 60000] [--dead 10] [--no-collect] [--compare "--no-history"]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cluster_tests.core import pairs as pairs_mod  # noqa: E402

MARK = "not collective and not training"
DEFAULT_CASES = "2:all,64:all,256:ring,256:sample:5000,1024:ring,1024:sample:20000,1024:all"
# pair checks and per-node checks of the checklist without C and T (counted at 2 nodes, below)


def run(argv: list[str], cwd: Path, dead: int = 0) -> dict:
    rss = cwd / "rss.txt"
    (cwd / "summary.json").unlink(missing_ok=True)
    start = time.monotonic()
    proc = subprocess.run(["/usr/bin/time", "-f", "%U %S %M", "-o", str(rss), *argv], cwd=cwd,
                          capture_output=True, text=True, errors="replace", check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO / "bench"),
                               "FAKE_DEAD": str(dead)})
    seconds = time.monotonic() - start
    try:
        user, system, kb = rss.read_text().split()[-3:]
        mb, cpu = int(kb) / 1024, float(user) + float(system)
    except (OSError, ValueError, IndexError):
        mb = cpu = float("nan")
    return {"seconds": seconds, "rss_mb": mb, "cpu_s": cpu, "rc": proc.returncode,
            "out": proc.stdout + proc.stderr, "history_s": _history_seconds(cwd),
            **junit_counts(cwd / "junit.xml")}


def _history_seconds(cwd: Path) -> float | None:
    """What recording the run in the history took (summary.json's history.seconds)."""
    import json

    try:
        got = json.loads((cwd / "summary.json").read_text()).get("history") or {}
    except (OSError, ValueError):
        return None
    return got.get("seconds")


def junit_counts(path: Path) -> dict:
    """Items, reds and skips of a run, from its JUnit file (0s where there is none)."""
    import xml.etree.ElementTree as ET
    try:
        root = ET.parse(path).getroot()
        path.unlink()
    except (OSError, ET.ParseError):
        return {"ran": 0, "failed": 0, "skipped": 0}
    cases = list(root.iter("testcase"))
    return {"ran": len(cases),
            "failed": sum(1 for c in cases
                          if c.find("failure") is not None or c.find("error") is not None),
            "skipped": sum(1 for c in cases if c.find("skipped") is not None)}


def pytest_argv(hostfile: Path, pairs: str, out: Path, collect_only: bool,
                extra: list[str] | None = None) -> list[str]:
    return [str(REPO / ".venv/bin/python"), "-m", "pytest",
            "-p", "fake_transport", "-p", "no:cacheprovider",
            "--hostfile", str(hostfile), "-m", MARK, "--pairs", pairs, "-q",
            *(["--collect-only"] if collect_only else ["--junitxml", str(out / "junit.xml")]),
            *(extra or []), str(REPO / "cluster_tests")]


def count_items(text: str) -> int:
    for line in reversed(text.splitlines()):
        words = line.replace(",", " ").split()
        for i, w in enumerate(words):
            if w in ("tests", "test") and i and words[i - 1].split("/")[0].isdigit():
                return int(words[i - 1].split("/")[0])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--max-items", type=int, default=60000)
    ap.add_argument("--dead", type=int, default=0,
                    help="also run every case with every K-th node dead (10: 10%% of the nodes)")
    ap.add_argument("--no-collect", action="store_true",
                    help="skip the --collect-only runs "
                         "(items are then read from the run's JUnit file)")
    ap.add_argument("--compare", default="",
                    help="also run each case with these pytest arguments added, alternating "
                         "with the runs without them (e.g. --compare=--no-history)")
    args = ap.parse_args()
    cases = []
    for c in args.cases.split(","):
        n, _, mode = c.partition(":")
        cases.append((int(n), mode or "auto"))
    rows = []
    per_node_checks = per_pair_checks = None
    print(f"# bench/collection.py on {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="ct-collect-") as tmp:
        base_s = None
        for n, mode in cases:
            work = Path(tmp) / f"{n}-{mode.replace(':', '_')}"
            work.mkdir()
            hostfile = work / "hostfile"
            hostfile.write_text("".join(f"node{i} slots=2\n" for i in range(1, n + 1)))
            pairs = len(pairs_mod.select([f"node{i}" for i in range(1, n + 1)],
                                         pairs_mod.parse_spec(mode)))
            if per_node_checks is not None and per_pair_checks is not None:
                expected = per_node_checks * n + per_pair_checks * pairs
                if expected > args.max_items:
                    rows.append({"nodes": n, "mode": mode, "pairs": pairs, "items": expected,
                                 "not_run": True})
                    print(f"  {n} nodes, --pairs {mode}: {expected} items expected: not run "
                          f"(> --max-items {args.max_items})", flush=True)
                    continue
            col = [] if args.no_collect else [run(pytest_argv(hostfile, mode, work, True), work)
                                              for _ in range(args.repeat)]
            full, other = [], []
            for _ in range(args.repeat):
                full.append(run(pytest_argv(hostfile, mode, work, False), work))
                if args.compare:
                    other.append(run(pytest_argv(hostfile, mode, work, False,
                                                 shlex.split(args.compare)), work))
            items = count_items(col[0]["out"]) if col else full[0]["ran"]
            bad = [r for r in full if r["rc"] not in (0, 1)]
            if bad:
                print(f"  !! {n} nodes {mode}: exit {bad[0]['rc']}: {bad[0]['out'][-600:]}",
                      flush=True)
            row = {"nodes": n, "mode": mode, "pairs": pairs, "items": items,
                   "collect_s": (statistics.median(r["seconds"] for r in col) if col
                                 else float("nan")),
                   "collect_mb": (statistics.median(r["rss_mb"] for r in col) if col
                                  else float("nan")),
                   "run_s": statistics.median(r["seconds"] for r in full),
                   "run_mb": statistics.median(r["rss_mb"] for r in full),
                   "failed": full[0]["failed"], "skipped": full[0]["skipped"]}
            if args.dead:
                argv = pytest_argv(hostfile, mode, work, False)
                dd = [run(argv, work, args.dead) for _ in range(args.repeat)]
                row.update(dead_s=statistics.median(r["seconds"] for r in dd),
                           dead_mb=statistics.median(r["rss_mb"] for r in dd),
                           dead_failed=dd[0]["failed"])
            if per_pair_checks is None:
                # the first case (2 nodes, all pairs) calibrates: checks per node and per pair
                if col:
                    per_node_checks, per_pair_checks, base_s = _calibrate(
                        col[0]["out"], n, pairs, row)
                else:  # --no-collect: nothing to calibrate on, no start-up to subtract
                    per_node_checks, per_pair_checks = 0, 0
            if base_s is not None:
                row["per_item_ms"] = ((row["run_s"] - base_s) / max(1, items - 1) * 1000
                                      if items > 20 else None)
                row["per_node_ms"] = (row["run_s"] - base_s) / n * 1000 if n > 2 else None
            rows.append(row)
            dead_text = (f"; {args.dead and 100 // args.dead}% dead: {row['dead_s']:.2f}s "
                         f"({row['dead_mb']:.0f} MB, "
                         f"{row['dead_failed']} reds, x{row['dead_s'] / row['run_s']:.2f})"
                         if args.dead else "")
            print(f"  {n} nodes, --pairs {mode}: {items} items, collect {row['collect_s']:.2f}s "
                  f"({row['collect_mb']:.0f} MB), run {row['run_s']:.2f}s ({row['run_mb']:.0f} MB, "
                  f"{row['failed']} reds, {row['skipped']} skipped){dead_text}", flush=True)
            if other:
                med = statistics.median(r["seconds"] for r in other)
                cpu = statistics.median(r["cpu_s"] for r in full)
                cpu_other = statistics.median(r["cpu_s"] for r in other)
                row["compare_s"] = med
                print(f"    with {args.compare}: run {med:.2f}s "
                      f"({statistics.median(r['rss_mb'] for r in other):.0f} MB); without / with: "
                      f"{row['run_s'] / med:.3f} wall, {cpu:.1f} / {cpu_other:.1f} = "
                      f"{cpu / cpu_other:.3f} CPU s of pytest; each (wall, CPU): "
                      + ", ".join(f"{a['seconds']:.1f}s {a['cpu_s']:.1f}s / {b['seconds']:.1f}s "
                                  f"{b['cpu_s']:.1f}s" for a, b in zip(full, other, strict=True)),
                      flush=True)
            recorded = [r["history_s"] for r in full if r.get("history_s") is not None]
            if recorded:
                print(f"    history recorded in {statistics.median(recorded):.2f}s (median; "
                      + ", ".join(f"{h:.2f}" for h in recorded) + f"): "
                      f"{100 * statistics.median(recorded) / row['run_s']:.1f} % of the run",
                      flush=True)
            if args.repeat > 1:  # the medians' spread: every run, in the order run
                for what, got in (("run", full), ("dead run", dd if args.dead else [])):
                    if got:
                        print(f"    each {what}: " + ", ".join(
                            f"{r['seconds']:.1f}s/{r['rss_mb']:.0f}MB" for r in got), flush=True)
    per_item = [r["per_item_ms"] for r in rows if r.get("per_item_ms")]
    typical = statistics.median(per_item) if per_item else None
    print()
    print(f"checks per node: {per_node_checks}, per pair: {per_pair_checks}; start-up (2 nodes): "
          + (f"{base_s:.2f}s" if base_s is not None else "not measured (--no-collect)"))
    print("| nodes | --pairs | pairs | items | collect s | collect MB | run s | run MB | reds | "
          "ms/item | ms/node | dead run s | dead MB | dead/healthy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("not_run"):
            est = (f"~{base_s + r['items'] * typical / 1000:.0f}"
                   if typical and base_s is not None else "?")
            print(f"| {r['nodes']} | {r['mode']} | {r['pairs']} | {r['items']} | not run | | {est} "
                  "(est.) | | | | | | | |")
            continue
        pi = f"{r['per_item_ms']:.2f}" if r.get("per_item_ms") else "-"
        pn = f"{r['per_node_ms']:.1f}" if r.get("per_node_ms") else "-"
        dead = (f"{r['dead_s']:.2f} | {r['dead_mb']:.0f} | {r['dead_s'] / r['run_s']:.2f}"
                if "dead_s" in r else " | | ")
        collect = ("not run | " if r["collect_s"] != r["collect_s"]  # NaN: --no-collect
                   else f"{r['collect_s']:.2f} | {r['collect_mb']:.0f}")
        print(f"| {r['nodes']} | {r['mode']} | {r['pairs']} | {r['items']} | {collect} | "
              f"{r['run_s']:.2f} | {r['run_mb']:.0f} | {r['failed']} | {pi} | {pn} | {dead} |")
    return 0


def _calibrate(collect_output: str, n: int, pairs: int, row: dict) -> tuple[int, int, float]:
    """Checks per node and per pair, from the node/pair ids of the collected items."""
    node_items = pair_items = 0
    for line in collect_output.splitlines():
        if "->" in line and "[" in line:
            pair_items += 1
        elif "[node" in line:
            node_items += 1
    return node_items // n, pair_items // pairs, row["run_s"]


if __name__ == "__main__":
    sys.exit(main())
