#!/usr/bin/env python3
"""All-reduce correctness and bandwidth worker: one process per rank (checks C1-C3).

Standalone on purpose (stdlib + torch only, python>=3.8), run with each node's Python. Its
stages and deadlines, what is timed, the correctness pattern, memory caps, slow links and its
output are described in docs/allreduce-worker.md. It is sent with its parts before it
(node.PARTS): allreduce_pattern.py (the verifiable pattern) and allreduce_stacks.py (its stacks
and connections at a deadline); run the assembled source (``node.source("allreduce.py")``), not
this file alone.
"""

import argparse
import datetime
import glob
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
EXIT_DEVICE = 5  # device set-up (torch/torch_npu import, set_device) failed or hung
EXIT_CONNECT = 10  # could not create / reach the TCPStore within --connect-timeout
EXIT_MISSING = 11  # the store was up, but some ranks never joined within --connect-timeout
EXIT_INIT = 12  # init_process_group or the first tiny all_reduce failed or hung
EXIT_COLLECTIVE = 13  # the size sweep failed or hung past --op-timeout

STAGE_EXIT = {
    "setup": EXIT_BACKEND,
    "device": EXIT_DEVICE,
    "connect": EXIT_CONNECT,
    "rendezvous": EXIT_MISSING,
    "init": EXIT_INIT,
    "collective": EXIT_COLLECTIVE,
}

#: What a stage's watchdog message says it was doing.
STAGE_WHAT = {
    "device": "device set-up (import torch/torch_npu, choose the backend, set_device): the "
              "accelerator or its driver did not answer; this is not a network problem",
}

TIMED = (
    "avg time per op of {iters} back-to-back in-place all_reduce calls after {warmup} warmup "
    "calls (fewer on a slow link: see the notes under the table), slowest rank (MAX over "
    "ranks); algbw = bytes/time, busbw = algbw*2(n-1)/n; "
    "GB/s = 1e9 B/s"
)

#: HCCL's own link-setup timeout when HCCL_CONNECT_TIMEOUT is unset (CANN documents 120 s).
HCCL_CONNECT_DEFAULT_S = 120.0

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
                what = STAGE_WHAT.get(stage)
                dump_own_stack()
                sockets = tcp_peers(os.getpid())  # now: the peers may end while we wait below
                message = (f"stage {stage} did not finish within {seconds:g} s (watchdog)"
                           + (f": {what}" if what else ""))
                if os.environ.get("CT_PY_SPY"):
                    # the supervisor reads this line and takes this rank's native frames
                    # (py-spy) while it still waits where it was: that is where gloo/NCCL wait
                    emit("spy", stage=stage)
                    wait_for_spy(os.environ)  # type: ignore[arg-type]
                fail(stage, message, timeout=True, timeout_s=seconds, sockets=sockets)


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
    p.add_argument("--setup-timeout", type=float, default=120.0)
    p.add_argument("--visible-devices", default="")
    p.add_argument("--local-size", type=int, default=1)
    p.add_argument("--label", default="")
    args = p.parse_args(argv)
    if not 0 <= args.rank < args.world_size:
        p.error("--rank must be in [0, --world-size)")
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    if args.size_seconds <= 0:
        p.error("--size-seconds must be > 0")
    return args


#: The device-visibility variables DeepSpeed's accelerators set per node (cuda, npu).
VISIBLE_ENVS = ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")


def apply_visible_devices(spec: str, environ: dict) -> dict:
    """Set the visibility variables to ``spec`` (before torch is imported); returns what was set."""
    if not spec:
        return {}
    for name in VISIBLE_ENVS:
        environ[name] = spec
    return {name: spec for name in VISIBLE_ENVS}


def accelerator_files(dev_dir: str = "/dev") -> dict:
    """Device files of the node's accelerators, whatever torch can see:
    {"nvidia": n, "ascend": n}."""
    return {"nvidia": len(glob.glob(os.path.join(dev_dir, "nvidia[0-9]*"))),
            "ascend": len(glob.glob(os.path.join(dev_dir, "davinci[0-9]*")))}


