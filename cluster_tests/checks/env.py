"""E. Environment (CHECKLIST E1-E6): what a NON-interactive ssh shell (pdsh's) gets on every
node: the variables and tools the launch needs, the same communication settings and versions
everywhere, on Ascend the HCCL settings and NPU links, (E5) a rehearsal of the launch's own
per-node step: from the rank-0 node, through pdsh, DeepSpeed's exports, `cd` and interpreter,
importing what the launch imports, (E6) the temporary directory the ranks' tools write to, and
(E7) what the first step builds: DeepSpeed's JIT ops, their build locks and their toolchain."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from cluster_tests.core import nodetable, outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, Declared, ProbeError
from cluster_tests.core.memokey import MemoKey
from cluster_tests.core.nodetable import NodeColumn
from cluster_tests.core.settings import Settings
from cluster_tests.core.transport import ConnectError
from cluster_tests.judge.common import tooloutput
from cluster_tests.judge.common.probes import untyped
from cluster_tests.judge.env import envvars
from cluster_tests.judge.env import jit as jj
from cluster_tests.judge.health import rdma
from cluster_tests.judge.problem import Problem
from cluster_tests.measure import accel, envfacts, rehearsal, sshroot
from cluster_tests.measure.envfacts import SCRIPT

pytestmark = pytest.mark.env

#: E7's verdicts for every node, judged once from the rehearsal (not once per node's item)
JIT_VERDICTS: MemoKey[dict[str, jj.JitVerdict]] = MemoKey("jit", "verdicts")
#: per table kind and node set: the values most nodes have (E2, E3), once, not once per node
MAJORITIES: MemoKey[dict[str, object]] = MemoKey("env", "majorities")
#: E3's tables across the nodes, built once (per node they made E3 quadratic in the nodes)
VERSION_TABLE: MemoKey[dict[str, dict[str, Any]]] = MemoKey("env", "version_table")
IMPORTED: MemoKey[dict[str, dict[str, Any]]] = MemoKey("env", "imported")
IMPORTED_TABLE: MemoKey[dict[str, dict[str, Any]]] = MemoKey("env", "imported_table")


def _differing(cluster: Cluster, kind: str, table: dict[str, dict[str, Any]],
               node: str) -> list[str]:
    """envvars.differing for `node`, the majorities computed once per kind of table and set of
    nodes (the tables are built from memoized facts: the same nodes give the same table)."""
    prefer = cluster.rank0.name
    most = cluster.memo(MAJORITIES(kind, str(hash(tuple(table)))),
                        lambda: envvars.majorities(table, prefer))
    return envvars.differing(table, node, prefer=prefer, most=most)


def node_probes(settings: Settings) -> list[Declared]:
    """The probes this section's tests ask of every node they touch (`Cluster.prefetch`)."""
    return [(untyped(SCRIPT, "envfiles"), {"launch_dir": settings.env.launch_dir})]


#: the tests of this section that read the rehearsal (E5's run also carries E3's versions)
REHEARSAL_READERS = frozenset(t.name for t in (ids.DEEPSPEED_ENV, ids.VERSIONS,
                                                ids.LAUNCH_REHEARSAL, ids.TMPDIR, ids.JIT_OPS))


def session_start(cluster: Cluster, selected: frozenset[str]) -> None:
    """After collection (`selected`: the test functions' names): start the rehearsal in the
    background when one of its readers runs, so that its imports overlap the S, N and F checks
    (S4's ssh matrix included)."""
    if selected & REHEARSAL_READERS:
        rehearsal.start_background(cluster)


#: E3's versions: compared across nodes, and node-table columns shown where they differ
VERSION_KEYS = ("python", "torch", "cuda", "nccl", "deepspeed", "torch_npu", "cann",
                "nvidia_driver", "ascend_driver")
#: the node table's order of the versions that have one (the rest follow by name)
_VERSION_RANKS = {"python": 6, "torch": 7, "deepspeed": 8}


def _version_column(key: str) -> NodeColumn:
    def read(cluster: Cluster, node: str) -> str | None:
        value = ((cluster.cached(envfacts.VERSIONS) or {}).get(node) or {}).get(key)
        return str(value) if value else None

    return NodeColumn(key, read, rank=_VERSION_RANKS.get(key, nodetable.LAST), varying_only=True)


nodetable.declare(*(_version_column(k) for k in VERSION_KEYS))


