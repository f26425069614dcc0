"""What the first step builds (CHECKLIST E7): pure judgement of the rehearsal's `jit` facts
(node/rehearse.py, read into :class:`JitFacts` where the leg's report arrives), tested in
tests/unit/test_judge_jit.py.

How torch and DeepSpeed behave (torch 2.x ``torch/utils/cpp_extension.py`` and
``file_baton.py``, DeepSpeed 0.19 ``ops/op_builder/builder.py``):

* ``OpBuilder.load()`` imports an op installed with DeepSpeed (``installed_ops``); any other op
  goes through ``jit_load()``, which first calls ``verify_ninja_availability()`` (``ninja
  --version`` on the process's PATH) and raises "Unable to JIT load the <op> op due to ninja not
  being installed" without it, then ``torch.utils.cpp_extension.load()``.
* ``load()`` builds in ``<root>/<op name>``, root being ``TORCH_EXTENSIONS_DIR`` as it is, else
  ``get_default_build_root()/py<maj><min>_<cpu|cuXY|rocmXY>``.  Each new process takes the build
  lock there (``FileBaton``: ``os.open(<dir>/lock, O_CREAT | O_EXCL)``, the fd kept open until
  it removes the file), runs ninja, which runs the compiler (``CXX`` or ``c++``) when anything
  is out of date, and removes the lock.  Every other process that finds the file **waits while it
  exists**, forever: a process killed while holding it leaves a plain file that no one removes,
  and every rank of every later launch waits on it.  So even an op built before needs ninja, a
  writable directory and no stale lock on every node that loads it.
* A lock is *held* while a process has it open (its builder, on some node) or ninja/the
  compiler runs in that op's directory.  A lock that no process on any node that sees it holds
  or builds in is stale: red, on the first node (hostfile order) that sees it, the other nodes
  that share the directory are blocked by that one.  A lock that a live build holds is a warning
  (not a bounded wait): the launch's ranks wait for that build and then go on.  A build on a
  machine outside the hostfile that shares the directory cannot be seen: the message says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.judge.common.fieldread import ByFields, by_fields
from cluster_tests.judge.common.fixcmd import q
from cluster_tests.judge.common.probes import (
    obj,
)
from cluster_tests.judge.env.envvars import Finding, node_problem
from cluster_tests.judge.health.rdma import fmt_bytes
from cluster_tests.judge.problem import Fix, Problem, SectionCause

#: room to build one op (objects and the .so of fused_adam / shm comm are a few MB; a CUDA op's
#: intermediates tens of MB)
MIN_FREE_BYTES = 256 << 20


class JitCause(SectionCause):
    """What can stop DeepSpeed building its ops at the launch, E7 (Problem.cause)."""

    JIT_NOT_INSPECTED = "JIT ops not inspected"
    NO_NINJA = "ninja not found"
    NO_COMPILER = "C++ compiler not found"
    EXT_DIR_UNWRITABLE = "extensions directory takes no file"
    EXT_DIR_FULL = "extensions directory short of space"
    TRITON_CACHE_UNWRITABLE = "Triton cache takes no file"
    STALE_LOCK = "stale JIT build lock"


@dataclass(frozen=True)
class Op(ByFields, what="an op"):
    """One of DeepSpeed's op builders the first step uses (`ops`)."""

    name: str  # "" where DeepSpeed could not create the builder
    compatible: bool
    prebuilt: bool  # installed with DeepSpeed: loaded without a build


@dataclass(frozen=True)
class JitDir(ByFields, what="a JIT directory"):
    """The extensions directory or Triton's cache as the launch's process finds it: a file
    really created and removed there (or in the nearest existing parent, `checked`)."""

    path: str
    source: str  # what names it: "TORCH_EXTENSIONS_DIR", "torch's default"...
    exists: bool = False
    checked: str = ""
    writable: bool = False
    write_error: str | None = None
    free_bytes: int | None = None
    ino: int | None = None
    entries: tuple[str, ...] = ()  # the extensions directory's ops (built before)
    installed: bool | None = None  # Triton's: importable

    @property
    def identity(self) -> tuple[str, int] | None:
        """The directory's identity across nodes, for the report: path and inode (the same on
        every client of one NFS/Lustre volume; its ctime is not, since each node's write test
        changes it). Two local directories at one path with one inode number (nodes cloned
        from one image) would read as shared; the locks' verdicts do not rest on this
        (:attr:`Lock.key`)."""
        return None if self.ino is None else (self.path, self.ino)


