"""The environment's verdicts (CHECKLIST E1-E4, E6; E5: launchlegs.py, E7: jit.py), pure, on
envprobe.py's typed facts; tested in tests/unit/test_judge_envvars.py.

* `.deepspeed_env` is linted the way DeepSpeed 0.19's runner reads it: it looks in `~` and in
  the directory deepspeed runs in (`DEEPSPEED_ENVIRONMENT_PATHS = [expanduser("~"), "."]`, the
  name from `DS_ENV_FILE`), reads every line with `readlines()` and does
  `key, val = var.split('=', maxsplit=1)` - a line without `=` (a blank line or a comment
  included) raises ValueError and the launch dies (PITFALLS 7).  `add_export` strips both sides
  and wraps a value with characters outside `[\\w@%+=:,./-]` in double quotes; the pdsh command
  becomes `export KEY=VAL; ...` on every node.
* Values of variables whose names look secret are masked in every message.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cluster_tests.core import testids as ids
from cluster_tests.core.testids import Scope
from cluster_tests.judge.common import tooloutput
from cluster_tests.judge.common.facts import Command
from cluster_tests.judge.common.fieldread import ByFields, by_fields
from cluster_tests.judge.common.probes import (
    Probe,
    obj,
    opt_text,
    text,
    text_map,
)
from cluster_tests.judge.problem import Fix, Problem, SectionCause

SCRIPT = "envprobe.py"
#: node -> {name: value, None where unset}: what the nodes are compared on (E2, E3)
Table = Mapping[str, Mapping[str, str | None]]


class EnvCause(SectionCause):
    """What can be wrong with the environment the launch meets, E1-E4 and E6 (Problem.cause);
    the launch's own steps (E5) have launchlegs.LaunchCause, the JIT ops (E7) jit.JitCause."""

    NOT_SET = "required variable not set"  # E1
    DEEPSPEED_OFF_PATH = "deepspeed not on PATH"  # E1
    ENV_UNREAD = "environment not read"  # E2
    SETTINGS_DIFFER = "communication settings differ"  # E2
    ENV_FILE_BROKEN = ".deepspeed_env stops the launch"  # E2
    TORCH_BROKEN = "torch does not import"  # E3
    VERSIONS_DIFFER = "versions differ"  # E3
    IMPORT_SHADOWED = "imported package not the installed one"  # E3
    IMPORTED_DIFFER = "imported versions differ"  # E3
    NPU_LINKS_DOWN = "NPU links down"  # E4
    NO_TMPDIR = "no usable temporary directory"  # E6
    TMPDIR_UNWRITABLE = "temporary directory takes no file"
    TMPDIR_FULL = "temporary directory short of space"


@dataclass(frozen=True)
class Finding:
    """One thing wrong on a node: its cause, what is wrong, and its own fix in words (if any)."""

    cause: SectionCause  # EnvCause, or E5's and E7's own
    text: str
    fix: str = ""


def node_problem(node: str, findings: Sequence[Finding], item: str, *, fix: str = "",
                 tail: str = "", fixes: tuple[Fix, ...] = (),
                 breaks: tuple[str, ...] = ()) -> Problem:
    """One red for a node's findings, each its own line headed by the node's name; the fix in
    words is `fix`, else the findings' own fixes, on the node. `tail`: lines after them."""
    own = list(dict.fromkeys(f.fix for f in findings if f.fix))
    return Problem((node,), findings[0].cause,
                   f"{node}: " + f"\n{node}: ".join(f.text for f in findings) + tail,
                   fix=fix or (f"on {node}: " + "; ".join(own) if own else ""), fixes=fixes,
                   item=item, breaks=breaks)


SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
COMM_PREFIXES = ("NCCL_", "HCCL_", "GLOO_")
ASCEND_VARS = ("HCCL_CONNECT_TIMEOUT", "HCCL_SOCKET_IFNAME", "HCCL_OP_BASE_FFTS_MODE_ENABLE")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DS_SAFE = re.compile(r"[^\w@%+=:,./-]")


def is_secret(name: str) -> bool:
    """Whether a variable's name looks secret (its value is masked in every message and report):
    the one definition (core/cluster.py's Cluster.secrets and the messages here use it)."""
    upper = name.upper()
    return any(w in upper for w in SECRET_WORDS)


