#!/usr/bin/env python3
"""Speed and scale on the sim: the checklist against what a user would otherwise do by hand.

Not a test: a measurement to quote (README "Speed and scale").  For each cluster size N it
brings up a simulated cluster (fixtures/sim/, one network namespace + real sshd per node)
and, in the same run, alternates `--repeat` times:

* suite: the whole checklist without collectives and training,
  ``pytest -m "not collective and not training"`` (default --pairs: all pairs up to 32 nodes),
  under ``/usr/bin/time`` for the peak RSS of the pytest process;
* (a) loop: ``ssh -F <cfg> a 'ssh b hostname'`` for every ordered pair, one after another (the
  field guide's by-hand check);
* (b) pdsh: ``pdsh -R ssh -w node1..nodeN 'for h in ...; do ssh -o BatchMode=yes $h hostname;
  done'``: every node checks ssh to every node, the nodes in parallel (pdsh's fan-out), the
  targets of one node one after another;
* (b') pdsh-par: the same with the inner loop in parallel (``ssh ... & done; wait``);
* (c) pdsh-import: (b) followed, on every node, by the launch's import done by hand with the
  launch's interpreter by absolute path (``<venv>/bin/python -c 'import deepspeed.launcher.launch,
  torch'``): trust and the launch's import, the by-hand line the fast checklist is held against
  (issue 24: suite/(c) <= 1.3 at 16 nodes).

(a), (b), (b') only check SSH trust; the suite checks the 40-odd items of CHECKLIST H/S/N/F/E/A/D.
Launcher SSH sessions are counted from the nodes' sshd logs (LogLevel VERBOSE: "Accepted
publickey ... from <launcher address>") before and after each command.  Medians are printed,
with the ratios: suite/(b) (target <= 2), (a)/suite (target >= 20 at 16 nodes).

    .venv/bin/python bench/scale.py [--nodes 2,4,8,16] [--repeat 3] [--json out.json]
        [--suite-args "..."] [--skip loop]

The machine this runs on may be shared (other workers' tests): the medians of --repeat runs
are what to quote, with the load average printed beside them.
"""

from __future__ import annotations

import argparse
import json
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

from fixtures.sim import SimCluster  # noqa: E402

MARK = "not collective and not training"


def logins_from(sim: SimCluster, address: str) -> int:
    n = 0
    for node in sim.nodes:
        try:
            text = node.paths["sshd_log"].read_text(errors="replace")
        except OSError:
            continue
        n += sum(1 for line in text.splitlines()
                 if "Accepted publickey" in line and f" from {address} port " in line)
    return n


def busy_cpu_seconds() -> float:
    """CPU seconds this machine has spent busy (all CPUs: user, nice, system, irq, softirq,
    steal) since boot, from /proc/stat: the difference around a run is the CPU work of the run
    and of the simulated nodes it drives (their sshd and Python processes are not its children),
    plus whatever else ran meanwhile (measure on an idle machine)."""
    with open("/proc/stat") as f:
        cols = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(c) for c in cols[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def timed(sim: SimCluster, argv: list[str], env: dict[str, str] | None = None,
          timeout: float = 1800) -> dict:
    """Run argv from the launcher; wall time, CPU seconds machine-wide, exit status, launcher
    sessions opened."""
    before = logins_from(sim, sim.launcher_address)
    cpu0 = busy_cpu_seconds()
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout,
                          check=False,
                          env={**os.environ, **(env or {})}, cwd=REPO)
    seconds = time.monotonic() - start
    cpu = busy_cpu_seconds() - cpu0
    time.sleep(0.3)  # sshd writes its log line asynchronously
    return {"seconds": seconds, "cpu_s": cpu, "rc": proc.returncode,
            "out": proc.stdout + proc.stderr,
            "sessions": logins_from(sim, sim.launcher_address) - before}


def run_suite(sim: SimCluster, extra: list[str], outdir: Path) -> dict:
    rss = outdir / "rss.txt"
    argv = ["/usr/bin/time", "-f", "%M", "-o", str(rss),
            str(REPO / ".venv/bin/python"), "-m", "pytest",
            "--hostfile", str(sim.hostfile), "--ssh-config", str(sim.ssh_config),
            "-m", MARK, "-p", "no:cacheprovider", "-q", "--junitxml", str(outdir / "junit.xml"),
            *extra]
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    res = timed(sim, argv, env=env)
    try:
        res["rss_mb"] = int(rss.read_text().split()[-1]) / 1024
    except (OSError, ValueError, IndexError):
        res["rss_mb"] = None
    tail = [ln for ln in res["out"].splitlines()
            if " in " in ln and ("passed" in ln or "failed" in ln)]
    res["summary"] = tail[-1].strip("= ") if tail else res["out"][-300:]
    res["items"] = _junit_count(outdir / "junit.xml")
    res["reds"] = _junit_reds(outdir / "junit.xml")
    return res


