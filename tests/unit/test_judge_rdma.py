"""judge/health/rdma.py: R1-R6's facts and verdicts, on what node/healthprobe.py's `fabric`
really answers (run here on the real /sys/class/infiniband fixture tree of prometheus/procfs,
found through CLUSTER_TESTS_SYSFS, and in a recorded run on the simulated cluster:
bench/fake_facts.json), and on the real ibstat / ibv_devinfo / show_gids / ulimit captures
(tests/data/samples)."""

from __future__ import annotations

import json
import re
import resource
from pathlib import Path

import pytest
import ttar
from nodescript import answer
from paths import REPO, SAMPLES

from cluster_tests.judge.health import rdma
from cluster_tests.judge.health.rdma import FabricFacts, RdmaCause


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """The real fixture tree, unpacked as a sysfs root (root/class/infiniband/...)."""
    ttar.unpack(sample("sysfs-class-infiniband-procfs-fixture.ttar.txt"), tmp_path / "sys",
                "fixtures/sys/")
    return tmp_path / "sys"


def fabric(home: Path, sysfs: Path | None = None) -> FabricFacts:
    """The `fabric` section as the node script answers it here (`home`: its ~)."""
    env = {"HOME": str(home), **({"CLUSTER_TESTS_SYSFS": str(sysfs)} if sysfs else {})}
    return FabricFacts.read(answer("healthprobe.py", "fabric", env=env))


def recorded() -> FabricFacts:
    """A simulated node's `fabric` answer, as bench/fake_transport.py recorded it: no RDMA,
    sshd and the shell above the probe at 8192 KB of locked memory."""
    facts = json.loads((REPO / "bench" / "fake_facts.json").read_text())
    return FabricFacts.read(facts["healthprobe.py/fabric"])


# -- R1: the ports --------------------------------------------------------------------------------

def test_the_probe_reads_the_sysfs_tree(tmp_path: Path, sysfs: Path) -> None:
    facts = fabric(tmp_path, sysfs)
    ports = {p.name: p for p in facts.rdma.ports}
    assert facts.rdma.source == f"{sysfs}/class/infiniband"
    assert set(ports) == {"hfi1_0:1", "mlx4_0:1", "mlx4_0:2", "mlx5_0:1"}
    assert ports["mlx4_0:2"].state == "ACTIVE" and ports["mlx4_0:2"].phys_state == "LinkUp"
    assert ports["mlx4_0:2"].link_layer == "InfiniBand" and not ports["mlx4_0:2"].roce
    assert ports["hfi1_0:1"].rate_gbps == 100
    assert ports["mlx5_0:1"].rate_text == "25 Gb/sec (1X EDR)"
    # the fixture's one edited value ('4: ACTIVE' in phys_state) reads as the kernel's number 4
    assert ports["mlx5_0:1"].phys_state == "PortConfigurationTraining"
    assert all(p.up for p in ports.values())
    assert rdma.judge_ports("node1", facts.rdma, {"node2": facts.rdma.ports}) is None


def test_a_node_without_rdma(tmp_path: Path) -> None:
    assert recorded().rdma == rdma.RdmaFacts((), "")
    assert fabric(tmp_path, tmp_path / "no-sys").rdma.ports == ()


def test_ibstat_h100_one_port_down() -> None:
    ports = {p.name: p for p in rdma.parse_ibstat(sample("ibstat-h100-12ca-one-down.txt"))}
    assert len(ports) == 12
    down = [p for p in ports.values() if not p.up]
    # SOURCES.md names mlx5_2; the capture has three Ethernet ports down
    assert [p.name for p in down] == ["mlx5_2:1", "mlx5_7:1", "mlx5_8:1"]
    assert all(p.roce for p in down)
    assert down[0].state == "DOWN" and down[0].phys_state == "Disabled" and down[0].rate_gbps == 40
    assert ports["mlx5_0:1"].rate_gbps == 400 and ports["mlx5_1:1"].roce


def test_ibstat_partial_output_keeps_what_was_printed() -> None:
    ports = rdma.parse_ibstat(sample("ibstat-a100-ibpanic-partial.txt"))
    assert len(ports) == 8 and all(p.up and p.rate_gbps == 200 for p in ports)


def test_ibv_devinfo_port2_down() -> None:
    ports = rdma.parse_ibv_devinfo(sample("ibv-devinfo-mlx4-2hca-port2-down.txt"))
    assert [(p.name, p.state) for p in ports] == [
        ("mlx4_1:1", "ACTIVE"), ("mlx4_1:2", "DOWN"), ("mlx4_0:1", "ACTIVE"), ("mlx4_0:2", "DOWN")]
    verbose = rdma.parse_ibv_devinfo(sample("ibv-devinfo-v-mlx4-port2-down-polling.txt"))
    assert [(p.name, p.state, p.phys_state) for p in verbose] == [("mlx4_1:2", "DOWN", "Polling")]


