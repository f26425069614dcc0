#!/usr/bin/env python3
"""All-reduce correctness and bandwidth worker: one process per rank (checks C1-C3).

Standalone on purpose (stdlib + torch only, python>=3.8): the orchestrator copies it to each node
and runs it with that node's Python, one process per rank::

    python allreduce.py --rank R --world-size W --local-rank L \
        --master-addr A --master-port P [--backend auto|nccl|hccl|gloo] \
        [--sizes 8,1K,64K,1M] [--dtype float32] [--warmup 5] [--iters 20] \
        [--connect-timeout S] [--init-timeout S] [--op-timeout S] [--size-seconds S] \
        [--label host]

Stages, each with its own deadline and exit code, so a hang names where it happened:

1. ``connect``/``rendezvous``: a ``TCPStore`` on rank 0 (server) at A:P; every rank writes
   ``joined/<rank>`` and waits up to --connect-timeout for all the others. Missing ranks are
   listed by number (the orchestrator maps them to host and local rank).
2. ``init``: ``init_process_group`` on that store plus one tiny all_reduce, within --init-timeout.
3. ``collective``: the whole size sweep, within --op-timeout.

A watchdog thread enforces each deadline: it prints an ``error`` event naming the stage and
calls ``os._exit`` with that stage's code, because a rank blocked inside NCCL/HCCL/gloo cannot be
interrupted from Python.

What is timed (same as nccl-tests' per-size figure): after ``warmup`` untimed calls, ``iters``
in-place all_reduce calls issued back to back, timed as one batch (CUDA/NPU events around the
loop, ``time.perf_counter`` on CPU) and divided by ``iters``: the average time per operation of a
pipelined loop, not the latency of one isolated call. The figure is the slowest rank's time
(MAX over ranks). algbw = bytes / time (GB/s, 1 GB = 1e9 B); busbw = algbw * 2(W-1)/W.

Correctness scheme: an in-place SUM accumulates, so the timed loop runs on a zero-filled buffer
(0 summed any number of times stays exactly 0; a non-zero element afterwards counts as wrong).
Then the buffer is re-filled, untimed, with rank r's pattern ``(r+1) * (i % m + 1)`` and reduced
once more; every element must equal ``W(W+1)/2 * (i % m + 1)``, which is exact in the dtype
(m is chosen so the largest sum stays below the dtype's exact-integer limit). ``wrong`` is the
number of elements failing either check (nccl-tests' #wrong), summed over ranks.

Slow links (``plan_size``): the first warmup call of each size is timed, and every rank agrees
on the slowest rank's figure and on the least time left (a tiny MAX all_reduce, untimed), so all
ranks take the same decision. A size gets at most --size-seconds (and half the time left of
--op-timeout): fewer warmup and timed calls where they would not fit (at least one timed call).
Once a size has been measured, a larger size whose single call alone exceeds --size-seconds
ends the sweep (a ``stopped`` event names it): on a link that slow the remaining sizes would
only run into the watchdog, and what was measured already says the link is slow.

Output: one JSON object per line on stdout, ``{"event": ..., "rank": ..., "t": seconds since
start, ...}``; human-readable text goes to stderr only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import threading
import time

EXIT_OK = 0
EXIT_ERROR = 1  # unexpected exception outside the stages below
EXIT_USAGE = 2  # bad arguments (argparse's own code)
EXIT_WRONG = 3  # every stage finished, but some element was wrong
EXIT_BACKEND = 4  # the requested backend is not available on this node
EXIT_CONNECT = 10  # could not create / reach the TCPStore within --connect-timeout
EXIT_MISSING = 11  # the store was up, but some ranks never joined within --connect-timeout
EXIT_INIT = 12  # init_process_group or the first tiny all_reduce failed or hung
EXIT_COLLECTIVE = 13  # the size sweep failed or hung past --op-timeout

STAGE_EXIT = {
    "setup": EXIT_BACKEND,
    "connect": EXIT_CONNECT,
    "rendezvous": EXIT_MISSING,
    "init": EXIT_INIT,
    "collective": EXIT_COLLECTIVE,
}

TIMED = (
    "avg time per op of {iters} back-to-back in-place all_reduce calls after {warmup} warmup "
    "calls (fewer on a slow link: see the notes under the table), slowest rank (MAX over "
    "ranks); algbw = bytes/time, busbw = algbw*2(n-1)/n; "
    "GB/s = 1e9 B/s"
)

# Largest integer N such that every integer in [0, N] is exact in the dtype.
EXACT_LIMIT = {
    "float64": 2**53,
    "float32": 2**24,
    "float16": 2**11,
    "bfloat16": 2**8,
    "int32": 2**31 - 1,
    "int64": 2**63 - 1,
}

_T0 = time.monotonic()
_OUT_LOCK = threading.Lock()
_RANK = -1


def emit(event: str, **fields: object) -> None:
    """Print one JSON event line on stdout (thread safe, flushed at once)."""
    record = {"event": event, "rank": _RANK, "t": round(time.monotonic() - _T0, 3)}
    record.update(fields)
    line = json.dumps(record, sort_keys=False)
    with _OUT_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def say(text: str) -> None:
    with _OUT_LOCK:
        sys.stderr.write(f"[rank {_RANK}] {text}\n")
        sys.stderr.flush()


def fail(stage: str, message: str, **fields: object) -> None:
    """Report an error for ``stage`` and leave at once with that stage's exit code."""
    emit("error", stage=stage, message=message, **fields)
    say(f"ERROR in stage {stage}: {message}")
    os._exit(STAGE_EXIT.get(stage, EXIT_ERROR))