def _junit_reds(path: Path) -> dict[str, list]:
    """The red items of a run by check: {check: [count, first id, its first message line]}, so
    that a red run on a healthy sim says what went red (a loaded machine's timeouts, say)."""
    import xml.etree.ElementTree as ET

    reds: dict[str, list] = {}
    try:
        cases = list(ET.parse(path).getroot().iter("testcase"))
    except (OSError, ET.ParseError):
        return reds
    for case in cases:
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is None:
            continue
        name = case.get("name", "?")
        check = name.split("[", 1)[0]
        got = reds.setdefault(check, [0, name, (bad.get("message") or "").splitlines()[:1]])
        got[0] += 1
    return reds


def _junit_count(path: Path) -> int:
    import xml.etree.ElementTree as ET

    try:
        return sum(1 for _ in ET.parse(path).getroot().iter("testcase"))
    except (OSError, ET.ParseError):
        return 0


def run_loop(sim: SimCluster) -> dict:
    """(a) for a, for b: ssh -F cfg a 'ssh b hostname' (one after another)."""
    names = [n.name for n in sim.nodes]
    script = "\n".join(
        f"ssh -F {shlex.quote(str(sim.ssh_config))} -o BatchMode=yes {a} "
        f"'ssh -o BatchMode=yes {b} hostname' >/dev/null || echo FAIL {a} {b}"
        for a in names for b in names)
    return timed(sim, ["bash", "-c", script])