def shown(name: str, value: str | None) -> str:
    """A value as messages may print it: secrets masked, absent as '(unset)'."""
    if value is None:
        return "(unset)"
    if is_secret(name):
        return "****" if value else "(empty)"
    return repr(value) if value == "" or value != value.strip() else value


# -- .deepspeed_env ----------------------------------------------------------------------------

@dataclass(frozen=True)
class EnvFileFinding:
    path: str
    lineno: int
    error: bool  # True: the launch crashes or the variable never arrives; False: a trap
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.lineno}: {self.text}"


def parse_deepspeed_env(text: str) -> dict[str, str]:
    """What DeepSpeed 0.19 exports from the file (lines it can read), values as the shell gets
    them."""
    out: dict[str, str] = {}
    for line in text.splitlines(keepends=True):
        if "=" not in line:
            continue
        key, val = line.split("=", 1)
        out[key.strip()] = val.strip()
    return out


def unquote_export(value: str) -> str:
    """A value as `add_export` wrote it, without the double quotes it may have added."""
    if len(value) >= 2 and value[0] == value[-1] == '"' and _DS_SAFE.search(value[1:-1]):
        return value[1:-1]
    return value


def lint_deepspeed_env(text: str, path: str) -> list[EnvFileFinding]:
    findings = []
    lines = text.splitlines(keepends=True)
    for n, line in enumerate(lines, 1):
        body = line.rstrip("\r\n")
        if "=" not in line:
            what = "an empty line" if not body.strip() else f"{_masked_line(body)!r} has no '='"
            findings.append(EnvFileFinding(path, n, True,
                f"{what}: deepspeed's runner does `key, val = line.split('=', 1)` on every line "
                f"and stops with 'ValueError: not enough values to unpack' (fix: delete the line, "
                f"or write NAME=value)"))
            continue
        key, val = line.split("=", 1)
        name = key.strip()
        if name.startswith("#"):
            findings.append(EnvFileFinding(path, n, True,
                f"a comment containing '=' becomes `export {name}=...` on every node, which bash "
                f"rejects (deepspeed has no comments in this file: delete the line)"))
            continue
        if name.startswith("export "):
            findings.append(EnvFileFinding(path, n, False,
                f"'{name}': write the bare name; deepspeed prepends `export` itself"))
            name = name[len("export "):].strip()
        if not _IDENT.match(name):
            findings.append(EnvFileFinding(path, n, True,
                f"'{name}' is not a valid variable name: `export {name}=...` fails on every node"))
            continue
        value = val.strip()
        if '"' in value and _DS_SAFE.search(value):
            findings.append(EnvFileFinding(path, n, False,
                f"{name}: deepspeed wraps this value in double quotes as it is, so the quotes it "
                f"already has end up nested (write the value without quotes)"))
        elif "$" in value or "`" in value:
            findings.append(EnvFileFinding(path, n, False,
                f"{name}: the value is expanded by the remote shell (inside double quotes), not "
                f"taken literally"))
    return findings


def _masked_line(line: str) -> str:
    """A line for a message: what follows a secret-looking name is masked, '=' or not."""
    name = line.split("=", 1)[0] if "=" in line else (line.split() or [""])[0]
    if not is_secret(name):
        return line
    return f"{name}=****" if "=" in line else f"{name} ****"


@dataclass(frozen=True)
class EnvFiles:
    """The files the launch reads on one node, as its non-interactive shell finds them
    (envprobe.py's `envfiles`): ~/.bashrc, and `.deepspeed_env` in home and the launch dir."""

    home: str
    ds_env_name: str  # DS_ENV_FILE's value, else ".deepspeed_env"
    deepspeed_env: Mapping[str, str | None]  # path -> its text (None: no such file)
    bashrc: str | None

    @classmethod
    def read(cls, raw: object) -> EnvFiles:
        d = obj(raw, "the environment files")
        return by_fields(cls, d, ds_env_name=text(d.get("ds_env_name"), ".deepspeed_env"))

    @property
    def present(self) -> dict[str, str]:
        """path -> text of the `.deepspeed_env` files there are."""
        return {p: t for p, t in self.deepspeed_env.items() if t is not None}

    def findings(self) -> list[EnvFileFinding]:
        """E2's lint of those files."""
        return [f for path, t in self.present.items() for f in lint_deepspeed_env(t, path)]


ENVFILES: Probe[EnvFiles] = Probe(SCRIPT, "envfiles", EnvFiles.read)


