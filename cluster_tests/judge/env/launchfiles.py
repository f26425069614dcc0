"""E8: the launch directory and the files the launch names, on every node it reaches.

DeepSpeed's runner cd's every rank into the directory it was started in (`cd <launch dir>` in
the line pdsh sends), runs the script there, and the script opens the files its arguments name
(a `--deepspeed ds_config.json`, a config, a tokenizer directory) on its own node. So every node
needs the directory, and there the script and each file or directory the command names, the
same as on the launcher: code that was never synced to one node is among the commonest reasons
a multi-node launch fails, and where the directory is missing the other ranks wait for that node
until they are killed.

Facts (node/envprobe.py, section `launchfiles`, run on each node and on the launcher alike):
for the directory, whether it is one; for each path, what it is: a file's size and SHA-256 (up
to DIGEST_MAX bytes; beyond that its size), a directory's listing of files with their sizes
(relative path, size; the first ENTRIES_MAX, and a digest of them). A node differs from the
launcher where a path is missing, of another kind, or differs in digest, size or listing.

Which words of the command are paths (`candidates`): the script, and every argument (or the
value of a `--flag=value`) that names an existing file or directory on the launcher, relative
to the launch directory; not the directory itself or one above it, nor the system's own
directories, nor the value of a flag the job writes to (`--output_dir`, `--save`, `--log_dir`,
`--cache_dir`...: a job's outputs differ from node to node by design).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.core.testids import Scope
from cluster_tests.judge.common.probes import (
    FactsError,
    Probe,
    flag,
    integer,
    obj,
    opt_text,
    text,
)
from cluster_tests.judge.env.envvars import SCRIPT
from cluster_tests.judge.hostfile.launchargs import LaunchCommand
from cluster_tests.judge.problem import Problem, SectionCause

#: a file up to this size is compared by its SHA-256; a larger one by its size
DIGEST_MAX = 32 * 1024 * 1024
#: a directory's listing holds at most this many files (compared with the digest of them)
ENTRIES_MAX = 20000
#: flags whose value the job writes to: never compared (a job's outputs differ by design)
OUTPUT_FLAG = re.compile(r"^--?[\w-]*(output|save|log|checkpoint|ckpt|cache|tensorboard|wandb|"
                         r"result|dump|trace|profile)", re.IGNORECASE)
#: directories that are never a launch's own file (a word that names one is not compared)
SYSTEM_DIRS = ("/", "/tmp", "/dev", "/proc", "/sys", "/run", "/etc", "/usr", "/var", "/home")


class LaunchFilesCause(SectionCause, items=(ids.LAUNCH_FILES.item,)):
    """What E8 finds on a node (Problem.cause)."""

    DIR_MISSING = "launch directory missing"
    FILES_MISSING = "launch files missing"
    FILES_DIFFER = "launch files differ"
    SCRIPT_NOWHERE = "launch script missing"


@dataclass(frozen=True)
class Entry:
    """One file of a directory's listing: its path under the directory, and its size."""

    path: str
    size: int


@dataclass(frozen=True)
class PathFacts:
    """What one path is on one machine: `kind` file, dir, missing or other (a socket, a device,
    unreadable: `error` says), a file's size and digest (None beyond DIGEST_MAX), a directory's
    file count, listing (the first ENTRIES_MAX) and the digest of the whole listing."""

    kind: str
    size: int = 0
    sha256: str | None = None
    count: int = 0
    listing: tuple[Entry, ...] = ()
    listing_sha256: str = ""
    error: str | None = None

    @classmethod
    def read(cls, raw: object) -> PathFacts:
        d = obj(raw, "a launch path")
        listing = d.get("listing") or []
        if not isinstance(listing, list):
            raise FactsError("a launch path: listing is not a list")
        return cls(kind=text(d.get("kind"), "missing"), size=integer(d.get("size")),
                   sha256=opt_text(d.get("sha256")), count=integer(d.get("count")),
                   listing=tuple(Entry(str(e[0]), int(e[1])) for e in listing
                                 if isinstance(e, list) and len(e) == 2),
                   listing_sha256=text(d.get("listing_sha256")), error=opt_text(d.get("error")))

    def describe(self) -> str:
        if self.kind == "file":
            return f"a file of {self.size} bytes" + (
                f" (sha256 {self.sha256[:12]})" if self.sha256 else "")
        if self.kind == "dir":
            return f"a directory of {self.count} files"
        return self.error or self.kind


@dataclass(frozen=True)
class LaunchFiles:
    """The launch directory (`dir_ok`: it is one) and its paths, as one machine has them."""

    launch_dir: str
    dir_ok: bool
    paths: Mapping[str, PathFacts] = field(default_factory=dict)

    @classmethod
    def read(cls, raw: object) -> LaunchFiles:
        d = obj(raw, "the launch files")
        paths = obj(d.get("paths") or {}, "the launch files' paths")
        return cls(launch_dir=text(d.get("launch_dir")), dir_ok=flag(d.get("dir_ok")),
                   paths={str(p): PathFacts.read(v) for p, v in paths.items()})


LAUNCHFILES: Probe[LaunchFiles] = Probe(SCRIPT, "launchfiles", LaunchFiles.read)


def params(launch_dir: str, paths: Sequence[str]) -> dict[str, object]:
    """The probe's parameters (the same on the launcher and on every node)."""
    return {"launch_dir": launch_dir, "paths": list(paths), "digest_max": DIGEST_MAX,
            "entries_max": ENTRIES_MAX}


@dataclass(frozen=True)
class Candidate:
    """A word of the launch command that names a path (absolute), and the flag it follows."""

    path: str
    flag: str = ""  # "" for the script


