"""What the first step builds (CHECKLIST E7): pure judgement of the rehearsal's `jit` facts
(node/rehearse.py), tested in tests/unit/test_judge_jit.py.

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
from typing import Any

from cluster_tests.core import testids as ids
from cluster_tests.judge.common.fixcmd import q
from cluster_tests.judge.problem import Fix

#: room to build one op (objects and the .so of fused_adam / shm comm are a few MB; a CUDA op's
#: intermediates tens of MB)
MIN_FREE_BYTES = 256 << 20


@dataclass
class JitVerdict:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: another node's test id-less name that already reports the stale lock this node waits on
    blocked_by: str | None = None
    blocked_text: str = ""
    fixes: list[Fix] = field(default_factory=list)
    #: every stale lock this node sees, with the node that reports it: (owner, lock)
    stale: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    #: what a report shows: directory, sharing, ops
    facts: dict[str, str] = field(default_factory=dict)


def stale_lock_fix(node: str, lock: Mapping[str, Any]) -> Fix:
    """Remove the lock file, but only while it is still the very file the suite found stale
    (same inode): a build started since has created a new one, which is left alone."""
    path = str(lock["path"])
    cmd = f'[ "$(stat -c %i {q(path)} 2>/dev/null)" != {int(lock["ino"])} ] || rm -f -- {q(path)}'
    return Fix(node, f"remove the stale JIT build lock of {lock['op']} ({path})", (cmd,), "E7",
               note="no process on any node sharing it held it or was building there")


def ops_to_load(jit: Mapping[str, Any]) -> list[str]:
    """The ops this node's ranks JIT-load (compiled here or loaded from the extensions
    directory, both through ninja and the lock): DeepSpeed's init and optimizer ops it deems
    compatible and did not install prebuilt, and every op already in the extensions directory
    (a previous job built it; the next one loads it again)."""
    names: list[str] = []
    for op in jit.get("ops") or []:
        if op.get("name") and op.get("compatible") and not op.get("prebuilt"):
            names.append(op["name"])
    prebuilt = {op.get("name") for op in jit.get("ops") or [] if op.get("prebuilt")}
    for entry in (jit.get("ext") or {}).get("entries") or []:
        if entry not in names and entry not in prebuilt and not entry.startswith("."):
            names.append(entry)
    return names


def dir_key(d: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    """A directory's identity across nodes, for the report: path and inode (the same on every
    client of one NFS/Lustre volume; its ctime is not, since each node's write test changes it).
    Two local directories at one path with one inode number (nodes cloned from one image) would
    read as shared; the locks' verdicts do not rest on this (see :func:`lock_key`)."""
    if not d or d.get("ino") is None:
        return None
    return (d.get("path"), d.get("ino"))


def lock_key(lock: Mapping[str, Any]) -> tuple[Any, ...]:
    """A lock file's identity across nodes: path, inode and mtime in ns (set once when it was
    created, the same for every client of a shared volume)."""
    return (lock.get("path"), lock.get("ino"), lock.get("mtime_ns"))


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


def _free(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "unknown"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def _proc(p: Mapping[str, Any], node: str) -> str:
    how = "holds it open" if p.get("how") == "holds" else "runs in its directory"
    return f"pid {p.get('pid')} on {node} ({how}): {str(p.get('cmd') or '?')[:120]}"


def sharers(facts: Mapping[str, Mapping[str, Any] | None], order: Sequence[str],
            key: tuple[Any, ...] | None, which: str = "ext") -> list[str]:
    """The nodes (hostfile order) whose `which` directory is the one with identity `key`."""
    if key is None:
        return []
    return [n for n in order if (f := facts.get(n)) and dir_key(f.get(which)) == key]


def some(names: Sequence[str], limit: int = 8) -> str:
    """`names` joined, the first `limit` of them and a count of the rest (a text that stays
    short on a thousand nodes sharing one volume)."""
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])} and {len(names) - limit} more"


