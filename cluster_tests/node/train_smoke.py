#!/usr/bin/env python3
"""Training smoke job (checklist T1/T2), run by the ``deepspeed`` launcher on every node.

Standalone on purpose: it imports only the standard library, torch and deepspeed (never
``cluster_tests``), so it can be copied to a node and started there as it is.

A tiny MLP is fitted by regression onto a fixed linear target, with synthetic data drawn from a
fixed seed (no downloads). Every rank prints JSON events on stdout, one per line, each prefixed
with the tag ``CT_SMOKE `` (the launcher interleaves the ranks' outputs, pdsh prefixes each line
with ``host: ``)::

  CT_SMOKE {"event": "start", "rank": 0, "world_size": 2, ...}
  CT_SMOKE {"event": "step", "rank": 0, "step": 1, "loss": 1.23}
  CT_SMOKE {"event": "done", "rank": 0, "first_loss": ..., "last_loss": ..., "weights_sha256": ...}
  CT_SMOKE {"event": "error", "rank": 0, "kind": "deadline", "message": ...}

Exit codes: 0 done; 3 deadline exceeded (watchdog); 4 any other error inside the job.

By accelerator (:func:`ds_config`): on CUDA/NPU the job trains as a real job would, in bf16
where the device supports it (else fp16 with dynamic loss scaling), with DeepSpeed's own Adam,
which DeepSpeed builds as its fused op on first use (the JIT build that a first launch so often
fails on); on every accelerator ``deepspeed.init_distributed`` JIT-loads the ops DeepSpeed
builds there (on CPU its shm comm op), in the extensions directory the user's job uses;
``deepspeed.init_distributed`` binds the local rank's device (``device_id``, eager NCCL init, as
DeepSpeed 0.19 does on CUDA). On CPU: fp32, a plain torch SGD, gloo. The ZeRO
stage is ``--zero-stage`` (the launch's own choice). The start event reports the accelerator,
backend, device, precision and optimizer, so that the launcher side can tell a GPU node that
trained on CPU.

Usage (single node, CPU: DS_ACCELERATOR=cpu)::

    deepspeed --hostfile /nonexistent --num_gpus 2 --master_port 29611 train_smoke.py --steps 20
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

# The same as judge/training/trainresult.py's (this script runs alone on the nodes and cannot import
# it; tests/unit/test_judge_trainresult.py keeps them equal).
TAG = "CT_SMOKE"
EXIT_DEADLINE = 3
EXIT_ERROR = 4

_state = {"rank": int(os.environ.get("RANK", "-1")), "phase": "import"}
_print_lock = threading.Lock()


def emit(event: str, **fields: object) -> None:
    """Print one tagged JSON event line and flush at once (ranks may be killed any moment)."""
    record = {"event": event, "rank": _state["rank"]}
    record.update(fields)
    line = f"{TAG} {json.dumps(record, sort_keys=True)}\n"
    # stdout gone: nothing left to report to
    with _print_lock, contextlib.suppress(Exception):
        sys.stdout.write(line)
        sys.stdout.flush()


#: the record of a JIT build lock this process holds, in its working directory (the run's own
#: directory): the launcher side's cleanup removes a lock whose holder it killed (judge: E7)
JIT_LOCK_RECORD = ".ct_jit_lock"


SHM_RECORD = ".ct_shm"
#: the segment DeepSpeed's CPU shared-memory all-reduce makes for a rank in /dev/shm when every
#: rank is on one machine (deepspeed/ops/csrc/cpu/comm/shm.cpp, shm_initialize); it never
#: unlinks it: 64 MiB a rank stays in /dev/shm after every such job, whatever its end
SHM_SEGMENT = "deepspeed_allreduce_buffer_{uid}_{addr}_{port}_{rank}"


def record_shm_segment(environ: Mapping[str, str] = os.environ) -> str | None:
    """The /dev/shm segment DeepSpeed's CPU all-reduce will make for this rank (None where it
    makes none: ranks on several machines, LOCAL_SIZE != WORLD_SIZE), recorded in the working
    directory before it exists: the suite's cleanup removes what a job killed before
    `release_shm_segment` leaves (as for the JIT locks)."""
    if environ.get("LOCAL_SIZE") != environ.get("WORLD_SIZE") or "RANK" not in environ:
        return None
    name = SHM_SEGMENT.format(uid=os.getuid(), addr=environ.get("MASTER_ADDR", ""),
                              port=environ.get("MASTER_PORT", ""), rank=environ["RANK"])
    if not re.fullmatch(r"[A-Za-z0-9_.:-]+", name):
        return None
    with contextlib.suppress(OSError):
        with open(f"{SHM_RECORD}.{environ['RANK']}", "w") as fh:
            fh.write(name + "\n")
    return name


def release_shm_segment(name: str, barrier: Callable[[], object]) -> None:
    """Unlink this rank's segment once every rank has mapped every other's (`barrier()` after
    init_distributed): the mappings stay, the name goes, and the job leaves nothing in
    /dev/shm even when it is killed later."""
    barrier()
    with contextlib.suppress(OSError):
        os.unlink(f"/dev/shm/{name}")
    with contextlib.suppress(OSError):
        os.unlink(f"{SHM_RECORD}.{os.environ['RANK']}")


def record_jit_locks() -> None:
    """While this job holds one of torch's JIT build locks (``FileBaton``: a plain file, removed
    only by its holder), a record of it (inode, path) lies in the working directory. A job killed
    at its deadline or by Ctrl-C would otherwise leave the lock behind and hang every later
    launch that loads the op; the suite's cleanup, after killing the run, removes each lock still
    recorded if it is the same file (inode).  Only records: the build itself is untouched."""
    from torch.utils import file_baton

    baton = file_baton.FileBaton
    orig_acquire, orig_release = baton.try_acquire, baton.release
    counter = [0]

    def try_acquire(self):  # type: ignore[no-untyped-def]
        got = orig_acquire(self)
        if got:
            counter[0] += 1
            record = os.path.abspath(f"{JIT_LOCK_RECORD}.{os.getpid()}.{counter[0]}")
            with contextlib.suppress(OSError):
                ino = os.stat(self.lock_file_path).st_ino
                with open(record, "w") as fh:
                    fh.write(f"{ino}\n{os.path.abspath(self.lock_file_path)}\n")
                self._ct_record = record
        return got

    def release(self):  # type: ignore[no-untyped-def]
        orig_release(self)
        record = getattr(self, "_ct_record", None)
        if record:
            with contextlib.suppress(OSError):
                os.unlink(record)

    baton.try_acquire, baton.release = try_acquire, release  # type: ignore[method-assign]


def dump_own_stack() -> str:
    """This process's stacks, every thread, as faulthandler writes them ('' if it cannot)."""
    import faulthandler
    import tempfile

    try:
        with tempfile.TemporaryFile(mode="w+") as f:
            faulthandler.dump_traceback(file=f, all_threads=True)
            f.seek(0)
            return f.read()
    except (OSError, ValueError, RuntimeError):
        return ""


