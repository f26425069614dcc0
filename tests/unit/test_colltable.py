"""report/colltable.py: C1's and C2's tables from the typed records the collective checks put on
their tests (one renderer each, the same in one process and under pytest-xdist), the records
read back whole from their JSON, and C1's table with the transport NCCL chose on each node
under it (real NCCL_DEBUG=INFO captures, tests/data/samples)."""

from __future__ import annotations

from typing import Any

from test_judge_nccllog import sample

from cluster_tests.judge.collective import collverdict as C
from cluster_tests.judge.collective import confirmation, nccllog
from cluster_tests.judge.collective import pairbw as pb
from cluster_tests.judge.collective import rankplan as rk
from cluster_tests.report import colltable
from cluster_tests.report.colltable import AllReduceResult, PairResult

THREE = ["node1", "node2", "node3"]


def _report(lines_by_host):
    ranks = rk.assign_ranks({h: 1 for h in lines_by_host})
    events: dict[int, list[dict[str, Any]]] = {r.rank: [{"event": "start", "backend": "nccl"},
                                                        {"event": "joined"},
                       {"event": "transport", "lines": lines_by_host[r.host].splitlines()},
                       {"event": "init_ok"}, {"event": "done", "ok": True}] for r in ranks}
    return C.collect(events, ranks, {r.rank: 0 for r in ranks})


def test_c1_table_names_each_nodes_transport_and_the_fallback():
    report = _report({"node1": sample("nccl-debug-roce-net-ib-p2p-ipc-shm-nccl2.5.7.txt"),
                      "node2": sample("nccl-debug-socket-fallback-gke-h100-2node-rank0.txt")})
    table = colltable.table(AllReduceResult.of(report))
    assert "# transport node1: net NET/IB; intra-node P2P/IPC, direct shared memory" in table
    assert "# transport node2: net Socket; intra-node P2P/CUMEM" in table
    nodes = nccllog.by_node(report.transport_lines, report.ranks)
    # node2 has active RDMA ports (as section R read them): red, with NCCL's own reason
    assert nccllog.socket_fallbacks(nodes, {"node2": "mlx5_0:1"}) == {
        "node2": "node2: NCCL used sockets (NET/Socket) although the node has active RDMA ports "
        "(mlx5_0:1); NCCL said: NET/IB : No device found."}
    # a node without RDMA devices may use sockets; IB nodes are never a fallback
    assert nccllog.socket_fallbacks(nodes, {"node1": "mlx5_0:1"}) == {}
    assert nccllog.socket_fallbacks(nodes, {}) == {}


def _sweep(hosts: list[str], times_us: dict[int, float], iters: int = 20,
           stopped: dict[str, Any] | None = None) -> C.CollectiveReport:
    """A gloo sweep's report from the worker's events: `times_us` per size, one rank per host."""
    ranks = rk.assign_ranks({h: 1 for h in hosts})
    rows = [{"event": "result", "size_bytes": size, "count": size // 4, "dtype": "float32",
             "time_us": t, "wrong": 0, "iters": iters if size < max(times_us) else iters - 8}
            for size, t in times_us.items()]
    start = {"event": "start", "backend": "gloo", "iters": iters,
             "timed": "avg time per op of 20 back-to-back in-place all_reduce calls",
             "versions": {"torch": "2.13.0+cpu", "python": "3.11.7"}}
    tail = [{"event": "stopped", **stopped}] if stopped else []
    return C.collect({r.rank: [start, {"event": "joined"}, {"event": "init_ok"}, *rows, *tail,
                               {"event": "done", "ok": True}] for r in ranks}, ranks,
                     {r.rank: 0 for r in ranks})


def _run(report: C.CollectiveReport, nodes: list[str]) -> C.RemoteRun:
    return C.RemoteRun(report=report, nodes=nodes, master=nodes[0], master_addr="10.0.0.1",
                       port=29500, options=rk.WorkerOptions())


