#!/usr/bin/env python3
"""What one NVIDIA GPU can prove about the suite's NCCL path, in one run (issue 17).

Run it through ``bench/gpu_check.sh`` (which skips cleanly without a GPU, installs carried
wheels and bounds the whole run); the steps, each a row of the table printed last:

* A1: ``nvidia-smi -L`` through the node probe's own section and parser, torch allocating on
  every GPU (the envprobe ``devices`` section); H4: the slots check with slots = the GPU count
  (green) and one more (red).
* C1, world size 1: the real worker (``node/allreduce.py``) with NCCL on the GPU.
* C1, two ranks on the one GPU that NCCL takes for two hosts (``NCCL_HOSTID`` differs per rank,
  so NCCL cannot use P2P/SHM and takes the network path, ``NCCL_SOCKET_IFNAME=lo``), with
  ``NCCL_DEBUG=INFO``: correctness (#wrong = 0 with the verifiable pattern), busbw = algbw *
  2(n-1)/n and algbw = bytes / time checked row by row (nccl-tests' PERFORMANCE.md), CUDA-event
  timing (the worker's ``timed`` line), the transport NCCL reports (``via NET/Socket/0``...).
* bare: the same two ranks, sizes and iterations as a bare ``torch.distributed`` loop timed
  with CUDA events (MAX over ranks, like the worker): the harness / bare time ratio per size.
* T1: the training smoke job through the real ``deepspeed`` launcher on the GPU (bf16, DeepSpeed's
  fused Adam built on first use), if deepspeed is importable; else the row says why.

Exit status: 0 when every row is ok or skipped, 1 when one failed, 0 with a ``no GPU`` line
when there is no GPU. ``--budget`` bounds the run: a step that would not fit is skipped, saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from cluster_tests.judge.collective import collopts as copts  # noqa: E402
from cluster_tests.judge.collective import collverdict as C  # noqa: E402
from cluster_tests.judge.collective import rankplan as rk  # noqa: E402
from cluster_tests.report import colltable  # noqa: E402
from fixtures import localcollective as LC  # noqa: E402

DEFAULT_SIZES = "1M,16M,256M,1G"
MAX_BUDGET_S = 450  # + the wrapper's 30 s: 8 minutes


@dataclass
class Row:
    check: str
    verdict: str  # ok | FAIL | skip
    detail: str


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="what one NVIDIA GPU proves about the NCCL path")
    p.add_argument("--budget", type=float, default=420.0,
                   help=f"seconds for the whole run (at most {MAX_BUDGET_S})")
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="all-reduce sizes (K/M/G = 2^10..)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--skip-train", action="store_true", help="leave T1 out")
    p.add_argument("--out", default="", help="directory for logs and results.json")
    p.add_argument("--rehearse-on-cpu", action="store_true",
                   help="no GPU needed: the same steps on gloo/CPU (to test this script)")
    args = p.parse_args(argv)
    if not 0 < args.budget <= MAX_BUDGET_S:
        p.error(f"--budget must be in (0, {MAX_BUDGET_S}] seconds")
    try:
        args.size_list = copts.parse_sizes(args.sizes)
    except ValueError as exc:
        p.error(f"--sizes: {exc}")
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    return args


def gpu_present(run=subprocess.run, which=shutil.which) -> tuple[bool, str]:
    """(True, listing) when ``nvidia-smi -L`` lists at least one GPU, else (False, why)."""
    if not which("nvidia-smi"):
        return False, "nvidia-smi is not on PATH"
    try:
        res = run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"nvidia-smi -L failed: {exc}"
    gpus = [ln for ln in res.stdout.splitlines() if ln.startswith("GPU ")]
    if res.returncode != 0 or not gpus:
        return False, (f"nvidia-smi -L: exit {res.returncode}: "
                       f"{(res.stderr or res.stdout).strip()[:200]}")
    return True, "; ".join(gpus)


def format_table(rows: list[Row]) -> str:
    width = max([len(r.check) for r in rows] + [5])
    lines = [f"{'check':<{width}}  {'verdict':<7}  detail", f"{'-' * width}  {'-' * 7}  {'-' * 6}"]
    lines += [f"{r.check:<{width}}  {r.verdict:<7}  {r.detail}" for r in rows]
    return "\n".join(lines)


# --- A1 / H4 -----------------------------------------------------------------------------------


def _script_module(name: str):
    import importlib.util

    path = REPO / "cluster_tests" / "node" / name
    spec = importlib.util.spec_from_file_location(f"gpu_check_{name[:-3]}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_a1_h4() -> list[Row]:
    from cluster_tests.judge.accelerator import inventory

    inv = inventory.Inventory.read(_script_module("probe.py").section_accelerators({}))
    rows = []
    dev = inventory.DeviceFacts.read(_script_module("envprobe.py").section_devices({"npu": False}))
    ok_devices = [d for d in dev.devices if d.ok]
    problems = [f.describe() for f in inv.failures] + ([dev.error] if dev.error else [])
    if inv.kind != "nvidia":
        problems.append(f"A1 saw {inv.describe()}")
    if dev.count < inv.count:
        problems.append(f"torch sees {dev.count} of {inv.count} GPUs")
    if len(ok_devices) < dev.count:
        problems.append(f"allocation failed on {dev.count - len(ok_devices)} device(s)")
    rows.append(Row("A1 nvidia-smi + torch", "FAIL" if problems else "ok",
                    "; ".join(problems) or f"{inv.describe()} ({', '.join(inv.names)}); torch "
                    f"{dev.torch} allocates on {len(ok_devices)}"))
    # H4 (test_slots_fit_accelerators) compares the hostfile's slots with A1's count: that
    # count must be what torch (and so DeepSpeed's launch) can use
    same = inv.count >= 1 and inv.count == dev.count
    rows.append(Row("H4 slots vs GPUs", "ok" if same else "FAIL",
                    f"A1 counts {inv.count}, torch {dev.count}: slots<={inv.count} "
                    f"green, slots={inv.count + 1} red"))
    return rows


# --- running the worker's ranks on this machine ---------------------------------------------


def run_ranks(world: int, sizes: list[int], per_rank_env: list[dict[str, str]],
              options: rk.WorkerOptions, out: Path, label: str,
              timeout: float) -> tuple[C.CollectiveReport, list[str]]:
    """The real worker, ``world`` ranks, every one on local rank 0 (the one GPU), each with its
    own environment on top of this one; returns the report and each rank's stderr."""
    import queue

    ranks = [rk.Rank(r, f"rank{r}", 0) for r in range(world)]
    port = LC.free_port()
    procs, logs = [], []
    inbox: queue.Queue = queue.Queue()
    events: dict[int, list[dict]] = {r: [] for r in range(world)}
    for r in ranks:
        argv = rk.worker_argv(sys.executable, LC.WORKER_SCRIPT, r, world, "127.0.0.1", port,
                             options)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **per_rank_env[r.rank]}
        log = open(out / f"{label}-rank{r.rank}.stderr", "w+b")  # noqa: SIM115 - closed below
        logs.append(log)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, env=env,
                                start_new_session=True)
        procs.append(proc)
        threading.Thread(target=LC.pump, args=(r.rank, proc.stdout, inbox, []), daemon=True).start()
    deadline = time.monotonic() + timeout
    open_streams = world
    try:
        while open_streams and time.monotonic() < deadline:
            try:
                rank, event = inbox.get(timeout=0.5)
            except queue.Empty:
                continue
            if event is None:
                open_streams -= 1
            else:
                events[rank].append(event)
    finally:
        for proc in procs:
            LC.kill_group(proc)
    texts = []
    for log in logs:
        log.seek(0)
        texts.append(log.read().decode(errors="replace"))
        log.close()
    report = C.collect(events, ranks, {r: p.returncode for r, p in enumerate(procs)})
    return report, texts


