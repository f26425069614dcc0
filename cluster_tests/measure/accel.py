"""A node's accelerator inventory (A1's facts, read by H4, E4, C1/C2 and T): the `accelerators`
probe section, read into judge/accelerator/inventory's Inventory, once per node for the session."""

from __future__ import annotations

from cluster_tests.core.cluster import Cluster
from cluster_tests.core.memokey import MemoKey
from cluster_tests.judge.accelerator.inventory import ACCELERATORS, Inventory

#: per node: INVENTORY(node)
INVENTORY: MemoKey[Inventory] = MemoKey("inventory")


def inventory(cluster: Cluster, node: str) -> Inventory:
    return cluster.memo(INVENTORY(node), lambda: cluster.probe(node, ACCELERATORS))