def judge_env_files(node: str, files: EnvFiles, site: str) -> Problem | None:
    """E2: the `.deepspeed_env` lines that stop deepspeed's runner, or export what no shell runs
    on any rank, where the launch starts (`site`: DeepSpeed reads the files there alone, in the
    home and the launch directory). Launch-wide: the runner hands them to every rank, so no set
    of nodes avoids them; the fix names each file and line. Elsewhere (`node` is not the site)
    they are not read: None (the check warns)."""
    errors = [f for f in files.findings() if f.error]
    if not errors or node != site:
        return None
    by_file: dict[str, list[EnvFileFinding]] = {}
    for f in errors:
        by_file.setdefault(f.path, []).append(f)
    where = "; ".join(
        f"in {path} ({_whose(path, files.home)}): line{'s' if len(found) > 1 else ''} "
        + ", ".join(str(f.lineno) for f in found) for path, found in by_file.items())
    return Problem(
        (node,), EnvCause.ENV_FILE_BROKEN,
        f"{node}: deepspeed's runner reads {files.ds_env_name} here, where the launch starts, and "
        f"exports every line to every rank: it would stop or export garbage on every node:\n  "
        + "\n  ".join(map(str, errors)),
        fix=f"on {node}, {where}: delete the line, or write it as NAME=value (deepspeed's env "
            f"file has no comments or blank lines)",
        item=ids.DEEPSPEED_ENV.item, scope=Scope.LAUNCH_WIDE)


def _whose(path: str, home: str) -> str:
    """Which of the runner's two `.deepspeed_env` files `path` is."""
    return ("the home directory's" if os.path.dirname(os.path.normpath(path)) ==
            os.path.normpath(home) else "the launch directory's")


def env_file_not_read(node: str, finding: EnvFileFinding, site: str) -> str:
    """E2's warning for a broken `.deepspeed_env` line on a node the launch does not start on."""
    return (f"{node}: {finding} (not read by this launch, which starts on {site}: only there "
            f"does deepspeed read it)")


def judge_env_agrees(node: str, table: Table,
                     diff: Sequence[str], rank0: str) -> Problem | None:
    """E2: the NCCL_/HCCL_/GLOO_ values `node`'s ranks get (`table`: node -> name -> value)
    differ from what most nodes have in `diff`."""
    if not diff:
        return None
    return Problem(
        (node,), EnvCause.SETTINGS_DIFFER,
        f"{node}: {len(diff)} setting(s) differ from what most nodes have "
        f"(as pdsh's non-interactive shell sees them):\n"
        + side_by_side(table, diff, mark=node)
        + "\n  note: these are the values the ranks get: deepspeed's pdsh command exports the "
        "rank-0 node's NCCL_* (CUDA) or HCCL_*/ASCEND_* (Ascend) variables and its "
        ".deepspeed_env to every rank (counted in above), so what differs is set by this node's "
        "own shell and not by the launch.",
        fix=f"set the same values on every node (~/.bashrc above any early return), or put them "
            f"in ~/.deepspeed_env on {rank0}, which the launch exports everywhere",
        item=ids.ENV_AGREES.item)


def env_unread(node: str) -> Problem:
    """E2 where the node's environment could not be read."""
    return Problem((node,), EnvCause.ENV_UNREAD, f"{node}: could not read its environment",
                   item=ids.ENV_AGREES.item)


# -- ~/.bashrc ---------------------------------------------------------------------------------

_EARLY_RETURN = (
    # case $- in *i*) ;; *) return;; esac
    re.compile(r"^\s*\*\)\s*return\b"),
    re.compile(r"case\s+\$-\s+in.*\*\)\s*return"),                   # the same on one line
    re.compile(r"\[\[?\s*-z\s+\"?\$PS1\"?\s*\]\]?\s*&&\s*return"),   # [ -z "$PS1" ] && return
    re.compile(r"\[\[?\s*\$-\s*!?=\s*\*i\*\s*\]\]?\s*\|\|\s*return"),  # [[ $- == *i* ]] || return
    re.compile(r"\[\[?\s*\$-\s*!=\s*\*i\*\s*\]\]?\s*&&\s*return"),
)