def test_port_down_where_the_peer_has_it_up() -> None:
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
    p = rdma.judge_ports("node2", rdma.RdmaFacts(tuple(mine), "ibv_devinfo"), {"node1": peer})
    assert p is not None and p.cause is RdmaCause.PORTS and p.item == "R1"
    assert p.message.splitlines()[0] == "node2: RDMA ports (read from ibv_devinfo):"
    assert p.fix == f"on node2: {rdma.PORTS_FIX}"
    assert p.facts == {"ports_down": ["mlx4_1:2", "mlx4_0:2"]}


def test_port_down_on_every_node_is_no_finding() -> None:
    h100 = rdma.parse_ibstat(sample("ibstat-h100-12ca-one-down.txt"))
    assert rdma.compare_ports("a", h100, {"b": h100, "c": h100}) == []
    assert rdma.judge_ports("a", rdma.RdmaFacts(tuple(h100), "ibstat"), {"b": h100}) is None


def test_no_active_port_at_all() -> None:
    verbose = rdma.parse_ibv_devinfo(sample("ibv-devinfo-v-mlx4-port2-down-polling.txt"))
    p = rdma.judge_ports("node3", rdma.RdmaFacts(tuple(verbose), "ibv_devinfo"), {})
    assert p is not None and p.message.splitlines()[1] == (
        "  no RDMA port is active: mlx4_1:2 (down, physical Polling, InfiniBand)")


def test_rate_below_the_peers(tmp_path: Path, sysfs: Path) -> None:
    mine = fabric(tmp_path, sysfs).rdma.ports  # mlx4_0 at 40 Gb/s
    peer = rdma.parse_ibstat(sample("ibstat-mlx4-2ca-4port-active.txt"))  # mlx4_0 at 56
    assert rdma.compare_ports("node3", mine, {"node1": peer}) == [
        "mlx4_0:1 (active, physical LinkUp, 40 Gb/sec (4X QDR), InfiniBand) runs at 40 Gb/s, "
        "below the 56 Gb/s of the same port on node1",
        "mlx4_0:2 (active, physical LinkUp, 40 Gb/sec (4X QDR), InfiniBand) runs at 40 Gb/s, "
        "below the 56 Gb/s of the same port on node1"]


# -- R2: NCCL_IB_HCA ------------------------------------------------------------------------------

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
    spec = rdma.parse_hca_spec(value)
    active, problems = rdma.judge_hca(spec, ports)
    assert len(active) == chosen
    red = rdma.hca_problem("node1", value, "node1's non-interactive shell", spec, ports, problems)
    if problem is None:
        assert problems == [] and red is None
    else:
        assert any(problem in p for p in problems), problems
        assert red is not None and red.cause is RdmaCause.HCA and problem in red.message
        assert red.fix.startswith("export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,")
        assert red.fix.endswith("(where it is set: node1's non-interactive shell), or unset "
                                "it to let NCCL use every active port")


# -- R3: NCCL_IB_GID_INDEX ------------------------------------------------------------------------

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
    p = rdma.gid_index_problem("node1", 3, "x", [port], {})
    assert p is not None and p.cause is RdmaCause.GID_INDEX and p.fix == rdma.GID_FIX
    # index 4 is RoCE v1 here; a peer with the same table at 4 agrees, at 7 it would not
    assert rdma.gid_index_problem("node1", 4, "x", [port], {"node2": [port]}) is None
    v2 = rdma.Port("mlx5_0", 1, "ACTIVE", "LinkUp", "Ethernet",
                   gids={4: gids[("mlx5_0", 1)][7]})
    p = rdma.gid_index_problem("node1", 4, "x", [port], {"node2": [v2]})
    assert p is not None and ("GID index 4 is IB/RoCE v1 here but RoCE v2 on node2"
                              in p.message)
    assert rdma.gid_index_not_a_number("node1", "v2", "x").message == (
        "node1: NCCL_IB_GID_INDEX='v2' (from x) is not a number")


def test_gid_table_from_show_gids_where_sysfs_has_none():
    """A sysfs port without GIDs gets them from show_gids (the probe runs it beside sysfs)."""
    tree = {"mlx5_0": {"ports": {"1": {"state": "4: ACTIVE", "link_layer": "Ethernet"}}}}
    facts = rdma.RdmaFacts.read(
        {"sysfs_root": "/sys", "sysfs": tree,
         "show_gids": {"rc": 0, "out": sample("show-gids-roce-v1-v2-pod-macvlan.txt")}})
    assert facts.source == "/sys/class/infiniband"
    assert rdma.judge_gid_index(5, facts.ports) == ({"mlx5_0:1": "RoCE v2"}, [])


# -- R4-R6: limits and /dev/shm -------------------------------------------------------------------

