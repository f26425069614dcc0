"""A. Accelerators (CHECKLIST A1): the node's accelerators are visible and healthy, and the
framework the launch uses can allocate on each of them.
Verdict: judge/accelerator/inventory.py; the inventory other sections read: measure/accel.py."""

from __future__ import annotations

import pytest

from cluster_tests.core import nodetable, outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, Declared, ProbeError
from cluster_tests.core.nodetable import NodeColumn
from cluster_tests.core.settings import Settings
from cluster_tests.judge.accelerator import inventory
from cluster_tests.judge.accelerator.inventory import ACCELERATORS, DEVICES, DeviceFacts
from cluster_tests.measure import accel

pytestmark = pytest.mark.accelerator


def node_probes(settings: Settings) -> list[Declared]:
    """The probes this section's tests ask of every node they touch (`Cluster.prefetch`)."""
    return [(ACCELERATORS, {})]


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
        outcome.fail(exc.problem(ids.ACCELERATORS.item))
    record_property("accelerators", inv.describe())
    dev: DeviceFacts | None = None
    if inv.kind != "cpu":  # CPU only: nothing to allocate on; H4 compares slots with the CPUs
        try:
            dev = cluster.probe(node, DEVICES, npu=inv.kind == "ascend",
                                timeout=max(120, cluster.settings.timeout_command))
        except ProbeError as exc:
            outcome.fail(exc.problem(ids.ACCELERATORS.item))
        record_property("framework_devices", str(dev.count))
    problem = inventory.judge_accelerators(node, inv, dev)
    if problem is not None:
        outcome.fail(problem)
