"""E. Environment (CHECKLIST E1-E8): what a NON-interactive ssh shell (pdsh's) gets on every
node: the variables and tools the launch needs, the same communication settings and versions
everywhere, on Ascend the HCCL settings and NPU links, (E5) a rehearsal of the launch's own
per-node step: from the rank-0 node, through pdsh, DeepSpeed's exports, `cd` and interpreter,
importing what the launch imports, (E6) the temporary directory the ranks' tools write to,
(E7) what the first step builds: DeepSpeed's JIT ops, their build locks and their toolchain,
and (E8) the launch directory, its script and the files the launch names, as the launcher has
them. Verdicts: judge/env/ (envvars: E1-E4, E6; launchlegs: E5; jit: E7; launchfiles: E8);
the facts across the cluster: measure/envfacts.py (E2, E3), measure/rehearsal.py (E5, and what
E3, E6, E7 read) and measure/launchref.py (E8's launcher copy).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import TypeVar

import pytest

from cluster_tests.checks import block_by_trust
from cluster_tests.core import nodetable, outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, Declared, ProbeError
from cluster_tests.core.memokey import MemoKey
from cluster_tests.core.nodetable import NodeColumn
from cluster_tests.core.settings import Settings
from cluster_tests.core.transport import ConnectError
from cluster_tests.judge.common.probes import Probe
from cluster_tests.judge.env import envvars, launchfiles, launchlegs
from cluster_tests.judge.env import jit as jj
from cluster_tests.judge.env.envvars import ENVFILES, EnvFiles, Finding, Package, Versions
from cluster_tests.judge.env.launchfiles import LAUNCHFILES
from cluster_tests.judge.env.launchlegs import LaunchCause, Leg
from cluster_tests.judge.health import rdma
from cluster_tests.measure import accel, envfacts, launchref, rehearsal

pytestmark = pytest.mark.env

T = TypeVar("T")

#: E7's verdicts for every node, judged once from the rehearsal (not once per node's item)
JIT_VERDICTS: MemoKey[dict[str, jj.JitVerdict]] = MemoKey("jit", "verdicts")
#: per table kind and node set: the values most nodes have (E2, E3), once, not once per node
MAJORITIES: MemoKey[dict[str, str | None]] = MemoKey("env", "majorities")
#: E3's tables across the nodes, built once (per node they made E3 quadratic in the nodes)
VERSION_TABLE: MemoKey[dict[str, Mapping[str, str | None]]] = MemoKey("env", "version_table")
IMPORTED: MemoKey[dict[str, Mapping[str, Package]]] = MemoKey("env", "imported")
IMPORTED_TABLE: MemoKey[dict[str, dict[str, str | None]]] = MemoKey("env", "imported_table")


def _differing(cluster: Cluster, kind: str, table: envvars.Table, node: str) -> list[str]:
    """envvars.differing for `node`, the majorities computed once per kind of table and set of
    nodes (the tables are built from memoized facts: the same nodes give the same table)."""
    prefer = cluster.rank0.name
    most = cluster.memo(MAJORITIES(kind, str(hash(tuple(table)))),
                        lambda: envvars.majorities(table, prefer))
    return envvars.differing(table, node, prefer=prefer, most=most)


def node_probes(settings: Settings) -> list[Declared]:
    """The probes this section's tests ask of every node they touch (`Cluster.prefetch`)."""
    return [(ENVFILES, {"launch_dir": settings.env.launch_dir}),
            (LAUNCHFILES, launchref.params(settings))]


#: the tests of this section that read the rehearsal (E5's run also carries E3's versions)
REHEARSAL_READERS = frozenset(t.name for t in (ids.DEEPSPEED_ENV, ids.VERSIONS,
                                                ids.LAUNCH_REHEARSAL, ids.TMPDIR, ids.JIT_OPS))


def session_start(cluster: Cluster, selected: frozenset[str]) -> None:
    """After collection (`selected`: the test functions' names): start the rehearsal in the
    background when one of its readers runs, so that its imports overlap the S, N and F checks
    (S4's ssh matrix included)."""
    if selected & REHEARSAL_READERS:
        rehearsal.start_background(cluster)


