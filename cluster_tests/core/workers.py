"""What the pytest-xdist worker processes share: probe results, and what each did and learnt.

The controller makes a directory for the run; under it, the first worker that needs a probe runs
it and the others read its result (core.sharedresults, which `Cluster.probe` uses when it is
set).  Each worker sends its node facts and counters back when it is done, and the controller,
which alone writes the summary, JSON and HTML, merges them (:class:`XdistPlugin`,
:func:`node_facts`, :func:`remote_counts`).  The checks are distributed by file (one section per
worker at a time), so that the whole-cluster phases (port matrix, shared-storage matrix,
all-reduce, training) run once, not once per worker.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cluster_tests.core.nodetable import NodeTable
from cluster_tests.core.sharedresults import SharedResults

if TYPE_CHECKING:
    from cluster_tests.core.cluster import Cluster


@dataclass
class WorkersDid:
    """What the xdist workers did and learnt, merged on the controller."""

    #: their counters (Cluster.stats), summed
    stats: dict[str, int] = field(default_factory=dict)
    logged_in: set[str] = field(default_factory=set)
    facts: NodeTable = field(default_factory=NodeTable)
    #: how many workers reported
    workers: int = 0


WORKERS_KEY = pytest.StashKey[WorkersDid]()


class XdistPlugin:
    """pytest-xdist: the controller makes the shared directory and hands it to each worker; each
    worker sends back what it did (counters, logins, node facts) and the controller merges it."""

    def __init__(self, config: pytest.Config, cluster: Cluster) -> None:
        self.config = config
        self.cluster = cluster
        self.shared: str | None = None

    @classmethod
    def setup(cls, config: pytest.Config, cluster: Cluster) -> None:
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None:
            if workerinput.get("ct_shared_dir"):
                cluster.shared = SharedResults(Path(workerinput["ct_shared_dir"]))
        elif getattr(config.option, "dist", "no") in ("load", "worksteal", "loadgroup"):
            config.option.dist = "loadfile"
        config.stash[WORKERS_KEY] = WorkersDid()
        config.pluginmanager.register(cls(config, cluster), "cluster_tests_xdist")

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:  # controller, once per worker
        if self.shared is None:
            self.shared = tempfile.mkdtemp(prefix="cluster-tests-xdist-")
        node.workerinput["ct_shared_dir"] = self.shared

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:  # controller, once per worker
        got = getattr(node, "workeroutput", {}).get("ct_cluster") or {}
        merged = self.config.stash[WORKERS_KEY]
        merged.workers += 1
        for k, v in got.get("stats", {}).items():
            merged.stats[k] = merged.stats.get(k, 0) + v
        merged.logged_in |= set(got.get("logged_in", []))
        merged.facts.merge(got.get("facts", {}), {
            k: (int(r), bool(v)) for k, (r, v) in got.get("columns", {}).items()})

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workeroutput"):  # a worker: hand what it did to the controller
            table = self.cluster.node_table()
            self.config.workeroutput["ct_cluster"] = {
                "stats": dict(self.cluster.stats), "logged_in": sorted(self.cluster.logged_in),
                "facts": dict(table), "columns": table.layout}

    def pytest_unconfigure(self) -> None:
        if self.shared is not None:
            shutil.rmtree(self.shared, ignore_errors=True)


def node_facts(config: pytest.Config, cluster: Cluster | None) -> NodeTable:
    """Per-node facts learnt by this process and (under xdist) by every worker, with the layout
    of their columns (declared by the sections, in the workers too)."""
    did = config.stash.get(WORKERS_KEY, None)
    workers = did.facts if did is not None else NodeTable()
    facts = NodeTable({n: dict(r) for n, r in workers.items()}, workers.layout)
    if cluster is not None:
        mine = cluster.node_table()
        facts.merge(mine, mine.layout)
    names = cluster.names if cluster else []
    return NodeTable({n: facts[n] for n in names if n in facts}, facts.layout)


def remote_counts(config: pytest.Config, cluster: Cluster) -> dict[str, object]:
    """SSH logins and probes of this run, all processes together (for the JSON meta)."""
    workers = config.stash.get(WORKERS_KEY, None) or WorkersDid()
    stats = {k: v + workers.stats.get(k, 0) for k, v in cluster.stats.items()}
    return {**stats, "logged_in": sorted(cluster.logged_in | workers.logged_in),
            "xdist_workers": workers.workers}