class EnvWarning(UserWarning):
    """Works, but departs from the field guide."""


def _probe(cluster: Cluster, node: str, section: str, **params: Any) -> dict[str, Any]:
    cluster.require(node)
    try:
        return cluster.probe(node, section, script=SCRIPT, **params)
    except ProbeError as exc:
        pytest.fail(str(exc), pytrace=False)


def _envfiles(cluster: Cluster, node: str) -> dict[str, Any]:
    return _probe(cluster, node, "envfiles", launch_dir=cluster.settings.env.launch_dir)


def _required(cluster: Cluster) -> list[str]:
    raw = cluster.settings.env.required_env
    return [v.strip() for v in raw.split(",") if v.strip()]


def test_required_env(cluster: Cluster, node: str) -> None:
    """E1: pdsh's non-interactive shell finds the remote python, `deepspeed`, and every
    variable named by --required-env."""
    facts = cluster.base(node)  # ran with the remote python: it was found
    env = facts.env
    missing = [v for v in _required(cluster) if v not in env]
    no_deepspeed = facts.which.get("deepspeed") is None
    if not missing and not no_deepspeed:
        return
    bashrc = _envfiles(cluster, node).get("bashrc")
    early = envvars.early_return_line(bashrc)
    if no_deepspeed and not missing:
        # the launch never looks deepspeed up on this PATH: it runs its own interpreter by
        # absolute path on every node; if that works here (E5), this is only a warning
        r = rehearsal.rehearse(cluster)
        if r.python and r.leg(node).kind == "ok":
            line = envvars.export_line(bashrc, "PATH")
            where = (f"; ~/.bashrc sets PATH on line {line}, below its early return for "
                     f"non-interactive shells on line {early}"
                     if early is not None and line is not None and line > early else
                     f"; ~/.bashrc returns early for non-interactive shells on line {early}"
                     if early is not None else "")
            warnings.warn(EnvWarning(
                f"{node}: `deepspeed` is not on the PATH of a non-interactive shell "
                f"({env.get('PATH', '(unset)')}){where}. The launch does not need it: it runs "
                f"{r.python} by absolute path on every node, and that works here (see "
                f"{ids.LAUNCH_REHEARSAL.of(node)}); scripts that call `deepspeed` or `python` "
                f"over ssh would not find them"), stacklevel=1)
            return
        # the launch's own interpreter fails there too (not installed on this node): E5's red
        _block_by_rehearsal(cluster, node, f"`deepspeed` is not on PATH there either "
                                           f"({env.get('PATH', '(unset)')})")
    problems = []
    if no_deepspeed:
        problems.append(f"`deepspeed` is not on PATH ({env.get('PATH', '(unset)')})")
    if missing:
        problems.append("not set: " + ", ".join(missing))
    hints = []
    for var in missing + (["PATH"] if no_deepspeed else []):
        line = envvars.export_line(bashrc, var)
        if early is not None and line is not None and line > early:
            hints.append(f"~/.bashrc sets {var} on line {line}, below the early return for "
                         f"non-interactive shells on line {early}: pdsh never sees it")
    if early is not None and not hints:
        hints.append(f"~/.bashrc returns early for non-interactive shells on line {early}")
    fix = (f"on {node}: move the exports above line {early} of ~/.bashrc (or delete that return)"
           if early is not None else
           f"on {node}: add the exports to ~/.bashrc (read by non-interactive ssh shells on Debian/"
           f"Ubuntu), or install deepspeed into the remote python's environment")
    pytest.fail(
        f"{node}: as pdsh's non-interactive shell sees it, " + "; ".join(problems) + "\n"
        + "".join(f"  {h}\n" for h in hints)
        + f"  python found there: {facts.python_executable} {facts.python_version}\n"
        f"  fix: {fix}", pytrace=False)