class Watchdog:
    """Kills this process with the stage's exit code when a stage overruns its deadline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stage = ""
        self._seconds = 0.0
        self._deadline = None  # type: float | None
        self._wake = threading.Event()
        thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
        thread.start()

    def arm(self, stage: str, seconds: float) -> None:
        with self._lock:
            self._stage, self._seconds = stage, seconds
            self._deadline = time.monotonic() + seconds

    def disarm(self) -> None:
        with self._lock:
            self._deadline = None

    def _run(self) -> None:
        while not self._wake.wait(0.05):
            with self._lock:
                expired = self._deadline is not None and time.monotonic() > self._deadline
                stage, seconds = self._stage, self._seconds
            if expired:
                fail(
                    stage,
                    f"stage {stage} did not finish within {seconds:g} s (watchdog)",
                    timeout=True,
                    timeout_s=seconds,
                )


def parse_size(text: str) -> int:
    """'64K' -> 65536: K/M/G are powers of 2, as nccl-tests' -b/-e."""
    text = text.strip().upper().rstrip("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    number = text[:-1] if scale > 1 else text
    value = int(number) * scale
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value


def parse_sizes(text: str) -> list:
    try:
        return [parse_size(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"bad --sizes {text!r}: {exc}") from None


def parse_args(argv: list) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--local-rank", type=int, default=0)
    p.add_argument("--master-addr", required=True)
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--backend", choices=["auto", "nccl", "hccl", "gloo"], default="auto")
    p.add_argument("--sizes", type=parse_sizes, default=parse_sizes("1K,64K,1M"))
    p.add_argument("--dtype", choices=sorted(EXACT_LIMIT), default="float32")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--connect-timeout", type=float, default=30.0)
    p.add_argument("--init-timeout", type=float, default=60.0)
    p.add_argument("--op-timeout", type=float, default=300.0)
    p.add_argument("--size-seconds", type=float, default=10.0)
    p.add_argument("--label", default="")
    args = p.parse_args(argv)
    if not 0 <= args.rank < args.world_size:
        p.error("--rank must be in [0, --world-size)")
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    if args.size_seconds <= 0:
        p.error("--size-seconds must be > 0")
    return args


def choose_backend(torch: object, requested: str, local_rank: int) -> tuple:
    """Return (backend, device string, reason, versions); exits with EXIT_BACKEND if impossible."""
    versions = {"python": sys.version.split()[0], "torch": torch.__version__}  # type: ignore
    cuda = torch.cuda.is_available()  # type: ignore[attr-defined]
    npu = False
    npu_why = "torch_npu not importable"
    try:
        import torch_npu  # registers torch.npu

        versions["torch_npu"] = getattr(torch_npu, "__version__", "?")
        npu = bool(torch.npu.is_available())  # type: ignore[attr-defined]
        npu_why = "torch_npu {}, npu available: {}".format(versions["torch_npu"], npu)
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken CANN install
        npu_why = f"torch_npu not usable ({type(exc).__name__}: {exc})"
    if cuda:
        versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))  # type: ignore
        versions["cuda"] = torch.version.cuda  # type: ignore[attr-defined]

    backend = requested
    if requested == "auto":
        if cuda:
            backend, reason = "nccl", f"CUDA available ({torch.cuda.device_count()} devices)"
        elif npu:
            backend, reason = "hccl", npu_why
        else:
            backend, reason = "gloo", "no CUDA; " + npu_why
    else:
        reason = "requested"
    if backend == "nccl" and not cuda:
        fail("setup", "backend nccl requested but torch.cuda.is_available() is False")
    if backend == "hccl" and not npu:
        fail("setup", "backend hccl requested but " + npu_why)
    kind = "cuda" if backend == "nccl" else "npu"
    device = "cpu" if backend == "gloo" else f"{kind}:{local_rank}"
    return backend, device, reason, versions