def run_pdsh(sim: SimCluster, parallel: bool, imports: bool = False) -> dict:
    names = [n.name for n in sim.nodes]
    hosts = " ".join(names)
    if imports:
        python = shlex.quote(str(REPO / ".venv/bin/python"))
        inner = (f"for h in {hosts}; do ssh -o BatchMode=yes $h hostname >/dev/null "
                 f"|| echo FAIL $h; "
                 f"done; {python} -c 'import deepspeed.launcher.launch, torch' >/dev/null 2>&1 "
                 f"|| echo FAIL import")
    elif parallel:
        inner = (f"for h in {hosts}; do (ssh -o BatchMode=yes $h hostname >/dev/null "
                 f"|| echo FAIL $h) & "
                 f"done; wait")
    else:
        inner = (f"for h in {hosts}; do ssh -o BatchMode=yes $h hostname >/dev/null "
                 f"|| echo FAIL $h; done")
    env = {"PDSH_RCMD_TYPE": "ssh",
           "PDSH_SSH_ARGS_APPEND": f"-F {sim.ssh_config} -o BatchMode=yes"}
    return timed(sim, ["pdsh", "-R", "ssh", "-w", ",".join(names), inner], env=env)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="2,4,8,16")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--suite-args", default="", help="extra pytest arguments for the suite run")
    ap.add_argument("--skip", default="", help="comma-separated: loop, pdsh, pdsh-par, pdsh-import")
    ap.add_argument("--json", help="write all raw figures here")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    sizes = [int(x) for x in args.nodes.split(",")]
    extra = shlex.split(args.suite_args)
    rows = []
    raw: dict = {}
    print(f"# bench/scale.py on {os.cpu_count()} CPUs, load average at start {load()}", flush=True)
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix=f"ct-scale{n}-") as tmp:
            with SimCluster(Path(tmp) / "sim", nodes=n, slots=1) as sim:
                runs: dict[str, list[dict]] = {"suite": [], "loop": [], "pdsh": [], "pdsh-par": [],
                                               "pdsh-import": []}
                for rep in range(args.repeat):
                    out = Path(tmp) / f"run{rep}"
                    out.mkdir()
                    runs["suite"].append(run_suite(sim, extra, out))
                    if "pdsh" not in skip:
                        runs["pdsh"].append(run_pdsh(sim, parallel=False))
                    if "pdsh-par" not in skip:
                        runs["pdsh-par"].append(run_pdsh(sim, parallel=True))
                    if "pdsh-import" not in skip:
                        runs["pdsh-import"].append(run_pdsh(sim, parallel=False, imports=True))
                    if "loop" not in skip:
                        runs["loop"].append(run_loop(sim))
                    for name, rs in runs.items():
                        if rs and rs[-1]["rc"] != 0 or rs and "FAIL" in rs[-1]["out"]:
                            print(f"  !! N={n} {name} run {rep}: exit {rs[-1]['rc']}: "
                                  f"{rs[-1].get('summary') or rs[-1]['out'][-400:]}", flush=True)
                            for check, (count, first, msg) in (rs[-1].get("reds") or {}).items():
                                print(f"     {count} x {check}, first {first}: {msg}", flush=True)
                    s = runs["suite"][-1]
                    print(f"  N={n:<3} run {rep + 1}: suite {s['seconds']:6.2f}s "
                          f"(CPU {s['cpu_s']:.1f}s; {s['summary']}), "
                          + ", ".join(f"{k} {v[-1]['seconds']:6.2f}s (CPU {v[-1]['cpu_s']:.1f}s)"
                                      for k, v in runs.items() if k != "suite" and v)
                          + f"  [load {load()}]", flush=True)
        med = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items() if v}
        cpu = {k: statistics.median(r["cpu_s"] for r in v) for k, v in runs.items() if v}
        sessions = {k: v[-1]["sessions"] for k, v in runs.items() if v}
        rss = statistics.median(r["rss_mb"] for r in runs["suite"] if r["rss_mb"] is not None)
        row = {"nodes": n, "items": runs["suite"][-1]["items"], "suite_s": med["suite"],
               "suite_rss_mb": rss, "suite_sessions": sessions["suite"],
               **{f"{k}_s": v for k, v in med.items() if k != "suite"},
               **{f"{k}_sessions": v for k, v in sessions.items() if k != "suite"}}
        if "pdsh" in med:
            row["suite_over_pdsh"] = med["suite"] / med["pdsh"]
        if "pdsh-par" in med:
            row["suite_over_pdsh_par"] = med["suite"] / med["pdsh-par"]
        if "pdsh-import" in med:
            row["suite_over_pdsh_import"] = med["suite"] / med["pdsh-import"]
            row["suite_cpu_s"], row["pdsh-import_cpu_s"] = cpu["suite"], cpu["pdsh-import"]
            row["cpu_suite_over_pdsh_import"] = cpu["suite"] / cpu["pdsh-import"]
        if "loop" in med:
            row["loop_over_suite"] = med["loop"] / med["suite"]
        rows.append(row)
        raw[n] = {k: [{kk: vv for kk, vv in r.items() if kk != "out"} for r in v]
                  for k, v in runs.items()}
    print()
    print(f"medians of {args.repeat} runs; load average at end {load()}")
    head = ("| nodes | items | suite s | peak RSS MB | launcher ssh sessions (suite / loop / pdsh) "
            "| (a) loop s | (b) pdsh s | (b') pdsh-par s | (c) pdsh-import s | suite/(b) | "
            "suite/(b') | suite/(c) | (a)/suite |")
    print(head)
    print("|" + "|".join("---" for _ in range(head.count("|") - 1)) + "|")
    for r in rows:
        def f(key: str, fmt: str = "{:.2f}", r: dict = r) -> str:
            return fmt.format(r[key]) if key in r else "-"
        print(f"| {r['nodes']} | {r['items']} | {f('suite_s')} | {f('suite_rss_mb', '{:.0f}')} | "
              f"{r['suite_sessions']} / {r.get('loop_sessions', '-')} / "
              f"{r.get('pdsh_sessions', '-')} | "
              f"{f('loop_s')} | {f('pdsh_s')} | {f('pdsh-par_s')} | {f('pdsh-import_s')} | "
              f"{f('suite_over_pdsh')} | {f('suite_over_pdsh_par')} | "
              f"{f('suite_over_pdsh_import')} | "
              f"{f('loop_over_suite', '{:.1f}')} |")
    if any("suite_cpu_s" in r for r in rows):
        print()
        print("CPU seconds, machine-wide (every simulated node shares these CPUs): medians")
        print("| nodes | suite CPU s | (c) CPU s | suite/(c) CPU | suite/(c) wall |")
        print("|---|---|---|---|---|")
        for r in rows:
            if "suite_cpu_s" in r:
                print(f"| {r['nodes']} | {r['suite_cpu_s']:.1f} | {r['pdsh-import_cpu_s']:.1f} | "
                      f"{r['cpu_suite_over_pdsh_import']:.2f} | "
                      f"{r['suite_over_pdsh_import']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "raw": raw}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