@dataclass(frozen=True)
class Holder:
    """A process that holds a build lock open, or builds in its op's directory."""

    pid: int
    holds: bool  # holds the lock's fd (else: runs in the op's directory)
    cmd: str

    @classmethod
    def read(cls, raw: object) -> Holder:
        d = obj(raw, "a lock's process")
        return by_fields(cls, d, holds=d.get("how") == "holds")

    def describe(self, node: str) -> str:
        how = "holds it open" if self.holds else "runs in its directory"
        return f"pid {self.pid} on {node} ({how}): {(self.cmd or '?')[:120]}"


@dataclass(frozen=True)
class Lock(ByFields, what="a build lock"):
    """A build lock (`<extensions dir>/<op>/lock`) and who holds or builds it there."""

    op: str
    path: str
    ino: int
    mtime_ns: int | None
    age_s: float | None
    activity_age_s: float | None  # since the op's files last changed
    processes: tuple[Holder, ...]

    @property
    def key(self) -> tuple[str, int, int | None]:
        """Its identity across nodes: path, inode and mtime in ns (set once when it was
        created, the same for every client of a shared volume)."""
        return (self.path, self.ino, self.mtime_ns)


@dataclass(frozen=True)
class Tool(ByFields, what="a tool"):
    """`ninja` or the C++ compiler, run (`--version`) as the launch's process finds it."""

    name: str
    path: str | None
    ok: bool
    version: str | None = None
    error: str | None = None
    from_env: bool = False  # the compiler: CXX names it

    def describe(self) -> str:
        if self.ok:
            return f"{self.path or self.name} ({self.version})"
        return f"{self.name}: not usable ({self.error or self.version or 'not found'})"


@dataclass(frozen=True)
class JitFacts(ByFields, what="the JIT facts"):
    """What the first step builds on one node (the rehearsal's `jit`)."""

    error: str | None = None  # the inspection itself failed
    ops: tuple[Op, ...] = ()
    ops_error: str | None = None  # DeepSpeed's op builders did not answer
    ext: JitDir = JitDir("", "")
    ext_error: str | None = None
    locks: tuple[Lock, ...] = ()
    triton: JitDir = JitDir("", "")
    ninja: Tool = Tool("ninja", None, False)
    cxx: Tool = Tool("c++", None, False)
    path: str | None = None  # the PATH the ranks get
    seconds: float | None = None

    def init_ops(self) -> list[str]:
        """The ops DeepSpeed itself JIT-loads here in init_distributed and for its Adam (what
        the training smoke job loads, with no op of the user's own): those it deems compatible
        and did not install prebuilt."""
        return [op.name for op in self.ops if op.name and op.compatible and not op.prebuilt]

    def to_load(self) -> list[str]:
        """The ops this node's ranks JIT-load (compiled here or loaded from the extensions
        directory, both through ninja and the lock): DeepSpeed's own (`init_ops`) and every op
        already in the extensions directory (a previous job built it; the next one loads it
        again)."""
        names = self.init_ops()
        prebuilt = {op.name for op in self.ops if op.prebuilt}
        names += [e for e in self.ext.entries
                  if e not in names and e not in prebuilt and not e.startswith(".")]
        return names


@dataclass
class JitVerdict:
    findings: list[Finding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: another node's test id-less name that already reports the stale lock this node waits on
    blocked_by: str | None = None
    blocked_text: str = ""
    fixes: list[Fix] = field(default_factory=list)
    #: every stale lock this node sees, with the node that reports it: (owner, lock)
    stale: list[tuple[str, Lock]] = field(default_factory=list)
    #: what a report shows: directory, sharing, ops
    facts: dict[str, str] = field(default_factory=dict)


def stale_lock_fix(node: str, lock: Lock) -> Fix:
    """Remove the lock file, but only while it is still the very file the suite found stale
    (same inode): a build started since has created a new one, which is left alone."""
    path = lock.path
    cmd = f'[ "$(stat -c %i {q(path)} 2>/dev/null)" != {lock.ino} ] || rm -f -- {q(path)}'
    return Fix(node, f"remove the stale JIT build lock of {lock.op} ({path})", (cmd,),
               ids.JIT_OPS.item,
               note="no process on any node sharing it held it or was building there")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    s = max(0.0, float(seconds))
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def some(names: Sequence[str], limit: int = 8) -> str:
    """`names` joined, the first `limit` of them and a count of the rest (a text that stays
    short on a thousand nodes sharing one volume)."""
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])} and {len(names) - limit} more"


LockKey = tuple[str, int, int | None]


