"""`--transport srun`: inside a Slurm allocation, the probes of a node's hardware and state run
as job steps, through the allocation's own `srun` fan-out (slurmd forwards the step along its
tree, as Slurm's health checks reach nodes), instead of as commands on the launcher's SSH
sessions: one `srun` runs a prefetch's probes on every node at once.

What stays on SSH, because the launch goes through SSH and the check judges exactly that: the
logins and trust (S), every probe of the non-interactive ssh shell's environment (`base`, which
E1 and the names checks read; `sshd`; envprobe's sections: E; healthprobe's `fabric`, whose
limits a rank gets from its ssh session and `.bashrc`, where a step gets the submitting shell's
under Slurm's PropagateResourceLimits), the port matrix's listeners
(a listener outlives its command, and Slurm ends a step's every process with the step), the
rehearsal and the launches.  `SRUN_PROBES` is the list of what moves; README "Transports".

Tested against a real Slurm 22.05 on the simulated cluster (fixtures/sim/slurm.py, the suite
started inside `salloc`), and against a stand-in `srun` (fixtures/sim/srun.py) for faults a real
Slurm would not survive.  The options used are Slurm's own (20.11 and later for
``--overlap``): ``--nodelist --nodes --ntasks-per-node --input=all --label``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

#: (script, section) that run as job steps under --transport srun; None: every section of it
SRUN_PROBES: frozenset[tuple[str, str | None]] = frozenset({
    ("healthprobe.py", "accel"),  # R: GPU/NPU health (nvidia-smi -q, npu-smi, the kernel log)
    ("healthprobe.py", "diag"),  # R9: DCGM's diagnostic, minutes long, ended with its step
    ("probe.py", "accelerators"),  # A1's inventory
    ("netprobe.py", "firewall"),  # F4's rule dump
    ("storeprobe.py", "dir"),  # the shared output directory, as the node sees it
})

#: a line of `srun --label`: "<task id>: <text>" (the id zero-padded to the widest one)
_LABEL = re.compile(rb"^\s*(\d+): ?")
#: printed first by node/bundle.py under Slurm: which node the task runs on
NODE_MARK = "CT_BUNDLE_NODE:"


def via_srun(script: str, section: str) -> bool:
    return (script, None) in SRUN_PROBES or (script, section) in SRUN_PROBES


class SrunError(Exception):
    """--transport srun cannot be used here (a usage error: the message says why)."""


def check_usable(environ: Mapping[str, str], node_source: str) -> str:
    """The `srun` to use, or SrunError: srun must be on PATH, the run inside an allocation, and
    the node names Slurm's own (the node list taken from the allocation)."""
    srun = shutil.which("srun", path=environ.get("PATH"))
    if srun is None:
        raise SrunError("--transport srun: no `srun` on this PATH (run inside the allocation, "
                        "on a node where Slurm's client commands are installed)")
    if not (environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")):
        raise SrunError("--transport srun: not inside a Slurm allocation (SLURM_JOB_ID is not "
                        "set): run the suite under salloc or sbatch")
    if node_source != "slurm":
        raise SrunError("--transport srun: the node list must come from the allocation "
                        "(SLURM_JOB_NODELIST, no --hostfile): srun is given Slurm's node names")
    return srun


@dataclass
class StepResult:
    """How one step on several nodes ended (its stdout went to `on_line`, task by task)."""

    exit_status: int | None
    seconds: float
    timed_out: bool
    stderr: str


class Srun:
    def __init__(self, srun: str) -> None:
        self.srun = srun
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()

    def argv(self, nodes: Sequence[str], command: Sequence[str]) -> list[str]:
        n = str(len(nodes))
        return [self.srun, "--nodelist", ",".join(nodes), "--nodes", n, "--ntasks", n,
                "--ntasks-per-node", "1", "--overlap", "--input", "all", "--label",
                "--kill-on-bad-exit=0", "--quiet", *command]

    def step(self, nodes: Sequence[str], command: Sequence[str], stdin: bytes,
             on_line: Callable[[int, bytes], None], timeout: float) -> StepResult:
        """Run `command` as one task on each of `nodes`; `on_line(task, line)` for each line of
        a task's stdout as it arrives.  The step is ended (srun killed, which ends it on every
        node) at `timeout`."""
        start = time.monotonic()
        proc = subprocess.Popen(self.argv(nodes, command), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        with self._lock:
            self._procs.add(proc)
        err: list[bytes] = []
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

        def feed() -> None:
            assert proc.stdin is not None
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
            except OSError:
                pass

        def drain() -> None:
            assert proc.stderr is not None
            err.append(proc.stderr.read()[-20000:])

        helpers = [threading.Thread(target=feed, daemon=True),
                   threading.Thread(target=drain, daemon=True)]
        for t in helpers:
            t.start()
        timer = threading.Timer(timeout, self._end, args=(proc,))
        timer.daemon = True
        timer.start()
        try:
            for line in proc.stdout:
                m = _LABEL.match(line)
                if m:
                    on_line(int(m.group(1)), line[m.end():].rstrip(b"\r\n"))
            proc.wait()
        finally:
            timer.cancel()
            with self._lock:
                self._procs.discard(proc)
        for t in helpers:
            t.join(timeout=2)
        timed_out = time.monotonic() - start >= timeout
        return StepResult(None if timed_out else proc.returncode, time.monotonic() - start,
                          timed_out, b"".join(err).decode("utf-8", "replace"))

    @staticmethod
    def _end(proc: subprocess.Popen[bytes]) -> None:
        """srun ends its step on every node when it gets SIGTERM/SIGKILL (Slurm's own cancel)."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, 15)
                time.sleep(2)
                if proc.poll() is None:
                    os.killpg(proc.pid, 9)
            except OSError:
                pass

    def end_all(self) -> None:
        """Ctrl-C or the end of the run: end every step still running."""
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            self._end(proc)
