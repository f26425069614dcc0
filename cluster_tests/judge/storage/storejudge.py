"""D1-D2's verdicts (pure): the output directory as each node sees it (node/storeprobe.py's
`dir`), and whether a token one node writes there is what another node reads (`write`, `read`;
the matrix is measure/share.py's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cluster_tests.core import testids as ids
from cluster_tests.judge.common.fieldread import ByFields, by_fields
from cluster_tests.judge.common.probes import (
    Probe,
    obj,
    text,
)
from cluster_tests.judge.problem import Problem, SectionCause

SCRIPT = "storeprobe.py"


class StorageCause(SectionCause):
    """What can be wrong with the output directory (Problem.cause)."""

    MISSING = "output directory missing"
    NOT_A_DIRECTORY = "output path not a directory"
    NOT_WRITABLE = "output directory not writable"
    SHORT_OF_SPACE = "output directory short of space"
    PROBE_FAILED = "storage probe failed"
    NOT_WRITTEN = "token not written"
    NOT_SHARED = "output directory not shared"


@dataclass(frozen=True)
class Mount:
    """The mount that holds a path (/proc/self/mountinfo)."""

    point: str
    fstype: str
    source: str


def describe_mount(mount: Mount | None) -> str:
    if mount is None:
        return "unknown mount"
    return f"{mount.source} ({mount.fstype}) mounted at {mount.point}"


@dataclass(frozen=True)
class DirFacts:
    """The output directory on one node (`dir`)."""

    path: str
    exists: bool
    is_dir: bool
    writable: bool
    error: str | None
    free_bytes: int | None
    mount: Mount | None

    @classmethod
    def read(cls, raw: object) -> DirFacts:
        d = obj(raw, "the output directory")
        m = d.get("mount")
        mount = (Mount(*(text(x) for x in m[:3]))
                 if isinstance(m, list) and len(m) >= 3 else None)
        return by_fields(cls, d, mount=mount)

    @property
    def usable(self) -> bool:
        return self.is_dir and self.writable


@dataclass(frozen=True)
class Written(ByFields, what="a token written"):
    """A node's token written into the output directory (`write`)."""

    ok: bool
    file: str
    error: str | None


@dataclass(frozen=True)
class ReadBack(ByFields, what="a token read back"):
    """Another node's token as this node read it (`read`)."""

    found: bool
    content: str = ""
    error: str | None = None


def _read_backs(raw: object) -> Mapping[str, ReadBack]:
    return {str(k): ReadBack.read(v) for k, v in obj(raw, "tokens read back").items()}


@dataclass(frozen=True)
class Removed(ByFields, what="a token removed"):
    """A node's own token removed again (`remove`)."""

    removed: bool
    gone: bool
    error: str | None


DIR: Probe[DirFacts] = Probe(SCRIPT, "dir", DirFacts.read)
WRITE: Probe[Written] = Probe(SCRIPT, "write", Written.read)
READ: Probe[Mapping[str, ReadBack]] = Probe(SCRIPT, "read", _read_backs)
REMOVE: Probe[Removed] = Probe(SCRIPT, "remove", Removed.read)


def judge_dir(node: str, facts: DirFacts, min_free_gb: float) -> Problem | None:
    """D1: the output directory exists on `node`, takes a file, and has `min_free_gb` free."""
    path, mount = facts.path, describe_mount(facts.mount)
    if not facts.exists or not facts.is_dir:
        missing = not facts.exists
        return Problem(
            (node,), StorageCause.MISSING if missing else StorageCause.NOT_A_DIRECTORY,
            f"{node}: output directory {path} "
            f"{'does not exist' if missing else 'is not a directory'} there.",
            fix=f"on {node}: mount the shared volume at {path} (or mkdir -p {path} if it lives "
                f"on a volume already shared)", item=ids.OUTPUT_DIR.item)
    if not facts.writable:
        return Problem(
            (node,), StorageCause.NOT_WRITABLE,
            f"{node}: cannot create a file in {path}: {facts.error} ({mount}).",
            fix=f"on {node}: chown/chmod it for the login user, or remount it read-write",
            item=ids.OUTPUT_DIR.item)
    if facts.free_bytes is not None and facts.free_bytes / 1e9 < min_free_gb:
        return Problem(
            (node,), StorageCause.SHORT_OF_SPACE,
            f"{node}: {path} has {facts.free_bytes / 1e9:.1f} GB free, less than --min-free-gb "
            f"{min_free_gb:g} ({mount}); checkpoints would fail half-written.",
            fix="free space on that volume, or point --output-dir elsewhere",
            item=ids.OUTPUT_DIR.item,
            facts={"free_gb": round(facts.free_bytes / 1e9, 1)})
    return None


def judge_shared(a: str, b: str, path: str, written: Written, got: ReadBack | None,
                 token: str, dir_a: DirFacts, dir_b: DirFacts) -> Problem | None:
    """D2: the token `a` wrote into `path` is what `b` reads there (`got`; None: b read none)."""
    if not written.ok:
        return Problem((a,), StorageCause.NOT_WRITTEN,
                       f"{a}: could not write {written.file}: {written.error}",
                       item=ids.OUTPUT_SHARED.item)
    if got is not None and got.found and got.content == token:
        return None
    what = (f"{b} finds no such file ({got.error if got is not None else 'not read'})"
            if got is None or not got.found else f"{b} reads different content")
    source = dir_a.mount.source if dir_a.mount is not None else "<server:/export>"
    return Problem(
        (a, b), StorageCause.NOT_SHARED,
        f"{a} -> {b}: a file written in {path} on {a} ({written.file}) is not there on {b}: "
        f"{what}.\n  {a}: {describe_mount(dir_a.mount)}\n  {b}: {describe_mount(dir_b.mount)}\n"
        f"  {path} is not one shared volume: checkpoints saved by one node would be missing on "
        f"the other (and a resume would load stale or no weights).",
        fix=f"mount the same volume at {path} on every node (on {b}: mount {source} {path})",
        item=ids.OUTPUT_SHARED.item)


def probe_failed(a: str, b: str, node: str, error: str) -> Problem:
    """D2 where the share matrix's probe on `node` failed."""
    return Problem((a, b), StorageCause.PROBE_FAILED,
                   f"{a} -> {b}: the probe on {node} failed: {error}", item=ids.OUTPUT_SHARED.item)
