"""NCCL_DEBUG=INFO logs (judge/collective/nccllog.py) on REAL captured tool outputs
(tests/data/samples, sources in SOURCES.md), and C1's wiring of them: the workers' `transport`
events, the table lines, the socket-fallback verdict. (Section R's own parsers and verdicts:
test_judge_rdma.py, test_judge_gpuhealth.py, test_judge_dcgm.py.)"""

from __future__ import annotations

from pathlib import Path

from paths import SAMPLES, load_script

from cluster_tests.judge.collective import nccllog


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


# -- NCCL_DEBUG=INFO -----------------------------------------------------------------------------

def test_nccl_log_socket_fallback():
    t = nccllog.parse(sample("nccl-debug-socket-fallback-gke-h100-2node-rank0.txt"))
    assert t.network == "Socket" and t.on_sockets
    assert t.net_transports == {"NET/Socket"} and t.intra == {"P2P/CUMEM"}
    assert t.net_devices == ["eth0:10.128.0.52<0>"]
    assert t.host.startswith("gke-hypercomputer-a3") and t.version == "2.22.3+cuda12.6"
    assert nccllog.socket_fallback_reason(t) == "NET/IB : No device found."


def test_nccl_log_roce_with_p2p_and_shm():
    t = nccllog.parse(sample("nccl-debug-roce-net-ib-p2p-ipc-shm-nccl2.5.7.txt"))
    assert not t.on_sockets
    assert t.net_devices == ["mlx5_0:1/RoCE"] and t.net_transports == {"NET/IB"}
    assert t.intra == {"P2P/IPC", "direct shared memory"}
    assert t.describe() == "net NET/IB; intra-node P2P/IPC, direct shared memory"


def test_nccl_log_ib_multi_hca_with_warn():
    t = nccllog.parse(sample("nccl-debug-ib-multi-hca-ibv-modify-qp-failed-nccl2.6.2.txt"))
    assert t.network == "IB" and not t.on_sockets
    assert t.net_devices == ["mlx5_3:1/IB", "mlx5_0:1/IB", "mlx5_2:1/RoCE", "mlx5_4:1/IB"]
    assert t.reasons == ["Call to ibv_modify_qp failed with error Invalid argument"]
    assert t.describe().startswith("net IB (mlx5_3:1/IB mlx5_0:1/IB")


def test_nccl_log_roce_2_7_8_and_shm_direct():
    t = nccllog.parse(sample("nccl-debug-roce-ibv-create-cq-failed-nccl2.7.8.txt"))
    assert (t.network == "IB" and t.net_devices == ["mlx5_1:1/RoCE"]
            and t.version == "2.7.8+cuda11.0")
    shm = nccllog.parse(sample("nccl-debug-shm-direct-8gpu-l20.txt"))
    assert shm.intra == {"SHM/direct/direct"} and shm.network == "" and not shm.on_sockets


# -- C1 wiring: the workers' `transport` events, the table lines, the socket-fallback verdict ------

def _worker_module():
    from fixtures import localcollective as LC

    return load_script(LC.WORKER_SCRIPT, "ct_allreduce_worker")


def test_worker_routes_nccl_debug_to_a_file_and_sends_the_transport_lines(monkeypatch, capsys,
                                                                          tmp_path):
    import json

    worker = _worker_module()
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    monkeypatch.delenv("NCCL_DEBUG_FILE", raising=False)
    assert worker._nccl_debug_file("gloo") is None and "NCCL_DEBUG" not in __import__("os").environ
    path = worker._nccl_debug_file("nccl")
    import os
    assert os.environ["NCCL_DEBUG"] == "INFO" and os.environ["NCCL_DEBUG_FILE"] == path
    # what NCCL would have written there: a real INFO log
    Path(path).write_text(sample("nccl-debug-socket-fallback-gke-h100-2node-rank0.txt"))
    worker._emit_transport(path)
    event = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert event["event"] == "transport" and not Path(path).exists()
    assert any("Using network Socket" in ln for ln in event["lines"])
    assert not any("Setting affinity" in ln for ln in event["lines"])
    assert nccllog.parse(event["lines"]).on_sockets