def connect(args: argparse.Namespace) -> object:
    from torch.distributed import TCPStore

    timeout = datetime.timedelta(seconds=args.connect_timeout)
    master = f"{args.master_addr}:{args.master_port}"
    try:
        if args.rank == 0:
            return TCPStore(args.master_addr, args.master_port, args.world_size, True,
                            timeout=timeout, wait_for_workers=False)
        return TCPStore(args.master_addr, args.master_port, args.world_size, False,
                        timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - any failure here is a connect failure
        # rank 0 listens, then connects to its own store through the master address too
        verb = "create (listen on, then connect to)" if args.rank == 0 else "reach"
        fail("connect", f"cannot {verb} the rendezvous store at {master} within "
             f"{args.connect_timeout:g} s: {exc}", master=master)
    raise AssertionError("unreachable")


def rendezvous(store: object, args: argparse.Namespace, deadline: float) -> None:
    """Every rank announces itself, then waits until all have (or reports who did not)."""
    master = f"{args.master_addr}:{args.master_port}"
    me = {"host": socket.gethostname(), "label": args.label, "local_rank": args.local_rank,
          "pid": os.getpid()}
    store.set(f"joined/{args.rank}", json.dumps(me))  # type: ignore[attr-defined]
    store.add("joined_count", 1)  # type: ignore[attr-defined]
    while store.add("joined_count", 0) < args.world_size:  # type: ignore[attr-defined]
        if time.monotonic() > deadline:
            missing = [r for r in range(args.world_size)
                       if not store.check([f"joined/{r}"])]  # type: ignore[attr-defined]
            joined = [r for r in range(args.world_size) if r not in missing]
            emit("missing_ranks", stage="rendezvous", missing=missing, joined=joined,
                 master=master, timeout_s=args.connect_timeout)
            fail("rendezvous", f"ranks {','.join(map(str, missing))} never joined the rendezvous"
                 f" at {master} within {args.connect_timeout:g} s", timeout=True,
                 missing=missing)
        time.sleep(0.05)
    peers = []
    if args.rank == 0:
        for r in range(args.world_size):
            info = json.loads(store.get(f"joined/{r}"))  # type: ignore[attr-defined]
            info["rank"] = r
            peers.append(info)
    emit("joined", world_size=args.world_size, peers=peers)


def fill_pattern(torch: object, buf: object, rank: int, modulus: int) -> None:
    idx = torch.arange(buf.numel(), device=buf.device)  # type: ignore
    buf.copy_((idx % modulus + 1) * (rank + 1))  # type: ignore[attr-defined]


def pattern_modulus(world: int, dtype: str) -> int:
    total = world * (world + 1) // 2
    for modulus in (5, 1):
        if total * modulus <= EXACT_LIMIT[dtype]:
            return modulus
    raise SystemExit(f"world size {world} too large for exact sums in {dtype}")


def sync(torch: object, backend: str) -> None:
    if backend == "nccl":
        torch.cuda.synchronize()  # type: ignore[attr-defined]
    elif backend == "hccl":
        torch.npu.synchronize()  # type: ignore[attr-defined]


def timed_loop(torch: object, dist: object, backend: str, buf: object, iters: int) -> float:
    """Seconds per op, averaged over ``iters`` back-to-back all_reduce calls."""
    if backend in ("nccl", "hccl"):
        mod = torch.cuda if backend == "nccl" else torch.npu  # type: ignore[attr-defined]
        start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(buf)  # type: ignore[attr-defined]
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)  # type: ignore[attr-defined]
    return (time.perf_counter() - t0) / iters


