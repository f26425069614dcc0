"""Ctrl-C at any moment of a run ends it promptly and leaves nothing behind, on any node or on
the launcher.

The user presses Ctrl-C at a moment drawn at random (a fixed seed: the same moments every run,
`MOMENTS`) on a loaded machine (`load`: the other worker's end-to-end tests under `make test`,
a spinning process per core when run by itself): in a full `-m
"collective or training"` run (its first seconds, while the nodes are logged in to and probed;
later, while the checks before the all-reduce run; the start of the all-reduce (C1) and of the
pair all-reduce (C2)), in its training half alone (`-m training`: the same T1 and T2, reached a
couple of minutes sooner; the first second of a single-node training job (T1), of the multi-node
launch (T2), and of pdsh's fan-out inside T2), during the port matrix (F3, whose listeners leave
their session) and during the launch rehearsal (E5). A moment is an offset from the start of the
run, or from the moment a phase is first seen running on the nodes. Each time: pytest ends
within 30 s of the Ctrl-C, and no process of the run is left in any node (launcher, pdsh and its
ssh clients, ranks, all-reduce supervisors, port-matrix listeners, a command sshd was still
starting) nor on the launcher (in pytest's own session), nor any scratch file. Half of the
moments press Ctrl-C a second time as soon as the run says it is cleaning up: that one must not
cut the cleanup of the nodes short.

And a command asked for just before the run's end, still on its way to the node when the
cleanup has begun (its channel slow to open), is refused, never started after the cleanup.

Cost: one suite run per moment, each up to its moment plus its cleanup: about 2.5 minutes with
another worker's tests beside it; the command on its way, about 5 s. `make test` runs them first
on one of its two workers (tests/conftest.py's HEAVY_FIRST), while the other works through its
half: that load is what a user's second run beside the first makes, and no core spins for
nothing.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from suite import PYTEST, REPO, sigint_as_at_a_terminal

COLLECTIVE = ("--sizes", "64K,1M", "--iters", "5", "--warmup", "2",
              "--collective-connect-timeout", "5", "--collective-init-timeout", "10",
              "--collective-op-timeout", "30")
#: T1's jobs run first (T2 needs each node to train alone), so the job must end by itself
TRAINING = ("--training-steps", "30", "--training-deadline", "120")
FULL = ("-m", "collective or training", *COLLECTIVE, *TRAINING)
#: the training half of FULL alone: its T1 and T2 as in FULL, a couple of minutes sooner
TRAIN = ("-m", "training", *TRAINING)

#: what shows that a phase runs: a process of one of the nodes whose command line holds all
#: of the words
PHASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # the run's first command on a node (a login's probe)
    "nodes": (("",), ("node1", "node2", "node3")),
    "F3": (('"listen"',), ("node2", "node3")),
    "E5": (("CT_DEADLINE=",), ("node1", "node2", "node3")),
    "C1": (("allreduce.py", "--world-size 3"), ("node1", "node2", "node3")),
    "C2": (("allreduce.py", "--world-size 2"), ("node1", "node2", "node3")),
    "T1": (("-t1-",), ("node1", "node2", "node3")),
    "T2": (("-t2/",), ("node1",)),
    # pdsh fanning out from node1: its ssh clients logging in to the other nodes, where sshd
    # is about to start launch.py
    "T2-pdsh": (("pdsh",), ("node1",)),
}


@dataclass(frozen=True)
class Moment:
    """Ctrl-C `offset` seconds after the run starts (`after` None) or after phase `after` is
    first seen running; `second`: Ctrl-C again as soon as the cleanup is under way."""

    select: tuple[str, ...]
    after: str | None
    offset: float
    second: bool

    def __str__(self) -> str:
        where = ("the start" if self.after is None
                 else "the first command on a node" if self.after == "nodes"
                 else f"{self.after} is seen running")
        return f"{self.offset:.2f} s after {where}" + (", twice" if self.second else "")


def _moments(seed: int = 50) -> dict[str, Moment]:
    rng = random.Random(seed)
    draws = [
        ("start-early", FULL, "nodes", rng.uniform(0.0, 4.0)),
        ("start-late", FULL, None, rng.uniform(10.0, 25.0)),
        ("C1", FULL, "C1", rng.uniform(0.0, 3.0)),
        ("C2", FULL, "C2", rng.uniform(0.0, 3.0)),
        ("T1", TRAIN, "T1", rng.uniform(0.0, 1.5)),
        ("T2", TRAIN, "T2", rng.uniform(0.0, 1.5)),
        ("T2-pdsh", TRAIN, "T2-pdsh", rng.uniform(0.0, 1.0)),
        ("F3", ("-m", "network"), "F3", rng.uniform(0.0, 2.0)),
        ("E5", ("-k", "test_launch_rehearsal"), "E5", rng.uniform(0.0, 2.0)),
    ]
    return {name: Moment(select, after, round(offset, 2), i % 2 == 1)
            for i, (name, select, after, offset) in enumerate(draws)}


MOMENTS = _moments()


def node_processes(sim) -> dict[str, list[str]]:
    """Every process in each node that the sim did not start itself (`SimCluster.processes`)."""
    out: dict[str, list[str]] = {nd.name: [] for nd in sim.nodes}
    for p in sim.processes():
        out[p.node].append(str(p))
    return out


def session_processes(sid: int) -> list[str]:
    """The launcher's processes in session `sid` (pytest's own: what it started here)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) != sid or fields[0] == "Z":
                continue
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        out.append(f"launcher: {d.name} {cmd[:300]}")
    return out


