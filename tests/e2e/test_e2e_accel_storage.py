"""A and D checks (and H4's slots) end to end on the simulated cluster, with fake vendor tools
on one node's PATH printing the real captured samples."""

from __future__ import annotations

import shlex

from paths import SAMPLES
from suite import fake_tool, run_suite

_fake_tool = fake_tool


def test_cpu_only_cluster_is_green(healthy_sim):
    result = run_suite(healthy_sim, "-m", "accelerator or storage or hostfile",
                       "--output-dir", str(healthy_sim.shared_dir), "--min-free-gb", "0.01")
    assert result.returncode == 0, result.describe()
    assert "CPU only" in result.properties["test_accelerators[node1]"]["accelerators"]
    assert "test_output_shared[node1->node3]" in result.passed
    assert not any(p.name.startswith(".ct-") for p in healthy_sim.shared_dir.iterdir())


def test_more_slots_than_gpus(healthy_sim, tmp_path):
    one_gpu = (SAMPLES / "nvidia-smi-L-8gpu.txt").read_text().splitlines()[0]
    _fake_tool(healthy_sim, "node2", "nvidia-smi",
               f'case "$1" in -L) echo {shlex.quote(one_gpu)};; *) echo 535.104.05;; esac\n')
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node1 slots=1\nnode2 slots=2\nnode3 slots=1\n")
    result = run_suite(healthy_sim, "-m", "accelerator or hostfile", hostfile=hostfile)
    assert result.failed == {"test_slots_fit_accelerators[node2]", "test_accelerators[node2]"}, \
        result.describe()
    assert "slots=2 but the node has 1 GPU" in result.message("test_slots_fit_accelerators[node2]")
    # the fake GPU is not real: the CPU build of torch sees none, which A1 must say
    assert ("sees 0 CUDA device(s) where the vendor tool lists 1"
            in result.message("test_accelerators[node2]"))


def test_npu_health_warning(healthy_sim):
    info = SAMPLES / "npu-smi-info-910a-warning-with-procs.txt"
    listing = SAMPLES / "npu-smi-info-l-8npu.txt"
    _fake_tool(healthy_sim, "node1", "npu-smi",
               f'if [ "$2" = "-l" ]; then cat {shlex.quote(str(listing))}; '
               f'else cat {shlex.quote(str(info))}; fi\n')
    result = run_suite(healthy_sim, "-m", "accelerator")
    assert result.failed == {"test_accelerators[node1]"}, result.describe()
    msg = result.message("test_accelerators[node1]")
    assert "NPU 3 (xxx): Health Warning" in msg and "NPU 7 (xxx): Health Warning" in msg
    assert "8 NPUs" in msg and "npu-smi info -t health" in msg


def test_output_dir_not_shared_on_node3(healthy_sim):
    healthy_sim.bind_private_dir("node3", healthy_sim.shared_dir)
    result = run_suite(healthy_sim, "-m", "storage", "--output-dir", str(healthy_sim.shared_dir),
                       "--min-free-gb", "0.01")
    assert result.failed == {"test_output_shared[node1->node3]",
                             "test_output_shared[node2->node3]",
                             "test_output_shared[node3->node1]",
                             "test_output_shared[node3->node2]"}, result.describe()
    msg = result.message("test_output_shared[node1->node3]")
    assert "is not there on node3" in msg and "not one shared volume" in msg
    assert "mount the same volume" in msg


def test_output_dir_missing_skips_without_option(healthy_sim):
    result = run_suite(healthy_sim, "-m", "storage")
    assert result.failed == set()
    assert "no --output-dir given" in result.message("test_output_dir[node1]")