def formula_problems(report: C.CollectiveReport) -> list[str]:
    """Rows whose figures are not nccl-tests' formulas, or that counted wrong elements."""
    out = []
    factor = C.allreduce_busbw_factor(report.world_size)
    for row in report.rows:
        algbw = row.size_bytes / (row.time_us * 1e-6) / 1e9 if row.time_us > 0 else 0.0
        if abs(row.algbw_GBps - algbw) > 1e-9 * max(1.0, algbw):
            out.append(f"{row.size_bytes} B: algbw {row.algbw_GBps} != bytes/time {algbw}")
        if abs(row.busbw_GBps - row.algbw_GBps * factor) > 1e-9 * max(1.0, row.busbw_GBps):
            out.append(f"{row.size_bytes} B: busbw != algbw*2(n-1)/n")
        if row.wrong:
            out.append(f"{row.size_bytes} B: {row.wrong} wrong elements")
        if row.nranks_reported != report.world_size:
            out.append(f"{row.size_bytes} B: {row.nranks_reported} of {report.world_size} ranks")
    return out


_VIA = re.compile(r"\bvia ((?:NET|P2P|SHM)(?:/[A-Za-z0-9_]+)*|direct shared memory|direct pointer)")


def transports(log_text: str) -> list[str]:
    """The transports NCCL's INFO log says its channels use (``NET/Socket/0``, ``P2P/IPC``...),
    most used first."""
    counts: dict[str, int] = {}
    for m in _VIA.finditer(log_text):
        counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return sorted(counts, key=lambda k: -counts[k])


