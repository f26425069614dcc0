"""E2/E3 over the whole cluster: the communication settings every node's ranks get (each
node's own non-interactive shell under what the launch exports from the rank-0 node) and the
versions on every node, each gathered once for the session (in parallel) and kept in the memo."""

from __future__ import annotations

from cluster_tests.core.cluster import Cluster, ProbeError
from cluster_tests.core.memokey import MemoKey
from cluster_tests.core.transport import ConnectError
from cluster_tests.judge.env import envvars
from cluster_tests.judge.env.envvars import ENVFILES, VERSIONS, Versions
from cluster_tests.measure import rehearsal

#: node -> the NCCL_/HCCL_/GLOO_ values its ranks get (E2)
COMM_TABLE: MemoKey[dict[str, dict[str, str | None]]] = MemoKey("envcheck", "comm_table")
#: node -> its versions (E3), for the reachable nodes whose probe worked
NODE_VERSIONS: MemoKey[dict[str, Versions]] = MemoKey("envcheck", "versions")


def launch_overlay(cluster: Cluster) -> dict[str, str]:
    """NCCL_/HCCL_/GLOO_ values that the launch itself sets on every rank: what deepspeed on the
    rank-0 node exports (its environment by DeepSpeed's prefixes, and its `.deepspeed_env`);
    where the rehearsal could not compute that, the rank-0 node's `.deepspeed_env` alone."""
    r = rehearsal.rehearse(cluster)
    if r.exports:
        return {k: envvars.unquote_export(v) for k, v in r.exports.items()
                if k.startswith(envvars.COMM_PREFIXES)}
    try:
        files = cluster.probe(cluster.rank0.name, ENVFILES,
                              launch_dir=cluster.settings.env.launch_dir)
    except (ProbeError, ConnectError):  # rank 0 is down: its own red says so
        return {}
    out: dict[str, str] = {}
    for text in files.present.values():
        out.update({k: v for k, v in envvars.parse_deepspeed_env(text).items()
                    if k.startswith(envvars.COMM_PREFIXES)})
    return out


def comm_table(cluster: Cluster) -> dict[str, dict[str, str | None]]:
    """node -> the NCCL_/HCCL_/GLOO_ values its ranks get: its own non-interactive shell's,
    overridden by what the launch exports from the rank-0 node (those are the same everywhere,
    so only a node's own extra or different settings can differ)."""
    def compute() -> dict[str, dict[str, str | None]]:
        overlay = launch_overlay(cluster)
        table: dict[str, dict[str, str | None]] = {}
        for n in cluster.names:
            facts = cluster.base_or_none(n)
            if facts is None:
                continue
            table[n] = {**envvars.comm_vars(facts.env), **overlay}
        return table
    return cluster.memo(COMM_TABLE, compute)


def versions(cluster: Cluster) -> dict[str, Versions]:
    """Versions on every reachable node, once: from the rehearsal's import where its leg ran (the
    launch's interpreter, exports and directory, through pdsh: one interpreter start and one
    `import torch` per node serve E3 and E5 together); elsewhere (a node outside the launch, a leg
    that hung or never ran, a launch that cannot start) probed over our ssh, in parallel, with the
    launch's interpreter where the rank-0 node tells it, else with --remote-python."""
    def compute() -> dict[str, Versions]:
        up = [n for n in cluster.names if cluster.login_error(n) is None]
        got = rehearsed_versions(cluster)
        rest = [n for n in up if n not in got]
        probed = cluster.pool.map(lambda n: versions_probe(cluster, n), rest)
        got.update({n: v for n, v in zip(rest, probed, strict=False)
                    if not isinstance(v, BaseException)})
        return {n: got[n] for n in up if n in got}
    return cluster.memo(NODE_VERSIONS, compute)


def rehearsed_versions(cluster: Cluster) -> dict[str, Versions]:
    """node -> E3's versions as the rehearsal's import reported them (rehearse.py, `versions`),
    for the nodes whose leg delivered its report."""
    r = rehearsal.rehearse(cluster)
    return {n: leg.data.versions for n, leg in r.legs.items()
            if leg.data is not None and leg.data.versions is not None}


def versions_probe(cluster: Cluster, node: str) -> Versions:
    """E3's probe of one node (raises ProbeError), run by the launch's interpreter."""
    python = rehearsal.launch_python(cluster)
    return cluster.probe(node, VERSIONS, **({"python": python} if python else {}),
                         timeout=max(120, cluster.settings.timeout_command))