def judge_jit(facts: Mapping[str, Mapping[str, Any] | None], order: Sequence[str], *,
              python: str = "the launch's python",
              min_free_bytes: int = MIN_FREE_BYTES) -> dict[str, JitVerdict]:
    """E7 for every node with facts (`facts[node]` is the rehearsal's `jit`; None: not
    rehearsed, no verdict).  `order` is the hostfile order: a lock shared by several nodes is
    red on the first of them that sees it."""
    out: dict[str, JitVerdict] = {}
    nodes = [n for n in order if facts.get(n)]
    # every lock, by identity: who sees it, and who holds or builds it
    seen: dict[tuple[Any, ...], list[str]] = {}
    procs: dict[tuple[Any, ...], list[str]] = {}
    locks: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for n in nodes:
        for lock in (facts[n] or {}).get("locks") or []:
            k = lock_key(lock)
            locks.setdefault(k, lock)
            seen.setdefault(k, []).append(n)
            procs.setdefault(k, []).extend(_proc(p, n) for p in lock.get("processes") or [])
    # the nodes of each extensions directory, once (not a scan of all nodes per node)
    by_dir: dict[tuple[Any, ...], list[str]] = {}
    for n in nodes:
        d = dir_key((facts[n] or {}).get("ext"))
        if d is not None:
            by_dir.setdefault(d, []).append(n)
    for n in nodes:
        jit = facts[n] or {}
        v = out[n] = JitVerdict()
        if jit.get("error"):
            v.problems.append(f"could not inspect the JIT ops with {python}: {jit['error']}")
            continue
        ext = jit.get("ext") or {}
        tri = jit.get("triton") or {}
        load = ops_to_load(jit)
        k_ext = dir_key(ext)
        shared = by_dir.get(k_ext, []) if k_ext is not None else []
        v.facts = {
            "extensions_dir": f"{ext.get('path')} ({ext.get('source')}; "
                              + (f"shared with {some([s for s in shared if s != n])}"
                                 if len(shared) > 1 else "not shared with another node")
                              + f"; {_free(ext.get('free_bytes'))} free)",
            "triton_cache_dir": f"{tri.get('path')} ({tri.get('source')}"
                                + ("" if tri.get("exists") else ", not created yet") + ")",
            "jit_ops": ", ".join(load) or "none",
            "ninja": _tool_text(jit.get("ninja")),
            "cxx": _tool_text(jit.get("cxx")),
        }
        if jit.get("ops_error"):
            v.warnings.append(f"DeepSpeed's op builders did not answer with {python}: "
                              f"{jit['ops_error']}; only the ops already built are judged")
        if jit.get("ext_error"):
            v.problems.append(f"the extensions directory could not be inspected: "
                              f"{jit['ext_error']}")
        # the toolchain, for the ops this node loads
        if load:
            ops = ", ".join(load)
            ninja = jit.get("ninja") or {}
            if not ninja.get("ok"):
                v.problems.append(
                    f"`ninja` is not found on the PATH the launch's ranks get there "
                    f"({jit.get('path')}), and they JIT-load {ops}: the launch fails on this "
                    f"node with \"Unable to JIT load the {load[0]} op due to ninja not being "
                    f"installed\"" + (f" ({ninja.get('error')})" if ninja.get("error") else "")
                    + f"\n  fix, on {n}: {python} -m pip install ninja (or apt-get install "
                    f"ninja-build), so that it is on that PATH")
            cxx = jit.get("cxx") or {}
            if not cxx.get("ok"):
                origin = "CXX names it" if cxx.get("from_env") else "torch's default without CXX"
                v.problems.append(
                    f"the C++ compiler torch's extension builder calls, `{cxx.get('name')}` "
                    f"({origin}), does not run there"
                    + (f" ({cxx.get('error')})" if cxx.get("error") else "")
                    + f", and the ranks JIT-load {ops}: the build fails on this node"
                    f"\n  fix, on {n}: install g++ (apt-get install g++ / dnf install gcc-c++), "
                    f"or set CXX to an installed compiler")
            if not ext.get("writable"):
                v.problems.append(
                    f"the extensions directory {ext.get('path')} ({ext.get('source')}) takes no "
                    f"file ({ext.get('write_error')} in {ext.get('checked')}), and the ranks "
                    f"JIT-load {ops} there: torch cannot create its build lock"
                    f"\n  fix, on {n}: make it writable by the launch's user, or set "
                    f"TORCH_EXTENSIONS_DIR to a writable directory (in ~/.deepspeed_env on the "
                    f"rank-0 node, so every rank gets it)")
            elif isinstance(ext.get("free_bytes"), (int, float)) and \
                    ext["free_bytes"] < min_free_bytes:
                v.problems.append(
                    f"the extensions directory {ext.get('path')} has {_free(ext['free_bytes'])} "
                    f"free, below {_free(min_free_bytes)}, and the ranks build {ops} there"
                    f"\n  fix, on {n}: free space there, or set TORCH_EXTENSIONS_DIR to a "
                    f"larger disk")
        if tri.get("installed") and not tri.get("writable"):
            v.problems.append(
                f"Triton is installed and its cache directory {tri.get('path')} "
                f"({tri.get('source')}) takes no file ({tri.get('write_error')}): the first "
                f"Triton kernel of every rank fails there\n  fix, on {n}: make it writable, or "
                f"set TRITON_CACHE_DIR to a writable directory")
        # the locks this node sees
        for lock in jit.get("locks") or []:
            k = lock_key(lock)
            who = seen[k]
            others = [m for m in who if m != n]
            where = (f"shared by {some(who)}" if others else f"on {n}")
            if procs[k]:
                if who[0] == n:
                    v.warnings.append(
                        f"a JIT build of {lock['op']} is running: its lock {lock['path']} "
                        f"({where}, {_age(lock.get('age_s'))} old) is held by "
                        + "; ".join(procs[k])
                        + ": the launch's ranks that load it wait until that build ends")
                continue
            v.stale.append((who[0], lock))
            if who[0] != n:
                if v.blocked_by is None:
                    v.blocked_by = who[0]
                    v.blocked_text = (f"the stale JIT build lock {lock['path']} of {lock['op']}, "
                                      f"in the extensions directory this node shares")
                continue
            activity = lock.get("activity_age_s")
            v.problems.append(
                f"stale JIT build lock of the {lock['op']} op: {lock['path']} ({where}), "
                f"{_age(lock.get('age_s'))} old, held by no process on "
                + ("any of those nodes" if others else "this node")
                + " and no build running in its directory"
                + (f" (its files last changed {_age(activity)} ago)" if activity is not None
                   else "")
                + f": a launch killed while building left it, and every rank that loads "
                f"{lock['op']} waits on it until the launch's timeout (torch's FileBaton waits "
                f"while the file exists)"
                f"\n  fix, on {n}: rm -f {q(lock['path'])} (safe now: nothing builds there; "
                f"if a machine outside the hostfile shares {ext.get('path')}, let its build "
                f"finish first)")
            v.fixes.append(stale_lock_fix(n, lock))
    return out