@dataclass
class _Survey:
    """Every lock by identity across the nodes: who sees it and who holds or builds it; and
    the nodes of each extensions directory (once, not a scan of all nodes per node)."""

    seen: dict[LockKey, list[str]] = field(default_factory=dict)
    procs: dict[LockKey, list[str]] = field(default_factory=dict)
    by_dir: dict[tuple[str, int], list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, facts: Mapping[str, JitFacts | None], nodes: Sequence[str]) -> _Survey:
        out = cls()
        for n in nodes:
            jit = facts[n]
            assert jit is not None
            for lock in jit.locks:
                out.seen.setdefault(lock.key, []).append(n)
                out.procs.setdefault(lock.key, []).extend(p.describe(n) for p in lock.processes)
            if jit.ext.identity is not None:
                out.by_dir.setdefault(jit.ext.identity, []).append(n)
        return out


def _shown(n: str, jit: JitFacts, survey: _Survey) -> dict[str, str]:
    """What a report shows of `n`'s JIT facts."""
    ext, tri = jit.ext, jit.triton
    shared = survey.by_dir.get(ext.identity, []) if ext.identity is not None else []
    return {
        "extensions_dir": f"{ext.path} ({ext.source}; "
                          + (f"shared with {some([s for s in shared if s != n])}"
                             if len(shared) > 1 else "not shared with another node")
                          + f"; {fmt_bytes(ext.free_bytes)} free)",
        "triton_cache_dir": f"{tri.path} ({tri.source}"
                            + ("" if tri.exists else ", not created yet") + ")",
        "jit_ops": ", ".join(jit.to_load()) or "none",
        "ninja": jit.ninja.describe(),
        "cxx": jit.cxx.describe(),
    }


def _toolchain(jit: JitFacts, python: str, min_free_bytes: int) -> list[Finding]:
    """What the ops the node loads need: ninja, the compiler, the extensions directory."""
    load = jit.to_load()
    if not load:
        return []
    ops, ninja, cxx, ext = ", ".join(load), jit.ninja, jit.cxx, jit.ext
    out = []
    if not ninja.ok:
        out.append(Finding(
            JitCause.NO_NINJA,
            f"`ninja` is not found on the PATH the launch's ranks get there ({jit.path}), and "
            f"they JIT-load {ops}: the launch fails on this node with \"Unable to JIT load the "
            f"{load[0]} op due to ninja not being installed\""
            + (f" ({ninja.error})" if ninja.error else ""),
            f"{python} -m pip install ninja (or apt-get install ninja-build), so that it is on "
            f"that PATH"))
    if not cxx.ok:
        origin = "CXX names it" if cxx.from_env else "torch's default without CXX"
        out.append(Finding(
            JitCause.NO_COMPILER,
            f"the C++ compiler torch's extension builder calls, `{cxx.name}` ({origin}), does "
            f"not run there" + (f" ({cxx.error})" if cxx.error else "")
            + f", and the ranks JIT-load {ops}: the build fails on this node",
            "install g++ (apt-get install g++ / dnf install gcc-c++), or set CXX to an "
            "installed compiler"))
    if not ext.writable:
        out.append(Finding(
            JitCause.EXT_DIR_UNWRITABLE,
            f"the extensions directory {ext.path} ({ext.source}) takes no file "
            f"({ext.write_error} in {ext.checked}), and the ranks JIT-load {ops} there: torch "
            f"cannot create its build lock",
            "make it writable by the launch's user, or set TORCH_EXTENSIONS_DIR to a writable "
            "directory (in ~/.deepspeed_env on the rank-0 node, so every rank gets it)"))
    elif ext.free_bytes is not None and ext.free_bytes < min_free_bytes:
        out.append(Finding(
            JitCause.EXT_DIR_FULL,
            f"the extensions directory {ext.path} has {fmt_bytes(ext.free_bytes)} free, below "
            f"{fmt_bytes(min_free_bytes)}, and the ranks build {ops} there",
            "free space there, or set TORCH_EXTENSIONS_DIR to a larger disk"))
    return out


def _triton(jit: JitFacts) -> list[Finding]:
    tri = jit.triton
    if not tri.installed or tri.writable:
        return []
    return [Finding(JitCause.TRITON_CACHE_UNWRITABLE,
                    f"Triton is installed and its cache directory {tri.path} ({tri.source}) "
                    f"takes no file ({tri.write_error}): the first Triton kernel of every rank "
                    f"fails there",
                    "make it writable, or set TRITON_CACHE_DIR to a writable directory")]


