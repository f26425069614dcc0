"""D. Checkpoint storage (CHECKLIST D1-D2): the output directory (--output-dir) is writable with
room on every node, and it is one shared volume: what a node writes, every node reads.
Verdicts: judge/storage/storejudge.py; the share matrix: measure/share.py."""

from __future__ import annotations

import pytest

from cluster_tests.core import outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, Declared, ProbeError
from cluster_tests.core.settings import Settings
from cluster_tests.judge.storage import storejudge
from cluster_tests.judge.storage.storejudge import DIR, DirFacts
from cluster_tests.measure.share import share_matrix

pytestmark = pytest.mark.storage


def node_probes(settings: Settings) -> list[Declared]:
    """The probes this section's tests ask of every node they touch (`Cluster.prefetch`)."""
    if not settings.storage.output_dir:
        return []
    return [(DIR, {"path": settings.storage.output_dir})]


def _output_dir(cluster: Cluster) -> str:
    path = cluster.settings.storage.output_dir
    if not path:
        pytest.skip("no --output-dir given (the checkpoint directory every node must share)")
    return path


def _dir(cluster: Cluster, node: str, path: str, check: ids.TestId) -> DirFacts:
    cluster.require(node)
    try:
        return cluster.probe(node, DIR, path=path)
    except ProbeError as exc:
        outcome.fail(exc.problem(check.item))


def test_output_dir(cluster: Cluster, node: str, record_property) -> None:
    """D1: the output directory exists, is writable, and has --min-free-gb free."""
    facts = _dir(cluster, node, _output_dir(cluster), ids.OUTPUT_DIR)
    if facts.usable:
        record_property("free_gb", f"{(facts.free_bytes or 0) / 1e9:.1f}")
        record_property("mount", storejudge.describe_mount(facts.mount))
    problem = storejudge.judge_dir(node, facts, cluster.settings.storage.min_free_gb)
    if problem is not None:
        outcome.fail(problem)


def test_output_shared(cluster: Cluster, pair: tuple[str, str]) -> None:
    """D2: a file written in the output directory on a is read back, identical, on b."""
    a, b = pair
    path = _output_dir(cluster)
    for n in dict.fromkeys(pair):
        if not _dir(cluster, n, path, ids.OUTPUT_SHARED).usable:
            pytest.skip(f"{path} is not a writable directory on {n}: see {ids.OUTPUT_DIR.of(n)}")
    m = share_matrix(cluster, path)
    for n in dict.fromkeys(pair):
        if n in m.errors:
            outcome.fail(storejudge.probe_failed(a, b, n, m.errors[n]))
    problem = storejudge.judge_shared(a, b, path, m.writes[a], m.reads[b].get(a), m.tokens[a],
                                      _dir(cluster, a, path, ids.OUTPUT_SHARED),
                                      _dir(cluster, b, path, ids.OUTPUT_SHARED))
    if problem is not None:
        outcome.fail(problem)
