"""What E7 (test_jit_ops, issue 28) costs the fast checklist: the suite of a base revision
against this checkout's, alternating, on one healthy simulated cluster. Prints a Markdown table.

    .venv/bin/python bench/jit_overhead.py [--base 404a079] [--nodes 3] [--repeat 3]

The base revision is extracted with `git archive` into a temporary directory and run from there
(its `cluster_tests` first on PYTHONPATH, ahead of this venv's editable install), this checkout
as it is; same venv, same sim, `-m "not collective and not training"`, as a user runs it. Also
printed: E7's own durations and the seconds the rehearsal's JIT inspection took on each node
(the `jit.seconds` of node/rehearse.py, in the JUnit properties' absence read from the log).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from suite import parse_junit  # noqa: E402

from fixtures.sim import SimCluster  # noqa: E402

FAST = ["-m", "not collective and not training"]


def run(sim: SimCluster, cwd: Path, pythonpath: str | None) -> tuple[float, int, str, Path]:
    junit = Path(tempfile.mkdtemp(prefix="ct-bench-")) / "junit.xml"
    argv = [sys.executable, "-m", "pytest", "--hostfile", str(sim.hostfile), "--ssh-config",
            str(sim.ssh_config), "-p", "no:cacheprovider", "-q", "-rw",
            "--durations=0", "--durations-min=0",
            "--junitxml", str(junit), *FAST]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS",)}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    return time.monotonic() - start, proc.returncode, proc.stdout + proc.stderr, junit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="404a079")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ct-base-"))
    archive = subprocess.run(["git", "-C", str(REPO), "archive", args.base], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
    times: dict[str, list[float]] = {"base": [], "E7": []}
    e7: list[str] = []
    inspect: list[float] = []
    with SimCluster(tempfile.mkdtemp(prefix="ct-bench-sim-"), nodes=args.nodes, slots=1) as sim:
        for i in range(args.repeat):
            for label, cwd, pp in (("base", base, str(base)), ("E7", REPO, None)):
                seconds, rc, out, junit = run(sim, cwd, pp)
                if rc != 0:
                    raise SystemExit(f"{label} run {i} exited {rc}:\n{out[-3000:]}")
                if label == "E7" and "test_jit_ops" not in out:
                    raise SystemExit("E7 did not run:\n" + out[-2000:])
                times[label].append(seconds)
                if label == "E7":
                    e7 += re.findall(r"^\s*([\d.]+)s call\s+\S*test_jit_ops\[(\S+)\]", out, re.M)
                    props = parse_junit(junit)[2]
                    inspect += [float(p["inspect_seconds"]) for t, p in props.items()
                                if t.startswith("test_jit_ops[") and "inspect_seconds" in p]
    b, n = statistics.median(times["base"]), statistics.median(times["E7"])
    print(f"| nodes | runs | base {args.base} s (median) | with E7 s (median) | growth |")
    print("|---|---|---|---|---|")
    print(f"| {args.nodes} | {args.repeat} | {b:.2f} | {n:.2f} | {100 * (n - b) / b:+.1f} % |")
    print("\nall runs:", {k: [round(x, 2) for x in v] for k, v in times.items()})
    print("test_jit_ops call durations (s, node):", e7)
    print("the rehearsal's JIT inspection per node (s): median "
          f"{statistics.median(inspect):.3f}, max {max(inspect):.3f}")


if __name__ == "__main__":
    main()