#: the node table's order of the versions that have one (the rest follow by name)
_VERSION_RANKS = {"python": 6, "torch": 7, "deepspeed": 8}


def _version_column(key: str) -> NodeColumn:
    def read(cluster: Cluster, node: str) -> str | None:
        mine = (cluster.cached(envfacts.NODE_VERSIONS) or {}).get(node)
        return (mine.values.get(key) or None) if mine is not None else None

    return NodeColumn(key, read, rank=_VERSION_RANKS.get(key, nodetable.LAST), varying_only=True)


nodetable.declare(*(_version_column(k) for k in envvars.VERSION_KEYS))


class EnvWarning(UserWarning):
    """Works, but departs from the field guide."""


def _probe(cluster: Cluster, node: str, probe: Probe[T], check: ids.TestId, **params: object
           ) -> T:
    """`node`'s facts of `probe`; a probe that cannot deliver them is the red of `check`."""
    cluster.require(node)
    try:
        return cluster.probe(node, probe, **params)
    except ProbeError as exc:
        outcome.fail(exc.problem(check.item))


def _envfiles(cluster: Cluster, node: str, check: ids.TestId) -> EnvFiles:
    return _probe(cluster, node, ENVFILES, check, launch_dir=cluster.settings.env.launch_dir)


def _required(cluster: Cluster) -> list[str]:
    raw = cluster.settings.env.required_env
    return [v.strip() for v in raw.split(",") if v.strip()]


def test_required_env(cluster: Cluster, node: str) -> None:
    """E1: pdsh's non-interactive shell finds the remote python, `deepspeed`, and every
    variable named by --required-env."""
    facts = cluster.base(node)  # ran with the remote python: it was found
    missing = [v for v in _required(cluster) if v not in facts.env]
    deepspeed, path = facts.which.get("deepspeed"), facts.env.get("PATH")
    if not missing and deepspeed is not None:
        return
    bashrc = _envfiles(cluster, node, ids.REQUIRED_ENV).bashrc
    if deepspeed is None and not missing:
        # the launch never looks deepspeed up on this PATH: it runs its own interpreter by
        # absolute path on every node; if that works here (E5), this is only a warning
        r = rehearsal.rehearse(cluster)
        if r.python and r.leg(node).kind == "ok":
            warnings.warn(EnvWarning(envvars.deepspeed_off_path(
                node, path, bashrc, r.python, ids.LAUNCH_REHEARSAL.of(node))), stacklevel=1)
            return
        # the launch's own interpreter fails there too (not installed on this node): E5's red
        _block_by_rehearsal(cluster, node, f"`deepspeed` is not on PATH there either "
                                           f"({path if path is not None else '(unset)'})")
    problem = envvars.judge_required_env(node, missing, deepspeed, path, bashrc,
                                         f"{facts.python_executable} {facts.python_version}")
    if problem is not None:
        outcome.fail(problem)


def test_env_agrees(cluster: Cluster, node: str) -> None:
    """E2: NCCL_*/HCCL_*/GLOO_* and `.deepspeed_env` entries agree across nodes."""
    cluster.base(node)
    table = envfacts.comm_table(cluster)
    if node not in table:
        outcome.fail(envvars.env_unread(node))
    problem = envvars.judge_env_agrees(node, table, _differing(cluster, "comm", table, node),
                                       cluster.rank0.name)
    if problem is not None:
        outcome.fail(problem)


def _launch_blocked_by_env_file(cluster: Cluster, r: rehearsal.Rehearsal) -> str | None:
    """E2's red on the rank-0 node (its id) when the launch cannot start there because of the
    `.deepspeed_env` deepspeed reads on it, and E2 finds the lines that do it: then E5's red
    there, and E5 and E7 on every node, are that red's consequences (one cause, one red)."""
    if not r.site_env_file:
        return None
    try:
        files = cluster.probe(r.site, ENVFILES, launch_dir=cluster.settings.env.launch_dir)
    except (ProbeError, ConnectError):
        return None
    if not any(f.error for f in files.findings()):
        return None
    return ids.DEEPSPEED_ENV.of(r.site)