def fallback_hint(files: dict, npu_why: str, torch_version: str, cuda_version: object) -> str:
    """Why ``--backend auto`` found no accelerator on a node whose /dev lists some ('' if none)."""
    if files.get("nvidia"):
        return (f"this node has {files['nvidia']} NVIDIA device(s) (/dev/nvidia<N>) but "
                f"torch.cuda.is_available() is False in this Python (torch {torch_version}, CUDA "
                f"build {cuda_version or 'none: a CPU-only wheel'}): install the CUDA build of "
                f"torch that matches the driver (nvidia-smi shows its CUDA version), or check "
                f"CUDA_VISIBLE_DEVICES in the non-interactive shell")
    if files.get("ascend"):
        return (f"this node has {files['ascend']} Ascend NPU(s) (/dev/davinci<N>) but {npu_why}: "
                f"CANN's environment is probably set only in interactive shells: source "
                f"/usr/local/Ascend/ascend-toolkit/set_env.sh in ~/.bashrc above any early "
                f"'return' (pdsh and ssh commands run non-interactive), and install torch_npu "
                f"into this Python")
    return ""


def choose_backend(torch: object, requested: str, local_rank: int,
                   dev_dir: str = "/dev") -> tuple:
    """Return (backend, device string, reason, versions, files); exits with EXIT_BACKEND if
    impossible, or if ``auto`` would fall to gloo on a node with accelerator device files."""
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
    files = accelerator_files(dev_dir)

    backend = requested
    if requested == "auto":
        if cuda:
            backend, reason = "nccl", f"CUDA available ({torch.cuda.device_count()} devices)"
        elif npu:
            backend, reason = "hccl", npu_why
        else:
            backend, reason = "gloo", "no CUDA; " + npu_why
            hint = fallback_hint(files, npu_why, str(torch.__version__),  # type: ignore
                                 getattr(torch.version, "cuda", None))  # type: ignore
            if hint:
                fail("setup", "--backend auto found no usable accelerator, and gloo on CPUs "
                     "would not test the launch's fabric: " + hint, files=files)
    else:
        reason = "requested"
    if backend == "nccl" and not cuda:
        fail("setup", "backend nccl requested but torch.cuda.is_available() is False")
    if backend == "hccl" and not npu:
        fail("setup", "backend hccl requested but " + npu_why)
    if backend in ("nccl", "hccl"):
        count = (torch.cuda if backend == "nccl" else torch.npu).device_count()  # type: ignore
        if local_rank >= count:
            shown = {k: os.environ.get(k) for k in VISIBLE_ENVS if os.environ.get(k)}
            fail("setup", f"local rank {local_rank} has no device: {count} visible "
                 f"({json.dumps(shown) if shown else 'no *_VISIBLE_DEVICES set'})")
    kind = "cuda" if backend == "nccl" else "npu"
    device = "cpu" if backend == "gloo" else f"{kind}:{local_rank}"
    return backend, device, reason, versions, files


def bind_device(torch: object, backend: str, local_rank: int) -> None:
    """This rank's device is current before the process group exists (DeepSpeed: set_device)."""
    if backend == "nccl":
        torch.cuda.set_device(local_rank)  # type: ignore[attr-defined]
    elif backend == "hccl":
        torch.npu.set_device(local_rank)  # type: ignore[attr-defined]


def device_id_kwargs(torch: object, dist: object, backend: str, device: str, world: int) -> dict:
    """``device_id`` for init_process_group, under DeepSpeed 0.19's rule (deepspeed/comm/
    torch.py): CUDA only, torch >= 2.3 (the argument exists), not 2.6.0 < torch < 2.7.1 (hangs,
    pytorch#153960), and not for a single-rank job (deepspeed#8248)."""
    import inspect

    if backend != "nccl" or world == 1:
        return {}
    if "device_id" not in inspect.signature(dist.init_process_group).parameters:  # type: ignore
        return {}
    version = tuple(int(x) for x in str(torch.__version__).split("+")[0].split(".")[:3]  # type: ignore
                    if x.isdigit())
    if (2, 6, 0) < version < (2, 7, 1):
        return {}
    return {"device_id": torch.device(device)}  # type: ignore[attr-defined]