def early_return_line(bashrc: str | None) -> int | None:
    """Line number of the first 'return if not interactive' in a ~/.bashrc, or None."""
    for n, line in enumerate((bashrc or "").splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("*)") else line
        if any(p.search(code) for p in _EARLY_RETURN):
            return n
    return None


def export_line(bashrc: str | None, name: str) -> int | None:
    """Line number where the ~/.bashrc sets `name` (export NAME=, NAME=), or None."""
    pat = re.compile(rf"^\s*(?:export\s+|declare\s+-x\s+)?{re.escape(name)}=")
    for n, line in enumerate((bashrc or "").splitlines(), 1):
        if pat.search(line):
            return n
    return None


def _path_shown(path: str | None) -> str:
    return path if path is not None else "(unset)"


def deepspeed_off_path(node: str, path: str | None, bashrc: str | None, python: str,
                       see: str) -> str:
    """E1's warning where `deepspeed` is not on the non-interactive PATH but the launch's own
    interpreter (`python`, run by absolute path) works there (`see`: E5's id on the node)."""
    early, line = early_return_line(bashrc), export_line(bashrc, "PATH")
    where = (f"; ~/.bashrc sets PATH on line {line}, below its early return for "
             f"non-interactive shells on line {early}"
             if early is not None and line is not None and line > early else
             f"; ~/.bashrc returns early for non-interactive shells on line {early}"
             if early is not None else "")
    return (f"{node}: `deepspeed` is not on the PATH of a non-interactive shell "
            f"({_path_shown(path)}){where}. The launch does not need it: it runs {python} by "
            f"absolute path on every node, and that works here (see {see}); scripts that call "
            f"`deepspeed` or `python` over ssh would not find them")


def judge_required_env(node: str, missing: Sequence[str], deepspeed: str | None,
                       path: str | None, bashrc: str | None, python: str) -> Problem | None:
    """E1: `missing` (the --required-env variables pdsh's shell lacks) and `deepspeed` (where
    that shell finds it, None: nowhere) on `node`; `python`: the interpreter found there."""
    if not missing and deepspeed is not None:
        return None
    early = early_return_line(bashrc)
    problems = []
    if deepspeed is None:
        problems.append(f"`deepspeed` is not on PATH ({_path_shown(path)})")
    if missing:
        problems.append("not set: " + ", ".join(missing))
    hints = []
    for var in [*missing, *(["PATH"] if deepspeed is None else [])]:
        line = export_line(bashrc, var)
        if early is not None and line is not None and line > early:
            hints.append(f"~/.bashrc sets {var} on line {line}, below the early return for "
                         f"non-interactive shells on line {early}: pdsh never sees it")
    if early is not None and not hints:
        hints.append(f"~/.bashrc returns early for non-interactive shells on line {early}")
    fix = (f"on {node}: move the exports above line {early} of ~/.bashrc (or delete that return)"
           if early is not None else
           f"on {node}: add the exports to ~/.bashrc (read by non-interactive ssh shells on Debian/"
           f"Ubuntu), or install deepspeed into the remote python's environment")
    return Problem(
        (node,), EnvCause.NOT_SET if missing else EnvCause.DEEPSPEED_OFF_PATH,
        f"{node}: as pdsh's non-interactive shell sees it, " + "; ".join(problems) + "\n"
        + "".join(f"  {h}\n" for h in hints) + f"  python found there: {python}",
        fix=fix, item=ids.REQUIRED_ENV.item)


# -- the temporary directory (E6) ----------------------------------------------------------------

#: E6: free space the launch's temporary directory needs: the first JIT op build (gcc's and
#: nvcc's temporaries), Triton's and torch.compile's caches put hundreds of MiB there.
TMP_MIN_FREE_MB = 1024
_TMP_USERS = "gcc's and nvcc's temporaries (DeepSpeed's op builds), Triton and torch.compile"


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.0f} MiB" if n < (1 << 30) else f"{n / (1 << 30):.1f} GiB"


@dataclass(frozen=True)
class TmpDir(ByFields, what="a temporary directory"):
    """A directory tried for real: a file written and removed there (tmpdirs.py's _try_dir)."""

    path: str
    exists: bool
    is_dir: bool
    writable: bool = False
    error: str | None = None
    free_bytes: int | None = None


