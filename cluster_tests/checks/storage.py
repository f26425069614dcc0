"""D. Checkpoint storage (CHECKLIST D1-D2): the output directory (--output-dir) is writable with
room on every node, and it is one shared volume: what a node writes, every node reads."""

from __future__ import annotations

from typing import Any

import pytest

from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, NodeProbe, ProbeError
from cluster_tests.core.settings import Settings
from cluster_tests.measure.share import SCRIPT, share_matrix

pytestmark = pytest.mark.storage


def node_probes(settings: Settings) -> list[NodeProbe]:
    """The probes this section's tests ask of every node they touch (`Cluster.prefetch`)."""
    if not settings.storage.output_dir:
        return []
    return [(SCRIPT, "dir", {"path": settings.storage.output_dir})]


def _output_dir(cluster: Cluster) -> str:
    path = cluster.settings.storage.output_dir
    if not path:
        pytest.skip("no --output-dir given (the checkpoint directory every node must share)")
    return path


def _dir(cluster: Cluster, node: str, path: str) -> dict[str, Any]:
    cluster.require(node)
    try:
        return cluster.probe(node, "dir", script=SCRIPT, path=path)
    except ProbeError as exc:
        pytest.fail(str(exc), pytrace=False)


def _mount(info: dict[str, Any]) -> str:
    m = info.get("mount")
    return f"{m[2]} ({m[1]}) mounted at {m[0]}" if m else "unknown mount"


def test_output_dir(cluster: Cluster, node: str, record_property) -> None:
    """D1: the output directory exists, is writable, and has --min-free-gb free."""
    path = _output_dir(cluster)
    info = _dir(cluster, node, path)
    if not info["exists"] or not info["is_dir"]:
        what = "does not exist" if not info["exists"] else "is not a directory"
        pytest.fail(f"{node}: output directory {path} {what} there.\n"
                    f"  fix, on {node}: mount the shared volume at {path} (or mkdir -p {path} "
                    f"if it lives on a volume already shared)", pytrace=False)
    if not info["writable"]:
        pytest.fail(f"{node}: cannot create a file in {path}: {info['error']} ({_mount(info)}).\n"
                    f"  fix, on {node}: chown/chmod it for the login user, "
                    f"or remount it read-write",
                    pytrace=False)
    free_gb = (info["free_bytes"] or 0) / 1e9
    need = cluster.settings.storage.min_free_gb
    record_property("free_gb", f"{free_gb:.1f}")
    record_property("mount", _mount(info))
    if info["free_bytes"] is not None and free_gb < need:
        pytest.fail(f"{node}: {path} has {free_gb:.1f} GB free, less than --min-free-gb {need:g} "
                    f"({_mount(info)}); checkpoints would fail half-written.\n"
                    f"  fix: free space on that volume, or point --output-dir elsewhere",
                    pytrace=False)


def test_output_shared(cluster: Cluster, pair: tuple[str, str]) -> None:
    """D2: a file written in the output directory on a is read back, identical, on b."""
    a, b = pair
    path = _output_dir(cluster)
    for n in dict.fromkeys(pair):
        info = _dir(cluster, n, path)
        if not info["is_dir"] or not info["writable"]:
            pytest.skip(f"{path} is not a writable directory on {n}: see {ids.OUTPUT_DIR.of(n)}")
    m = share_matrix(cluster, path)
    for n in dict.fromkeys(pair):
        if n in m.errors:
            pytest.fail(f"{a} -> {b}: the probe on {n} failed: {m.errors[n]}", pytrace=False)
    w = m.writes[a]
    if not w.get("ok"):
        pytest.fail(f"{a}: could not write {w['file']}: {w.get('error')}", pytrace=False)
    got = m.reads[b].get(a, {})
    if got.get("found") and got.get("content") == m.tokens[a]:
        return
    ia, ib = _dir(cluster, a, path), _dir(cluster, b, path)
    what = (f"{b} finds no such file ({got.get('error')})" if not got.get("found")
            else f"{b} reads different content")
    pytest.fail(
        f"{a} -> {b}: a file written in {path} on {a} ({w['file']}) is not there on {b}: {what}.\n"
        f"  {a}: {_mount(ia)}\n  {b}: {_mount(ib)}\n"
        f"  {path} is not one shared volume: checkpoints saved by one node would be missing on "
        f"the other (and a resume would load stale or no weights).\n"
        f"  fix: mount the same volume at {path} on every node (on {b}: mount "
        f"{(ia.get('mount') or ['', '', '<server:/export>'])[2]} {path})",
        pytrace=False)