def start_watchdog(deadline_s: float) -> None:
    """Kill this process with EXIT_DEADLINE when the job is not done after deadline_s seconds."""

    def fire() -> None:
        text = dump_own_stack()
        if text:  # where this rank was: the launcher side groups the ranks by it (judge/stacks)
            emit("stack", text=text, phase=_state["phase"], host=socket.gethostname())
        emit(
            "error",
            kind="deadline",
            phase=_state["phase"],
            message=f"deadline of {deadline_s:g} s exceeded during {_state['phase']}",
            host=socket.gethostname(),
        )
        os._exit(EXIT_DEADLINE)

    timer = threading.Timer(deadline_s, fire)
    timer.daemon = True
    timer.start()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Tiny DeepSpeed training smoke job (cluster_tests T1/T2)"
    )
    p.add_argument("--steps", type=int, default=20, help="optimizer steps (default 20)")
    p.add_argument(
        "--zero-stage", type=int, default=0, choices=[0, 1, 2, 3], help="ZeRO stage (default 0)"
    )
    p.add_argument("--batch-size", type=int, default=16, help="micro batch per rank (default 16)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD-momentum learning rate")
    p.add_argument("--hidden", type=int, default=32, help="hidden width of the MLP")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument(
        "--deadline",
        type=float,
        default=300.0,
        help="overall wall-clock limit in seconds; exceeded -> error event, exit 3",
    )
    p.add_argument(
        "--dist-timeout",
        type=float,
        default=60.0,
        help="torch.distributed timeout in seconds (rendezvous and collectives)",
    )
    p.add_argument(
        "--backend",
        default=None,
        help="torch.distributed backend (default: the accelerator's; CPU -> gloo)",
    )
    p.add_argument(
        "--sleep-before-init",
        type=float,
        default=0.0,
        help="testing aid: sleep this long before dist init",
    )
    p.add_argument(
        "--no-jit-shm",
        action="store_true",
        help="testing aid, CPU only: mark DeepSpeed's shm comm op unavailable so that "
        "init_distributed neither builds nor loads it (the user's launch does both)",
    )
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "fp16", "bf16"],
        default="auto",
        help="auto: bf16 where the accelerator supports it, else fp16; fp32 on CPU",
    )
    p.add_argument(
        "--run-id",
        default="",
        help="an id of this launch, only reported back; it also lets the launching side find "
        "(and kill) exactly the processes of this run with pkill -f",
    )
    # The deepspeed launcher passes --local_rank=N unless --no_local_rank is given.
    p.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def ds_config(
    accel_name: str,
    bf16_ok: bool,
    fp16_ok: bool,
    zero_stage: int,
    batch_size: int,
    lr: float,
    precision: str = "auto",
) -> tuple[dict, str, bool]:
    """(DeepSpeed config, precision, whether the job passes its own torch optimizer).

    Accelerators: bf16 if supported, else fp16 (dynamic loss scale from 2^8), else fp32, and
    DeepSpeed's "Adam" (FusedAdam on CUDA/NPU: built on first use). CPU: fp32 and a client
    torch SGD (momentum 0.9), which ZeRO >= 1 accepts only with zero_allow_untested_optimizer.
    """
    if precision == "auto":
        if accel_name == "cpu":
            precision = "fp32"
        else:
            precision = "bf16" if bf16_ok else ("fp16" if fp16_ok else "fp32")
    config: dict = {
        "train_micro_batch_size_per_gpu": batch_size,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": zero_stage},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if precision == "bf16":
        config["bf16"] = {"enabled": True}
    elif precision == "fp16":
        config["fp16"] = {"enabled": True, "initial_scale_power": 8, "loss_scale_window": 100}
    client = accel_name == "cpu"
    if client:
        # a plain torch SGD: fine for a smoke test, but ZeRO >= 1 refuses it unless told
        config["zero_allow_untested_optimizer"] = True
    else:
        config["optimizer"] = {"type": "Adam", "params": {"lr": min(lr, 0.01)}}
    return config, precision, client


def weights_sha256(named: list[tuple[str, object]]) -> str:
    """SHA-256 over names, shapes and exact float32 bytes of the parameters (CPU, contiguous)."""
    import torch

    h = hashlib.sha256()
    for name, tensor in named:
        t = tensor.detach().to("cpu", dtype=torch.float32).contiguous()  # type: ignore[attr-defined]
        h.update(name.encode())
        h.update(repr(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def _setup_device(args: argparse.Namespace) -> tuple[Any, Any, int]:
    """DeepSpeed's accelerator for this rank, its device, and its local rank; the JIT build locks
    recorded (and on CPU, with --no-jit-shm, the shm op marked unavailable)."""
    import deepspeed
    import torch
    from deepspeed.accelerator import get_accelerator

    accel = get_accelerator()
    local_rank = int(
        os.environ.get("LOCAL_RANK", args.local_rank if args.local_rank is not None else 0)
    )
    with contextlib.suppress(Exception):  # a torch without FileBaton: nothing to record
        record_jit_locks()
    if accel.device_name() == "cpu" and args.no_jit_shm:
        # The user's launch takes this path: DeepSpeed's CPU TorchBackend JIT-builds (or loads,
        # through ninja and the build lock in the extensions directory) its shared-memory op
        # deepspeed_shm_comm in init_distributed (~30 s on 2 cores the first time). Only the
        # project's own tests skip it, by marking the op unavailable: build_shm_op() then
        # returns None. Another layout in a future deepspeed: fall back to building it.
        with contextlib.suppress(Exception):
            compatible = deepspeed.ops.__dict__.setdefault("__compatible_ops__", {})
            compatible["deepspeed_shm_comm"] = False
    if accel.device_name() == "cpu":
        return accel, torch.device("cpu"), local_rank
    accel.set_device(local_rank)
    return accel, torch.device(accel.device_name(), local_rank), local_rank


def _init_distributed(args: argparse.Namespace, accel: Any) -> None:
    """deepspeed.init_distributed as the user's job calls it; DeepSpeed's CPU all-reduce
    segment released once every rank has it mapped."""
    import deepspeed
    import torch.distributed as dist

    backend = args.backend or accel.communication_backend_name()
    if args.sleep_before_init > 0:
        _state["phase"] = "sleep"
        time.sleep(args.sleep_before_init)
    _state["phase"] = "dist-init"
    segment = record_shm_segment() if accel.device_name() == "cpu" else None
    deepspeed.init_distributed(
        dist_backend=backend,
        timeout=datetime.timedelta(seconds=args.dist_timeout),
    )
    if segment is not None:
        release_shm_segment(segment, dist.barrier)


def _emit_start(args: argparse.Namespace, accel: Any, device: Any, local_rank: int,
                precision: str, client_optimizer: bool, t0: float) -> None:
    import deepspeed
    import torch
    import torch.distributed as dist

    bound = None
    with contextlib.suppress(Exception):  # private API: only reported
        bound = dist.distributed_c10d._get_default_group().bound_device_id
    emit(
        "start",
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        host=socket.gethostname(),
        backend=dist.get_backend(),
        device=str(device),
        accelerator=accel.device_name(),
        torch=torch.__version__,
        deepspeed=deepspeed.__version__,
        python=sys.version.split()[0],
        pid=os.getpid(),
        init_s=round(time.monotonic() - t0, 3),
        run_id=args.run_id,
        precision=precision,
        optimizer="torch SGD" if client_optimizer else "DeepSpeed Adam",
        bound_device=str(bound) if bound is not None else None,
        ds_accelerator_env=os.environ.get("DS_ACCELERATOR"),
        visible_devices={
            k: os.environ[k]
            for k in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")
            if k in os.environ
        },
    )


def _model_and_data(args: argparse.Namespace, rank: int) -> tuple[Any, Any, Any]:
    """The MLP (the same initial weights on every rank: DeepSpeed broadcasts rank 0's anyway)
    and this rank's shard of the synthetic data set, drawn from a fixed seed."""
    import torch

    torch.manual_seed(args.seed)
    d_in, d_out = 8, 2
    model = torch.nn.Sequential(
        torch.nn.Linear(d_in, args.hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(args.hidden, d_out),
    )
    gen = torch.Generator().manual_seed(args.seed + 1)
    w_true = torch.randn(d_in, d_out, generator=gen) / d_in**0.5
    n = args.batch_size * args.steps
    gen_r = torch.Generator().manual_seed(args.seed + 100 + rank)
    x_all = torch.randn(n, d_in, generator=gen_r)
    return model, x_all, x_all @ w_true


def _train(args: argparse.Namespace, engine: Any, device: Any, x_all: Any,
           y_all: Any) -> list[float]:
    import torch

    loss_fn = torch.nn.MSELoss()
    dtype = next(engine.module.parameters()).dtype
    losses: list[float] = []
    for step in range(args.steps):
        lo = step * args.batch_size
        x = x_all[lo : lo + args.batch_size].to(device=device, dtype=dtype)
        y = y_all[lo : lo + args.batch_size].to(device=device, dtype=dtype)
        loss = loss_fn(engine(x), y)
        engine.backward(loss)
        engine.step()
        value = float(loss.detach().float().cpu())
        losses.append(value)
        emit("step", step=step + 1, loss=value)
    return losses


def _weights_digest(args: argparse.Namespace, engine: Any) -> str:
    import deepspeed

    if args.zero_stage == 3:
        params = list(engine.module.named_parameters())
        with deepspeed.zero.GatheredParameters([p for _, p in params], modifier_rank=None):
            return weights_sha256([(name, p) for name, p in params])
    return weights_sha256(list(engine.module.named_parameters()))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start_watchdog(args.deadline)
    t0 = time.monotonic()

    import deepspeed
    import torch

    accel, device, local_rank = _setup_device(args)
    _init_distributed(args, accel)
    import torch.distributed as dist

    bf16_ok = fp16_ok = False
    with contextlib.suppress(Exception):
        bf16_ok, fp16_ok = bool(accel.is_bf16_supported()), bool(accel.is_fp16_supported())
    config, precision, client_optimizer = ds_config(
        accel.device_name(), bf16_ok, fp16_ok, args.zero_stage, args.batch_size, args.lr,
        args.precision)
    rank = dist.get_rank()
    _state["rank"] = rank
    _emit_start(args, accel, device, local_rank, precision, client_optimizer, t0)

    _state["phase"] = "setup"
    model, x_all, y_all = _model_and_data(args, rank)
    optimizer = (
        torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9) if client_optimizer else None
    )
    _state["phase"] = "initialize"  # DeepSpeed builds its fused optimizer op here
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, model_parameters=None if client_optimizer
        else list(model.parameters()), config=config,
    )
    _state["phase"] = "train"
    losses = _train(args, engine, device, x_all, y_all)
    _state["phase"] = "gather"
    digest = _weights_digest(args, engine)

    _state["phase"] = "barrier"
    dist.barrier()
    emit(
        "done",
        first_loss=losses[0],
        last_loss=losses[-1],
        steps=len(losses),
        weights_sha256=digest,
        elapsed_s=round(time.monotonic() - t0, 3),
    )
    _state["phase"] = "shutdown"
    with contextlib.suppress(Exception):
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - report every failure as an event
        emit(
            "error",
            kind=type(exc).__name__,
            phase=_state["phase"],
            message=str(exc)[:2000],
            traceback=traceback.format_exc()[-4000:],
            host=socket.gethostname(),
        )
        sys.stdout.flush()
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        os._exit(EXIT_ERROR)
    sys.stdout.flush()
    sys.exit(code)
