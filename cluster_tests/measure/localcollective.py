"""The all-reduce worker (node/allreduce.py) run on this machine, for the project's own tests and
`bench/`: `run_local(world_size, sizes)` starts every rank on 127.0.0.1, each in its own process
group, follows their JSON events and judges them with judge/collective.py, killing every worker on
every way out.  It starts processes, so it is a measurement, not judgement."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from cluster_tests import node
from cluster_tests.judge.collective import (
    EXIT_OK,
    CollectiveReport,
    WorkerOptions,
    assign_ranks,
    collect,
    worker_argv,
)

WORKER_SCRIPT = node.script("allreduce.py")

EventHook = Callable[[int, dict, "subprocess.Popen[bytes]"], None]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def pump(rank: int, stream: object, out: queue.Queue, stderr_tail: list[str]) -> None:
    """Read one worker's stdout: JSON lines become events, anything else is kept as text."""
    for raw in iter(stream.readline, b""):  # type: ignore[attr-defined]
        line = raw.decode(errors="replace").strip()
        try:
            event = json.loads(line)
        except ValueError:
            stderr_tail.append(line)
            continue
        if isinstance(event, dict):
            out.put((rank, event))
    out.put((rank, None))


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail
        pass


def run_local(world_size: int, sizes: Sequence[int], backend: str = "gloo", *,
              connect_timeout: float = 20.0, init_timeout: float = 30.0,
              op_timeout: float = 120.0, warmup: int = 5, iters: int = 20,
              size_seconds: float = 10.0,
              dtype: str = "float32", env: Mapping[str, str] | None = None,
              start_ranks: Iterable[int] | None = None, port: int | None = None,
              on_event: EventHook | None = None, python: str = sys.executable,
              overall_timeout: float | None = None, grace: float = 3.0) -> CollectiveReport:
    """Run the worker for ``world_size`` ranks on 127.0.0.1 and return the report.

    Only ``start_ranks`` are started (default: all), to simulate ranks that never join.
    ``on_event(rank, event, popen)`` sees every event as it arrives (tests use it to SIGSTOP a
    rank at a chosen stage). Every worker runs in its own process group and is killed on every
    path out of here, including exceptions and the overall deadline (default: the sum of the
    stage deadlines plus 30 s). Once a rank reports an error or dies, the others get ``grace``
    seconds to report theirs (a SIGSTOPped or wedged rank never would) before all are killed.
    """
    ranks = assign_ranks({"127.0.0.1": world_size})
    port = port or free_port()
    options = WorkerOptions(sizes=list(sizes), backend=backend, dtype=dtype, warmup=warmup,
                            iters=iters, connect_timeout=connect_timeout,
                            init_timeout=init_timeout, op_timeout=op_timeout,
                            size_seconds=size_seconds)
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    deadline = time.monotonic() + (overall_timeout or
                                   connect_timeout + init_timeout + op_timeout + 30.0)
    wanted = sorted(set(range(world_size) if start_ranks is None else start_ranks))
    procs: dict[int, subprocess.Popen[bytes]] = {}
    events: dict[int, list[dict]] = {r: [] for r in range(world_size)}
    text: dict[int, list[str]] = {r: [] for r in range(world_size)}
    inbox: queue.Queue = queue.Queue()
    try:
        for r in wanted:
            argv = worker_argv(python, WORKER_SCRIPT, ranks[r], world_size, "127.0.0.1", port,
                               options)
            procs[r] = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, env=child_env,
                                        start_new_session=True)
            threading.Thread(target=pump, args=(r, procs[r].stdout, inbox, text[r]),
                             daemon=True).start()
        open_streams = len(procs)
        while open_streams and time.monotonic() < deadline:
            try:
                rank, event = inbox.get(timeout=min(0.5, max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                continue
            if event is None:
                open_streams -= 1
                try:
                    code: int | None = procs[rank].wait(timeout=2.0)
                except subprocess.TimeoutExpired:
                    code = None
                if code != EXIT_OK:
                    deadline = min(deadline, time.monotonic() + grace)
                continue
            events[rank].append(event)
            if event.get("event") == "error":
                deadline = min(deadline, time.monotonic() + grace)
            if on_event is not None:
                on_event(rank, event, procs[rank])
        for proc in procs.values():  # let finished workers exit by themselves
            try:
                proc.wait(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
    finally:
        for proc in procs.values():
            kill_group(proc)
            if proc.stdout is not None:
                proc.stdout.close()
    report = collect(events, ranks, {r: p.returncode for r, p in procs.items()})
    report.pids.update({r: p.pid for r, p in procs.items()})
    return report
