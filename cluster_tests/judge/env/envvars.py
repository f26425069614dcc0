"""Environment checks' logic (CHECKLIST E1-E6): pure functions, tested in
tests/unit/test_judge_env.py.

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

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

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


# -- the temporary directory (E6) ----------------------------------------------------------------

#: E6: free space the launch's temporary directory needs: the first JIT op build (gcc's and
#: nvcc's temporaries), Triton's and torch.compile's caches put hundreds of MiB there.
TMP_MIN_FREE_MB = 1024
_TMP_USERS = "gcc's and nvcc's temporaries (DeepSpeed's op builds), Triton and torch.compile"


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.0f} MiB" if n < (1 << 30) else f"{n / (1 << 30):.1f} GiB"


@dataclass(frozen=True)
class TmpVerdict:
    problems: list[str]
    warnings: list[str]


def judge_tmpdir(facts: Mapping[str, object], bashrc: str | None = None,
                 min_free_mb: float = TMP_MIN_FREE_MB) -> TmpVerdict:
    """E6 from envprobe's `tmpdir` section. Red: the directory the tools really end up in
    (Python's tempfile, gcc and bash all take TMPDIR when it is a writable directory, else fall
    back to /tmp, /var/tmp...) takes no file or has too little room, or there is none at all.
    A TMPDIR that is missing or unwritable is only a warning: those tools fall back quietly
    (measured on the simulated cluster: gcc compiles, `tempfile.gettempdir()` is /tmp), while
    `mktemp` and scripts that use "$TMPDIR" literally fail."""
    problems: list[str] = []
    warnings: list[str] = []
    value = facts.get("TMPDIR")
    tmp = facts.get("tmpdir")
    eff = facts.get("effective")
    if value and isinstance(tmp, Mapping) and not (tmp.get("is_dir") and tmp.get("writable")):
        launch = bool(facts.get("from_launch"))
        line = None if launch else export_line(bashrc, "TMPDIR")
        where = ("the launch's .deepspeed_env" if launch else
                 f"~/.bashrc line {line}" if line else "this shell")
        what = ("does not exist" if not tmp.get("exists") else "is not a directory"
                if not tmp.get("is_dir") else f"is not writable ({tmp.get('error')})")
        fallback = eff.get("path") if isinstance(eff, Mapping) else "the next candidate"
        warnings.append(f"TMPDIR={value} (from {where}) {what}: Python, gcc and bash fall back "
                        f"to {fallback}, `mktemp` and scripts using \"$TMPDIR\" fail; create "
                        f"it or drop the setting")
    if facts.get("effective_error"):
        problems.append(f"Python finds no usable temporary directory: {facts['effective_error']}"
                        f"\n  fix: free or remount /tmp, or point TMPDIR at a writable local disk")
        return TmpVerdict(problems, warnings)
    if not isinstance(eff, Mapping):
        return TmpVerdict(problems, warnings)
    path = eff.get("path")
    free = eff.get("free_bytes")
    if not eff.get("writable"):
        problems.append(f"{path}, the temporary directory here, takes no file: {eff.get('error')}"
                        f"; {_TMP_USERS} write there\n  fix: free space in {path} or repair its "
                        f"mount and mode (chmod 1777 {path}), or point TMPDIR at a local disk")
    elif isinstance(free, (int, float)) and free < min_free_mb * (1 << 20):
        problems.append(f"{path}, the temporary directory here, has {_mib(free)} free, below "
                        f"{min_free_mb:g} MiB: {_TMP_USERS} write there (\"No space left on "
                        f"device\")\n  fix: free space (du -xsh {path}/* | sort -h | tail), or "
                        f"point TMPDIR at a larger local disk")
    return TmpVerdict(problems, warnings)


# -- what the launch's interpreter imports (E3) -------------------------------------------------

def import_findings(packages: Mapping[str, Mapping[str, object]]) -> list[str]:
    """Where an imported package is not the installed distribution it claims to be (from the
    rehearsal's per-package facts: imported `__version__` and `__file__`, the distribution's
    metadata version and location, whether its RECORD lists that file)."""
    out = []
    for name, p in packages.items():
        if not p.get("imported"):
            continue
        file, version = p.get("file"), p.get("version")
        meta, where = p.get("dist_version"), p.get("dist_location")
        installed = f"the installed distribution says {meta} ({where})" if meta else \
            "no installed distribution of it"
        if file is None:
            listed: Any = p.get("paths") or []
            paths = ", ".join(str(x) for x in listed) or "?"
            out.append(f"{name} imports as an empty namespace package from {paths}: a directory "
                       f"left behind (a half-removed install?), not the package; {installed}")
            continue
        if version is None:
            out.append(f"{name} imported from {file} has no __version__: an empty or stray copy "
                       f"earlier on sys.path shadows the package; {installed}")
            continue
        if meta is not None and str(version) != str(meta):
            out.append(f"{name} imported from {file} is {version}, but {installed}")
        elif meta is not None and p.get("owned") is False:
            out.append(f"{name} {version} is imported from {file}, which is not the installed "
                       f"distribution's file ({where}): a copy earlier on sys.path shadows it")
    return out


# -- comparing across nodes --------------------------------------------------------------------

def comm_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(COMM_PREFIXES)}


def majority(values: Mapping[str, object], prefer: str | None = None) -> object:
    """The value most nodes have; on a tie, the one `prefer` (the rank-0 node) has."""
    counts = Counter(_hashable(v) for v in values.values())
    top = counts.most_common()
    if not top:
        return None
    best = [v for v, c in top if c == top[0][1]]
    if len(best) > 1 and prefer is not None and prefer in values:
        return _hashable(values[prefer])
    return best[0]


def _hashable(v: object) -> object:
    return tuple(sorted(v.items())) if isinstance(v, dict) else v


def majorities(table: Mapping[str, Mapping[str, Any]],
               prefer: str | None = None) -> dict[str, object]:
    """key -> the value most nodes have (`majority`), for every key of `table` (node -> {key:
    value or None}); computed once, it answers `differing` for every node."""
    keys = sorted({k for row in table.values() for k in row})
    return {key: majority({n: row.get(key) for n, row in table.items()}, prefer) for key in keys}


def differing(table: Mapping[str, Mapping[str, Any]], node: str,
              prefer: str | None = None, most: Mapping[str, object] | None = None) -> list[str]:
    """Keys whose value on `node` differs from the value most nodes have.
    `table` is node -> {key: value or None (unset)}; `most`: its `majorities`, where the caller
    has them (a check that asks for every node of a big cluster computes them once)."""
    if most is None:
        most = majorities(table, prefer)
    row = table.get(node) or {}
    return [key for key, value in most.items() if _hashable(row.get(key)) != value]


def side_by_side(table: Mapping[str, Mapping[str, str | None]], keys: Iterable[str],
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
