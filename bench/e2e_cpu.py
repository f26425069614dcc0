"""CPU seconds (user + system, every process it starts, on the launcher and the nodes) that one
suite run costs on a fresh simulated cluster, per selection: where the end-to-end tests' time
goes on a CPU-bound machine, independent of what else runs beside it.

    .venv/bin/python bench/e2e_cpu.py                    # the default selections
    .venv/bin/python bench/e2e_cpu.py -- -m ssh          # one selection of your own

This process makes itself the child subreaper, so the nodes' processes (started by the sim's
sshd, or daemonized) are reaped here once the sim is down, and their CPU time lands in
RUSAGE_CHILDREN. Each selection gets a cluster of its own; `(sim only)` is the cost of bringing
one up and down, to subtract.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from cpu_of import become_subreaper, children_cpu  # noqa: E402

from fixtures.sim import SimCluster  # noqa: E402

SELECTIONS: dict[str, list[str]] = {
    "(sim only)": [],
    "-m ssh": ["-m", "ssh"],
    "FAST (not collective, not training)": ["-m", "not collective and not training"],
    "-m collective": ["-m", "collective"],
    "-m training": ["-m", "training"],
    "everything": [],
}


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.2)


def measure(name: str, args: list[str], ext: Path) -> tuple[float, float]:
    before, start = children_cpu(), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ct-cpu-") as tmp:
        with SimCluster(Path(tmp) / "sim", nodes=3, slots=1, torch_extensions_dir=ext) as sim:
            if name != "(sim only)":
                subprocess.run(
                    [sys.executable, "-m", "pytest", "--hostfile", str(sim.hostfile),
                     "--ssh-config", str(sim.ssh_config), "-p", "no:cacheprovider", "-q",
                     "--junitxml", f"{tmp}/junit.xml", *args],
                    cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    check=False, timeout=900)
        reap()
    return children_cpu() - before, time.monotonic() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suite_args", nargs="*", help="one selection (after --)")
    ap.add_argument("--extensions", default=str(REPO / ".sim" / "torch_extensions" / "main"))
    a = ap.parse_args()
    become_subreaper()
    selections = {" ".join(a.suite_args): a.suite_args} if a.suite_args else SELECTIONS
    print(f"{'selection':40} {'cpu s':>8} {'wall s':>8}")
    for name, args in selections.items():
        c, w = measure(name, args, Path(a.extensions))
        print(f"{name:40} {c:8.1f} {w:8.1f}", flush=True)


if __name__ == "__main__":
    main()