def plan_size(op_seconds: float, left_seconds: float, warmup: int, iters: int,
              size_seconds: float, measured_any: bool):
    """(further warmup calls, timed calls) for one size, or None to end the sweep here.

    ``op_seconds`` is the slowest rank's first warmup call at this size, ``left_seconds`` the
    least time any rank has left of its sweep budget: both agreed over all ranks, so every rank
    computes the same plan. Healthy links get exactly ``warmup - 1`` and ``iters``."""
    if op_seconds * 2 > left_seconds or (measured_any and op_seconds > size_seconds):
        return None
    if op_seconds <= 0:
        return max(warmup - 1, 0), iters
    budget = min(size_seconds, left_seconds / 2)
    more = min(max(warmup - 1, 0), int(0.2 * budget / op_seconds))
    timed = min(iters, max(1, int((budget - more * op_seconds) / op_seconds)))
    return more, timed


def agree(torch: object, dist: object, device: str, op_seconds: float, left: float) -> tuple:
    """(slowest rank's op_seconds, least time left over ranks): one tiny MAX all_reduce."""
    t = torch.tensor([op_seconds, -left], dtype=torch.float32, device=device)  # type: ignore
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # type: ignore[attr-defined]
    return float(t[0].item()), -float(t[1].item())


def sweep(torch: object, dist: object, args: argparse.Namespace, backend: str,
          device: str, budget_end: float) -> int:
    """Run every size; return the number of wrong elements over all ranks and sizes."""
    dtype = getattr(torch, args.dtype)
    elsize = torch.tensor([], dtype=dtype).element_size()  # type: ignore[attr-defined]
    world = args.world_size
    modulus = pattern_modulus(world, args.dtype)
    total = world * (world + 1) // 2
    factor = 2.0 * (world - 1) / world
    wrong_all = 0
    measured_any = False
    if args.rank == 0:
        say(f"{'size(B)':>12} {'count':>12} {'type':>8} {'time(us)':>10} {'algbw':>10} "
            f"{'busbw':>10} {'#wrong':>7}   (GB/s = 1e9 B/s)")
    for index, size in enumerate(args.sizes):
        count = max(1, size // elsize)
        nbytes = count * elsize
        buf = torch.zeros(count, dtype=dtype, device=device)  # type: ignore[attr-defined]
        sync(torch, backend)
        t0 = time.perf_counter()
        dist.all_reduce(buf)  # type: ignore[attr-defined]  # the first warmup call, timed
        sync(torch, backend)
        first, left = agree(torch, dist, device, time.perf_counter() - t0,
                            budget_end - time.monotonic())
        plan = plan_size(first, left, args.warmup, args.iters, args.size_seconds, measured_any)
        if plan is None:
            emit("stopped", size_bytes=nbytes, op_seconds=round(first, 6),
                 left_seconds=round(left, 3), size_seconds=args.size_seconds,
                 skipped=args.sizes[index:])
            if args.rank == 0:
                say(f"sweep stopped at {nbytes} B: one all_reduce took {first:.2f} s "
                    f"(--size-seconds {args.size_seconds:g}, {left:.1f} s left)")
            del buf
            break
        warmup, iters = plan
        for _ in range(warmup):
            dist.all_reduce(buf)  # type: ignore[attr-defined]
        sync(torch, backend)
        seconds = timed_loop(torch, dist, backend, buf, iters)
        measured_any = True
        wrong = int(torch.count_nonzero(buf).item())  # type: ignore[attr-defined]
        fill_pattern(torch, buf, args.rank, modulus)
        dist.all_reduce(buf)  # type: ignore[attr-defined]
        expected = torch.empty_like(buf)  # type: ignore[attr-defined]
        fill_pattern(torch, expected, total - 1, modulus)  # (total-1)+1 = W(W+1)/2
        wrong += int((buf != expected).sum().item())
        stats = torch.tensor([seconds], dtype=torch.float32, device=device)  # type: ignore
        dist.all_reduce(stats, op=dist.ReduceOp.MAX)  # type: ignore[attr-defined]
        wrongs = torch.tensor([wrong], dtype=torch.int64, device=device)  # type: ignore
        dist.all_reduce(wrongs)  # type: ignore[attr-defined]
        time_s = float(stats.item())
        time_us = time_s * 1e6
        algbw = nbytes / time_s / 1e9 if time_s > 0 else 0.0
        busbw = algbw * factor
        wrong_all += int(wrongs.item())
        emit("result", size_bytes=nbytes, count=count, dtype=args.dtype, time_us=time_us,
             algbw_GBps=algbw, busbw_GBps=busbw, wrong=wrong, wrong_all_ranks=int(wrongs.item()),
             local_time_us=seconds * 1e6, iters=iters, warmup=warmup + 1)
        if args.rank == 0:
            say(f"{nbytes:12d} {count:12d} {args.dtype:>8} {time_us:10.2f} {algbw:10.3f} "
                f"{busbw:10.3f} {int(wrongs.item()):7d}")
        del buf, expected
    return wrong_all


# NCCL_DEBUG=INFO goes to a file of this rank's; after init its transport lines are sent as a
# `transport` event, parsed on the launcher (cluster_tests/nccllog.py) for C1's table and check.
_TRANSPORT_LINE = ("NET/", "Using network", " via ", "NCCL WARN", "NCCL version")


def _nccl_log_path(pid: int) -> str:
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"ct-nccl-{pid}.log")