def leftover_files(sim, scratch: set[str]) -> dict[str, list[str]]:
    """What a run leaves on the nodes' disks: its scratch directories (`scratch`, the
    ct-train-<session> prefixes its processes named), and DeepSpeed's CPU all-reduce segments
    in each node's own /dev/shm (64 MiB a rank, never unlinked by DeepSpeed itself)."""
    out = {}
    for nd in sim.nodes:
        shm = sim.exec(nd.name, ["ls", "/dev/shm"]).stdout.split()
        left = [f"/dev/shm/{f}" for f in shm if f.startswith("deepspeed_allreduce_buffer")]
        if left:
            out[nd.name] = left
    dirs = [str(p) for prefix in scratch for p in Path("/tmp").glob(f"{prefix}*")]
    if dirs:
        out["/tmp (every node's)"] = dirs
    return out


def _scratch(procs: dict[str, list[str]]) -> set[str]:
    return {m for lines in procs.values() for line in lines
            for m in re.findall(r"ct-train-[0-9a-f]+-", line)}


def _running(procs: dict[str, list[str]]) -> list[str]:
    """The phases running now, by the nodes' process tables."""
    return [name for name, (words, nodes) in PHASES.items()
            if any(all(w in line for w in words) for n in nodes for line in procs[n])]


@pytest.fixture
def load():
    """The machine kept busy for the length of the test: beside another xdist worker (`make
    test`), that worker's end-to-end tests do it (each a suite run on a sim of its own, CPU-bound
    on every core); run by itself, a spinning process per core."""
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        yield
        return
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(os.cpu_count() or 2)]
    yield
    for p in spinners:
        p.kill()
        p.wait()


def _load() -> str:
    """How loaded the machine is now: the processes running or ready to run this instant (the
    load average lags a minute behind)."""
    stat = Path("/proc/stat").read_text()
    running = next((int(ln.split()[1]) for ln in stat.splitlines()
                    if ln.startswith("procs_running ")), 0)
    return (f"{running} runnable on {os.cpu_count()} cores, load average "
            f"{os.getloadavg()[0]:.1f}")