@dataclass(frozen=True)
class TmpdirFacts:
    """E6's facts on one node (tmpdirs.py's tmpdir_facts: envprobe.py's `tmpdir` section, or
    the rehearsal's leg, which runs with the rank's exports and environment)."""

    value: str | None  # TMPDIR as the ranks get it
    from_launch: bool  # that value is the one the launch exports (its .deepspeed_env)
    tmpdir: TmpDir | None  # that directory, tried (where TMPDIR is set)
    effective: TmpDir | None  # where Python's tempfile settles
    effective_error: str | None = None  # tempfile found no usable directory

    @classmethod
    def read(cls, raw: object) -> TmpdirFacts:
        d = obj(raw, "the temporary directories")
        return by_fields(cls, d, value=opt_text(d.get("TMPDIR")))


TMPDIR: Probe[TmpdirFacts] = Probe(SCRIPT, "tmpdir", TmpdirFacts.read)


@dataclass(frozen=True)
class TmpVerdict:
    problem: Problem | None
    warnings: list[str]


def _tmpdir_warning(facts: TmpdirFacts, bashrc: str | None) -> str | None:
    """A TMPDIR that names no usable directory: the tools fall back, `mktemp` does not."""
    tmp = facts.tmpdir
    if not facts.value or tmp is None or (tmp.is_dir and tmp.writable):
        return None
    line = None if facts.from_launch else export_line(bashrc, "TMPDIR")
    where = ("the launch's .deepspeed_env" if facts.from_launch else
             f"~/.bashrc line {line}" if line else "this shell")
    what = ("does not exist" if not tmp.exists else "is not a directory"
            if not tmp.is_dir else f"is not writable ({tmp.error})")
    fallback = facts.effective.path if facts.effective is not None else "the next candidate"
    return (f"TMPDIR={facts.value} (from {where}) {what}: Python, gcc and bash fall back to "
            f"{fallback}, `mktemp` and scripts using \"$TMPDIR\" fail; create it or drop the "
            f"setting")


def judge_tmpdir(node: str, facts: TmpdirFacts, bashrc: str | None = None,
                 min_free_mb: float = TMP_MIN_FREE_MB) -> TmpVerdict:
    """E6. Red: the directory the tools really end up in (Python's tempfile, gcc and bash all
    take TMPDIR when it is a writable directory, else fall back to /tmp, /var/tmp...) takes no
    file or has too little room, or there is none at all. A TMPDIR that is missing or
    unwritable is only a warning: those tools fall back quietly (measured on the simulated
    cluster: gcc compiles, `tempfile.gettempdir()` is /tmp), while `mktemp` and scripts that
    use "$TMPDIR" literally fail."""
    warned = _tmpdir_warning(facts, bashrc)
    warnings = [warned] if warned else []
    eff = facts.effective
    if facts.effective_error:
        finding = Finding(EnvCause.NO_TMPDIR, f"Python finds no usable temporary directory: "
                                              f"{facts.effective_error}",
                          "free or remount /tmp, or point TMPDIR at a writable local disk")
    elif eff is None:
        return TmpVerdict(None, warnings)
    elif not eff.writable:
        finding = Finding(EnvCause.TMPDIR_UNWRITABLE,
                          f"{eff.path}, the temporary directory here, takes no file: {eff.error}"
                          f"; {_TMP_USERS} write there",
                          f"free space in {eff.path} or repair its mount and mode (chmod 1777 "
                          f"{eff.path}), or point TMPDIR at a local disk")
    elif eff.free_bytes is not None and eff.free_bytes < min_free_mb * (1 << 20):
        finding = Finding(EnvCause.TMPDIR_FULL,
                          f"{eff.path}, the temporary directory here, has {_mib(eff.free_bytes)} "
                          f"free, below {min_free_mb:g} MiB: {_TMP_USERS} write there (\"No "
                          f"space left on device\")",
                          f"free space (du -xsh {eff.path}/* | sort -h | tail), or point TMPDIR "
                          f"at a larger local disk")
    else:
        return TmpVerdict(None, warnings)
    return TmpVerdict(node_problem(node, [finding], ids.TMPDIR.item), warnings)


# -- what the launch's interpreter imports (E3) -------------------------------------------------

#: E3's versions: compared across nodes (and node-table columns where they differ)
VERSION_KEYS = ("python", "torch", "cuda", "nccl", "deepspeed", "torch_npu", "cann",
                "nvidia_driver", "ascend_driver")


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class Versions:
    """E3's versions on one node (versions.py's stack_versions: envprobe.py's `versions`, or
    the rehearsal's own import): each of VERSION_KEYS, None where absent."""

    python_executable: str
    values: Mapping[str, str | None]
    torch_error: str | None = None

    @classmethod
    def read(cls, raw: object) -> Versions:
        d = obj(raw, "the versions")
        return cls(text(d.get("python_executable")),
                   {k: _opt_str(d.get(k)) for k in VERSION_KEYS}, opt_text(d.get("torch_error")))


