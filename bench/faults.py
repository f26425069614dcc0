"""Faults on a simulated cluster: how long the suite takes to finish with each, and what it
leaves behind on the nodes (processes, listeners, scratch files). Prints a Markdown table.

    .venv/bin/python bench/faults.py [--nodes 3] [-m "not training"]

Each fault is injected for real, the suite runs as a user runs it (a pytest subprocess), the
fault is undone, and the nodes are inspected: every process inside a node's network namespace
other than its sshd and holder, every listening TCP port other than 22, every /tmp/ct-* path
created during the run.
"""

from __future__ import annotations

import argparse
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from fixtures.sim import SimCluster  # noqa: E402


def leftovers(sim: SimCluster, scratch_before: set[str]) -> list[str]:
    found = []
    for node in sim.nodes:
        pid = str(node.pid)
        procs = sim.exec(node.name, ["pgrep", "-af", "--ns", pid, "--nslist", "net", "."]).stdout
        for line in procs.splitlines():
            if any(x in line for x in ("sshd", "sleep infinity", "unshare", "pgrep")):
                continue
            found.append(f"{node.name}: process {line[:100]}")
        ports = sim.exec(node.name, ["ss", "-Hltn"]).stdout
        for line in ports.splitlines():
            local = line.split()[3] if len(line.split()) > 3 else ""
            if not local.endswith(":22"):
                found.append(f"{node.name}: listener {local}")
    for path in set(glob.glob("/tmp/ct-train-*")) - scratch_before:
        found.append(f"scratch {path}")
    return found


def run(sim: SimCluster, args: list[str], interrupt_on: str | None = None,
        hostfile: Path | None = None):
    argv = [sys.executable, "-m", "pytest", "--hostfile", str(hostfile or sim.hostfile),
            "--ssh-config", str(sim.ssh_config), "-p", "no:cacheprovider", "-q",
            "--output-dir", str(sim.shared_dir), *args]
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    if interrupt_on:
        while proc.poll() is None:
            if any(interrupt_on in sim.exec(n.name,
                                            ["pgrep", "-af", "--ns", str(n.pid), "--nslist", "net",
                                                     interrupt_on]).stdout for n in sim.nodes):
                start = time.monotonic()
                proc.send_signal(signal.SIGINT)
                break
            time.sleep(0.1)
    out, _ = proc.communicate(timeout=900)
    return time.monotonic() - start, proc.returncode, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("-m", dest="marker", default="not training")
    opts = ap.parse_args()
    fast = ["-m", opts.marker]
    with tempfile.TemporaryDirectory(prefix="ct-bench-faults-") as tmp, \
            SimCluster(Path(tmp) / "sim", nodes=opts.nodes) as sim:
        slow = Path(tmp) / "slowbin"
        slow.mkdir()
        (slow / "python3").write_text(f"#!/bin/sh\nsleep 45\nexec {sys.executable} \"$@\"\n")
        (slow / "python3").chmod(0o755)
        hostile = Path(tmp) / "hostile"
        hostile.write_text(f"$(touch {tmp}/pwned) slots=1\n`touch {tmp}/pwned2` slots=1\n"
                           "node1 slots=1\n")
        cases = [
            ("healthy cluster", lambda: None, fast, None, None),
            ("sshd stopped on node3", lambda: sim.stop_sshd("node3"), fast, None, None),
            ("node3 black-holed (all input dropped)",
             lambda: sim.iptables("node3", ["-I", "INPUT", "-j", "DROP"]),
             fast + ["--timeout-connect", "5"], None, None),
            ("node3 drops high ports", lambda: sim.iptables(
                "node3", ["-A", "INPUT", "-p", "tcp", "--dport", "1024:65535", "-j", "DROP"]), fast,
             None, None),
            ("node2 slow: every shell sleeps 3 s (.bashrc)",
             lambda: sim.prepend_bashrc("node2", "sleep 3\n"), fast, None, None),
            ("node3 link throttled to 50 Mbit/s (tc tbf)", lambda: sim.tc(
                "node3", ["qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "50mbit",
                          "burst", "64kb", "latency", "100ms"]), fast, None, None),
            ("authorized_keys 0666 on node2", lambda: sim.chmod("node2", "authorized_keys", 0o666),
             fast, None, None),
            ("host key of node2 changed", lambda: sim.change_host_key("node2"), fast, None, None),
            ("hostile hostfile lines", lambda: None, ["-m", "hostfile or ssh"], None, hostile),
            ("SIGINT while probing (node2's python slow to start)", lambda: sim.append_bashrc(
                "node2", f"export PATH={slow}:$PATH\n"), ["-m", "ssh or names"], "sleep 45", None),
            ("SIGINT during the bandwidth test", lambda: None, ["-m", "collective"],
             "allreduce", None),
            ("SIGINT during training", lambda: None, ["-m", "training"], "train_smoke", None),
        ]
        print(f"| fault ({opts.nodes} nodes) | suite exit | time to finish "
              "| leftovers on the nodes |")
        print("|---|---|---|---|")
        for name, inject, args, interrupt_on, hostfile in cases:
            sim.restore()
            before = set(glob.glob("/tmp/ct-train-*"))
            inject()
            seconds, rc, out = run(sim, args, interrupt_on, hostfile)
            sim.restore()
            time.sleep(0.5)
            left = leftovers(sim, before)
            if hostfile is not None:
                left += [p for p in glob.glob(f"{tmp}/pwned*")]
            what = "after SIGINT " if interrupt_on else ""
            print(f"| {name} | {rc} | {what}{seconds:.1f} s | "
                  f"{len(left)}{': ' + '; '.join(left) if left else ''} |",
                  flush=True)


if __name__ == "__main__":
    os.environ.pop("PYTEST_ADDOPTS", None)
    main()