def init_deadline(backend: str, init_timeout: float, environ: dict) -> float:
    """The init stage's deadline: on HCCL never below HCCL_CONNECT_TIMEOUT + 15 s."""
    if backend != "hccl":
        return init_timeout
    try:
        hccl = float(environ.get("HCCL_CONNECT_TIMEOUT") or HCCL_CONNECT_DEFAULT_S)
    except ValueError:
        hccl = HCCL_CONNECT_DEFAULT_S
    return max(init_timeout, hccl + 15.0)


def memory_cap(torch: object, backend: str, device: str, local_size: int) -> tuple:
    """(largest buffer in bytes this rank can hold, where the figure comes from)."""
    try:
        if backend in ("nccl", "hccl"):
            mod = torch.cuda if backend == "nccl" else torch.npu  # type: ignore[attr-defined]
            free, total = mod.mem_get_info(torch.device(device))  # type: ignore[attr-defined]
            return max(0, int((free - (1 << 30)) / 1.1)), f"{device} free {free} of {total} B"
        with open("/proc/meminfo") as fh:
            avail = next(int(line.split()[1]) * 1024 for line in fh
                         if line.startswith("MemAvailable:"))
        return avail // 2 // max(1, local_size), f"host MemAvailable {avail} B"
    except Exception as exc:  # noqa: BLE001 - no figure: do not cap
        return 1 << 62, f"unknown ({type(exc).__name__})"

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
        dump_own_stack()  # where it waited: the others will say where they did
        fail("connect", f"cannot {verb} the rendezvous store at {master} within "
             f"{args.connect_timeout:g} s: {exc}", master=master)
    raise AssertionError("unreachable")


def rendezvous(store: object, args: argparse.Namespace, deadline: float) -> None:
    """Every rank announces itself, then waits until all have (or reports who did not)."""
    master = f"{args.master_addr}:{args.master_port}"
    me = {"host": socket.gethostname(), "label": args.label, "local_rank": args.local_rank,
          "pid": os.getpid()}
    try:
        store.set(f"joined/{args.rank}", json.dumps(me))  # type: ignore[attr-defined]
        store.add("joined_count", 1)  # type: ignore[attr-defined]
        while store.add("joined_count", 0) < args.world_size:  # type: ignore[attr-defined]
            if time.monotonic() > deadline:
                missing = [r for r in range(args.world_size)
                           if not store.check([f"joined/{r}"])]  # type: ignore[attr-defined]
                joined = [r for r in range(args.world_size) if r not in missing]
                dump_own_stack()
                emit("missing_ranks", stage="rendezvous", missing=missing, joined=joined,
                     master=master, timeout_s=args.connect_timeout)
                fail("rendezvous", f"ranks {','.join(map(str, missing))} never joined the "
                     f"rendezvous at {master} within {args.connect_timeout:g} s", timeout=True,
                     missing=missing)
            time.sleep(0.05)
    except Exception as exc:  # noqa: BLE001 - report the stage, whatever broke
        # the store went away under us (rank 0 ended first, at its own deadline): where this
        # rank waited is still where it was, and the launcher's ask would come too late
        dump_own_stack()
        fail("rendezvous", f"store error during rendezvous: {exc}")
    peers = []
    if args.rank == 0:
        for r in range(args.world_size):
            info = json.loads(store.get(f"joined/{r}"))  # type: ignore[attr-defined]
            info["rank"] = r
            peers.append(info)
    emit("joined", world_size=args.world_size, peers=peers)


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


