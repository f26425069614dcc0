#!/usr/bin/env python3
"""What does the C1 harness cost? Harness vs a bare torch.distributed loop vs iperf3, on the sim.

Not a test: a measurement to quote. On a simulated 3-node cluster (fixtures/sim/, one rank per
node, gloo over the sim's bridge) it alternates, ``--repeat`` times:

* the harness: ``pytest -m collective -k test_allreduce`` over SSH, results read back from
  ``--busbw-record`` (supervisor per node, watchdog thread, JSON events, correctness pass);
* a bare loop: the same sizes, warmup, iterations and backend, started directly in each node's
  namespaces with ``init_process_group(init_method="env://")``, timed the same way (avg per op
  of ``iters`` back-to-back in-place all_reduce calls, MAX over ranks);

and prints the median busbw of each per size and their ratio (target: harness >= 0.95 x bare).
Then iperf3 between the same namespaces (server on node1, client on node2, both directions)
gives the link's raw TCP figure. Units: GB/s, 1 GB = 1e9 B.

    .venv/bin/python bench/allreduce_overhead.py [--sizes 1M,4M] [--iters 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from cluster_tests.judge.collective import collopts as copts  # noqa: E402  (after the sys.path set-up)
from fixtures.sim import SimCluster  # noqa: E402

BARE = r"""
import json, os, sys, time, torch, torch.distributed as dist
sizes, warmup, iters = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo", init_method="env://")
world, rank = dist.get_world_size(), dist.get_rank()
out = []
for size in sizes:
    buf = torch.zeros(size // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(buf)
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    t = torch.tensor([(time.perf_counter() - t0) / iters])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    algbw = size / t.item() / 1e9
    out.append({"size_bytes": size, "time_us": t.item() * 1e6, "algbw_GBps": algbw,
                "busbw_GBps": algbw * 2 * (world - 1) / world})
dist.barrier()
dist.destroy_process_group()
if rank == 0:
    print("BARE_JSON:" + json.dumps(out), flush=True)
"""


def harness(sim: SimCluster, sizes: str, warmup: int, iters: int, port: int) -> dict[int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "record.json"
        argv = [sys.executable, "-m", "pytest", "--hostfile", str(sim.hostfile),
                "--ssh-config", str(sim.ssh_config), "-p", "no:cacheprovider", "-q",
                f"--junitxml={Path(tmp) / 'j.xml'}", "-m", "collective",
                "-k", "test_allreduce and not pair", "--backend", "gloo", "--sizes", sizes,
                "--warmup", str(warmup), "--iters", str(iters), "--master-port", str(port),
                "--busbw-record", str(record)]
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600,
                              check=False)
        if not record.exists():
            raise SystemExit(f"harness run failed:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
        return {r["size_bytes"]: r["busbw_GBps"] for r in json.loads(record.read_text())["rows"]}


def bare(sim: SimCluster, sizes: list[int], warmup: int, iters: int, port: int) -> dict[int, float]:
    names = [n.name for n in sim.nodes]
    master = sim.node(names[0]).address
    procs = []
    for rank, name in enumerate(names):
        env = {"MASTER_ADDR": master, "MASTER_PORT": str(port), "RANK": str(rank),
               "WORLD_SIZE": str(len(names))}
        procs.append(sim.popen(name, [sys.executable, "-c", BARE, json.dumps(sizes), str(warmup),
                                      str(iters)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=600) for p in procs]
    for out, _err in outs:
        for line in out.splitlines():
            if line.startswith("BARE_JSON:"):
                return {r["size_bytes"]: r["busbw_GBps"] for r in json.loads(line[10:])}
    raise SystemExit("bare run failed:\n" + "\n".join(err[-2000:] for _, err in outs))


def iperf3(sim: SimCluster, server: str, client: str, seconds: int = 3) -> dict[str, float]:
    """GB/s (1e9 B/s) received, client->server and server->client (-R)."""
    figures = {}
    for label, extra in (("->", []), ("<-", ["-R"])):
        srv = sim.popen(server, ["iperf3", "-s", "-1", "-p", "5299"], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            res = sim.exec(client, ["iperf3", "-c", sim.node(server).address, "-p", "5299",
                                    "-t", str(seconds), "-J", *extra], timeout=seconds + 30)
            data = json.loads(res.stdout)
            bps = data["end"]["sum_received"]["bits_per_second"]
            figures[f"{client}{label}{server}"] = bps / 8 / 1e9
        finally:
            srv.kill()
            srv.wait()
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1M,4M")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=3)
    args = ap.parse_args()
    sizes = copts.parse_sizes(args.sizes)
    runs: dict[str, dict[int, list[float]]] = {"harness": {}, "bare": {}}
    with tempfile.TemporaryDirectory(prefix="ct-bench-") as state, \
            SimCluster(Path(state) / "sim", nodes=args.nodes, slots=1) as sim:
        for i in range(args.repeat):
            port = 29600 + 2 * i
            for name, result in (("harness",
                                  harness(sim, args.sizes, args.warmup, args.iters, port)),
                                 ("bare", bare(sim, sizes, args.warmup, args.iters, port + 1))):
                for size, bw in result.items():
                    runs[name].setdefault(size, []).append(bw)
        link = iperf3(sim, "node1", "node2")
    print(f"# all-reduce, gloo, {args.nodes} nodes x 1 rank, warmup {args.warmup}, iters "
          f"{args.iters}, median of {args.repeat} alternating runs; busbw in GB/s (1e9 B/s)")
    print(f"# {'size(B)':>10} {'harness':>10} {'bare':>10} {'harness/bare':>13}")
    for size in sizes:
        h, b = statistics.median(runs["harness"][size]), statistics.median(runs["bare"][size])
        print(f"  {size:>10} {h:10.3f} {b:10.3f} {h / b:13.3f}")
    for name, per_size in runs.items():
        for size, values in per_size.items():
            print(f"# {name:>7} {size:>10}: " + " ".join(f"{v:.3f}" for v in values))
    print("# iperf3 (TCP, 3 s, one stream) between the same namespaces, GB/s:")
    for where, bw in link.items():
        print(f"  {where}: {bw:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
