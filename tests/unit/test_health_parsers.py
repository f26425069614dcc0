"""Section R's pure parsers and judgement (rdma.py, gpuhealth.py, nccllog.py) on REAL captured
tool outputs (tests/data/samples, sources in SOURCES.md), and the node-side probe's sysfs reader
on the real /sys/class/infiniband fixture tree of prometheus/procfs."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import ttar
from paths import PACKAGE, SAMPLES, load_script

from cluster_tests import node
from cluster_tests.judge.collective import nccllog
from cluster_tests.judge.health import gpuhealth, rdma

PROBE = PACKAGE / "node" / "healthprobe.py"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def _probe_module():
    """healthprobe.py as it runs on a node: the prelude followed by the script."""
    mod = ModuleType("healthprobe")
    exec(compile(node.source("healthprobe.py"), str(PROBE), "exec"), mod.__dict__)
    return mod


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """The real fixture tree, unpacked as a sysfs root (root/class/infiniband/...)."""
    ttar.unpack(sample("sysfs-class-infiniband-procfs-fixture.ttar.txt"), tmp_path, "fixtures/sys/")
    return tmp_path


# -- RDMA ports ------------------------------------------------------------------------------------

def test_sysfs_tree_read_by_the_probe(sysfs):
    tree = _probe_module()._ib_tree(str(sysfs))
    ports = {p.name: p for p in rdma.ports_from_sysfs(tree)}
    assert set(ports) == {"hfi1_0:1", "mlx4_0:1", "mlx4_0:2", "mlx5_0:1"}
    assert ports["mlx4_0:2"].state == "ACTIVE" and ports["mlx4_0:2"].phys_state == "LinkUp"
    assert ports["mlx4_0:2"].link_layer == "InfiniBand" and not ports["mlx4_0:2"].roce
    assert ports["hfi1_0:1"].rate_gbps == 100
    assert ports["mlx5_0:1"].rate_text == "25 Gb/sec (1X EDR)"
    # the fixture's one edited value ('4: ACTIVE' in phys_state) reads as the kernel's number 4
    assert ports["mlx5_0:1"].phys_state == "PortConfigurationTraining"
    assert all(p.up for p in ports.values())


def test_ibstat_h100_one_port_down():
    ports = {p.name: p for p in rdma.parse_ibstat(sample("ibstat-h100-12ca-one-down.txt"))}
    assert len(ports) == 12
    down = [p for p in ports.values() if not p.up]
    # SOURCES.md names mlx5_2; the capture has three Ethernet ports down
    assert [p.name for p in down] == ["mlx5_2:1", "mlx5_7:1", "mlx5_8:1"]
    assert all(p.roce for p in down)
    assert down[0].state == "DOWN" and down[0].phys_state == "Disabled" and down[0].rate_gbps == 40
    assert ports["mlx5_0:1"].rate_gbps == 400 and ports["mlx5_1:1"].roce


def test_ibstat_partial_output_keeps_what_was_printed():
    ports = rdma.parse_ibstat(sample("ibstat-a100-ibpanic-partial.txt"))
    assert len(ports) == 8 and all(p.up and p.rate_gbps == 200 for p in ports)


def test_ibv_devinfo_port2_down():
    ports = rdma.parse_ibv_devinfo(sample("ibv-devinfo-mlx4-2hca-port2-down.txt"))
    assert [(p.name, p.state) for p in ports] == [
        ("mlx4_1:1", "ACTIVE"), ("mlx4_1:2", "DOWN"), ("mlx4_0:1", "ACTIVE"), ("mlx4_0:2", "DOWN")]
    verbose = rdma.parse_ibv_devinfo(sample("ibv-devinfo-v-mlx4-port2-down-polling.txt"))
    assert [(p.name, p.state, p.phys_state) for p in verbose] == [("mlx4_1:2", "DOWN", "Polling")]


def test_port_down_where_the_peer_has_it_up():
    mine = rdma.parse_ibv_devinfo(sample("ibv-devinfo-mlx4-2hca-port2-down.txt"))
    peer = rdma.parse_ibstat(sample("ibstat-mlx4-2ca-4port-active.txt"))
    problems = rdma.compare_ports("node2", mine, {"node1": peer})
    assert len(problems) == 2
    assert problems[0].startswith("mlx4_1:2 (down") and "active on node1" in problems[0]
    # a port that NCCL_IB_HCA leaves out is none of the launch's business
    assert rdma.compare_ports("node2", mine, {"node1": peer},
                              rdma.parse_hca_spec("=mlx4_0:1,mlx4_1:1")) == []
    assert len(rdma.compare_ports("node2", mine, {"node1": peer},
                                  rdma.parse_hca_spec("mlx4_1"))) == 1
    # the other way round: node1's ports are all up, nothing to say
    assert rdma.compare_ports("node1", peer, {"node2": mine}) == []


def test_port_down_on_every_node_is_no_finding():
    h100 = rdma.parse_ibstat(sample("ibstat-h100-12ca-one-down.txt"))
    assert rdma.compare_ports("a", h100, {"b": h100, "c": h100}) == []


def test_rate_below_the_peers(sysfs):
    mine = rdma.ports_from_sysfs(_probe_module()._ib_tree(str(sysfs)))  # mlx4_0 at 40 Gb/s
    peer = rdma.parse_ibstat(sample("ibstat-mlx4-2ca-4port-active.txt"))  # mlx4_0 at 56
    problems = rdma.compare_ports("node3", mine, {"node1": peer})
    assert problems == [
        "mlx4_0:1 (active, physical LinkUp, 40 Gb/sec (4X QDR), InfiniBand) runs at 40 Gb/s, "
        "below the 56 Gb/s of the same port on node1",
        "mlx4_0:2 (active, physical LinkUp, 40 Gb/sec (4X QDR), InfiniBand) runs at 40 Gb/s, "
        "below the 56 Gb/s of the same port on node1"]


@pytest.mark.parametrize("value,chosen,problem", [
    ("mlx5", 9, None),  # every prefix match that is active
    ("=mlx5_0:1,mlx5_10:1", 2, None),
    ("^=mlx5_2", 9, None),
    ("^mlx5", 0, "selects no active port"),
    ("=mlx5_2:1", 0, "'mlx5_2:1' names only ports that are not active"),
    ("mlx5_0:2", 0, "'mlx5_0:2' names no RDMA port here"),
    ("=mlx5_1", 1, None),  # exact: mlx5_1 only, not mlx5_10/11
])
def test_nccl_ib_hca(value, chosen, problem):
    ports = rdma.parse_ibstat(sample("ibstat-h100-12ca-one-down.txt"))
    active, problems = rdma.judge_hca(rdma.parse_hca_spec(value), ports)
    assert len(active) == chosen
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


def test_show_gids_and_gid_index():
    gids = rdma.parse_show_gids(sample("show-gids-roce-v1-v2-pod-macvlan.txt"))
    assert gids[("mlx5_0", 1)][7] == ("0000:0000:0000:0000:0000:ffff:0a98:000c", "RoCE v2", "net1")
    assert gids[("mlx5_0", 1)][4][1] == "IB/RoCE v1"
    port = rdma.Port("mlx5_0", 1, "ACTIVE", "LinkUp", "Ethernet", gids=gids[("mlx5_0", 1)])
    types, problems = rdma.judge_gid_index(7, [port])
    assert types == {"mlx5_0:1": "RoCE v2"} and problems == []
    types, problems = rdma.judge_gid_index(3, [port])
    assert problems == ["mlx5_0:1: GID index 3 is not set (set indices: 4, 5, 6, 7)"]
    assert rdma.parse_show_gids(sample("show-gids-empty-in-pod.txt")) == {}


# -- limits and /dev/shm ---------------------------------------------------------------------------

def test_ulimit_samples_and_memlock():
    low = rdma.parse_ulimit_a(sample("ulimit-a-memlock-64k.txt"))
    assert low["-l"] == 64 and low["-n"] == 1024
    high = rdma.parse_ulimit_a(sample("ulimit-Ha-memlock-unlimited.txt"))
    assert high["-l"] == rdma.UNLIMITED and high["-n"] == 65536
    msg = rdma.judge_memlock(low["-l"], high["-l"], has_rdma=True)
    assert msg and "64 KB (hard unlimited)" in msg and "needs unlimited" in msg
    assert rdma.judge_memlock(low["-l"], low["-l"], has_rdma=False) is None
    assert rdma.judge_memlock(high["-l"], high["-l"], has_rdma=True) is None
    assert rdma.judge_memlock(8192, 8192, True, min_kb=4096) is None


def test_memlock_origin_names_the_line():
    lim = {"rc_ulimit_lines": [["/root/.bashrc", 7, "ulimit -l 64"]],
           "limits_conf_lines": [["/etc/security/limits.d/x.conf", 2, "* hard nofile 4096"]],
           "ancestors": [{"pid": 9, "comm": "bash", "memlock_soft_kb": 64},
                         {"pid": 1, "comm": "sshd", "memlock_soft_kb": 8192}]}
    where = rdma.memlock_origin(lim)
    assert where[0] == "/root/.bashrc:7: ulimit -l 64"
    assert "sshd (pid 1) already runs with max locked memory 8192 KB" in where[1]
    assert len(where) == 2


def test_nofile_needed_on_rank0_grows_with_the_world():
    assert rdma.judge_nofile(1024, world=16, is_rank0=False) is None
    assert rdma.judge_nofile(1024, world=16, is_rank0=True) is None
    msg = rdma.judge_nofile(1024, world=512, is_rank0=True)
    assert msg and "below 1280" in msg and "512 ranks" in msg
    assert "below 1024" in (rdma.judge_nofile(256, world=2, is_rank0=False) or "")


def test_dev_shm_container_default_is_too_small_for_two_ranks():
    line = next(ln for ln in sample("df-h-container-shm-64m.txt").splitlines() if "/dev/shm" in ln)
    size = int(re.split(r"\s+", line)[1].rstrip("M")) << 20  # `shm 64M 0 64M 0% /dev/shm`
    shm = {"exists": True, "total_bytes": size, "avail_bytes": size}
    msg = rdma.judge_shm(shm, slots=2)
    assert msg == ("/dev/shm has 64 MiB free of 64 MiB, below the 256 MiB that 2 local ranks "
                   "need (128 MiB a rank, --shm-per-rank-mb)")
    assert rdma.judge_shm(shm, slots=1, per_rank_mb=32) is None
    # one real NCCL segment (nccl-warn-dev-shm-no-space-left) is well inside a rank's figure
    found = re.search(r"size (\d+)", sample("nccl-warn-dev-shm-no-space-left.txt"))
    assert found is not None
    seg = int(found.group(1))
    assert seg < rdma.SHM_PER_RANK_MB << 20


# -- NVIDIA ----------------------------------------------------------------------------------------

def test_nvidia_smi_q_a10_remap_pending():
    gpus = gpuhealth.parse_nvidia_smi_q(sample("nvidia-smi-q-a10-1gpu-remap-pending.txt"))
    assert len(gpus) == 1 and gpus[0]["_bus_id"] == "00000000:07:00.0"
    assert gpus[0]["Remapped Rows"]["Pending"] == "Yes"
    f = gpuhealth.judge_gpu(gpus[0])
    assert f.label() == "GPU 0 (00000000:07:00.0, NVIDIA A10)"
    assert f.problems == ["row remapping pending (4 row(s) remapped for uncorrectable errors): "
                          "the GPU must be reset to activate it"]


def test_nvidia_smi_q_healthy_h100_and_idle_titan_v():
    h100 = gpuhealth.parse_nvidia_smi_q(sample("nvidia-smi-q-h100-gpu0-of-8.txt"))
    assert len(h100) == 1 and gpuhealth.judge_gpu(h100[0]).problems == []
    titan = gpuhealth.judge_gpu(gpuhealth.parse_nvidia_smi_q(
        sample("nvidia-smi-q-titanv-1gpu-pcie-gen1.txt"))[0])
    # gen 1 of 3 at P8 is power saving, not a fault; persistence off is a note
    assert titan.problems == []
    assert any("PCIe gen 1, below its gen 3 at P8 (normal when idle)" in n for n in titan.notes)
    assert any("persistence mode disabled" in n for n in titan.notes)


def test_nvidia_smi_q_page_retirement_8gpu():
    gpus = gpuhealth.parse_nvidia_smi_q(sample("nvidia-smi-q-d-page-retirement-8gpu.txt"))
    assert len(gpus) == 8 and [g["_index"] for g in gpus] == list(range(8))
    assert all(gpuhealth.judge_gpu(g).problems == [] for g in gpus)


def test_nvlink_status():
    a100 = gpuhealth.parse_nvlink_status(sample("nvidia-smi-nvlink-s-a100-8gpu.txt"))
    assert len(a100) == 8 and all(len(g["links"]) == 12 for g in a100.values())
    assert gpuhealth.nvlink_problems(a100) == {}
    h100 = gpuhealth.parse_nvlink_status(sample("nvidia-smi-nvlink-s-h100-1gpu.txt"))
    assert h100[0]["links"][17] == "26.562 GB/s"
    one = gpuhealth.parse_nvlink_status(sample("nvidia-smi-nvlink-s-a100-1gpu.txt"))
    assert list(one) == [7] and len(one[7]["links"]) == 12


def test_xids_hardware_and_application():
    gsp = gpuhealth.parse_xids(sample("dmesg-nvrm-xid-119-gsp-timeout.txt"))
    assert gsp and gsp[0].code == 119 and gsp[0].bus == "0000:9b:00" and gsp[0].hardware
    assert gpuhealth.bus_matches("0000:9b:00", "00000000:9B:00.0")
    app = gpuhealth.parse_xids(sample("dmesg-nvrm-xid-13-43.txt"))
    assert {x.code for x in app} == {13, 43} and not any(x.hardware for x in app)
    hard, soft = gpuhealth.summarize_xids(app)
    assert hard == {} and len(soft) == 2
    remap = gpuhealth.parse_xids(sample("dmesg-nvrm-xid-63-row-remapper.txt"))
    assert remap[0].code == 63 and remap[0].hardware
    off = gpuhealth.parse_xids(sample("dmesg-nvrm-gpu-fallen-off-bus-no-xid.txt"))
    assert off[0].code is None and off[0].bus == "0000:b3:00.0" and off[0].hardware


def test_judge_nvidia_ties_xids_to_the_gpu():
    q = sample("nvidia-smi-q-h100-gpu0-of-8.txt")
    bus = gpuhealth.parse_nvidia_smi_q(q)[0]["_bus_id"]  # 00000000:53:00.0
    raw: dict[str, Any] = {"nvidia_smi_q": {"rc": 0, "out": q}, "nvlink_s": {"rc": 0, "out": ""},
           "dmesg": {"rc": 0, "lines": sample("dmesg-nvrm-xid-119-gsp-timeout.txt").splitlines()}}
    problems, _, count = gpuhealth.judge_nvidia(raw)
    assert count == 1 and bus == "00000000:53:00.0"
    # the Xid is on 9b:00, not on this GPU: named by its PCI address
    assert problems and problems[0].startswith("PCI:0000:9b:00: Xid 119 (GSP RPC timeout)")
    raw["nvswitches"] = ["0", "1"]
    raw["fabric_manager"] = {"pids": [], "systemctl": {"rc": 3, "out": "inactive\n"}}
    problems, _, _ = gpuhealth.judge_nvidia(raw)
    assert any("2 NVSwitch(es) but no fabric manager running" in p for p in problems)


# -- Ascend ----------------------------------------------------------------------------------------

def _ok(text: str) -> dict:
    return {"rc": 0, "out": text, "err": ""}


def test_judge_npu():
    raw = {"npu_health": {"0": _ok(sample("npu-smi-info-t-health-ok.txt"))},
           "hccn": {"0": {"net_health": _ok(sample("hccn-tool-net-health-g-socket-failed.txt")),
                          "link": _ok(sample("hccn-tool-link-g-up.txt")),
                          "ip": _ok(sample("hccn-tool-ip-g-unredacted.txt")),
                          "tls": _ok(sample("hccn-tool-tls-g-switch.txt"))},
                    "1": {"net_health": _ok(sample("hccn-tool-net-health-g.txt")),
                          "link": _ok(sample("hccn-tool-link-g-down.txt")),
                          "ip": _ok(sample("hccn-tool-ip-g-unredacted.txt")),
                          "tls": _ok(sample("hccn-tool-tls-g-switch.txt"))}}}
    problems, notes, ips, tls = gpuhealth.judge_npu(raw)
    assert ips == {"0": "192.161.200.10", "1": "192.161.200.10"} and tls == "0"
    assert problems == [
        "device 1: link status DOWN",
        "devices 0 and 1 share the device IP 192.161.200.10"]
    assert notes == []  # the net health is R9's (judge/dcgm.judge_net_health): one cause, one red
    assert gpuhealth.net_health(raw) == {"0": "Socket failed", "1": "Init"}


# -- NCCL_DEBUG=INFO -----------------------------------------------------------------------------

def test_nccl_log_socket_fallback():
    t = nccllog.parse(sample("nccl-debug-socket-fallback-gke-h100-2node-rank0.txt"))
    assert t.network == "Socket" and t.on_sockets and not t.on_rdma
    assert t.net_transports == {"NET/Socket"} and t.intra == {"P2P/CUMEM"}
    assert t.net_devices == ["eth0:10.128.0.52<0>"]
    assert t.host.startswith("gke-hypercomputer-a3") and t.version == "2.22.3+cuda12.6"
    assert nccllog.socket_fallback_reason(t) == "NET/IB : No device found."


def test_nccl_log_roce_with_p2p_and_shm():
    t = nccllog.parse(sample("nccl-debug-roce-net-ib-p2p-ipc-shm-nccl2.5.7.txt"))
    assert t.on_rdma and not t.on_sockets
    assert t.net_devices == ["mlx5_0:1/RoCE"] and t.net_transports == {"NET/IB"}
    assert t.intra == {"P2P/IPC", "direct shared memory"}
    assert t.describe() == "net NET/IB; intra-node P2P/IPC, direct shared memory"


def test_nccl_log_ib_multi_hca_with_warn():
    t = nccllog.parse(sample("nccl-debug-ib-multi-hca-ibv-modify-qp-failed-nccl2.6.2.txt"))
    assert t.network == "IB" and t.on_rdma
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


def test_gid_table_from_show_gids_where_sysfs_has_none():
    tree = {"mlx5_0": {"ports": {"1": {"state": "4: ACTIVE", "link_layer": "Ethernet"}}}}
    ports, source = rdma.ports_from_probe(
        {"sysfs_root": "/sys", "sysfs": tree,
         "show_gids": {"rc": 0, "out": sample("show-gids-roce-v1-v2-pod-macvlan.txt")}})
    assert source == "/sys/class/infiniband"
    assert rdma.judge_gid_index(5, ports) == ({"mlx5_0:1": "RoCE v2"}, [])


def test_probe_fabric_section_reads_this_machine(tmp_path, monkeypatch, sysfs):
    """The node-side section itself, run here: limits from getrlimit, the rc line that sets
    one, /dev/shm from statvfs, the RDMA tree from CLUSTER_TESTS_SYSFS."""
    import resource

    probe = _probe_module()
    (tmp_path / ".bashrc").write_text("export A=1\n# ulimit -l 1\nulimit -l 64\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLUSTER_TESTS_SYSFS", str(sysfs))
    data = probe.section_fabric({})
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    want = -1 if soft == resource.RLIM_INFINITY else soft // 1024
    assert data["limits"]["memlock_soft_kb"] == want
    assert data["limits"]["rc_ulimit_lines"][0] == [str(tmp_path / ".bashrc"), 3, "ulimit -l 64"]
    assert data["limits"]["ancestors"][0]["pid"] > 0
    assert data["shm"]["exists"] and data["shm"]["total_bytes"] > 0
    ports, source = rdma.ports_from_probe(data["rdma"])
    assert len(ports) == 4 and source == f"{sysfs}/class/infiniband"