def test_deepspeed_env(cluster: Cluster, node: str, record_property) -> None:
    """E2: `.deepspeed_env` (home and launch directory) reads the way DeepSpeed 0.19 reads it,
    where the launch starts (it exports them to every rank: a broken line is launch-wide)."""
    files = _envfiles(cluster, node, ids.DEEPSPEED_ENV)
    record_property("deepspeed_env", ", ".join(files.present) or "none")
    site = cluster.rank0.name  # where the launch starts (the rehearsal's site)
    for f in files.findings():
        if not f.error:
            warnings.warn(EnvWarning(f"{node}: {f}"), stacklevel=1)
        elif node != site:
            warnings.warn(EnvWarning(envvars.env_file_not_read(node, f, site)), stacklevel=1)
    problem = envvars.judge_env_files(node, files, site)
    if problem is not None:
        outcome.fail(problem)


def _imported(cluster: Cluster) -> dict[str, Mapping[str, Package]]:
    """node -> {package: facts} as the launch's interpreter imports them (the rehearsal's), for
    the nodes whose rehearsal ran (built once)."""
    def compute() -> dict[str, Mapping[str, Package]]:
        r = rehearsal.rehearse(cluster)
        return {n: leg.data.packages for n, leg in r.legs.items() if leg.data is not None}
    return cluster.memo(IMPORTED, compute)


def _versions(cluster: Cluster, node: str) -> Versions:
    """`node`'s versions (the rehearsal's, or probed); its own probe's failure is its red."""
    versions = envfacts.versions(cluster)
    if node in versions:
        return versions[node]
    try:  # re-raise this node's own failure
        return envfacts.versions_probe(cluster, node)
    except ProbeError as exc:
        _block_by_rehearsal(cluster, node, exc.message)
        outcome.fail(exc.problem(ids.VERSIONS.item))


def _imported_findings(cluster: Cluster, node: str, python: str,
                       record_property) -> list[Finding]:
    """E3 on what the launch's interpreter imports on `node` (where its leg reported it)."""
    imported = _imported(cluster)
    if node not in imported:
        return []
    for pkg, p in imported[node].items():
        if p.imported:
            record_property(f"imported_{pkg}", f"{p.version} {p.file}")
    itable = cluster.memo(IMPORTED_TABLE, lambda: {n: envvars.imported_row(pk)
                                                   for n, pk in imported.items()})
    return envvars.imported_findings(node, imported[node], python, itable,
                                     _differing(cluster, "imported", itable, node))


def test_versions(cluster: Cluster, node: str, record_property) -> None:
    """E3: Python, torch, deepspeed, torch_npu, NCCL/HCCL, CUDA/CANN, driver agree across nodes;
    and what the launch's interpreter imports (the rehearsal's: `__version__` and file) is the
    installed distribution, the same version on every node."""
    cluster.require(node)
    mine = _versions(cluster, node)
    for k, v in mine.values.items():
        if v:
            record_property(k, v)
    table = cluster.memo(VERSION_TABLE, lambda: {n: v.values for n, v in
                                                 envfacts.versions(cluster).items()})
    if node not in table:  # its own probe, re-run above
        table = {**table, node: mine.values}
    findings = envvars.version_findings(node, mine, table,
                                        _differing(cluster, "versions", table, node))
    python = rehearsal.rehearse(cluster).python
    findings += _imported_findings(cluster, node, python, record_property)
    if findings:
        _block_by_rehearsal(cluster, node, findings[0].text)
        outcome.fail(envvars.versions_problem(node, findings, mine.python_executable, python,
                                              table.get(cluster.rank0.name) or {}))


def _block_by_rehearsal(cluster: Cluster, node: str, said: str) -> None:
    """E3 red on `node` where the launch's own step fails there for what E3 sees (a package
    missing, half-removed or shadowed; the interpreter absent): E5's red holds the cause, and
    E3 is blocked by it, saying what it saw."""
    if rehearsal.rehearse(cluster).leg(node).cannot_import:
        outcome.block(ids.LAUNCH_REHEARSAL.of(node),
                      f"the launch's interpreter fails to import on {node} "
                      f"({said.strip().splitlines()[0]})")