def candidates(cmd: LaunchCommand, launch_dir: str,
               exists: Callable[[str], bool] = os.path.exists) -> list[Candidate]:
    """The script, and the arguments of the command that name an existing path on the launcher
    (`exists`), as absolute paths in the launch directory (see the module docstring)."""
    out: dict[str, Candidate] = {}
    script = _absolute(cmd.script, launch_dir)
    out[script] = Candidate(script)
    previous = ""
    for word in cmd.script_args:
        flag_name, value = previous, word
        if word.startswith("-"):
            flag_name, _, value = word.partition("=")
            if not value:
                previous = word
                continue
        previous = ""
        if OUTPUT_FLAG.match(flag_name) or not value or value.startswith("-"):
            continue
        path = _absolute(value, launch_dir)
        if path in out or not _own(path, launch_dir) or not exists(path):
            continue
        out[path] = Candidate(path, flag_name)
    return list(out.values())


def _absolute(word: str, launch_dir: str) -> str:
    return os.path.normpath(os.path.join(launch_dir, os.path.expanduser(word)))


def _own(path: str, launch_dir: str) -> bool:
    """Whether `path` may be a launch's own file: not the launch directory or one above it, not
    a home directory, not a system directory."""
    home = os.path.expanduser("~")
    above = launch_dir == path or launch_dir.startswith(path.rstrip("/") + "/")
    return not above and path not in (home, *SYSTEM_DIRS) and not path.startswith(
        ("/dev/", "/proc/", "/sys/"))


def differences(mine: PathFacts, theirs: PathFacts) -> list[str]:
    """How a node's copy (`mine`) differs from the launcher's (`theirs`)."""
    if mine.kind != theirs.kind:
        return [f"{mine.describe()} here, {theirs.describe()} on the launcher"]
    if mine.kind == "file":
        if mine.size != theirs.size:
            return [f"{mine.size} bytes here, {theirs.size} on the launcher"]
        if mine.sha256 and theirs.sha256 and mine.sha256 != theirs.sha256:
            return [f"same size, other content (sha256 {mine.sha256[:12]} here, "
                    f"{theirs.sha256[:12]} on the launcher)"]
        return []
    if mine.kind == "dir" and (mine.listing_sha256 != theirs.listing_sha256
                               or mine.count != theirs.count):
        here = {e.path: e.size for e in mine.listing}
        there = {e.path: e.size for e in theirs.listing}
        out = [f"{p}: missing here" for p in there if p not in here]
        out += [f"{p}: not on the launcher" for p in here if p not in there]
        out += [f"{p}: {here[p]} bytes here, {there[p]} on the launcher"
                for p in here if p in there and here[p] != there[p]]
        return out[:5] + ([f"... {len(out) - 5} more"] if len(out) > 5 else []) or [
            f"{mine.count} files here, {theirs.count} on the launcher"]
    return []


def judge_launch_files(node: str, mine: LaunchFiles, launcher: LaunchFiles | None,
                       script: str | None, site: str) -> Problem | None:
    """E8 on `node`: its launch directory, and each path the launcher has (`launcher`: None
    where the launcher has not the launch directory: then the script must be there, at least).
    One Problem naming every path that is missing or differs. A script that the launcher lacks
    too (a typo in the command) is one launch-wide red, on the node the launch starts on
    (`site`), and not the other nodes' cause."""
    d = mine.launch_dir
    nowhere = (launcher is not None and script is not None
               and launcher.paths.get(script, PathFacts("missing")).kind == "missing")
    if nowhere and node == site:
        return Problem(
            (node,), LaunchFilesCause.SCRIPT_NOWHERE,
            f"the launch's script {script} does not exist on the launcher either: every rank "
            f"would fail to start it", fix=f"correct the script's path in the launch command "
            f"(it is read in {d} on every node)", item=ids.LAUNCH_FILES.item,
            scope=Scope.LAUNCH_WIDE)
    if not mine.dir_ok:
        return Problem(
            (node,), LaunchFilesCause.DIR_MISSING,
            f"{node}: the launch directory {d} does not exist there: deepspeed starts every rank "
            f"with `cd {d}`, so {node}'s ranks would not start (the others then wait for them "
            f"in rendezvous until killed)",
            fix=f"on {node}: create or mount {d} with the project's files (the same path as on "
                f"the launcher: rsync -a {d}/ {node}:{d}/ from the launcher), or start the "
                f"launch in a directory every node has", item=ids.LAUNCH_FILES.item)
    missing, differ = [], []
    for path, facts in mine.paths.items():
        reference = launcher.paths.get(path) if launcher is not None else None
        if reference is None or reference.kind == "missing":
            if facts.kind == "missing" and path == script and not nowhere:
                missing.append(f"{path}: the script, missing here")
            continue
        if facts.kind == "missing":
            missing.append(f"{path}: missing here ({reference.describe()} on the launcher)")
            continue
        said = differences(facts, reference)
        if said:
            differ.append(f"{path}: " + "; ".join(said))
    if not missing and not differ:
        return None
    found = missing + differ
    cause = LaunchFilesCause.FILES_MISSING if missing else LaunchFilesCause.FILES_DIFFER
    paths = " ".join(dict.fromkeys(p.split(": ", 1)[0] for p in found))
    return Problem(
        (node,), cause,
        f"{node}: the launch's files are not the launcher's there (code not synced to {node}?); "
        f"its ranks would run other code or fail to open them:\n  - " + "\n  - ".join(found),
        fix=f"copy them from the launcher (the same paths): rsync -aR {paths} {node}:/ ; or put "
            f"{d} on a volume every node mounts", item=ids.LAUNCH_FILES.item)
