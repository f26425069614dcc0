"""A. Accelerators (CHECKLIST A1): the node's accelerators are visible and healthy, and the
framework the launch uses can allocate on each of them."""

from __future__ import annotations

import pytest

from cluster_tests.core import nodetable
from cluster_tests.core.cluster import Cluster, Declared, ProbeError
from cluster_tests.core.nodetable import NodeColumn
from cluster_tests.core.settings import Settings
from cluster_tests.judge.common.probes import untyped
from cluster_tests.measure import accel

pytestmark = pytest.mark.accelerator


def node_probes(settings: Settings) -> list[Declared]:
    """The probes this section's tests ask of every node they touch (`Cluster.prefetch`)."""
    return [(untyped("probe.py", "accelerators"), {})]


def _accelerators_column(cluster: Cluster, node: str) -> str | None:
    inv = cluster.cached(accel.INVENTORY(node))
    return inv.describe() if inv is not None else None


nodetable.declare(NodeColumn("accelerators", _accelerators_column, rank=4))


def test_accelerators(cluster: Cluster, node: str, record_property) -> None:
    """A1: nvidia-smi / npu-smi list the devices, all healthy; torch allocates on each."""
    cluster.require(node)
    try:
        inv = accel.inventory(cluster, node)
    except ProbeError as exc:
        pytest.fail(str(exc), pytrace=False)
    record_property("accelerators", inv.describe())
    problems = list(inv.problems)
    problems += [f"{u} (npu-smi info)" for u in inv.unhealthy]
    if inv.kind == "cpu":
        if problems:
            pytest.fail(f"{node}: a vendor tool exists but fails:\n  " + "\n  ".join(problems)
                        + f"\n  fix, on {node}: check the driver (dmesg, the tool's own log)",
                        pytrace=False)
        return  # CPU only: nothing to allocate on; H4 compares slots with the CPU count
    try:
        dev = cluster.probe(node, "devices", script="envprobe.py", npu=inv.kind == "ascend",
                            timeout=max(120, cluster.settings.timeout_command))
    except ProbeError as exc:
        pytest.fail(str(exc), pytrace=False)
    framework = "torch_npu" if inv.kind == "ascend" else "torch (CUDA)"
    record_property("framework_devices", str(dev.get("count")))
    if dev.get("error"):
        problems.append(f"{framework}: {dev['error']}")
    elif dev.get("count", 0) < inv.count:
        build = f"torch {dev.get('torch')}" if dev.get("torch") else "torch"
        kind = 'CUDA' if inv.kind == 'nvidia' else 'NPU'
        problems.append(f"{build} sees {dev.get('count', 0)} {kind} device(s) where the vendor "
                        f"tool lists {inv.count} (a CPU-only build, CUDA_VISIBLE_DEVICES/"
                        f"ASCEND_RT_VISIBLE_DEVICES, or a driver/runtime mismatch)")
    problems += [f"{framework} device {d['index']}: allocation failed: {d['error']}"
                 for d in dev.get("devices", []) if not d["ok"]]
    if problems:
        pytest.fail(
            f"{node}: {inv.describe()}, not all usable:\n  " + "\n  ".join(problems)
            + f"\n  fix, on {node}: "
            + ("npu-smi info -t health -i <id> for the cause; reset or replace the card "
               "(npu-smi set -t reset -i <id> -c 0), or leave it out with --exclude"
               if inv.unhealthy else
               "install the framework build that matches the driver into the remote python, "
               "and check the *_VISIBLE_DEVICES variables in ~/.bashrc"),
            pytrace=False)