def interrupt(sim, moment: Moment, tmp_path: Path) -> str:
    """Run the suite on `moment`'s selection and press Ctrl-C at that moment (and again as soon
    as the run says it is cleaning up, if `moment.second`); assert that pytest ends within 30 s
    and leaves no process on any node, nor on the launcher. Returns pytest's output."""
    argv = [*PYTEST, "--hostfile", str(sim.hostfile),
            "--ssh-config", str(sim.ssh_config), "-p", "no:cacheprovider", "-q",
            f"--junitxml={tmp_path / 'junit.xml'}", *moment.select]
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONFAULTHANDLER"] = "1"  # SIGABRT below: every thread's stack, if it never ends
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=sigint_as_at_a_terminal)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    scratch: set[str] = set()
    running: list[str] = []
    try:
        start = time.monotonic()
        at = start + moment.offset if moment.after is None else None
        end = start + 400
        while proc.poll() is None and time.monotonic() < end:
            now = time.monotonic()
            if at is not None and now >= at:
                break
            procs = node_processes(sim)
            scratch |= _scratch(procs)
            if at is None and moment.after in _running(procs):
                at = time.monotonic() + moment.offset
            time.sleep(0.05)
        assert proc.poll() is None and at is not None, (
            f"the run never reached {moment}:\n{''.join(lines)[-3000:]}")
        procs = node_processes(sim)
        running = [p for p in _running(procs) if p != "nodes"]
        scratch |= _scratch(procs)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        if moment.second:  # as soon as the run says its cleanup is under way
            while (proc.poll() is None and time.monotonic() < sent + 10
                   and not any("[cluster] interrupted" in ln for ln in lines)):
                time.sleep(0.02)
            proc.send_signal(signal.SIGINT)
        where = (f"Ctrl-C {sent - start:.1f} s into the run, {moment} (running then: "
                 f"{', '.join(running) or 'no phase of the nodes'}; {_load()})")
        try:
            proc.wait(timeout=max(1.0, sent + 30 - time.monotonic()))
        except subprocess.TimeoutExpired:
            on_nodes = node_processes(sim)
            proc.send_signal(signal.SIGABRT)  # where it waits: faulthandler prints every thread
            proc.wait(timeout=20)
            reader.join(5)
            raise AssertionError(f"pytest did not end within 30 s of the {where}; on the "
                                 f"nodes: {on_nodes}\n{''.join(lines)[-12000:]}") from None
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left = [p for ps in node_processes(sim).values() for p in ps]
    left += session_processes(proc.pid)
    if not left:  # and none that sshd was still starting when pytest ended
        time.sleep(2)
        left = [p for ps in node_processes(sim).values() for p in ps]
    reader.join(5)
    out = "".join(lines)
    assert not left, ("left running after the " + where + ":\n  " + "\n  ".join(left)
                      + f"\n{out[-3000:]}")
    files = leftover_files(sim, scratch)
    assert not files, f"left on the nodes after the {where}: {files}"
    assert "KeyboardInterrupt" in out, f"{where}:\n{out[-2000:]}"
    print(f"{where}: pytest ended {took:.1f} s after Ctrl-C")
    return out


@pytest.mark.parametrize("name", list(MOMENTS))
def test_ctrl_c_at_a_random_moment(healthy_sim, tmp_path, load, name):
    moment = MOMENTS[name]
    out = interrupt(healthy_sim, moment, tmp_path)
    if moment.second:  # that one is only acknowledged, and the nodes are cleaned up all the same
        assert "still cleaning up the nodes" in out, out[-2000:]


def test_a_command_still_on_its_way_when_the_run_ends_never_starts(healthy_sim, monkeypatch):
    """A command asked for just before the run's end, whose thread is still on its way to the
    node when the cleanup has begun and ended (here: its channel takes 4 s to open, as a
    starved thread or a loaded node's sshd makes it), is refused, not started after the
    cleanup and left running. About 15 s."""
    import paramiko

    from cluster_tests.core.transport import ConnectError, Pool, resolve_target

    sim = healthy_sim
    opened = paramiko.Transport.open_session

    def slow_open(self, *args, **kwargs):
        if threading.current_thread().name.startswith("on-its-way"):
            time.sleep(4)
        return opened(self, *args, **kwargs)

    monkeypatch.setattr(paramiko.Transport, "open_session", slow_open)
    names = [nd.name for nd in sim.nodes]
    pool = Pool({n: resolve_target(n, str(sim.ssh_config)) for n in names},
                str(sim.ssh_config))
    refused: list[str] = []

    def ask(node: str) -> None:
        try:
            pool.stream(node, "sleep 60", timeout=90)
        except ConnectError as exc:
            refused.append(f"{node}: {exc}")

    try:
        for n in names:
            pool.connection(n).connect()
        threads = [threading.Thread(target=ask, args=(n,), name=f"on-its-way-{n}", daemon=True)
                   for n in names]
        for t in threads:
            t.start()
        time.sleep(0.3)
        pool.end_leftovers()
        for t in threads:
            t.join(30)
        time.sleep(1)
        left = [str(p) for p in sim.processes() if "sleep 60" in p.cmdline]
    finally:
        pool.close()
        for p in sim.processes():
            if "sleep 60" in p.cmdline:
                sim.exec(p.node, ["kill", "-KILL", str(p.pid)])
    assert not left, "started after the run's cleanup, and left running:\n  " + "\n  ".join(left)
    assert len(refused) == len(names), refused
