"""Ctrl-C at every long phase of a run ends it promptly and leaves nothing on any node.

The user presses Ctrl-C while the port matrix (F3), the launch rehearsal (E5), the all-reduce
(C1), the pair all-reduce (C2), a single-node training job (T1) or the multi-node launch (T2)
runs: pytest ends within 30 s, and no process of the run is left in any node (launcher, pdsh and
its ssh clients, ranks, all-reduce supervisors, port-matrix listeners). Each phase is
interrupted once on an idle machine and once with both cores kept busy by a load generator of
the test's own, the second time with a second Ctrl-C during the cleanup, which must not cut the
cleanup of the nodes short.

These tests load the machine on purpose, so they need it alone (the `alone` marker: `make test`
runs them after the others, one at a time).
"""

from __future__ import annotations

import os
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

pytestmark = pytest.mark.alone

COLLECTIVE = ("--sizes", "64K,1M", "--iters", "5", "--warmup", "2",
              "--collective-connect-timeout", "5", "--collective-init-timeout", "10",
              "--collective-op-timeout", "30")
#: T1's jobs run first (T2 needs each node to train alone), so the job must end by itself
TRAINING = ("--training-steps", "30", "--training-deadline", "120")


@dataclass(frozen=True)
class Phase:
    name: str
    select: tuple[str, ...]
    #: the phase runs when, for each (words, nodes), a process of one of `nodes` has all of
    #: `words` in its command line
    running: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]


PAST_RANK0 = ("node2", "node3")
PHASES = {
    # F3's port matrix: its listeners outlive the command that starts them (setsid)
    "F3": Phase("F3", ("-m", "network"), ((('"listen"',), PAST_RANK0),)),
    "rehearsal": Phase("rehearsal", ("-k", "test_launch_rehearsal"),
                       ((("CT_DEADLINE=",), PAST_RANK0),)),
    "C1": Phase("C1", ("-m", "collective", "-k", "test_allreduce and not pair and not busbw",
                       *COLLECTIVE), ((("allreduce.py", "--world-size 3"), PAST_RANK0),)),
    "C2": Phase("C2", ("-m", "collective", "-k", "test_allreduce_pair", *COLLECTIVE),
                ((("allreduce.py", "--world-size 2"), PAST_RANK0),)),
    "T1": Phase("T1", ("-m", "training", "-k", "test_train_single_node", *TRAINING),
                ((("-t1-", "train_smoke.py --steps"), PAST_RANK0),)),
    "T2": Phase("T2", ("-m", "training", "-k", "test_train_multi_node", *TRAINING),
                ((("-t2/", "train_smoke.py --steps"), PAST_RANK0),)),
}


def node_processes(sim) -> dict[str, list[str]]:
    """Every process in each node that the sim did not start itself (`SimCluster.processes`)."""
    out: dict[str, list[str]] = {nd.name: [] for nd in sim.nodes}
    for p in sim.processes():
        out[p.node].append(str(p))
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


def _scratch(sim) -> set[str]:
    return {m for lines in node_processes(sim).values() for line in lines
            for m in re.findall(r"ct-train-[0-9a-f]+-", line)}


def _running(sim, phase: Phase) -> bool:
    procs = node_processes(sim)
    return all(any(all(w in line for w in words) for n in nodes for line in procs[n])
               for words, nodes in phase.running)


@pytest.fixture
def load():
    """Both cores kept busy (a spinning process per core), for the length of the test."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(os.cpu_count() or 2)]
    yield
    for p in spinners:
        p.kill()
        p.wait()


def interrupt(sim, phase: Phase, tmp_path: Path, *, second: bool = False) -> str:
    """Run the suite on `phase`'s selection, press Ctrl-C once the phase runs past rank 0
    (and again as soon as the run says it is cleaning up, if `second`); assert that
    pytest ends within 30 s and leaves no process on any node. Returns pytest's output."""
    argv = [*PYTEST, "--hostfile", str(sim.hostfile),
            "--ssh-config", str(sim.ssh_config), "-p", "no:cacheprovider", "-q",
            f"--junitxml={tmp_path / 'junit.xml'}", *phase.select]
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONFAULTHANDLER"] = "1"  # SIGABRT below: every thread's stack, if it never ends
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            preexec_fn=sigint_as_at_a_terminal)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        end = time.monotonic() + 300
        seen = False
        while time.monotonic() < end and proc.poll() is None and not seen:
            seen = _running(sim, phase)
            time.sleep(0.1)
        assert proc.poll() is None and seen, (
            f"{phase.name} was never seen running ({phase.running}):\n{''.join(lines)[-3000:]}")
        scratch = _scratch(sim)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        if second:  # as soon as the run says its cleanup is under way
            while (proc.poll() is None and time.monotonic() < sent + 10
                   and not any("[cluster] interrupted" in ln for ln in lines)):
                time.sleep(0.02)
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=max(1.0, sent + 30 - time.monotonic()))
        except subprocess.TimeoutExpired:
            left = node_processes(sim)
            proc.send_signal(signal.SIGABRT)  # where it waits: faulthandler prints every thread
            proc.wait(timeout=20)
            reader.join(5)
            raise AssertionError(f"pytest did not end within 30 s of Ctrl-C during {phase.name}; "
                                 f"on the nodes: {left}\n{''.join(lines)[-12000:]}") from None
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left = {n: procs for n, procs in node_processes(sim).items() if procs}
    reader.join(5)
    out = "".join(lines)
    assert not left, f"left on the nodes after Ctrl-C during {phase.name}: {left}\n{out[-3000:]}"
    files = leftover_files(sim, scratch)
    assert not files, f"left on the nodes after Ctrl-C during {phase.name}: {files}"
    assert "KeyboardInterrupt" in out, out[-2000:]
    print(f"{phase.name}: ended {took:.1f} s after Ctrl-C")
    return out


@pytest.mark.parametrize("phase", list(PHASES))
def test_ctrl_c_on_an_idle_machine(healthy_sim, tmp_path, phase):
    interrupt(healthy_sim, PHASES[phase], tmp_path)


@pytest.mark.parametrize("phase", list(PHASES))
def test_ctrl_c_twice_with_both_cores_busy(healthy_sim, tmp_path, load, phase):
    """Under load, and with a second Ctrl-C while the first one's cleanup runs: that one is
    only acknowledged, and the nodes are cleaned up all the same."""
    out = interrupt(healthy_sim, PHASES[phase], tmp_path, second=True)
    assert "still cleaning up the nodes" in out, out[-2000:]