def _locks(n: str, jit: JitFacts, v: JitVerdict, survey: _Survey) -> None:
    """The locks `n` sees: a live build's is a warning (on the first node that sees it); a
    stale one is red on the first node that sees it, and blocks the others."""
    for lock in jit.locks:
        who, procs = survey.seen[lock.key], survey.procs[lock.key]
        others = [m for m in who if m != n]
        where = f"shared by {some(who)}" if others else f"on {n}"
        if procs:
            if who[0] == n:
                v.warnings.append(
                    f"a JIT build of {lock.op} is running: its lock {lock.path} ({where}, "
                    f"{_age(lock.age_s)} old) is held by " + "; ".join(procs)
                    + ": the launch's ranks that load it wait until that build ends")
            continue
        v.stale.append((who[0], lock))
        if who[0] != n:
            if v.blocked_by is None:
                v.blocked_by = who[0]
                v.blocked_text = (f"the stale JIT build lock {lock.path} of {lock.op}, in the "
                                  f"extensions directory this node shares")
            continue
        changed = (f" (its files last changed {_age(lock.activity_age_s)} ago)"
                   if lock.activity_age_s is not None else "")
        v.findings.append(Finding(
            JitCause.STALE_LOCK,
            f"stale JIT build lock of the {lock.op} op: {lock.path} ({where}), "
            f"{_age(lock.age_s)} old, held by no process on "
            + ("any of those nodes" if others else "this node")
            + f" and no build running in its directory{changed}: a launch killed while building "
            f"left it, and every rank that loads {lock.op} waits on it until the launch's "
            f"timeout (torch's FileBaton waits while the file exists)",
            f"rm -f {q(lock.path)} (safe now: nothing builds there; if a machine outside the "
            f"hostfile shares {jit.ext.path}, let its build finish first)"))
        v.fixes.append(stale_lock_fix(n, lock))


def judge_jit(facts: Mapping[str, JitFacts | None], order: Sequence[str], *,
              python: str = "the launch's python",
              min_free_bytes: int = MIN_FREE_BYTES) -> dict[str, JitVerdict]:
    """E7 for every node with facts (`facts[node]`: the rehearsal's `jit`; None: not
    rehearsed, no verdict).  `order` is the hostfile order: a lock shared by several nodes is
    red on the first of them that sees it."""
    nodes = [n for n in order if facts.get(n) is not None]
    survey = _Survey.of(facts, nodes)
    out: dict[str, JitVerdict] = {}
    for n in nodes:
        jit = facts[n]
        assert jit is not None
        v = out[n] = JitVerdict()
        if jit.error:
            v.findings.append(Finding(JitCause.JIT_NOT_INSPECTED,
                                      f"could not inspect the JIT ops with {python}: {jit.error}"))
            continue
        v.facts = _shown(n, jit, survey)
        if jit.ops_error:
            v.warnings.append(f"DeepSpeed's op builders did not answer with {python}: "
                              f"{jit.ops_error}; only the ops already built are judged")
        if jit.ext_error:
            v.findings.append(Finding(JitCause.JIT_NOT_INSPECTED,
                                      f"the extensions directory could not be inspected: "
                                      f"{jit.ext_error}"))
        v.findings += _toolchain(jit, python, min_free_bytes) + _triton(jit)
        _locks(n, jit, v, survey)
    return out


def jit_problem(node: str, verdicts: Mapping[str, JitVerdict]) -> Problem | None:
    """E7's red on `node` (None: nothing of its own is wrong there): its findings, and the
    stale lock of another node's red it also waits on; a stale lock in a shared directory
    stops the ranks of every node that shares it (`breaks`)."""
    v = verdicts[node]
    if not v.findings:
        return None
    return node_problem(
        node, v.findings, ids.JIT_OPS.item,
        tail=f"\n{node}: also {blocked_line(v)}" if v.blocked_by else "",
        fixes=tuple(v.fixes), breaks=tuple(n for n, o in verdicts.items() if o.blocked_by == node))


def blocked_line(v: JitVerdict) -> str:
    """Why a node's E7 is blocked by another's red (the stale lock it waits on)."""
    return f"blocked by {ids.JIT_OPS.of(v.blocked_by or '')}: {v.blocked_text}"


def smoke_waits_on(facts: Mapping[str, JitFacts | None], order: Sequence[str],
                   node: str) -> str | None:
    """Why a DeepSpeed job on `node` would wait on a stale lock until its deadline (the smoke
    job's T1/T2 fail at once with it instead), or None; the text names E7's red id."""
    got = stale_lock_owner(facts, order, node)
    return got[1] if got else None


def stale_lock_owner(facts: Mapping[str, JitFacts | None], order: Sequence[str],
                     node: str) -> tuple[str, str] | None:
    """(the node whose E7 red holds the stale lock a DeepSpeed job on `node` would wait on, why),
    or None."""
    jit = facts.get(node)
    if jit is None:
        return None
    verdict = judge_jit(facts, order).get(node)
    mine = jit.init_ops()
    for owner, lock in verdict.stale if verdict else []:
        if lock.op in mine:
            return owner, (f"{node}: deepspeed.init_distributed would wait on the stale JIT "
                           f"build lock {lock.path} of {lock.op} until the deadline; not "
                           f"started: see {ids.JIT_OPS.of(owner)}")
    return None