def cap_sizes(torch: object, dist: object, args: argparse.Namespace, backend: str,
              device: str) -> list:
    """The sizes every rank can hold (the least cap over ranks: one tiny MIN all_reduce)."""
    elsize = torch.tensor([], dtype=getattr(torch, args.dtype)).element_size()  # type: ignore
    cap, where = memory_cap(torch, backend, device, args.local_size)
    t = torch.tensor([min(cap, 1 << 62)], dtype=torch.int64, device=device)  # type: ignore
    dist.all_reduce(t, op=dist.ReduceOp.MIN)  # type: ignore[attr-defined]
    least = int(t.item())
    kept = [s for s in args.sizes if max(1, s // elsize) * elsize <= least]
    if len(kept) < len(args.sizes):
        emit("capped", cap_bytes=least, local_cap_bytes=cap, where=where,
             skipped=[s for s in args.sizes if s not in kept])
        if args.rank == 0:
            say(f"sizes above {least} B skipped: not enough memory on some rank ({where} here)")
    return kept


def busbw_factor(world: int) -> float:
    """busbw / algbw for all-reduce, 2(W-1)/W: a copy of judge/collective.allreduce_busbw_factor
    (this script runs alone on the node and cannot import it; a unit test keeps them equal)."""
    return 2.0 * (world - 1) / world


def sweep(torch: object, dist: object, args: argparse.Namespace, backend: str,
          device: str, budget_end: float) -> int:
    """Run every size; return the number of wrong elements over all ranks and sizes."""
    dtype = getattr(torch, args.dtype)
    elsize = torch.tensor([], dtype=dtype).element_size()  # type: ignore[attr-defined]
    wrong_all = 0
    measured_any = False
    sizes = cap_sizes(torch, dist, args, backend, device)
    if args.rank == 0:
        say(f"{'size(B)':>12} {'count':>12} {'type':>8} {'time(us)':>10} {'algbw':>10} "
            f"{'busbw':>10} {'#wrong':>7}   (GB/s = 1e9 B/s)")
    last = None  # (bytes, seconds per op, slowest rank) of the last size measured
    for index, size in enumerate(sizes):
        count = max(1, size // elsize)
        nbytes = count * elsize
        if last is not None and last[1] * nbytes / last[0] > args.size_seconds:
            # the same on every rank (the time is the MAX over ranks): not even one call of a
            # size that would take longer than its share
            predicted = last[1] * nbytes / last[0]
            emit("stopped", size_bytes=nbytes, op_seconds=round(predicted, 6), predicted=True,
                 left_seconds=round(budget_end - time.monotonic(), 3),
                 size_seconds=args.size_seconds, skipped=sizes[index:])
            if args.rank == 0:
                say(f"sweep stopped before {nbytes} B: one all_reduce would take about "
                    f"{predicted:.2f} s (--size-seconds {args.size_seconds:g})")
            break
        buf = torch.zeros(count, dtype=dtype, device=device)  # type: ignore[attr-defined]
        dist.all_reduce(buf)  # type: ignore[attr-defined]  # cold: this size's first call
        sync(torch, backend)
        t0 = time.perf_counter()
        dist.all_reduce(buf)  # type: ignore[attr-defined]  # warm: timed to plan the size
        sync(torch, backend)
        first, left = agree(torch, dist, device, time.perf_counter() - t0,
                            budget_end - time.monotonic())
        plan = plan_size(first, left, max(args.warmup - 1, 0), args.iters, args.size_seconds,
                         measured_any)
        if plan is None:
            emit("stopped", size_bytes=nbytes, op_seconds=round(first, 6),
                 left_seconds=round(left, 3), size_seconds=args.size_seconds,
                 skipped=sizes[index:])
            if args.rank == 0:
                say(f"sweep stopped at {nbytes} B: one all_reduce took {first:.2f} s "
                    f"(--size-seconds {args.size_seconds:g}, {left:.1f} s left)")
            del buf
            break
        time_s, wrongs = measure_size(torch, dist, args, backend, device, buf, count, nbytes,
                                      index, plan)
        measured_any = True
        last = (nbytes, time_s)
        wrong_all += wrongs
        del buf
    return wrong_all


def measure_size(torch: object, dist: object, args: argparse.Namespace, backend: str,
                 device: str, buf: object, count: int, nbytes: int, index: int,
                 plan: "tuple[int, int]") -> "tuple[float, int]":
    """One size of the sweep as planned (warm-up calls, timed calls): its time, then the
    checked call on the pattern; its ``result`` event (and rank 0's table row). Returns
    (seconds per op of the slowest rank, wrong elements over all ranks)."""
    world = args.world_size
    warmup, iters = plan
    for _ in range(warmup):
        dist.all_reduce(buf)  # type: ignore[attr-defined]
    sync(torch, backend)
    seconds = timed_loop(torch, dist, backend, buf, iters)
    wrong = count_nonzero(torch, buf)  # zeros summed stay zeros
    seed = pattern_seed(nbytes, index)
    fill_pattern(torch, buf, args.rank, world, seed, args.dtype)
    dist.all_reduce(buf)  # type: ignore[attr-defined]  # the checked call, in place
    sync(torch, backend)
    wrong += count_wrong(torch, buf, world, seed, args.dtype)
    stats = torch.tensor([seconds], dtype=torch.float32, device=device)  # type: ignore
    dist.all_reduce(stats, op=dist.ReduceOp.MAX)  # type: ignore[attr-defined]
    total = torch.tensor([seconds], dtype=torch.float32, device=device)  # type: ignore
    dist.all_reduce(total)  # type: ignore[attr-defined]
    wrongs = torch.tensor([wrong], dtype=torch.int64, device=device)  # type: ignore
    dist.all_reduce(wrongs)  # type: ignore[attr-defined]
    time_s = float(stats.item())
    time_us = time_s * 1e6
    algbw = nbytes / time_s / 1e9 if time_s > 0 else 0.0
    busbw = algbw * busbw_factor(world)
    emit("result", size_bytes=nbytes, count=count, dtype=args.dtype, time_us=time_us,
         algbw_GBps=algbw, busbw_GBps=busbw, wrong=wrong, wrong_all_ranks=int(wrongs.item()),
         local_time_us=seconds * 1e6, avg_time_us=float(total.item()) / world * 1e6,
         iters=iters, warmup=warmup + 2)
    if args.rank == 0:
        say(f"{nbytes:12d} {count:12d} {args.dtype:>8} {time_us:10.2f} {algbw:10.3f} "
            f"{busbw:10.3f} {int(wrongs.item()):7d}")
    return time_s, int(wrongs.item())


# NCCL_DEBUG=INFO goes to a file of this rank's; after init its transport lines are sent as a
# `transport` event, parsed on the launcher (cluster_tests/judge/collective/nccllog.py) for C1's
# table and check.
_TRANSPORT_LINE = ("NET/", "Using network", " via ", "NCCL WARN", "NCCL version")


def _nccl_log_path(pid: int) -> str:
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"ct-nccl-{pid}.log")


def _nccl_debug_file(backend: str) -> "str | None":
    if backend != "nccl":
        return None
    path = _nccl_log_path(os.getpid())
    os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_FILE=path)
    return path


def _emit_transport(path: "str | None") -> None:
    if not path:
        return
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = [ln.rstrip("\n") for ln in fh if any(k in ln for k in _TRANSPORT_LINE)]
        os.unlink(path)
    except OSError:
        lines = []
    emit("transport", lines=lines[-400:])


def init_group(torch: object, dist: object, args: argparse.Namespace, backend: str,
               device: str, store: object, init_s: float, nccl_log: "str | None") -> None:
    """Stage init: the process group on the store, and a first all_reduce of ones; its
    transport lines sent either way, then ``init_ok``."""
    t_init = time.monotonic()
    try:
        extra = device_id_kwargs(torch, dist, backend, device, args.world_size)
        dist.init_process_group(  # type: ignore[attr-defined]
            backend, store=store, rank=args.rank, world_size=args.world_size,
            timeout=datetime.timedelta(seconds=init_s + args.op_timeout), **extra)
        probe = torch.ones(1, device=device)  # type: ignore[attr-defined]
        dist.all_reduce(probe)  # type: ignore[attr-defined]
        sync(torch, backend)
        if probe.item() != args.world_size:
            fail("init", f"first all_reduce of ones gave {probe.item()}, "
                 f"expected {args.world_size}")
    except Exception as exc:  # noqa: BLE001 - report the stage, whatever broke
        _emit_transport(nccl_log)
        fail("init", f"{type(exc).__name__}: {exc}")
    _emit_transport(nccl_log)
    emit("init_ok", backend=backend, seconds=round(time.monotonic() - t_init, 3),
         device_id=str(extra.get("device_id", "")))


def main(argv: list) -> int:
    global _RANK
    args = parse_args(argv)
    _RANK = args.rank
    register_stack_dump(os.environ)  # type: ignore[arg-type]
    watchdog = Watchdog()
    watchdog.arm("device", args.setup_timeout)
    visible = apply_visible_devices(args.visible_devices, os.environ)  # type: ignore[arg-type]
    import torch
    import torch.distributed as dist

    backend, device, reason, versions, files = choose_backend(
        torch, args.backend, args.local_rank, os.environ.get("CT_ALLREDUCE_DEV_DIR", "/dev"))
    init_s = init_deadline(backend, args.init_timeout, os.environ)  # type: ignore[arg-type]
    emit("start", world_size=args.world_size, local_rank=args.local_rank,
         host=socket.gethostname(), label=args.label, pid=os.getpid(), backend=backend,
         device=device, reason=reason, versions=versions, accelerator_files=files,
         visible_devices=visible, init_timeout_s=init_s,
         master=f"{args.master_addr}:{args.master_port}", dtype=args.dtype,
         sizes=args.sizes, iters=args.iters,
         timed=TIMED.format(iters=args.iters, warmup=args.warmup))
    say(f"backend {backend} on {device} ({reason}); {json.dumps(versions)}")
    nccl_log = _nccl_debug_file(backend)
    bind_device(torch, backend, args.local_rank)
    watchdog.disarm()

    deadline = time.monotonic() + args.connect_timeout
    # The store honours its own timeout; the watchdog only catches a stuck constructor.
    watchdog.arm("connect", args.connect_timeout + 5.0)
    store = connect(args)
    watchdog.arm("rendezvous", max(0.0, deadline - time.monotonic()) + 5.0)
    rendezvous(store, args, deadline)

    watchdog.arm("init", init_s)
    init_group(torch, dist, args, backend, device, store, init_s, nccl_log)
    watchdog.disarm()

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


class _Stacks:
    """The supervisor's end of one worker's stack pipe: what faulthandler wrote, read as it
    comes, handed on as ``stack`` events."""

    def __init__(self, rank: int, fd: int) -> None:
        self.rank = rank
        self._fd = fd
        self._buf = bytearray()
        self._lock = threading.Lock()
        self.grew = threading.Event()  # set whenever the worker wrote more
        self.thread = threading.Thread(target=self._read, daemon=True, name=f"stacks-{rank}")
        self.thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            with self._lock:
                self._buf += chunk
            self.grew.set()
        os.close(self._fd)

    def wait_written(self, within: float) -> None:
        """After a dump was asked for: until the worker wrote some (at most `within` s), then
        until it stops writing (0.1 s without more)."""
        if self.grew.wait(within):
            self.grew.clear()
            while self.grew.wait(0.1):
                self.grew.clear()

    def flush(self, why: str, native: str = "", sockets: object = None,
              native_pending: bool = False, native_done: bool = False) -> None:
        """Relay what the worker wrote (and ``native``, py-spy's frames) as a ``stack`` event;
        ``native_pending``: py-spy's frames follow in a later one, which says ``native_done``
        (even when py-spy gave nothing: the launcher waits for it)."""
        with self._lock:
            text, self._buf = bytes(self._buf), bytearray()
        if text or native or native_pending or native_done:
            emit("stack", stack_rank=self.rank, why=why, text=text.decode(errors="replace"),
                 native=native, sockets=sockets or {}, native_pending=native_pending,
                 native_done=native_done)


def _py_spy_tool() -> str:
    """py-spy on the PATH, or installed beside the interpreter (pip install py-spy in the
    launch's environment); '' where there is none."""
    import shutil

    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return shutil.which("py-spy") or (beside if os.access(beside, os.X_OK) else "")


def _py_spy(pid: int) -> str:
    """``py-spy dump --native`` of a worker, where py-spy is on the node ('' where not)."""
    import subprocess

    tool = _py_spy_tool()
    if not tool:
        return ""
    try:
        out = subprocess.run([tool, "dump", "--native", "--pid", str(pid)], capture_output=True,
                             timeout=10, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"py-spy failed: {exc}"
    return (out.stdout or out.stderr).decode(errors="replace")


class _Supervisor:
    """The workers of one node (see `supervise`), with what each one needs: its stack pipe
    (`_Stacks`), the pipe that tells it its py-spy is done, its stdout relay."""

    def __init__(self, spec: dict, source: bytes) -> None:
        env = dict(os.environ)
        env.update({k: str(v) for k, v in spec.get("env", {}).items()})
        env["PYTHONUNBUFFERED"] = "1"
        env["CT_ALLREDUCE_SUPERVISED"] = "1"
        if _py_spy_tool():
            env["CT_PY_SPY"] = "1"  # a worker at its watchdog waits for its native frames
        self.env = env
        self.payload = str(len(source)).encode() + b"\n" + source
        self.procs = {}  # type: dict  # rank -> Popen
        self.stacks = {}  # type: dict  # rank -> _Stacks
        self.acks = {}  # type: dict  # rank -> the write end of its CT_SPY_ACK_FD pipe
        self.pumps = {}  # type: dict  # rank -> the thread relaying its stdout
        self.spied = {}  # type: dict  # rank -> py-spy text taken at the worker's own watchdog
        self.stop = threading.Event()

    def start(self, workers: list) -> None:
        import subprocess

        for worker in workers:
            rank = int(worker["rank"])
            read_end, write_end = os.pipe()
            ack_read, self.acks[rank] = os.pipe()
            proc = subprocess.Popen([sys.executable, "-u", "-c", BOOTSTRAP, *worker["argv"]],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    env={**self.env, "CT_STACK_FD": str(write_end),
                                         "CT_SPY_ACK_FD": str(ack_read)},
                                    pass_fds=(write_end, ack_read))
            os.close(write_end)
            os.close(ack_read)
            self.stacks[rank] = _Stacks(rank, read_end)
            proc.stdin.write(self.payload)  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]
            self.procs[rank] = proc
            self.pumps[rank] = threading.Thread(target=self._pump, args=(rank, proc),
                                                daemon=True)
            self.pumps[rank].start()

    def dump(self) -> None:
        """Every live worker's stacks: SIGUSR1 (faulthandler, all threads), relayed as soon as
        written; then py-spy's native frames, where py-spy runs."""
        import signal

        live = {r: p for r, p in self.procs.items() if p.poll() is None}
        for rank, proc in live.items():
            self.stacks[rank].grew.clear()
            try:
                os.kill(proc.pid, signal.SIGUSR1)
            except OSError:
                pass
        native = {}  # rank -> py-spy text

        def spy(rank: int, pid: int) -> None:
            native[rank] = _py_spy(pid)

        spies = [threading.Thread(target=spy, args=(r, p.pid), daemon=True)
                 for r, p in live.items()] if _py_spy_tool() else []
        for t in spies:
            t.start()
        # faulthandler writes from the signal handler, at once; its reader thread here may be
        # slow to read it on a loaded node: each worker's dump is waited for, not slept for
        until = time.monotonic() + 3.0
        for rank in live:
            self.stacks[rank].wait_written(max(0.0, until - time.monotonic()))
        # its Python stacks at once: the launcher stops the run soon after it asked, and
        # py-spy can take longer than that on a loaded node (the stacks were then lost)
        for rank, proc in live.items():
            self.stacks[rank].flush("asked", "", tcp_peers(proc.pid), native_pending=bool(spies))
        for t in spies:
            t.join(12)
        for rank in live:  # then the native frames, as py-spy gives them
            if spies:
                self.stacks[rank].flush("asked", native.get(rank, ""), native_done=True)

    def watch_stdin(self) -> None:
        """A ``D`` asks for the stacks; anything else, or end of file, stops the workers."""
        while True:
            try:
                byte = sys.stdin.buffer.read(1)
            except Exception:  # noqa: BLE001 - a broken stdin means the launcher is gone too
                break
            if byte != b"D":
                break
            threading.Thread(target=self.dump, name="dump", daemon=True).start()
        self.stop.set()

    def _spy_at_watchdog(self, rank: int, pid: int) -> None:
        try:
            self.spied[rank] = _py_spy(pid)
        finally:
            try:  # the worker waits for this before it ends
                os.write(self.acks[rank], b"1")
            except (KeyError, OSError):
                pass

    def _pump(self, rank: int, proc: object) -> None:
        for raw in iter(proc.stdout.readline, b""):  # type: ignore[attr-defined]
            if raw.startswith(b'{"event": "spy"'):
                pid = proc.pid  # type: ignore[attr-defined]
                threading.Thread(target=self._spy_at_watchdog, args=(rank, pid),
                                 daemon=True).start()
                continue
            with _OUT_LOCK:
                sys.stdout.buffer.write(raw if raw.endswith(b"\n") else raw + b"\n")
                sys.stdout.flush()

    def reap(self) -> None:
        """Until every worker has ended (killed once `stop` is set): each one's exit, after
        what it printed and the stacks its watchdog dumped."""
        reported = set()
        while len(reported) < len(self.procs):
            for rank, proc in self.procs.items():
                if rank in reported:
                    continue
                if self.stop.is_set() and proc.poll() is None:
                    proc.kill()
                code = proc.poll()
                if code is not None:
                    reported.add(rank)
                    self.pumps[rank].join(timeout=1.0)  # what it printed before its exit line
                    self.stacks[rank].thread.join(timeout=1.0)
                    # its watchdog's own dump, if it had one, with py-spy's frames taken then
                    self.stacks[rank].flush("exit", self.spied.get(rank, ""))
                    emit("exit", exit_rank=rank, code=code, killed=self.stop.is_set())
            time.sleep(0.05)
        for proc in self.procs.values():  # a worker killed mid-init leaves its NCCL log behind
            try:
                os.unlink(_nccl_log_path(proc.pid))
            except OSError:
                pass


def supervise(spec: dict, source: bytes) -> int:
    """Start one worker per entry of ``spec["workers"]`` (argv lists), relay their JSON lines,
    and kill them all as soon as stdin reaches EOF or carries any byte but ``D``: the launcher
    closes the SSH channel (or dies: sshd then closes it) and nothing is left running on the node.
    A ``D`` on stdin asks every live worker for its stacks (SIGUSR1: faulthandler, all threads;
    plus ``py-spy dump --native`` where py-spy is installed), relayed as ``stack`` events; a
    worker's own watchdog dumps its stacks before it exits (relayed the same way).

    Workers get the script on their stdin too, so nothing is written to the node's disk.
    Extra events: ``workers`` (pids), ``exit`` (rank, code; negative = signal), ``stack``
    (stack_rank, why, text, native), ``reaped``.
    The remote ``timeout`` around this process kills its whole process group (workers
    included: they stay in it) if everything else fails.
    """
    import signal

    sup = _Supervisor(spec, source)
    signal.signal(signal.SIGTERM, lambda *_: sup.stop.set())
    sup.start(spec["workers"])
    threading.Thread(target=sup.watch_stdin, name="stdin-watch", daemon=True).start()
    emit("workers", pids={str(r): p.pid for r, p in sup.procs.items()}, host=socket.gethostname())
    sup.reap()
    emit("reaped", killed=sup.stop.is_set())
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