def test_env_agrees(cluster: Cluster, node: str) -> None:
    """E2: NCCL_*/HCCL_*/GLOO_* and `.deepspeed_env` entries agree across nodes."""
    cluster.base(node)
    table = envfacts.comm_table(cluster)
    if node not in table:
        pytest.fail(f"{node}: could not read its environment", pytrace=False)
    diff = _differing(cluster, "comm", table, node)
    if not diff:
        return
    pytest.fail(
        f"{node}: {len(diff)} setting(s) differ from what most nodes have "
        f"(as pdsh's non-interactive shell sees them):\n"
        + envvars.side_by_side(table, diff, mark=node)
        + "\n  note: these are the values the ranks get: deepspeed's pdsh command exports the "
        "rank-0 node's NCCL_* (CUDA) or HCCL_*/ASCEND_* (Ascend) variables and its "
        ".deepspeed_env to every rank (counted in above), so what differs is set by this node's "
        "own shell and not by the launch.\n"
        f"  fix: set the same values on every node (~/.bashrc above any early return), or put "
        f"them in ~/.deepspeed_env on {cluster.rank0.name}, which the launch exports everywhere",
        pytrace=False)


def _env_file_findings(files: dict[str, Any]) -> list[envvars.EnvFileFinding]:
    """E2's lint of the `.deepspeed_env` files a node has (home and launch directory)."""
    return [f for path, text in files["deepspeed_env"].items() if text is not None
            for f in envvars.lint_deepspeed_env(text, path)]


def _launch_blocked_by_env_file(cluster: Cluster, r: rehearsal.Rehearsal) -> str | None:
    """E2's red on the rank-0 node (its id) when the launch cannot start there because of the
    `.deepspeed_env` deepspeed reads on it, and E2 finds the lines that do it: then E5's red
    there, and E5 and E7 on every node, are that red's consequences (one cause, one red)."""
    if not r.site_env_file:
        return None
    try:
        files = cluster.probe(r.site, "envfiles", script=SCRIPT,
                              launch_dir=cluster.settings.env.launch_dir)
    except (ProbeError, ConnectError):
        return None
    if not any(f.error for f in _env_file_findings(files)):
        return None
    return ids.DEEPSPEED_ENV.of(r.site)


def test_deepspeed_env(cluster: Cluster, node: str, record_property) -> None:
    """E2: `.deepspeed_env` (home and launch directory) reads the way DeepSpeed 0.19 reads it."""
    files = _envfiles(cluster, node)
    present = {p: t for p, t in files["deepspeed_env"].items() if t is not None}
    record_property("deepspeed_env", ", ".join(present) or "none")
    findings = _env_file_findings(files)
    for f in findings:
        if not f.error:
            warnings.warn(EnvWarning(f"{node}: {f}"), stacklevel=1)
    errors = [f for f in findings if f.error]
    if errors:
        pytest.fail(
            f"{node}: deepspeed reads {files['ds_env_name']} on the node it is started on "
            f"(rank 0: {cluster.rank0.name}) and would stop or export garbage:\n  "
            + "\n  ".join(map(str, errors)), pytrace=False)