def test_ascend_env(cluster: Cluster, node: str, record_property) -> None:
    """E4: HCCL settings reported, and every NPU's link up (`hccn_tool -i N -link -g`)."""
    facts = cluster.base(node)
    try:
        inv = accel.inventory(cluster, node)
    except ProbeError as exc:
        outcome.fail(exc.problem(ids.ASCEND_ENV.item))
    if (inv is None or inv.kind != "ascend") and not facts.which.get("hccn_tool"):
        pytest.skip(f"{node}: not an Ascend node (no npu-smi listing NPUs, no hccn_tool)")
    devices = list(range(inv.count)) if inv is not None and inv.kind == "ascend" else []
    data = _probe(cluster, node, envvars.ASCEND, ids.ASCEND_ENV, devices=devices)
    for var in envvars.ASCEND_VARS:
        record_property(var, envvars.shown(var, data.env.get(var)))
    unset = [v for v in envvars.ASCEND_VARS if v not in data.env]
    if unset:
        warnings.warn(EnvWarning(
            f"{node}: {', '.join(unset)} not set in pdsh's shell (the field guide sets "
            f"HCCL_CONNECT_TIMEOUT, e.g. 1200, for large clusters)"), stacklevel=1)
    if not data.hccn_tool:
        pytest.skip(f"{node}: hccn_tool not found: NPU link status not checked")
    problem = envvars.judge_npu_links(node, data)
    if problem is not None:
        outcome.fail(problem)


def test_launch_rehearsal(cluster: Cluster, node: str, record_property) -> None:
    """E5: from the rank-0 node, through pdsh, `node` runs what `deepspeed --hostfile` runs there
    (DeepSpeed's exports, `cd <launch dir>`, the launching interpreter's absolute path) and
    imports deepspeed.launcher.launch, deepspeed, torch and its accelerator's backend."""
    r = rehearsal.rehearse(cluster)
    leg = r.leg(node)
    if r.python:
        record_property("launch_python", r.python)
        record_property("launch_dir", r.launch_dir)
        record_property("launch_command", rehearsal.command_line(cluster))
        record_property("rehearsal_seconds", round(r.seconds, 2))
    for s in leg.data.steps if leg.data is not None else ():
        if s.step == "import deepspeed.launcher.launch":
            record_property("import_seconds", s.seconds)
    if leg.kind == "skip":
        _block_leg(cluster, r, node, leg)
        pytest.skip(leg.text)
    if leg.kind == "fail":
        if leg.cause == LaunchCause.LAUNCH_DIR_MISSING:
            outcome.block(ids.LAUNCH_FILES.of(node), f"the launch directory {r.launch_dir} is "
                                                     f"missing on {node}")
        env_file = _launch_blocked_by_env_file(cluster, r) if node == r.site else None
        if env_file is not None:
            outcome.block(env_file, f"deepspeed --hostfile would stop on {r.site} before "
                                    f"starting any rank: its .deepspeed_env")
        outcome.fail(launchlegs.leg_problem(node, leg, r.line, rehearsal.command_line(cluster)))


def _block_leg(cluster: Cluster, r: rehearsal.Rehearsal, node: str, leg: Leg) -> None:
    """A rehearsal leg skipped for another red's cause: blocked by the red that holds it (the
    node's own login, S4 from rank 0, S5's pdsh leg, E2's on the rank-0 node's
    .deepspeed_env), traced to its root."""
    if not leg.root:
        return
    site = r.site
    if leg.root == ids.PDSH.of(site, node):
        cluster.require(node)
        block_by_trust(cluster, site, node)
    if leg.root == ids.LAUNCH_REHEARSAL.of(site):
        env_file = _launch_blocked_by_env_file(cluster, r)
        if env_file is not None:
            outcome.block(env_file, f"the launch cannot start on {site}: its .deepspeed_env")
    outcome.block(leg.root, leg.text.split(": see ")[0])