def _summary(report: C.CollectiveReport) -> str:
    if not report.rows:
        return report.message[:200]
    top = report.rows[-1]
    return (f"{len(report.rows)} sizes, #wrong {sum(r.wrong for r in report.rows)}; "
            f"{copts.format_size(top.size_bytes)}B: {top.time_us:.1f} us, "
            f"algbw {top.algbw_GBps:.2f}, busbw {top.busbw_GBps:.2f} GB/s")


# --- the bare loop -------------------------------------------------------------------------

BARE = r"""
import json, os, sys, time, torch, torch.distributed as dist
sizes, warmup, iters = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
gpu = sys.argv[4] == "nccl"
dev = "cuda:0" if gpu else "cpu"
if gpu:
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", device_id=torch.device(dev))
else:
    dist.init_process_group("gloo")
out = {}
for size in sizes:
    buf = torch.zeros(max(1, size // 4), device=dev)
    for _ in range(warmup + 2):
        dist.all_reduce(buf)
    if gpu:
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
    else:
        t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    if gpu:
        b.record()
        b.synchronize()
        seconds = a.elapsed_time(b) / 1e3 / iters
    else:
        seconds = (time.perf_counter() - t0) / iters
    t = torch.tensor([seconds], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out[size] = t.item() * 1e6
    del buf
if dist.get_rank() == 0:
    print("BARE " + json.dumps(out), flush=True)
dist.destroy_process_group()
"""


def run_bare(sizes: list[int], per_rank_env: list[dict[str, str]], warmup: int, iters: int,
             timeout: float, backend: str = "nccl") -> dict[int, float]:
    port = LC.free_port()
    procs = []
    for r, extra in enumerate(per_rank_env):
        env = {**os.environ, **extra, "RANK": str(r), "WORLD_SIZE": str(len(per_rank_env)),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "LOCAL_RANK": "0"}
        env.pop("NCCL_DEBUG", None)
        procs.append(subprocess.Popen([sys.executable, "-c", BARE, json.dumps(sizes), str(warmup),
                                       str(iters), backend], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, env=env, text=True,
                                      start_new_session=True))
    try:
        out, _ = procs[0].communicate(timeout=timeout)
    finally:
        for proc in procs:
            LC.kill_group(proc)  # type: ignore[arg-type]
    for line in out.splitlines():
        if line.startswith("BARE "):
            return {int(k): float(v) for k, v in json.loads(line[5:]).items()}
    return {}


def ratio_detail(report: C.CollectiveReport, bare: dict[int, float]) -> tuple[str, str]:
    pairs = [(row.size_bytes, row.time_us / bare[row.size_bytes]) for row in report.rows
             if bare.get(row.size_bytes)]
    if not pairs:
        return "FAIL", "no bare-loop figure"
    text = ", ".join(f"{copts.format_size(s)}B x{r:.2f}" for s, r in pairs)
    # the harness times the same calls the same way: far from 1 at the top size means a bug
    return ("ok" if 0.8 <= pairs[-1][1] <= 1.25 else "FAIL"), f"harness/bare time {text}"


# --- T1 ---------------------------------------------------------------------------------------


def check_t1(deadline_s: float, out: Path) -> Row:
    try:
        import deepspeed  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return Row("T1 deepspeed on the GPU", "skip",
                   f"deepspeed not importable ({type(exc).__name__}: {exc}); carry it: "
                   f"bench/gpu_check.sh --wheels DIR (see bench/README.md)")
    from cluster_tests.judge.training import traindiag as tdiag
    from cluster_tests.judge.training import trainresult as tres
    from fixtures import localtrain as local

    # `python -m deepspeed.launcher.runner`: the carried wheels are on PYTHONPATH, not PATH
    result, text = local.run_local_single_node(1, steps=20, deadline=deadline_s,
                                               env={"NCCL_SOCKET_IFNAME": "lo"},
                                               deepspeed=sys.executable,
                                               launch_grace=min(60.0, deadline_s / 2))
    (out / "T1.log").write_text(text)
    rank0 = result.ranks.get(0)
    start = rank0.start if rank0 is not None else tres.RankStart()
    on = (f"accelerator {start.accelerator}, {start.precision}, "
          f"{start.optimizer}, bound device {start.bound_device}")
    if result.ok and start.accelerator == "cuda":
        r0 = result.ranks[0]
        return Row("T1 deepspeed on the GPU", "ok",
                   f"{on}; loss {r0.first_loss:.3g} -> {r0.last_loss:.3g}, "
                   f"{result.launch.elapsed_s:.0f} s" if result.launch else on)
    causes = [str(d) for d in tdiag.diagnose(text, 1)][:2] or result.problems()[:2]
    return Row("T1 deepspeed on the GPU", "FAIL", f"{on}; " + " | ".join(causes)[:300])