def test_memlock():
    # the limits of the captures ulimit-a-memlock-64k.txt (soft) and ulimit-Ha-memlock-unlimited.txt
    # (hard), as healthprobe.py reads them with resource.getrlimit (KB; unlimited: UNLIMITED)
    low, high = 64, rdma.UNLIMITED
    msg = rdma.judge_memlock(low, high, has_rdma=True)
    assert msg and "64 KB (hard unlimited)" in msg and "needs unlimited" in msg
    assert rdma.judge_memlock(low, low, has_rdma=False) is None
    assert rdma.judge_memlock(high, high, has_rdma=True) is None
    assert rdma.judge_memlock(8192, 8192, True, min_kb=4096) is None


def test_memlock_set_by_the_bashrc_line(tmp_path: Path, sysfs: Path) -> None:
    """The node-side section itself, run here: limits from getrlimit, the rc line that sets
    one, /dev/shm from statvfs, the RDMA tree from CLUSTER_TESTS_SYSFS."""
    (tmp_path / ".bashrc").write_text("export A=1\n# ulimit -l 1\nulimit -l 64\n")
    facts = fabric(tmp_path, sysfs)
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    want = -1 if soft == resource.RLIM_INFINITY else soft // 1024
    assert facts.limits.memlock_soft_kb == want
    line = facts.limits.rc_ulimit_lines[0]
    assert (line.path, line.lineno, line.line) == (str(tmp_path / ".bashrc"), 3, "ulimit -l 64")
    assert facts.limits.ancestors[0].pid > 0
    assert facts.shm.exists and facts.shm.total_bytes and facts.shm.mount.split()[1] == "/dev/shm"
    assert len(facts.rdma.ports) == 4
    assert rdma.memlock_origin(facts.limits)[0] == f"{tmp_path}/.bashrc:3: ulimit -l 64"


def test_memlock_of_sshd_on_a_simulated_node():
    facts = recorded()
    assert rdma.memlock_origin(facts.limits) == [
        "sshd (pid 17305) already runs with max locked memory 8192 KB: systemd's "
        "LimitMEMLOCK for the service, or the container's --ulimit memlock"]
    assert rdma.memlock_problem("node2", facts.limits, 0, uses_rdma=False) is None
    p = rdma.memlock_problem("node2", facts.limits, 2, uses_rdma=True)
    assert p is not None and p.cause is RdmaCause.MEMLOCK and p.item == "R4"
    assert p.message.startswith("node2: max locked memory (ulimit -l) is 8192 KB (hard 8192 KB) "
                                "in the non-interactive shell pdsh gets")
    assert "(2 RDMA port(s) here)" in p.message and "\n  set by:\n    sshd (pid 17305)" in \
        p.message
    # the hard limit is 8192 KB: raising the soft one in ~/.bashrc cannot help
    assert p.fix.startswith("on node2: '* soft memlock unlimited'")
    assert rdma.memlock_problem("node2", facts.limits, 2, True, minimum=8192) is None


def test_nofile_needed_on_rank0_grows_with_the_world():
    assert rdma.judge_nofile(1024, world=16, is_rank0=False) is None
    assert rdma.judge_nofile(1024, world=16, is_rank0=True) is None
    msg = rdma.judge_nofile(1024, world=512, is_rank0=True)
    assert msg and "below 1280" in msg and "512 ranks" in msg
    assert "below 1024" in (rdma.judge_nofile(256, world=2, is_rank0=False) or "")
    limits = recorded().limits  # 20000 open files
    assert rdma.nofile_problem("node1", limits, world=10000, is_rank0=False) is None
    p = rdma.nofile_problem("node1", limits, world=10000, is_rank0=True)
    assert p is not None and p.cause is RdmaCause.NOFILE
    assert p.message.startswith("node1: open files (ulimit -n) is 20000, below 20256")
    assert "'* soft nofile 65536'" in p.fix


def test_dev_shm_container_default_is_too_small_for_two_ranks():
    line = next(ln for ln in sample("df-h-container-shm-64m.txt").splitlines() if "/dev/shm" in ln)
    size = int(re.split(r"\s+", line)[1].rstrip("M")) << 20  # `shm 64M 0 64M 0% /dev/shm`
    shm = rdma.Shm(True, size, size)
    assert rdma.judge_shm(shm, slots=2) == (
        "/dev/shm has 64 MiB free of 64 MiB, below the 256 MiB that 2 local ranks need (128 MiB "
        "a rank, --shm-per-rank-mb)")
    assert rdma.judge_shm(shm, slots=1, per_rank_mb=32) is None
    p = rdma.shm_problem("node3", shm, slots=2)
    assert p is not None and p.cause is RdmaCause.SHM and p.item == "R6"
    assert "--shm-size=1g" in p.fix and "mounted as" not in p.message
    # one real NCCL segment (nccl-warn-dev-shm-no-space-left) is well inside a rank's figure
    found = re.search(r"size (\d+)", sample("nccl-warn-dev-shm-no-space-left.txt"))
    assert found is not None
    assert int(found.group(1)) < rdma.SHM_PER_RANK_MB << 20
    assert rdma.shm_problem("node1", recorded().shm, slots=8) is None  # 12.6 GB free