def _imported(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """node -> {package: facts} as the launch's interpreter imports them (the rehearsal's), for
    the nodes whose rehearsal ran (built once)."""
    def compute() -> dict[str, dict[str, Any]]:
        r = rehearsal.rehearse(cluster)
        return {n: leg.data.get("packages") or {} for n, leg in r.legs.items() if leg.data}
    return cluster.memo(IMPORTED, compute)


def test_versions(cluster: Cluster, node: str, record_property) -> None:
    """E3: Python, torch, deepspeed, torch_npu, NCCL/HCCL, CUDA/CANN, driver agree across nodes;
    and what the launch's interpreter imports (the rehearsal's: `__version__` and file) is the
    installed distribution, the same version on every node."""
    cluster.require(node)
    versions = envfacts.versions(cluster)
    if node not in versions:
        try:  # re-raise this node's own failure
            mine = envfacts.versions_probe(cluster, node)
        except ProbeError as exc:
            _block_by_rehearsal(cluster, node, str(exc))
            pytest.fail(str(exc), pytrace=False)
        versions = {**versions, node: mine}
    mine = versions[node]
    for k in VERSION_KEYS:
        if mine.get(k):
            record_property(k, str(mine[k]))
    table = cluster.memo(VERSION_TABLE, lambda: {n: {k: v.get(k) for k in VERSION_KEYS}
                                                  for n, v in envfacts.versions(cluster).items()})
    if node not in table:  # its own probe, re-run above
        table = {**table, node: {k: mine.get(k) for k in VERSION_KEYS}}
    diff = _differing(cluster, "versions", table, node)
    problems = []
    if mine.get("torch_error"):
        problems.append(f"torch does not import with {mine['python_executable']}: "
                        f"{mine['torch_error']}")
    if diff:
        problems.append(f"{', '.join(diff)} differ from the other nodes:\n"
                        + envvars.side_by_side(table, [k for k in VERSION_KEYS if k in diff or any(
                            r.get(k) for r in table.values())], mark=node, secret_aware=False))
    imported = _imported(cluster)
    python = rehearsal.rehearse(cluster).python
    if node in imported:
        for pkg, p in imported[node].items():
            if p.get("imported"):
                record_property(f"imported_{pkg}", f"{p.get('version')} {p.get('file')}")
        problems += [f"with the launch's interpreter ({python}): {f}"
                     for f in envvars.import_findings(imported[node])]
        itable = cluster.memo(IMPORTED_TABLE, lambda: {
            n: {f"{k} (imported)": (v.get("version") if v.get("imported") else None)
                for k, v in pk.items()} for n, pk in imported.items()})
        idiff = _differing(cluster, "imported", itable, node)
        if idiff and len(itable) > 1:
            problems.append(f"the launch's interpreter ({python}) imports other versions here "
                            f"than on the other nodes:\n"
                            + envvars.side_by_side(itable, idiff, mark=node, secret_aware=False))
    if problems:
        _block_by_rehearsal(cluster, node, problems[0])
        pytest.fail(
            f"{node}: " + f"\n{node}: ".join(problems)
            + f"\n  fix, on {node}: install the same versions as the other nodes into the python "
            f"that pdsh's shell finds ({mine['python_executable']})"
            + (f" and the launch runs ({python})" if python and python != mine["python_executable"]
               else "")
            + ", e.g. pip install "
            + " ".join(f"{k}=={table[cluster.rank0.name].get(k)}" for k in ("torch", "deepspeed")
                       if cluster.rank0.name in table and table[cluster.rank0.name].get(k))
            + "; remove any stray copy that shadows them (the file named above)",
            pytrace=False)


def _block_by_rehearsal(cluster: Cluster, node: str, said: str) -> None:
    """E3 red on `node` where the launch's own step fails there for what E3 sees (a package
    missing, half-removed or shadowed; the interpreter absent): E5's red holds the cause, and
    E3 is blocked by it, saying what it saw."""
    leg = rehearsal.rehearse(cluster).leg(node)
    if leg.kind == "fail" and _launch_cannot_import(leg):
        outcome.block(ids.LAUNCH_REHEARSAL.of(node),
                      f"the launch's interpreter fails to import on {node} "
                      f"({said.strip().splitlines()[0]})")


def _launch_cannot_import(leg) -> bool:
    """Whether a rehearsal leg failed because the launch's interpreter could not run or import
    (not, say, because the launch directory is missing there)."""
    if leg.data is None:
        return True
    return any(not s.get("ok") for s in leg.data.get("steps", []))


def test_ascend_env(cluster: Cluster, node: str, record_property) -> None:
    """E4: HCCL settings reported, and every NPU's link up (`hccn_tool -i N -link -g`)."""
    facts = cluster.base(node)
    try:
        inv = accel.inventory(cluster, node)
    except ProbeError as exc:
        pytest.fail(str(exc), pytrace=False)
    if (inv is None or inv.kind != "ascend") and not facts.which.get("hccn_tool"):
        pytest.skip(f"{node}: not an Ascend node (no npu-smi listing NPUs, no hccn_tool)")
    devices = list(range(inv.count)) if inv is not None and inv.kind == "ascend" else []
    data = _probe(cluster, node, "ascend", devices=devices)
    for var in envvars.ASCEND_VARS:
        record_property(var, envvars.shown(var, data["env"].get(var)))
    unset = [v for v in envvars.ASCEND_VARS if v not in data["env"]]
    if unset:
        warnings.warn(EnvWarning(
            f"{node}: {', '.join(unset)} not set in pdsh's shell (the field guide sets "
            f"HCCL_CONNECT_TIMEOUT, e.g. 1200, for large clusters)"), stacklevel=1)
    if not data["hccn_tool"]:
        pytest.skip(f"{node}: hccn_tool not found: NPU link status not checked")
    down = []
    for dev, res in sorted(data["links"].items(), key=lambda kv: int(kv[0])):
        up = tooloutput.hccn_link_up(res["out"]) if res["rc"] == 0 else None
        if up is not True:
            said = res["out"].strip() or res["err"].strip() or f"exit {res['rc']}"
            down.append(f"NPU {dev}: {said}")
    if down:
        pytest.fail(f"{node}: NPU network links not up:\n  " + "\n  ".join(down)
                    + f"\n  fix, on {node}: check cabling/switch port; "
                      "hccn_tool -i N -net_health -g",
                    pytrace=False)


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
    for s in (leg.data or {}).get("steps", []):
        if s.get("step") == "import deepspeed.launcher.launch":
            record_property("import_seconds", s.get("seconds"))
    if leg.kind == "skip":
        _block_leg(cluster, r, node, leg)
        pytest.skip(leg.text)
    if leg.kind == "fail":
        env_file = _launch_blocked_by_env_file(cluster, r) if node == r.site else None
        if env_file is not None:
            outcome.block(env_file, f"deepspeed --hostfile would stop on {r.site} before "
                                    f"starting any rank: its .deepspeed_env")
        pytest.fail(leg.text + (f"\n  each node ran: {r.line}" if r.line else "")
                    + f"\n  the launch rehearsed: {rehearsal.command_line(cluster)}"
                    + (f"\n  fix: {leg.fix}" if leg.fix else ""), pytrace=False)


def _block_leg(cluster: Cluster, r: rehearsal.Rehearsal, node: str, leg) -> None:
    """A rehearsal leg skipped for another red's cause: blocked by the red that holds it (the
    node's own login, S4 from rank 0, S5's pdsh leg, E2's on the rank-0 node's
    .deepspeed_env), traced to its root."""
    if not leg.root:
        return
    site = r.site
    if leg.root == ids.PDSH.of(site, node):
        cluster.require(node)
        sshroot.block_by_trust(cluster, site, node)
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
    facts = (r.leg(node).data or {}).get("tmpdir")
    if facts is not None:
        facts = {**facts, "from_launch": exported is not None}
    else:
        launch_value = envvars.unquote_export(exported) if exported is not None else None
        facts = _probe(cluster, node, "tmpdir", tmpdir=launch_value)
    eff = facts.get("effective") or {}
    if eff:
        record_property("tmpdir",
                        f"{eff.get('path')} ({rdma.fmt_bytes(eff.get('free_bytes'))} free)")
    verdict = envvars.judge_tmpdir(facts, _envfiles(cluster, node).get("bashrc"))
    for text in verdict.warnings:
        warnings.warn(EnvWarning(f"{node}: {text}"), stacklevel=1)
    if verdict.problems:
        pytest.fail(f"{node}: " + f"\n{node}: ".join(verdict.problems), pytrace=False)


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
    if not (leg.data or {}).get("jit"):
        if leg.kind == "fail":
            env_file = _launch_blocked_by_env_file(cluster, r) if node == r.site else None
            if env_file is not None:
                outcome.block(env_file, f"the launch cannot start on {node}: its .deepspeed_env")
            outcome.block(ids.LAUNCH_REHEARSAL.of(node), f"the launch's step fails on {node}")
        pytest.skip(f"{node}: the launch's interpreter did not import deepspeed and torch there, "
                    f"so what it builds is unknown: see {ids.LAUNCH_REHEARSAL.of(node)}")
    verdicts = cluster.memo(JIT_VERDICTS, lambda: jj.judge_jit(
        {n: (r.leg(n).data or {}).get("jit") for n in cluster.names}, cluster.names,
        python=r.python))
    verdict = verdicts[node]
    for key, value in verdict.facts.items():
        record_property(key, value)
    record_property("inspect_seconds", (leg.data or {})["jit"].get("seconds"))
    for text in verdict.warnings:
        warnings.warn(EnvWarning(f"{node}: {text}"), stacklevel=1)
    blocked = (f"blocked by {ids.JIT_OPS.of(verdict.blocked_by)}: {verdict.blocked_text}"
               if verdict.blocked_by else "")
    if verdict.problems:
        outcome.fail(Problem(
            (node,), verdict.problems[0].split(":")[0][:100],
            f"{node}: " + f"\n{node}: ".join(verdict.problems)
            + (f"\n{node}: also {blocked}" if blocked else ""),
            fixes=tuple(verdict.fixes), item="E7",
            # a stale lock in a shared directory stops the ranks of every node that shares it
            breaks=tuple(n for n, v in verdicts.items() if v.blocked_by == node)))
    if verdict.blocked_by:
        outcome.block(ids.JIT_OPS.of(verdict.blocked_by), verdict.blocked_text)
        pytest.skip(blocked)