def test_c1_record_reads_back_whole_and_its_table_is_nccl_tests():
    report = _sweep(THREE, {1024: 3948.5012, 1048576: 5548.149, 16777216: 187740.0})
    run = _run(report, THREE)
    result = AllReduceResult.of_run(run)
    assert AllReduceResult.from_json(result.to_json()) == result
    assert AllReduceResult.from_json("not json") is None
    lines = colltable.tables(result, [])
    assert lines[0] == "C1: all-reduce over every rank (node1, node2, node3), master " + run.where
    table = lines[1].splitlines()
    assert table[0] == ('# all_reduce: 3 ranks, backend gloo, versions {"python": "3.11.7", '
                        '"torch": "2.13.0+cpu"}')
    assert table[5:8] == [
        "        1024          256  float32    sum    3948.50     0.00     0.00       0",
        "     1048576       262144  float32    sum    5548.15     0.19     0.25       0",
        "    16777216      4194304  float32    sum  187740.00     0.09     0.12       0"]
    assert table[8] == "# Avg bus bandwidth    : 0.124 GB/s"
    assert table[9].startswith("# slow link: fewer timed calls at 16MB (12) to stay within")
    assert table[-1].startswith("# verdict: ok: all-reduce over 3 ranks (gloo)")
    # what summary.json, the HTML plot, the history and the metrics read: rounded as JUnit's
    assert colltable.sizes(result)[1] == {"size_bytes": 1048576, "time_us": 5548.149,
                                          "algbw_GBps": round(1048576 / 5548.149e-6 / 1e9, 6),
                                          "busbw_GBps": round(1048576 / 5548.149e-6 / 1e9 * 4 / 3,
                                                              6)}


def _pairs(times_us: dict[tuple[str, str], float], error: tuple[str, str] | None = None,
           retry_bw: float = 0.01) -> list[PairResult]:
    """C2's records as the pair tests write them: a run per pair (or `error`'s, not run), the
    slow pairs, and the confirmation pass (its retries measure `retry_bw`)."""
    runs: dict[tuple[str, str], C.RemoteRun | BaseException] = {
        p: _run(_sweep(list(p), {16777216: t}), list(p)) for p, t in times_us.items()}
    if error is not None:
        runs[error] = RuntimeError(f"{error[1]} unreachable: see test_login[{error[1]}]")
    measured = {p: r.report.rows[-1].busbw_GBps for p, r in runs.items()
                if isinstance(r, C.RemoteRun)}
    slow = pb.flag_slow_pairs(measured, ratio=0.5, reference="upper_median")
    bad = [p for p, _ in slow.slow]
    plan = confirmation.plan(bad, {p: bw for p, bw in measured.items() if p not in bad}, THREE)
    retries = {p: confirmation.retry_from(p, True, retry_bw, None, None, slow.threshold_GBps)
               for p in plan.pairs}
    confirmed = confirmation.judge(plan, retries, bad, THREE)
    return [PairResult.from_json(PairResult.of(p, runs[p], slow, confirmed).to_json()) or
            PairResult(p, None, "unread") for p in runs]


def test_c2_table_marks_the_slow_pairs_and_lists_every_retry():
    pairs = _pairs({("node1", "node2"): 1_000_000.0, ("node2", "node3"): 1_000_000.0,
                    ("node1", "node3"): 23181.07})
    text = "\n".join(colltable.pairs_table(pairs))
    assert "               node1<->node2     16777216 1000000.00     0.02     0.02       0  SLOW" \
        in text
    assert text.splitlines()[4].endswith("0  ok")  # node1<->node3, sorted
    assert "# slow = busbw below 0.185 GB/s (0.5 x the upper median 0.370 GB/s); suspect " \
           "node: node2" in text
    assert "# C2 confirmation: measured again before blaming (slow = below 0.185 GB/s, as " \
           "above)" in text
    assert "node1<->node2  retry: 0.010 GB/s  SLOW  -> SLOW (suspect confirmed)" in text
    assert "# suspect node: node2 (confirmed: measured again, node2 is slow with" in text
    # each record carries what C2 judged of its pairs together: any one renders the table
    assert len({p.judged for p in pairs}) == 1


def test_c2_table_without_slow_pairs_and_with_a_pair_not_run():
    pairs = _pairs({("node1", "node2"): 23181.07, ("node1", "node3"): 30406.76},
                   error=("node2", "node3"))
    lines = colltable.pairs_table(pairs)
    assert lines[-2:] == [
        "               node2<->node3            -          -        -        -       -  "
        "error: node3 unreachable: see test_login[node3]",
        "# slow = busbw below 0.362 GB/s (0.5 x the upper median 0.724 GB/s); suspect node: "
        "none"]
    assert not any("confirmation" in ln for ln in lines)
    assert colltable.pairs_table([]) == []
    # C1 and C2 together: a blank line between the tables
    c1 = AllReduceResult.of_run(_run(_sweep(THREE, {1024: 10.0}), THREE))
    assert colltable.tables(c1, pairs)[2] == ""
