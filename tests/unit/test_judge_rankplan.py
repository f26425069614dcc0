"""C1-C3 rank layout and worker command (judge/collective/rankplan.py)."""

from __future__ import annotations

from cluster_tests.judge.collective import rankplan as rk


def test_ranks_are_assigned_node_by_node() -> None:
    ranks = rk.assign_ranks({"node1": 2, "node2": 0, "node3": 3})
    assert [(r.rank, r.host, r.local_rank) for r in ranks] == [
        (0, "node1", 0), (1, "node1", 1), (2, "node3", 0), (3, "node3", 1), (4, "node3", 2)]
    assert rk.describe_ranks([4, 2, 3], ranks) == "ranks 2-4 (node3 local 0-2)"
    assert rk.describe_ranks([1, 2], ranks) == "ranks 1-2 (node1 local 1; node3 local 0)"


def test_worker_argv() -> None:
    opts = rk.WorkerOptions(sizes=[8, 1024], backend="nccl", connect_timeout=20)
    argv = rk.worker_argv("python3", "/tmp/allreduce.py", rk.Rank(5, "node2", 1), 8,
                         "node1", 29500, opts)
    assert argv[:2] == ["python3", "/tmp/allreduce.py"]
    flags = dict(zip(argv[2::2], argv[3::2], strict=False))
    assert flags == {
        "--rank": "5", "--world-size": "8", "--local-rank": "1", "--label": "node2",
        "--master-addr": "node1", "--master-port": "29500", "--backend": "nccl",
        "--dtype": "float32", "--sizes": "8,1024", "--warmup": "5", "--iters": "20",
        "--connect-timeout": "20", "--init-timeout": "60", "--op-timeout": "300",
            "--size-seconds": "10"}