def _nccl_debug_file(backend: str) -> str | None:
    if backend != "nccl":
        return None
    path = _nccl_log_path(os.getpid())
    os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_FILE=path)
    return path


def _emit_transport(path: str | None) -> None:
    if not path:
        return
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = [ln.rstrip("\n") for ln in fh if any(k in ln for k in _TRANSPORT_LINE)]
        os.unlink(path)
    except OSError:
        lines = []
    emit("transport", lines=lines[-400:])


def main(argv: list) -> int:
    global _RANK
    args = parse_args(argv)
    _RANK = args.rank
    import torch
    import torch.distributed as dist

    backend, device, reason, versions = choose_backend(torch, args.backend, args.local_rank)
    emit("start", world_size=args.world_size, local_rank=args.local_rank,
         host=socket.gethostname(), label=args.label, pid=os.getpid(), backend=backend,
         device=device, reason=reason, versions=versions,
         master=f"{args.master_addr}:{args.master_port}", dtype=args.dtype,
         sizes=args.sizes, iters=args.iters,
         timed=TIMED.format(iters=args.iters, warmup=args.warmup))
    say(f"backend {backend} on {device} ({reason}); {json.dumps(versions)}")
    nccl_log = _nccl_debug_file(backend)
    if backend == "nccl":
        torch.cuda.set_device(args.local_rank)
    elif backend == "hccl":
        torch.npu.set_device(args.local_rank)  # type: ignore[attr-defined]

    watchdog = Watchdog()
    deadline = time.monotonic() + args.connect_timeout
    # The store honours its own timeout; the watchdog only catches a stuck constructor.
    watchdog.arm("connect", args.connect_timeout + 5.0)
    store = connect(args)
    watchdog.arm("rendezvous", max(0.0, deadline - time.monotonic()) + 5.0)
    try:
        rendezvous(store, args, deadline)
    except Exception as exc:  # noqa: BLE001 - report the stage, whatever broke
        fail("rendezvous", f"store error during rendezvous: {exc}")

    watchdog.arm("init", args.init_timeout)
    t_init = time.monotonic()
    try:
        dist.init_process_group(
            backend, store=store, rank=args.rank, world_size=args.world_size,
            timeout=datetime.timedelta(seconds=args.init_timeout + args.op_timeout))
        probe = torch.ones(1, device=device)
        dist.all_reduce(probe)
        sync(torch, backend)
        if probe.item() != args.world_size:
            fail("init", f"first all_reduce of ones gave {probe.item()}, "
                 f"expected {args.world_size}")
    except Exception as exc:  # noqa: BLE001 - report the stage, whatever broke
        _emit_transport(nccl_log)
        fail("init", f"{type(exc).__name__}: {exc}")
    watchdog.disarm()
    _emit_transport(nccl_log)
    emit("init_ok", backend=backend, seconds=round(time.monotonic() - t_init, 3))

    watchdog.arm("collective", args.op_timeout)
    t_sweep = time.monotonic()
    try:
        # The plan keeps a tenth of --op-timeout for the correctness passes and the final sync.
        wrong = sweep(torch, dist, args, backend, device, t_sweep + 0.9 * args.op_timeout)
        done = torch.ones(1, device=device)
        dist.all_reduce(done)  # everyone finished before the store server (rank 0) goes away
        sync(torch, backend)
    except Exception as exc:  # noqa: BLE001 - report the stage, whatever broke
        fail("collective", f"{type(exc).__name__}: {exc}")
    watchdog.disarm()
    emit("done", ok=wrong == 0, wrong=wrong, seconds=round(time.monotonic() - t_sweep, 3))
    dist.destroy_process_group()
    return EXIT_OK if wrong == 0 else EXIT_WRONG