VERSIONS: Probe[Versions] = Probe(SCRIPT, "versions", Versions.read)


@dataclass(frozen=True)
class Package:
    """A package as the launch's interpreter imports it (node/rehearse.py's `packages`): its
    `__version__` and file, and what its installed distribution says."""

    imported: bool
    version: str | None = None
    file: str | None = None
    paths: tuple[str, ...] = ()  # a namespace package's __path__
    owned: bool | None = None  # the distribution's RECORD lists `file` (None: cannot tell)
    dist_version: str | None = None
    dist_location: str | None = None

    @classmethod
    def read(cls, raw: object) -> Package:
        d = obj(raw, "an imported package")
        return by_fields(cls, d, version=_opt_str(d.get("version")),
                         dist_version=_opt_str(d.get("dist_version")))


def import_findings(packages: Mapping[str, Package]) -> list[str]:
    """Where an imported package is not the installed distribution it claims to be (from the
    rehearsal's per-package facts: imported `__version__` and `__file__`, the distribution's
    metadata version and location, whether its RECORD lists that file)."""
    out = []
    for name, p in packages.items():
        if not p.imported:
            continue
        meta = p.dist_version
        installed = (f"the installed distribution says {meta} ({p.dist_location})" if meta else
                     "no installed distribution of it")
        if p.file is None:
            out.append(f"{name} imports as an empty namespace package from "
                       f"{', '.join(p.paths) or '?'}: a directory left behind (a half-removed "
                       f"install?), not the package; {installed}")
        elif p.version is None:
            out.append(f"{name} imported from {p.file} has no __version__: an empty or stray "
                       f"copy earlier on sys.path shadows the package; {installed}")
        elif meta is not None and p.version != meta:
            out.append(f"{name} imported from {p.file} is {p.version}, but {installed}")
        elif meta is not None and p.owned is False:
            out.append(f"{name} {p.version} is imported from {p.file}, which is not the "
                       f"installed distribution's file ({p.dist_location}): a copy earlier on "
                       f"sys.path shadows it")
    return out


def imported_row(packages: Mapping[str, Package]) -> dict[str, str | None]:
    """A node's row of the imported versions' table: "<package> (imported)" -> its version."""
    return {f"{k} (imported)": (p.version if p.imported else None) for k, p in packages.items()}


def version_findings(node: str, mine: Versions, table: Table,
                     diff: Sequence[str]) -> list[Finding]:
    """E3 from the versions: torch does not import, or `diff` (of `table`: node -> versions)
    differ from what most nodes have."""
    out = []
    if mine.torch_error:
        out.append(Finding(EnvCause.TORCH_BROKEN, f"torch does not import with "
                                                  f"{mine.python_executable}: {mine.torch_error}"))
    if diff:
        keys = [k for k in VERSION_KEYS if k in diff or any(r.get(k) for r in table.values())]
        out.append(Finding(EnvCause.VERSIONS_DIFFER,
                           f"{', '.join(diff)} differ from the other nodes:\n"
                           + side_by_side(table, keys, mark=node, secret_aware=False)))
    return out


def imported_findings(node: str, packages: Mapping[str, Package], python: str,
                      itable: Table,
                      idiff: Sequence[str]) -> list[Finding]:
    """E3 from what the launch's interpreter (`python`) imports on `node`: a package that is
    not the installed one, or other versions than most nodes import (`idiff` of `itable`)."""
    out = [Finding(EnvCause.IMPORT_SHADOWED, f"with the launch's interpreter ({python}): {f}")
           for f in import_findings(packages)]
    if idiff and len(itable) > 1:
        out.append(Finding(EnvCause.IMPORTED_DIFFER,
                           f"the launch's interpreter ({python}) imports other versions here "
                           f"than on the other nodes:\n"
                           + side_by_side(itable, idiff, mark=node, secret_aware=False)))
    return out


