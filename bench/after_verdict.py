#!/usr/bin/env python3
"""What the run's after-effects cost on the fast checklist (issue 42): the history written by
default, the Slurm step (nothing runs without its flags when no Slurm answers), against the code
before them.

Not a test: a measurement to quote (README "Reports").  It brings up one simulated cluster
(fixtures/sim/) and alternates, `--repeat` times, the fast checklist
(``pytest -m "not collective and not training"``) run by

* base: the package as it was at `--base` (``git archive``, first on PYTHONPATH: the same
  venv, the same sim);
* now: this checkout, as a user runs it: no new flag (history.sqlite written beside the JUnit
  file, one more run in it each time);
* now --no-history: this checkout without the history;

and prints each one's median wall time, machine-wide CPU seconds (bench/scale.py's ``/proc/stat``
count: the sim's sshd and Python processes are not children of the run), the pytest process's
own CPU seconds (``/usr/bin/time``: the launcher's work, where the after-verdict steps run, and
the least disturbed by other work on the machine), the ratios to base, and what the history step
took in each run (summary.json's ``history.seconds``).

    .venv/bin/python bench/after_verdict.py [--nodes 4] [--repeat 5] [--base 81be10f]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from scale import MARK, busy_cpu_seconds, load  # noqa: E402

from fixtures.sim import SimCluster  # noqa: E402


def run(sim: SimCluster, out: Path, extra: list[str], pythonpath: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLUSTER_TESTS_", "SLURM_"))}
    env.pop("PYTEST_ADDOPTS", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    argv = [sys.executable, "-m", "pytest", "--hostfile", str(sim.hostfile), "--ssh-config",
            str(sim.ssh_config), "-m", MARK, "-p", "no:cacheprovider", "-q",
            "--junitxml", str(out / "junit.xml"), *extra]
    cpu0 = busy_cpu_seconds()
    times = out / "time.txt"
    (out / "summary.json").unlink(missing_ok=True)
    t0 = time.monotonic()
    proc = subprocess.run(["/usr/bin/time", "-f", "%U %S", "-o", str(times), *argv], cwd=str(out),
                          env=env, capture_output=True, text=True, errors="replace", check=False,
                          timeout=900)
    wall = time.monotonic() - t0
    cpu = busy_cpu_seconds() - cpu0
    if proc.returncode != 0:
        print(f"  !! exit {proc.returncode}: {proc.stdout[-800:]}", flush=True)
    try:
        own = sum(float(x) for x in times.read_text().split()[-2:])
    except (OSError, ValueError):
        own = float("nan")
    try:
        history = (json.loads((out / "summary.json").read_text()).get("history") or {}).get(
            "seconds")
    except (OSError, ValueError):
        history = None
    return {"wall": wall, "cpu": cpu, "own": own, "history": history, "rc": proc.returncode}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--base", default="81be10f", help="the revision before issue 42")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ct-after-") as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.base],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        variants = {"base": ([], str(base)), "now": ([], None),
                    "now --no-history": (["--no-history"], None)}
        outs = {name: Path(tmp) / ("out-" + name.replace(" ", "_")) for name in variants}
        for d in outs.values():
            d.mkdir()
        got: dict[str, list[dict]] = {name: [] for name in variants}
        print(f"# bench/after_verdict.py: {args.nodes} nodes, fast checklist, base {args.base}, "
              f"{os.cpu_count()} CPUs, {load()}", flush=True)
        with SimCluster(Path(tmp) / "sim", nodes=args.nodes, slots=1) as sim:
            run(sim, outs["now"].parent, ["--no-history"], None)  # warm: first logins, caches
            for i in range(args.repeat):
                for name, (extra, pythonpath) in variants.items():
                    r = run(sim, outs[name], extra, pythonpath)
                    got[name].append(r)
                    print(f"  {i + 1}/{args.repeat} {name}: {r['wall']:.2f} s wall, "
                          f"{r['cpu']:.1f} CPU s, pytest's own {r['own']:.2f} CPU s"
                          + (f", history {r['history']:.3f} s" if r["history"] is not None
                             else "") + f" ({load()})", flush=True)
        history = outs["now"] / "history.sqlite"
        print(f"# history after {args.repeat} runs: {history.stat().st_size} bytes"
              if history.exists() else "# no history file written")
    print("| variant | wall s (median) | machine CPU s (median) | pytest's own CPU s (median) | "
          "wall / base | machine CPU / base | own CPU / base | runs (wall) |")
    print("|---|---|---|---|---|---|---|---|")
    b_wall = statistics.median(r["wall"] for r in got["base"])
    b_cpu = statistics.median(r["cpu"] for r in got["base"])
    b_own = statistics.median(r["own"] for r in got["base"])
    for name, runs in got.items():
        wall = statistics.median(r["wall"] for r in runs)
        cpu = statistics.median(r["cpu"] for r in runs)
        own = statistics.median(r["own"] for r in runs)
        print(f"| {name} | {wall:.2f} | {cpu:.1f} | {own:.2f} | {wall / b_wall:.3f} | "
              f"{cpu / b_cpu:.3f} | {own / b_own:.3f} | "
              + ", ".join(f"{r['wall']:.1f}" for r in runs) + " |")
    recorded = [r["history"] for r in got["now"] if r["history"] is not None]
    if recorded:
        print("history step (summary.json history.seconds), median "
              f"{statistics.median(recorded):.3f} s: " + ", ".join(f"{h:.3f}" for h in recorded))
    return 0


if __name__ == "__main__":
    sys.exit(main())