# --- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.monotonic()
    left = lambda: args.budget - (time.monotonic() - start)  # noqa: E731
    backend = "gloo" if args.rehearse_on_cpu else "nccl"
    present, why = (True, "rehearsal on CPU (gloo)") if args.rehearse_on_cpu else gpu_present()
    if not present:
        print(f"gpu_check: no GPU ({why}): skipped")
        return 0
    out = Path(args.out or tempfile.mkdtemp(prefix="gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"gpu_check: {why}; logs in {out}", flush=True)
    rows: list[Row] = []
    try:
        rows += check_a1_h4() if not args.rehearse_on_cpu else [
            Row("A1/H4", "skip", "rehearsal on CPU")]
    except Exception as exc:  # noqa: BLE001 - a row, not a crash
        rows.append(Row("A1/H4", "FAIL", f"{type(exc).__name__}: {exc}"))
    opts = rk.WorkerOptions(sizes=args.size_list, backend=backend, warmup=args.warmup,
                           iters=args.iters, connect_timeout=30, init_timeout=60,
                           op_timeout=min(180.0, max(30.0, left() / 3)), size_seconds=20)
    base = {"NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}
    one, _ = run_ranks(1, args.size_list, [base], opts, out, "c1-world1", 240)
    bad = formula_problems(one) if one.ok else [one.message[:200]]
    rows.append(Row(f"C1 {backend}, 1 rank", "ok" if not bad else "FAIL",
                    "; ".join(bad) or f"{_summary(one)} (busbw 0 for 1 rank, as nccl-tests)"))
    two_env = [{**base, "NCCL_HOSTID": f"ct-gpu-check-host{r}", "NCCL_DEBUG": "INFO"}
               for r in range(2)]
    two = C.CollectiveReport(2, [])
    if left() > 60:
        two, logs = run_ranks(2, args.size_list, two_env, opts, out, "c1-2hosts",
                              min(300.0, left() - 30))
        bad = formula_problems(two) if two.ok else [two.message[:200]]
        rows.append(Row(f"C1 {backend}, 2 ranks as 2 hosts", "ok" if not bad else "FAIL",
                        "; ".join(bad) or f"{_summary(two)}; "
                        + ("CUDA-event timing" if backend == "nccl" else "perf_counter timing")
                        + ", MAX over ranks"))
        via = transports("\n".join(logs))
        net = any(v.startswith("NET/") for v in via)
        if args.rehearse_on_cpu:
            rows.append(Row("C1 transport (NCCL_DEBUG=INFO)", "skip", "gloo: no NCCL log"))
        else:
            rows.append(Row("C1 transport (NCCL_DEBUG=INFO)", "ok" if net else "FAIL",
                            ("via " + ", ".join(via)) if via else "no 'via' line in the INFO log"))
        table = colltable.table(colltable.AllReduceResult.of(two))
        (out / "c1-2hosts.txt").write_text(table + "\n")
    else:
        rows.append(Row(f"C1 {backend}, 2 ranks as 2 hosts", "skip", f"{left():.0f} s left"))
    if two.ok and left() > 60:
        bare = run_bare(args.size_list, two_env, args.warmup, args.iters, min(200.0, left() - 30),
                        backend)
        verdict, detail = ratio_detail(two, bare)
        if args.rehearse_on_cpu and bare:  # gloo on shared CPUs: a figure, not a verdict
            verdict = "ok"
        rows.append(Row("harness vs bare loop", verdict, detail))
    else:
        rows.append(Row("harness vs bare loop", "skip", "needs the 2-rank run and 60 s"))
    if args.skip_train or args.rehearse_on_cpu:
        rows.append(Row("T1 deepspeed on the GPU", "skip", "--skip-train"))
    elif left() > 90:
        rows.append(check_t1(min(240.0, left() - 40), out))
    else:
        rows.append(Row("T1 deepspeed on the GPU", "skip", f"{left():.0f} s left"))
    (out / "results.json").write_text(json.dumps([r.__dict__ for r in rows], indent=2) + "\n")
    if two.rows:
        print(colltable.table(colltable.AllReduceResult.of(two)))
    print()
    print(format_table(rows))
    return 1 if any(r.verdict == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
