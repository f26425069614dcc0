"""R (health) end to end on the simulated cluster, each fault real on one node:

- RDMA devices: the real /sys/class/infiniband fixture tree of prometheus/procfs (ttar sample),
  unpacked per node and found by the probe through CLUSTER_TESTS_SYSFS, exported in the node's
  ~/.bashrc (the sim has no RDMA hardware);
- a port down: that node's copy of mlx4_0 port 2 reads what the kernel prints for a port that
  lost its link (`1: DOWN`, `2: Polling`, as the ibv_devinfo -v sample shows it);
- ulimit -l: `ulimit -l 64` (the container default of the ulimit -a sample) in the node's
  ~/.bashrc, which pdsh's non-interactive shell reads;
- /dev/shm: the node's private tmpfs remounted at 64m (a container's default);
- a GPU with uncorrectable errors: a fake nvidia-smi on that node's PATH printing the real A10
  `nvidia-smi -q` capture (4 rows remapped for uncorrectable errors, remap pending);
- DCGM's diagnostic failing (R9): a fake dcgmi on that node's PATH printing the real H100
  `dcgmi diag` capture (GPU Memory Fail - All, cuInit 'system not yet initialized' on GPUs 0-7),
  beside a fake nvidia-smi printing a real healthy H100 `nvidia-smi -q` (GPU 0's bus id).

This machine's own max locked memory is 8192 KB and cannot be raised here, so the RDMA runs
pass --min-memlock-kb 8192 (what "large enough" means is the option's to say).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import tempfile
from pathlib import Path

import ttar
from paths import SAMPLES
from suite import fake_tool, run_suite

TREE = "sysfs-class-infiniband-procfs-fixture.ttar.txt"


def _give_rdma(sim, node: str) -> Path:
    root = sim.state_dir / f"sysfs-{node}"
    shutil.rmtree(root, ignore_errors=True)
    ttar.unpack((SAMPLES / TREE).read_text(), root, "fixtures/sys/")
    sim.append_bashrc(node, f"export CLUSTER_TESTS_SYSFS={shlex.quote(str(root))}\n")
    return root / "class" / "infiniband"


_fake_tool = fake_tool


def test_cpu_only_sim_is_green_and_skips_with_reasons(healthy_fast_run):
    """Cost: none of its own (the health checks' green is read from the shared healthy
    fast-checklist run, conftest.py)."""
    result = healthy_fast_run
    assert result.returncode == 0, result.describe()
    for node in ("node1", "node2", "node3"):
        assert {f"test_memlock[{node}]", f"test_open_files[{node}]",
                f"test_dev_shm[{node}]"} <= result.passed, result.describe()
        assert "no RDMA devices" in result.message(f"test_rdma_ports[{node}]")
        assert result.outcomes[f"test_ib_gid_index[{node}]"] == "skipped"
        assert "CPU only" in result.message(f"test_gpu_health[{node}]")
        assert "CPU only" in result.message(f"test_npu_health[{node}]")
        assert "CPU only" in result.message(f"test_accel_diag[{node}]")
    assert "free of" in result.properties["test_dev_shm[node1]"]["dev_shm"]


def test_rdma_healthy_then_memlock_port_down_and_hca(healthy_sim):
    trees = {n: _give_rdma(healthy_sim, n) for n in ("node1", "node2", "node3")}
    green = run_suite(healthy_sim, "-m", "health", "--min-memlock-kb", "8192")
    assert green.returncode == 0, green.describe()
    assert "4 ports, 4 active" in green.properties["test_rdma_ports[node2]"]["rdma"]
    nodes = json.loads(green.junit.with_name("summary.json").read_text())["nodes"]
    node2 = next(n for n in nodes if "node2" in n.values())
    assert node2["rdma"] == "4/4 ports active", node2  # the node table's column

    healthy_sim.append_bashrc("node2", "ulimit -l 64\n")
    port = trees["node3"] / "mlx4_0" / "ports" / "2"
    (port / "state").write_text("1: DOWN\n")
    (port / "phys_state").write_text("2: Polling\n")
    healthy_sim.append_bashrc("node1", "export NCCL_IB_HCA==mlx4_0:2,mlx5_1\n")
    result = run_suite(healthy_sim, "-m", "health", "--min-memlock-kb", "8192")
    assert result.failed == {"test_memlock[node2]", "test_rdma_ports[node3]",
                             "test_ib_hca[node1]"}, result.describe()

    memlock = result.message("test_memlock[node2]")
    assert "max locked memory (ulimit -l) is 64 KB" in memlock
    assert "/root/.bashrc:" in memlock and ": ulimit -l 64" in memlock
    assert re.search(r"remove or raise `/root/\.bashrc:\d+: ulimit -l 64`", memlock)
    assert "/etc/security/limits.d/" in memlock and "--ulimit memlock=-1" in memlock

    down = result.message("test_rdma_ports[node3]")
    assert "mlx4_0:2 (down, physical Polling, 40 Gb/sec (4X QDR), InfiniBand) is not active, " \
           "while it is active on node1, node2" in down
    assert "mlx4_0:1" not in down.split("fix")[0]

    hca = result.message("test_ib_hca[node1]")
    assert "NCCL_IB_HCA==mlx4_0:2,mlx5_1" in hca and "'mlx5_1' names no RDMA port here" in hca
    assert "export NCCL_IB_HCA==" in hca

    # NCCL told not to use RDMA: neither the limit nor the ports matter to the launch
    healthy_sim.append_bashrc("node2", "export NCCL_IB_DISABLE=1\n")
    healthy_sim.append_bashrc("node3", "export NCCL_IB_DISABLE=1\n")
    healthy_sim.append_bashrc("node1", "export NCCL_IB_DISABLE=1\n")
    off = run_suite(healthy_sim, "-m", "health", "--min-memlock-kb", "8192")
    assert off.returncode == 0, off.describe()
    assert "NCCL_IB_DISABLE=1 (from node3's non-interactive shell)" in off.message(
        "test_rdma_ports[node3]")


def test_small_dev_shm_and_gpu_with_uncorrectable_errors(healthy_sim):
    healthy_sim.resize_shm("node3", "64m")
    q = SAMPLES / "nvidia-smi-q-a10-1gpu-remap-pending.txt"
    _fake_tool(healthy_sim, "node1", "nvidia-smi",
               f'case "$1" in -q) cat {shlex.quote(str(q))};; *) exit 0;; esac\n')
    healthy_sim.append_bashrc("node2", "ulimit -n 512\n")
    result = run_suite(healthy_sim, "-m", "health")
    assert result.failed == {"test_dev_shm[node3]", "test_gpu_health[node1]",
                             "test_open_files[node2]"}, result.describe()
    nofile = result.message("test_open_files[node2]")
    assert "open files (ulimit -n) is 512, below 1024" in nofile
    assert re.search(r"set by:\n    /root/\.bashrc:\d+: ulimit -n 512", nofile)

    shm = result.message("test_dev_shm[node3]")
    assert "/dev/shm has 64 MiB free of 64 MiB, below the 128 MiB that 1 local rank needs" in shm
    assert "--shm-size=1g" in shm and "mount -o remount,size=1G /dev/shm" in shm
    assert "mounted as: tmpfs /dev/shm tmpfs rw,nosuid,nodev,relatime,size=65536k" in shm

    gpu = result.message("test_gpu_health[node1]")
    assert "GPU 0 (00000000:07:00.0, NVIDIA A10): row remapping pending (4 row(s) remapped for " \
           "uncorrectable errors)" in gpu
    assert "nvidia-smi -r -i 0" in gpu and "--exclude node1:0" in gpu
    assert "no Ascend NPU" in result.message("test_npu_health[node1]")
    assert "CPU only" in result.message("test_gpu_health[node2]")
    assert "dcgmi not on the non-interactive PATH: DCGM's diagnostic not run" in result.message(
        "test_accel_diag[node1]")


def test_npu_roce_port_and_device_ips(healthy_sim):
    """Fake npu-smi and hccn_tool on node2 and node3 printing the real captures: 8 NPUs
    (npu-smi info -l), health OK, but `net health status: Socket failed` and the same device IP
    on every device of both nodes."""
    s = {k: shlex.quote(str(SAMPLES / v)) for k, v in {
        "list": "npu-smi-info-l-8npu.txt", "health": "npu-smi-info-t-health-ok.txt",
        "net": "hccn-tool-net-health-g-socket-failed.txt", "link": "hccn-tool-link-g-up.txt",
        "ip": "hccn-tool-ip-g-unredacted.txt", "tls": "hccn-tool-tls-g-switch.txt"}.items()}
    for node in ("node2", "node3"):
        _fake_tool(healthy_sim, node, "npu-smi",
                   f'case "$2" in -l) cat {s["list"]};; -t) cat {s["health"]};; esac\n')
        _fake_tool(healthy_sim, node, "hccn_tool",
                   f'case "$3" in -net_health) cat {s["net"]};; -link) cat {s["link"]};; '
                   f'-ip) cat {s["ip"]};; -tls) cat {s["tls"]};; esac\n')
    result = run_suite(healthy_sim, "-m", "health")
    assert result.failed == {"test_npu_health[node2]", "test_npu_health[node3]",
                             "test_accel_diag[node2]", "test_accel_diag[node3]"}, result.describe()
    assert "device IP(s) 192.161.200.10 also on node3" in result.message("test_npu_health[node2]")
    msg = result.message("test_npu_health[node2]")
    assert "net health" not in msg  # R9's, one red for one cause
    assert "devices 0 and 1 share the device IP 192.161.200.10" in msg
    diag = result.message("test_accel_diag[node2]")
    assert "failed on device 0,1,2,3,4,5,6,7" in diag
    assert "device 0: net health status Socket failed: the port could not open the socket" in diag
    assert "device 7: net health status Socket failed" in diag
    assert ("devices 0,1,2,3,4,5,6,7 (socket failed), for each N of them: hccn_tool -i N -ip -g"
            in diag)
    assert result.properties["test_accel_diag[node3]"]["npu_net_health"].startswith(
        "0=Socket failed, 1=Socket failed")
    assert "hccn_tool -i <dev> -ip -s address" in msg
    assert "no NVIDIA GPU" in result.message("test_gpu_health[node2]")
    assert "CPU only" in result.message("test_npu_health[node1]")


def test_dcgm_diagnostic_fails_on_one_node_only(healthy_sim):
    """A fake dcgmi on node2's non-interactive PATH alone, answering `dcgmi diag -r 1` (the
    default level) with the real failing H100 capture: R9 red on node2, naming each GPU, the
    test and DCGM's message; GPU 0's bus id from the (real, healthy) nvidia-smi -q; every other
    node skips R9 naming why. At --dcgm-level 2 the fake answers nothing: no red, a skip."""
    diag = shlex.quote(str(SAMPLES / "dcgmi" / "dcgmi-diag-r3-fail-memory-h100-8gpu.txt"))
    q = shlex.quote(str(SAMPLES / "nvidia-smi-q-h100-gpu0-of-8.txt"))
    _fake_tool(healthy_sim, "node2", "dcgmi",
               f'[ "$*" = "diag -r 1" ] || exit 1\ncat {diag}\nexit 226\n')
    _fake_tool(healthy_sim, "node2", "nvidia-smi",
               f'case "$1" in -q) cat {q};; *) exit 0;; esac\n')
    result = run_suite(healthy_sim, "-m", "health")
    assert result.failed == {"test_accel_diag[node2]"}, result.describe()
    msg = result.message("test_accel_diag[node2]")
    assert ("node2: DCGM's diagnostic (`dcgmi diag -r 1`, DCGM 3.3.8, driver "
                          "560.35.03) failed GPU Memory on GPU 0,1,2,3,4,5,6,7") in msg, msg
    assert ("GPU 0 (00000000:53:00.0): GPU Memory (Hardware) Fail - All: GPU 0 Error using "
            "CUDA API cuInit") in msg
    assert "GPU 7 (bus id unknown: not in nvidia-smi -q): GPU Memory" in msg
    assert "Unable to initialize CUDA library: 'system not yet initialized'" in msg
    assert "nvidia-fabricmanager" in msg and "leave the node out (--exclude node2)" in msg
    assert "1 failed" in result.properties["test_accel_diag[node2]"]["dcgm"]
    problem = json.loads(result.properties["test_accel_diag[node2]"]["problem"])
    assert problem["nodes"] == ["node2"] and problem["item"] == "R9"
    assert result.outcomes["test_gpu_health[node2]"] == "passed"
    for other in ("node1", "node3"):
        assert result.outcomes[f"test_accel_diag[{other}]"] == "skipped"
        assert "CPU only" in result.message(f"test_accel_diag[{other}]")

    deeper = run_suite(healthy_sim, "-m", "health", "--dcgm-level", "2")
    assert deeper.returncode == 0, deeper.describe()
    assert "`dcgmi diag -r 2` gave no result (exit 1: no output)" in deeper.message(
        "test_accel_diag[node2]")

    # the same node on an NVSwitch system with no fabric manager running: cuInit's "system not
    # yet initialized" in DCGM's run is R7's cause, so R9 is blocked by R7's red (one cause)
    switches = Path(tempfile.mkdtemp(prefix="nvswitch-node2-", dir=healthy_sim.state_dir))
    (switches / "0").mkdir()
    healthy_sim.append_bashrc("node2", f"export CLUSTER_TESTS_NVSWITCH_DIR={switches}\n")
    fabric = run_suite(healthy_sim, "-m", "health")
    assert fabric.failed == {"test_gpu_health[node2]"}, fabric.describe()
    assert "no fabric manager running" in fabric.message("test_gpu_health[node2]")
    assert fabric.outcomes["test_accel_diag[node2]"] == "skipped"
    assert fabric.message("test_accel_diag[node2]").startswith(
        "blocked by test_gpu_health[node2]: node2: 1 NVSwitch(es) but no fabric manager")