# --- supervisor: one per node, started over SSH, owns that node's workers -------------------

# How a script reaches a node without a file: the process reads "<length>\n<source>" on stdin and
# runs it as __main__ (the supervisor keeps the source to hand it on to its workers the same way).
BOOTSTRAP = ("import sys;n=int(sys.stdin.buffer.readline());s=sys.stdin.buffer.read(n);"
             "exec(compile(s,'allreduce.py','exec'),{'__name__':'__main__','CT_SOURCE':s})")


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker if its supervisor dies (belt and braces to the stdin watch)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001, S110 - not Linux, or no libc: the supervisor still kills us
        pass


def supervise(spec: dict, source: bytes) -> int:
    """Start one worker per entry of ``spec["workers"]`` (argv lists), relay their JSON lines,
    and kill them all as soon as stdin reaches EOF or carries any byte: the launcher closes
    the SSH channel (or dies: sshd then closes it) and nothing is left running on the node.

    Workers get the script on their stdin too, so nothing is written to the node's disk.
    Extra events: ``workers`` (pids), ``exit`` (rank, code; negative = signal), ``reaped``.
    The remote ``timeout`` around this process kills its whole process group (workers
    included: they stay in it) if everything else fails.
    """
    import signal
    import subprocess

    env = dict(os.environ)
    env.update({k: str(v) for k, v in spec.get("env", {}).items()})
    env["PYTHONUNBUFFERED"] = "1"
    env["CT_ALLREDUCE_SUPERVISED"] = "1"
    payload = str(len(source)).encode() + b"\n" + source
    procs = {}  # rank -> Popen
    stop = threading.Event()

    def watch_stdin() -> None:
        try:
            sys.stdin.buffer.read(1)
        except Exception:  # noqa: BLE001, S110 - a broken stdin means the launcher is gone too
            pass
        stop.set()

    def pump(rank: int, proc: object) -> None:
        for raw in iter(proc.stdout.readline, b""):  # type: ignore[attr-defined]
            with _OUT_LOCK:
                sys.stdout.buffer.write(raw if raw.endswith(b"\n") else raw + b"\n")
                sys.stdout.flush()

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=watch_stdin, name="stdin-watch", daemon=True).start()
    pumps = {}  # rank -> thread relaying its stdout
    for worker in spec["workers"]:
        rank = int(worker["rank"])
        proc = subprocess.Popen([sys.executable, "-u", "-c", BOOTSTRAP, *worker["argv"]],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        proc.stdin.write(payload)  # type: ignore[union-attr]
        proc.stdin.close()  # type: ignore[union-attr]
        procs[rank] = proc
        thread = threading.Thread(target=pump, args=(rank, proc), daemon=True)
        thread.start()
        pumps[rank] = thread
    emit("workers", pids={str(r): p.pid for r, p in procs.items()}, host=socket.gethostname())
    reported = set()
    while len(reported) < len(procs):
        for rank, proc in procs.items():
            if rank in reported:
                continue
            if stop.is_set() and proc.poll() is None:
                proc.kill()
            code = proc.poll()
            if code is not None:
                reported.add(rank)
                pumps[rank].join(timeout=1.0)  # relay what it printed before its exit line
                emit("exit", exit_rank=rank, code=code, killed=stop.is_set())
        time.sleep(0.05)
    for proc in procs.values():  # a worker killed mid-init leaves its NCCL log behind
        try:
            os.unlink(_nccl_log_path(proc.pid))
        except OSError:
            pass
    emit("reaped", killed=stop.is_set())
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--supervise"]:
        _RANK = -1
        try:
            code = supervise(json.loads(sys.argv[2]), globals()["CT_SOURCE"])
        except Exception as exc:  # noqa: BLE001 - say why, on the channel the launcher reads
            emit("error", stage="supervisor", message=f"{type(exc).__name__}: {exc}")
            code = EXIT_ERROR
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # not sys.exit: the stdin watcher thread blocks interpreter shutdown
    if os.environ.get("CT_ALLREDUCE_SUPERVISED"):
        _die_with_parent()
    try:
        code = main(sys.argv[1:])
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - report, never hang in interpreter teardown
        emit("error", stage="unexpected", message=f"{type(exc).__name__}: {exc}")
        sys.stderr.flush()
        os._exit(EXIT_ERROR)
    sys.stdout.flush()
    sys.exit(code)
