"""judge/collective/colltable.py: C1's table, nccl-tests' layout, with the transport NCCL chose
on each node under it (real NCCL_DEBUG=INFO captures, tests/data/samples)."""

from __future__ import annotations

from typing import Any

from test_judge_nccllog import sample

from cluster_tests.judge.collective import nccllog


def _report(lines_by_host):
    from cluster_tests.judge.collective import collverdict as C
    from cluster_tests.judge.collective import rankplan as rk

    ranks = rk.assign_ranks({h: 1 for h in lines_by_host})
    events: dict[int, list[dict[str, Any]]] = {r.rank: [{"event": "start", "backend": "nccl"},
                                                        {"event": "joined"},
                       {"event": "transport", "lines": lines_by_host[r.host].splitlines()},
                       {"event": "init_ok"}, {"event": "done", "ok": True}] for r in ranks}
    return C, C.collect(events, ranks, {r.rank: 0 for r in ranks})


def test_c1_table_names_each_nodes_transport_and_the_fallback():
    C, report = _report({"node1": sample("nccl-debug-roce-net-ib-p2p-ipc-shm-nccl2.5.7.txt"),
                         "node2": sample("nccl-debug-socket-fallback-gke-h100-2node-rank0.txt")})
    from cluster_tests.judge.collective import colltable as ctab

    table = ctab.format_table(report)
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
