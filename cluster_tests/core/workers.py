"""What the pytest-xdist worker processes share: probe results, and what each did and learnt.

The controller makes a directory for the run; under it, the first worker that needs a probe runs
it and the others read its result (:class:`SharedResults`, which `Cluster.probe` uses when it is
set).  Each worker sends its node facts and counters back when it is done, and the controller,
which alone writes the summary, JSON and HTML, merges them (:class:`XdistPlugin`,
:func:`node_facts`, :func:`remote_counts`).  The checks are distributed by file (one section per
worker at a time), so that the whole-cluster phases (port matrix, shared-storage matrix,
all-reduce, training) run once, not once per worker.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cluster_tests.core.nodetable import NodeTable

if TYPE_CHECKING:
    from cluster_tests.core.cluster import Cluster

# What the xdist workers did and learnt (node facts, logins, probes), merged on the controller.
WORKERS_KEY = pytest.StashKey[dict[str, Any]]()


class SharedResults:
    """Results shared by the worker processes through a directory: the first process that asks
    for a key computes it and writes the result (or its error) there, under a file lock; the
    others wait for the lock and read it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def get(self, key: tuple[str, ...], compute: Callable[[], Any],
            errors: type[Exception]) -> tuple[Any, str | None, bool]:
        """(result, error text, whether it was read from another process): an exception of
        `errors` that `compute` raises is shared as its text."""
        name = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]
        path = self.directory / f"{name}.json"
        read = False
        with open(self.directory / f"{name}.lock", "w") as lock:
            while True:  # short waits, so that Ctrl-C is not held up (see remote.wait_result)
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    time.sleep(0.05)
            try:
                if path.exists():
                    stored = json.loads(path.read_text())
                    read = True
                else:
                    try:
                        stored = {"data": compute()}
                    except errors as exc:
                        stored = {"probe_error": str(exc)}
                    tmp = path.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_text(json.dumps(stored))
                    os.replace(tmp, path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        return stored.get("data"), stored.get("probe_error"), read


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
        config.stash[WORKERS_KEY] = {"stats": {}, "logged_in": set(), "facts": NodeTable(),
                                     "workers": 0}
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
        merged["workers"] += 1
        for k, v in got.get("stats", {}).items():
            merged["stats"][k] = merged["stats"].get(k, 0) + v
        merged["logged_in"] |= set(got.get("logged_in", []))
        merged["facts"].merge(got.get("facts", {}), {
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
    workers: NodeTable = config.stash.get(WORKERS_KEY, {}).get("facts", NodeTable())
    facts = NodeTable({n: dict(r) for n, r in workers.items()}, workers.layout)
    if cluster is not None:
        mine = cluster.node_table()
        facts.merge(mine, mine.layout)
    names = cluster.names if cluster else []
    return NodeTable({n: facts[n] for n in names if n in facts}, facts.layout)


def remote_counts(config: pytest.Config, cluster: Cluster) -> dict[str, object]:
    """SSH logins and probes of this run, all processes together (for the JSON meta)."""
    workers: dict[str, Any] = config.stash.get(
        WORKERS_KEY, {"stats": {}, "logged_in": set(), "workers": 0})
    stats = {k: v + workers["stats"].get(k, 0) for k, v in cluster.stats.items()}
    return {**stats, "logged_in": sorted(cluster.logged_in | workers["logged_in"]),
            "xdist_workers": workers["workers"]}