def init_ops(jit: Mapping[str, Any]) -> set[str]:
    """The ops DeepSpeed itself JIT-loads on this node in init_distributed and for its Adam (what
    the training smoke job loads, with no op of the user's own)."""
    return {op["name"] for op in jit.get("ops") or []
            if op.get("name") and op.get("compatible") and not op.get("prebuilt")}


def smoke_waits_on(facts: Mapping[str, Mapping[str, Any] | None], order: Sequence[str],
                   node: str) -> str | None:
    """Why a DeepSpeed job on `node` would wait on a stale lock until its deadline (the smoke
    job's T1/T2 fail at once with it instead), or None; the text names E7's red id."""
    got = stale_lock_owner(facts, order, node)
    return got[1] if got else None


def stale_lock_owner(facts: Mapping[str, Mapping[str, Any] | None], order: Sequence[str],
                     node: str) -> tuple[str, str] | None:
    """(the node whose E7 red holds the stale lock a DeepSpeed job on `node` would wait on, why),
    or None."""
    jit = facts.get(node)
    if not jit:
        return None
    verdict = judge_jit(facts, order).get(node)
    mine = init_ops(jit)
    for owner, lock in verdict.stale if verdict else []:
        if lock.get("op") in mine:
            return owner, (f"{node}: deepspeed.init_distributed would wait on the stale JIT "
                           f"build lock {lock.get('path')} of {lock.get('op')} until the "
                           f"deadline; not started: see {ids.JIT_OPS.of(owner)}")
    return None


def _tool_text(t: Mapping[str, Any] | None) -> str:
    if not t:
        return "unknown"
    if t.get("ok"):
        return f"{t.get('path') or t.get('name')} ({t.get('version')})"
    return f"{t.get('name')}: not usable ({t.get('error') or t.get('version') or 'not found'})"
