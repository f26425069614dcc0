"""Training smoke (checklist T1) on this machine, for the project's own tests and bench/.

:func:`run_local_single_node` runs ``node/train_smoke.py`` on local ranks through the real
deepspeed launcher (the command line of judge/trainargv.py), bounded by a deadline and killed
as a whole process group on every path; the log is judged by judge/trainresult.py. The checks
themselves run the job on the cluster's nodes over SSH: measure/training.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from cluster_tests import node
from cluster_tests.judge.trainargv import single_node_argv
from cluster_tests.judge.traindiag import LAUNCH_TIMEOUT_MARK
from cluster_tests.judge.trainresult import DEFAULT_MIN_DROP, LaunchInfo, SmokeResult, parse_output
from cluster_tests.measure.localcollective import free_port

SCRIPT_PATH = node.script("train_smoke.py")

__all__ = ["SCRIPT_PATH", "find_deepspeed", "free_port", "run_local_single_node"]


def find_deepspeed() -> str:
    """The ``deepspeed`` launcher next to this interpreter, else the one on PATH."""
    here = Path(sys.executable).parent / "deepspeed"
    if here.is_file():
        return str(here)
    found = shutil.which("deepspeed")
    if found:
        return found
    raise FileNotFoundError("deepspeed launcher not found next to the interpreter nor on PATH")



def _kill_group(proc: subprocess.Popen[bytes], grace: float = 3.0) -> None:
    """SIGTERM the process group, then SIGKILL it; reap the leader."""
    pgid = proc.pid
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        end = time.monotonic() + wait
        while time.monotonic() < end:
            if proc.poll() is not None and not _group_alive(pgid):
                break
            time.sleep(0.05)
        if not _group_alive(pgid):
            break
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _group_alive(pgid: int) -> bool:
    """True while any non-zombie process is in the group (Linux /proc; else killpg probe)."""
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for d in proc_dir.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def run_local_single_node(
    slots: int,
    steps: int,
    deadline: float,
    env: Mapping[str, str] | None = None,
    *,
    deepspeed: str | None = None,
    script: str | os.PathLike[str] = SCRIPT_PATH,
    master_port: int | None = None,
    extra: Sequence[str] = (),
    launch_grace: float = 30.0,
    min_drop: float = DEFAULT_MIN_DROP,
) -> tuple[SmokeResult, str]:
    """Run the job on this machine on ``slots`` local ranks through the real deepspeed launcher.

    The job gets ``--deadline deadline`` (its own watchdog); the launch as a whole is killed
    (its whole process group: launcher, launch.py and ranks) after ``deadline + launch_grace``
    seconds, on KeyboardInterrupt and on any other exception. ``env`` is laid over
    ``os.environ``; with no accelerator, pass ``DS_ACCELERATOR=cpu``. The log (stdout+stderr)
    is returned with the parsed result; ``result.launch`` has argv, return code and pgid.
    """
    ds = deepspeed or find_deepspeed()
    port = master_port or free_port()
    job_args = ["--steps", str(steps), "--deadline", f"{deadline:g}", *extra]
    argv = single_node_argv(ds, script, slots, port, job_args)
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    t0 = time.monotonic()
    timed_out = False
    with tempfile.TemporaryFile() as out, tempfile.TemporaryDirectory(prefix="ct-train-") as cwd:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=cwd,  # the runner prepends its cwd to PYTHONPATH: keep it neutral
            start_new_session=True,
        )
        try:
            try:
                proc.wait(timeout=deadline + launch_grace)
            except subprocess.TimeoutExpired:
                timed_out = True
        finally:
            # On every path (done, timeout, KeyboardInterrupt, error) no process is left.
            _kill_group(proc)
        out.seek(0)
        text = out.read().decode("utf-8", errors="replace")
    elapsed = time.monotonic() - t0
    if timed_out:
        text += (
            f"\n{LAUNCH_TIMEOUT_MARK} launch exceeded {deadline + launch_grace:g} s; "
            f"killed process group {proc.pid}\n"
        )
    result = parse_output(text, expected_ranks=slots, min_drop=min_drop)
    result.launch = LaunchInfo(
        argv=argv,
        returncode=proc.returncode,
        pgid=proc.pid,
        elapsed_s=elapsed,
        timed_out=timed_out,
    )
    return result, text