"""The end of a run on the nodes: the gate that no command passes once the cleanup has begun,
one round of the sweep script (run here, on this machine's own processes), and what is said
of a process the sweep could not end."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from types import SimpleNamespace

import pytest

from cluster_tests.core import transport
from cluster_tests.core.transport import ConnectError, Connection, SSHTarget, Sweep


class _Chan:
    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.started: list[str] = []

    def exec_command(self, command: str) -> None:
        time.sleep(self.delay)
        self.started.append(command)


def test_no_command_starts_once_the_cleanup_has_begun() -> None:
    conn = Connection(SSHTarget("node1", "node1"))
    chan = _Chan()
    conn._exec(chan, "true")  # type: ignore[arg-type]
    conn.refuse()
    with pytest.raises(ConnectError, match="the run is ending"):
        conn._exec(chan, "sleep 100")  # type: ignore[arg-type]
    assert chan.started == ["true"]


def test_refuse_waits_for_a_start_already_asked_for() -> None:
    """A command whose start was asked for before the cleanup is started (sshd has it) before
    `refuse` returns: the sweep that follows finds it."""
    conn = Connection(SSHTarget("node1", "node1"))
    chan = _Chan(delay=0.5)
    t = threading.Thread(target=conn._exec, args=(chan, "sleep 100"))
    t.start()
    time.sleep(0.1)
    conn.refuse(wait=5)
    assert chan.started == ["sleep 100"]
    t.join()


def test_sweep_output_is_parsed() -> None:
    s = Sweep.parse("node2", "found 12 timeout -k 2 380 sh -c x ct-run-a\nleft 13 python3 x\n"
                             "noise\n")
    assert s.found == [(12, "timeout -k 2 380 sh -c x ct-run-a")]
    assert s.left == [(13, "python3 x")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_one_round_ends_what_carries_the_tag_and_not_itself() -> None:
    """The script, run here: a process with the tag in its command line and one with it only
    in its environment are ended and reported; a process without it is left alone."""
    tag = f"ct-run-{uuid.uuid4().hex[:12]}"
    by_argv = subprocess.Popen(["sh", "-c", "sleep 60", tag])
    by_env = subprocess.Popen(["sleep", "61"], env={**os.environ, transport.RUN_TAG_VAR: tag})
    other = subprocess.Popen(["sleep", "62"])
    try:
        time.sleep(0.2)
        out = subprocess.run(["sh", "-c", transport.leftovers_script(tag, grace=0.2)],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        s = Sweep.parse("here", out)
        assert {p for p, _ in s.found} >= {by_argv.pid, by_env.pid}, out
        assert other.pid not in {p for p, _ in s.found}, out
        assert not s.left, out
        assert by_argv.wait(5) is not None and by_env.wait(5) is not None
        assert other.poll() is None
    finally:
        for p in (by_argv, by_env, other):
            p.kill()
            p.wait()


def test_the_report_names_each_process_and_the_command_that_ends_them() -> None:
    from cluster_tests.core.cluster import Cluster

    fake = SimpleNamespace(pool=SimpleNamespace(tag="ct-run-abc"),
                           settings=SimpleNamespace(ssh_config="/x/ssh_config"))
    text = Cluster.leftover_report(fake, [Sweep("node1", left=[(41, "python3 -u launch.py")]),  # type: ignore[arg-type]
                                          Sweep("node3", error="no answer within 5 s")])
    assert "node1 pid 41: python3 -u launch.py" in text
    assert "node3: not swept (no answer within 5 s)" in text
    assert "ssh -F /x/ssh_config node1 kill -KILL 41" in text
    assert "ssh -F /x/ssh_config node3 sh -c" in text