def test_tmpdir(cluster: Cluster, node: str, record_property) -> None:
    """E6: the temporary directory the ranks' tools really write to (TMPDIR as the launch gives
    it where usable, else the fallback Python, gcc and bash all settle on) takes a file and has
    room; an unusable TMPDIR is a warning."""
    r = rehearsal.rehearse(cluster)
    exported = r.exports.get("TMPDIR")
    # as the launch's own leg found them, with the rank's exports and environment (one Python
    # start-up fewer per node); where the leg did not report, a probe given the exported value
    data = r.leg(node).data
    if data is not None and data.tmpdir is not None:
        facts = dataclasses.replace(data.tmpdir, from_launch=exported is not None)
    else:
        launch_value = envvars.unquote_export(exported) if exported is not None else None
        facts = _probe(cluster, node, envvars.TMPDIR, ids.TMPDIR, tmpdir=launch_value)
    if facts.effective is not None:
        record_property("tmpdir", f"{facts.effective.path} "
                                  f"({rdma.fmt_bytes(facts.effective.free_bytes)} free)")
    verdict = envvars.judge_tmpdir(node, facts, _envfiles(cluster, node, ids.TMPDIR).bashrc)
    for text in verdict.warnings:
        warnings.warn(EnvWarning(f"{node}: {text}"), stacklevel=1)
    if verdict.problem is not None:
        outcome.fail(verdict.problem)


def test_jit_ops(cluster: Cluster, node: str, record_property) -> None:
    """E7: what the first step builds, as the launch's ranks meet it (the rehearsal's
    interpreter, exports and directory, on every node through pdsh): DeepSpeed's JIT ops for
    the accelerator, the extensions directory and Triton's cache (shared, writable, room), no
    stale build lock there (red once, on the first node that sees a shared one; the others are
    blocked by it), and `ninja` and the C++ compiler where an op is JIT-loaded."""
    r = rehearsal.rehearse(cluster)
    leg = r.leg(node)
    if leg.kind == "skip":
        _block_leg(cluster, r, node, leg)
        pytest.skip(leg.text)
    jit = leg.data.jit if leg.data is not None else None
    if jit is None:
        if leg.kind == "fail":
            env_file = _launch_blocked_by_env_file(cluster, r) if node == r.site else None
            if env_file is not None:
                outcome.block(env_file, f"the launch cannot start on {node}: its .deepspeed_env")
            outcome.block(ids.LAUNCH_REHEARSAL.of(node), f"the launch's step fails on {node}")
        pytest.skip(f"{node}: the launch's interpreter did not import deepspeed and torch there, "
                    f"so what it builds is unknown: see {ids.LAUNCH_REHEARSAL.of(node)}")
    verdicts = cluster.memo(JIT_VERDICTS, lambda: jj.judge_jit(
        r.jit_facts(cluster.names), cluster.names, python=r.python))
    verdict = verdicts[node]
    for key, value in verdict.facts.items():
        record_property(key, value)
    record_property("inspect_seconds", jit.seconds)
    for text in verdict.warnings:
        warnings.warn(EnvWarning(f"{node}: {text}"), stacklevel=1)
    problem = jj.jit_problem(node, verdicts)
    if problem is not None:
        outcome.fail(problem)
    if verdict.blocked_by:
        outcome.block(ids.JIT_OPS.of(verdict.blocked_by), verdict.blocked_text)
        pytest.skip(jj.blocked_line(verdict))


def test_launch_files(cluster: Cluster, node: str, record_property) -> None:
    """E8: the launch directory is on `node`, and there the script and every file or directory
    the launch command names, the same as on the launcher (digest, or listing with sizes)."""
    if node not in rehearsal.launch_hosts(cluster):
        pytest.skip(f"{node} is not in the launch (its --include/--exclude/--num_nodes)")
    s = cluster.settings
    facts = _probe(cluster, node, LAUNCHFILES, ids.LAUNCH_FILES, **launchref.params(s))
    record_property("launch_dir", facts.launch_dir)
    record_property("launch_files", " ".join(facts.paths) or "none")
    problem = launchfiles.judge_launch_files(node, facts, launchref.reference(cluster),
                                             launchref.script(s), cluster.rank0.name)
    if problem is not None:
        outcome.fail(problem)
