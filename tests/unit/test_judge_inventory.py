"""judge/accelerator/inventory.py: A1's facts and verdict, on what node/probe.py's
`accelerators` and node/envprobe.py's `devices` really answer, run here with vendor
tools on their PATH that print the real captures (tests/data/samples)."""

from __future__ import annotations

from pathlib import Path

from nodescript import answer, fake_tools

from cluster_tests.judge.accelerator import inventory
from cluster_tests.judge.accelerator.inventory import (
    AcceleratorCause,
    DeviceFacts,
    Inventory,
)

NPU_SMI = ('if [ "$2" = "-l" ]; then cat {npu-smi-info-l-8npu.txt}; '
           'else cat {npu-smi-info-910a-warning-with-procs.txt}; fi\n')


def _inventory(tmp_path: Path, **tools: str) -> Inventory:
    bindir = fake_tools(tmp_path / "bin", tools) if tools else None
    return Inventory.read(answer("probe.py", "accelerators", bindir))


def test_a_cpu_only_node_has_nothing_to_judge(tmp_path: Path) -> None:
    inv = _inventory(tmp_path)
    assert inv.kind == "cpu" and inv.count >= 1 and not inv.failures
    assert inv.describe().startswith("no accelerator (CPU only, ")
    assert inventory.judge_accelerators("node1", inv, None) is None


def test_eight_gpus_listed_and_the_cpu_build_of_torch_sees_none(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, **{"nvidia-smi": "cat {nvidia-smi-L-8gpu.txt}\n"})
    assert (inv.kind, inv.count, inv.describe()) == ("nvidia", 8, "8 GPUs")
    assert set(inv.names) == {"Quadro RTX 8000"}
    # this machine's torch is the CPU build: what A1 says on a node whose torch cannot use them
    dev = DeviceFacts.read(answer("envprobe.py", "devices", npu=False))
    assert dev.kind == "cuda" and dev.count == 0 and dev.error is None and dev.torch
    p = inventory.judge_accelerators("node2", inv, dev)
    assert p is not None and p.cause is AcceleratorCause.FRAMEWORK and p.item == "A1"
    assert p.nodes == ("node2",) and p.message.startswith("node2: 8 GPUs, not all usable:\n  ")
    assert f"torch {dev.torch} sees 0 CUDA device(s) where the vendor tool lists 8" in p.message
    assert p.fix == f"on node2: {inventory.FRAMEWORK_FIX}"
    assert p.text().endswith(f"\n  fix: on node2: {inventory.FRAMEWORK_FIX}")


def test_a_vendor_tool_that_fails_on_a_cpu_node(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, **{"nvidia-smi": "exec false\n"})
    assert inv.kind == "cpu" and [f.argv for f in inv.failures] == ["nvidia-smi -L"]
    p = inventory.judge_accelerators("node3", inv, None)
    assert p is not None and p.cause is AcceleratorCause.TOOL_FAILED
    assert p.message == "node3: a vendor tool exists but fails:\n  nvidia-smi -L failed (exit 1): "
    assert p.fix == "on node3: check the driver (dmesg, the tool's own log)"


def test_two_npus_with_a_health_warning(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, **{"npu-smi": NPU_SMI})
    assert (inv.kind, inv.count, inv.describe()) == ("ascend", 8, "8 NPUs")
    assert [u.describe() for u in inv.unhealthy] == ["NPU 3 (xxx): Health Warning",
                                                     "NPU 7 (xxx): Health Warning"]
    # no torch_npu here: the framework's own failure is said too, the fix is the NPUs'
    dev = DeviceFacts.read(answer("envprobe.py", "devices", npu=True))
    assert dev.error is not None and dev.error.startswith("torch_npu not importable: ")
    p = inventory.judge_accelerators("node1", inv, dev)
    assert p is not None and p.cause is AcceleratorCause.DEVICE_UNHEALTHY
    assert p.message.splitlines()[1:] == [
        "  NPU 3 (xxx): Health Warning (npu-smi info)",
        "  NPU 7 (xxx): Health Warning (npu-smi info)",
        f"  torch_npu: {dev.error}"]
    assert p.fix == f"on node1: {inventory.NPU_FIX}" and p.facts == {"npus_unhealthy": [3, 7]}