def versions_problem(node: str, findings: Sequence[Finding], shell_python: str,
                     launch_python: str, pins: Mapping[str, str | None]) -> Problem:
    """E3's red: `findings`, fixed by the versions the rank-0 node has (`pins`) installed into
    the python pdsh's shell finds and the one the launch runs."""
    also = (f" and the launch runs ({launch_python})"
            if launch_python and launch_python != shell_python else "")
    pip = " ".join(f"{k}=={pins[k]}" for k in ("torch", "deepspeed") if pins.get(k))
    return node_problem(
        node, findings, ids.VERSIONS.item,
        fix=f"on {node}: install the same versions as the other nodes into the python that "
            f"pdsh's shell finds ({shell_python}){also}, e.g. pip install {pip}; remove any "
            f"stray copy that shadows them (the file named above)")


# -- the Ascend settings and NPU links (E4) -----------------------------------------------------

@dataclass(frozen=True)
class AscendFacts:
    """HCCL's settings in pdsh's shell, and each NPU's link (envprobe.py's `ascend`)."""

    env: Mapping[str, str]  # HCCL_*
    hccn_tool: str | None
    links: Mapping[int, Command]  # NPU -> `hccn_tool -i N -link -g`

    @classmethod
    def read(cls, raw: object) -> AscendFacts:
        d = obj(raw, "the Ascend settings")
        links = obj(d.get("links") or {}, "the NPU links")
        return cls(text_map(d.get("env")), opt_text(d.get("hccn_tool")),
                   {int(k): Command.read(v, f"NPU {k}'s link") for k, v in links.items()})


ASCEND: Probe[AscendFacts] = Probe(SCRIPT, "ascend", AscendFacts.read)


def judge_npu_links(node: str, facts: AscendFacts) -> Problem | None:
    """E4: every NPU's link up, as `hccn_tool -i N -link -g` reports it."""
    down = []
    for dev, res in sorted(facts.links.items()):
        if res.rc != 0 or tooloutput.hccn_link_up(res.out) is not True:
            down.append(f"NPU {dev}: {res.out.strip() or res.err.strip() or f'exit {res.rc}'}")
    if not down:
        return None
    return Problem((node,), EnvCause.NPU_LINKS_DOWN,
                   f"{node}: NPU network links not up:\n  " + "\n  ".join(down),
                   fix=f"on {node}: check cabling/switch port; hccn_tool -i N -net_health -g",
                   item=ids.ASCEND_ENV.item)


# -- comparing across nodes --------------------------------------------------------------------

def comm_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(COMM_PREFIXES)}


def majority(values: Mapping[str, str | None], prefer: str | None = None) -> str | None:
    """The value most nodes have; on a tie, the one `prefer` (the rank-0 node) has."""
    top = Counter(values.values()).most_common()
    if not top:
        return None
    best = [v for v, c in top if c == top[0][1]]
    if len(best) > 1 and prefer is not None and prefer in values:
        return values[prefer]
    return best[0]


def majorities(table: Table, prefer: str | None = None) -> dict[str, str | None]:
    """key -> the value most nodes have (`majority`), for every key of `table`; computed once,
    it answers `differing` for every node."""
    keys = sorted({k for row in table.values() for k in row})
    return {key: majority({n: row.get(key) for n, row in table.items()}, prefer) for key in keys}


def differing(table: Table, node: str, prefer: str | None = None,
              most: Mapping[str, str | None] | None = None) -> list[str]:
    """Keys whose value on `node` differs from the value most nodes have; `most`: the table's
    `majorities`, where the caller has them (a check that asks for every node of a big
    cluster computes them once)."""
    if most is None:
        most = majorities(table, prefer)
    row = table.get(node) or {}
    return [key for key, value in most.items() if row.get(key) != value]


def side_by_side(table: Table, keys: Iterable[str],
                 mark: str | None = None, secret_aware: bool = True) -> str:
    """A plain-text table: one row per key, one column per node ('<' marks `mark`'s column)."""
    nodes = list(table)
    keys = list(keys)
    cells = [[k] + [shown(k, table[n].get(k)) if secret_aware else str(table[n].get(k))
                    for n in nodes] for k in keys]
    header = [""] + [f"{n} <" if n == mark else n for n in nodes]
    widths = [max(len(str(r[i])) for r in [header, *cells]) for i in range(len(header))]
    fmt = "    " + "  ".join(f"{{:{w}}}" for w in widths)
    return "\n".join(fmt.format(*r).rstrip() for r in [header, *cells])
