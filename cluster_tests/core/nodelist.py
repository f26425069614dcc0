"""Where the node list comes from: a DeepSpeed hostfile, a Slurm allocation, an MPI hostfile or
SkyPilot, always turned into the one model the checks use (a DeepSpeed hostfile, rank 0 first).

Pure parts (no subprocess, no network) except :func:`scontrol_hostnames`:

* :func:`expand_hostlist`: Slurm's hostlist syntax, expanded as Slurm's ``src/common/hostlist.c``
  does (``_next_tok``, ``_hostlist_create_bracketed``, ``_parse_single_range``,
  ``_push_range_list``): ``gpu-[01-04,07]``, several bracket groups (``rack[1-2]-n[01-02]``, the
  rightmost group innermost, the others in Slurm's recursion order), zero padding from the
  width of the low bound as written, Slurm's quirks (``n[+1-2]`` is ``n01 n02``) and Slurm's
  refusals (text after the last ``]``, as in ``a[1-2]-ib``, is "Invalid hostlist"). Checked
  against real ``scontrol show hostnames`` output (tests/data/samples).
* :func:`parse_tasks_per_node`: ``SLURM_TASKS_PER_NODE``'s ``2(x3),1``.
* :func:`parse_mpi_hostfile`: Open MPI (``host slots=N max_slots=M``, with the aliases of
  Open MPI's hostfile lexer, ``#`` and ``//`` comments) and MPICH / Intel MPI (``host:N``)
  machine files, linted with line numbers like H1, each finding with the DeepSpeed line to write.
* :func:`skypilot_nodes`: ``SKYPILOT_NODE_IPS`` (one address per line, head node first) and
  ``SKYPILOT_NUM_GPUS_PER_NODE``.
* :func:`load_hostfile`: a DeepSpeed hostfile read from disk (missing, unreadable, binary,
  empty, absurd: one sentence each), parsed by ``judge/hostfile/hostparse.py`` (DeepSpeed's
  parse and H1's lint, pure).

:func:`resolve` picks the source of a run (explicit ones win over the environment's; two
explicit sources, or two environments with nothing explicit, are a usage error naming both).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cluster_tests.judge.hostfile import hostparse as hf
from cluster_tests.judge.hostfile.hostmodel import (
    BOM,
    ERROR,
    MAX_BYTES,
    MAX_LINES,
    WARNING,
    Finding,
    Host,
    HostfileError,
    example,
)

#: _parse_single_range's limit: a range of more hosts is refused ("Too many hosts in range")
MAX_RANGE = 64 * 1024
#: our own limit on a whole expanded list (Slurm's MAX_PREFIX_CNT is of the same order)
MAX_HOSTS = 100_000
#: how long `scontrol show hostnames` may take (it answers in milliseconds where it is configured;
#: with SLURM_CONF naming a missing file, Slurm 22.05 retries for 60 s)
SCONTROL_TIMEOUT = 15.0
_SEP = "\t, "
_CSPACE = " \t\n\v\f\r"


class HostlistError(ValueError):
    """Slurm would refuse this hostlist expression ("Invalid hostlist: ...")."""


class NodeListError(Exception):
    """The node list of the run cannot be determined (a usage error, one sentence)."""


# --------------------------------------------------------------------------- Slurm hostlists


def _next_tokens(text: str) -> list[str]:
    """Slurm's ``_next_tok`` over the separators tab, comma and space: a separator inside a
    bracket pair does not end a token (``a[1, 3]`` is one token)."""
    tokens: list[str] = []
    s, n, i = text, len(text), 0
    while True:
        while i < n and s[i] in _SEP:  # push past leading separators
            i += 1
        if i >= n:
            return tokens
        tok = parse = i
        while True:
            while i < n and s[i] not in _SEP:  # to the first separator
                i += 1
            done = False
            while True:  # push past pairs of brackets ("bracket:" in the C)
                ob = s.find("[", parse)
                if ob < 0 or ob > i:
                    done = True
                    break
                cb = s.find("]", parse)
                if cb < 0 or cb < ob:
                    done = True
                    break
                if cb < i:
                    parse = cb + 1
                    continue
                i = cb  # a separator inside brackets: scan on from the ']'
                break
            if done:
                break
        tokens.append(s[tok:i])


def _strtoul(text: str, start: int = 0) -> tuple[int, int]:
    """C ``strtoul(text + start, &end, 10)``: (value, end index; == start when no digits)."""
    i = start
    n = len(text)
    while i < n and text[i] in _CSPACE:
        i += 1
    neg = False
    if i < n and text[i] in "+-":
        neg = text[i] == "-"
        i += 1
    j = i
    while j < n and "0" <= text[j] <= "9":
        j += 1
    if j == i:
        return 0, start
    value = int(text[i:j])
    if value >= 2**64:
        value = 2**64 - 1
    elif neg:
        value = (-value) % 2**64
    return value, j


@dataclass(frozen=True)
class _Range:
    lo: int
    hi: int
    width: int


def _parse_single_range(text: str) -> _Range:
    if "x" in text:  # "do NOT allow boxes here"
        raise HostlistError(f"Invalid range: `{text}'")
    lo_text, dash, hi_text = text.partition("-")
    if dash and hi_text.startswith("-"):  # "do NOT allow negative numbers"
        raise HostlistError(f"Invalid range: `{text}'")
    width = len(lo_text)
    lo, end = _strtoul(lo_text)
    if end == 0:
        raise HostlistError(f"Invalid range: `{text}'")
    if dash and hi_text:
        hi, hend = _strtoul(hi_text)
        if hend == 0 or hend != len(hi_text):
            raise HostlistError(f"Invalid range: `{text}'")
    else:
        hi = lo
        if end != len(lo_text):
            raise HostlistError(f"Invalid range: `{text}'")
    if lo > hi:
        raise HostlistError(f"Invalid range: `{text}'")
    if hi - lo + 1 > MAX_RANGE:
        raise HostlistError(f"Too many hosts in range `{text}'")
    return _Range(lo, hi, width)


def _parse_range_list(text: str) -> list[_Range]:
    return [_parse_single_range(part) for part in text.split(",")]


def _fmt(prefix: str, r: _Range, j: int, after: str = "") -> str:
    return f"{prefix}{j:0{r.width}d}{after}" if r.width else f"{prefix}{j}{after}"


def _push_range_list(out: list[str], prefix: str, ranges: list[_Range]) -> None:
    p = prefix.rfind("[")
    q = prefix.rfind("]", p + 1) if p >= 0 else -1
    if p >= 0 and q >= 0:
        pre, inner, after = prefix[:p], prefix[p + 1:q], prefix[q + 1:]
        recurse = "[" in pre
        for pr in _parse_range_list(inner):
            for j in range(pr.lo, pr.hi + 1):
                new_prefix = _fmt(pre, pr, j, after)
                if recurse:
                    _push_range_list(out, new_prefix, ranges)
                else:
                    _push_ranges(out, new_prefix, ranges)
        return
    _push_ranges(out, prefix, ranges)


def _push_ranges(out: list[str], prefix: str, ranges: list[_Range]) -> None:
    for r in ranges:
        if len(out) + (r.hi - r.lo + 1) > MAX_HOSTS:
            raise HostlistError(f"more than {MAX_HOSTS} hosts")
        out.extend(_fmt(prefix, r, j) for j in range(r.lo, r.hi + 1))


def expand_hostlist(expression: str) -> list[str]:
    """The host names of a Slurm hostlist expression, in the order ``scontrol show hostnames``
    prints them (duplicates kept). Raises HostlistError where Slurm says "Invalid hostlist"."""
    out: list[str] = []
    for tok in _next_tokens(expression):
        p = tok.rfind("[")
        if p < 0:
            out.append(tok)
            continue
        prefix, rest = tok[:p], tok[p + 1:]
        q = rest.find("]")
        if q < 0:
            # no ']': Slurm 22.05 pushes the prefix with a ']' tacked on (or the rest when the
            # token starts with '['); such names then fail the H1 name lint
            out.append(prefix + "]" if prefix else rest)
            continue
        if q + 1 != len(rest) and rest[q + 1] != ",":
            raise HostlistError(f"Invalid hostlist: {expression}")
        try:
            ranges = _parse_range_list(rest[:q])
            _push_range_list(out, prefix, ranges)
        except HostlistError as exc:
            raise HostlistError(f"{exc}; Invalid hostlist: {expression}") from None
    return out


class ScontrolFailed(NodeListError):
    """`scontrol show hostnames` gave no list: a client without a configuration ("Could not
    establish a configuration source"), a timeout, a refusal. ``said``: what it said, one line."""

    def __init__(self, said: str) -> None:
        super().__init__(f"`scontrol show hostnames` said: {said}")
        self.said = said


def _scontrol_said(stderr: str, returncode: int) -> str:
    """What scontrol's stderr says about why: its first line (the root: `cannot stat file ...`,
    `res_nsearch error`) and its fatal line (`Could not establish a configuration source`), else
    its last line (`Invalid hostlist: ...`), else the exit status."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    fatal = [ln for ln in lines if "fatal:" in ln]
    if fatal:
        return f"{lines[0]} ... {fatal[-1]}" if lines[0] != fatal[-1] else fatal[-1]
    return lines[-1] if lines else f"exit {returncode} and no host"


def scontrol_hostnames(expression: str, scontrol: str, timeout: float = SCONTROL_TIMEOUT
                       ) -> list[str]:
    """``scontrol show hostnames EXPR`` (it exits 0 even on a bad list: its stderr says so).
    Raises ScontrolFailed when it gives no list."""
    try:
        proc = subprocess.run([scontrol, "show", "hostnames", expression], capture_output=True,
                              text=True, errors="replace", timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (
            exc.stderr or "")
        last = [ln.strip() for ln in err.splitlines() if ln.strip()]
        raise ScontrolFailed(f"no answer within {timeout:g} s"
                             + (f" (its last words: {last[-1]})" if last else "")) from None
    except OSError as exc:
        raise ScontrolFailed(f"{scontrol} did not run: {exc.strerror or exc}") from None
    names = proc.stdout.split()
    if (proc.returncode != 0 or "Invalid hostlist" in proc.stderr
            or (expression.strip() and not names)):
        raise ScontrolFailed(_scontrol_said(proc.stderr, proc.returncode))
    return names


def _repeat_list(text: str, what: str) -> list[int]:
    """``2(x3),1`` -> [2, 2, 2, 1] (SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE)."""
    out: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise NodeListError(f"{what}={text!r}: {part!r} is not N or N(xK)")
        count = int(m.group(2) or 1)
        if count > MAX_HOSTS or len(out) + count > MAX_HOSTS:
            raise NodeListError(f"{what}={text!r}: more than {MAX_HOSTS} nodes")
        out.extend([int(m.group(1))] * count)
    return out


def parse_tasks_per_node(text: str) -> list[int]:
    """SLURM_TASKS_PER_NODE: ``2(x3),1`` -> [2, 2, 2, 1]."""
    return _repeat_list(text, "SLURM_TASKS_PER_NODE")


def count_job_gpus(text: str) -> int:
    """SLURM_JOB_GPUS: the GPU indices of this node, ``0,1,2,3`` (ranges ``0-3`` allowed)."""
    n = 0
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise NodeListError(f"SLURM_JOB_GPUS={text!r}: {part!r} is not a GPU index")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        n += max(0, hi - lo + 1)
    return n


# --------------------------------------------------------------------------- the model


@dataclass
class NodeList:
    """Hosts of one source, in launch order (rank 0 first), with the findings on its lines."""

    source: str  # "hostfile", "slurm", "skypilot", "mpi-hostfile"
    description: str  # where the list came from, for the report header
    hosts: list[Host] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    path: str = "<node list>"  # what the findings' path names
    #: what the user must be told about how the list was read (the run's summary shows them)
    notes: list[str] = field(default_factory=list)

    def deepspeed_text(self) -> str:
        return "".join(f"{h.name} slots={h.slots}\n" for h in self.hosts)


def _slots_from_slurm(environ: Mapping[str, str], n: int,
                      slots: int | None) -> tuple[list[int], str]:
    if slots is not None:
        return [slots] * n, f"--slots {slots}"
    gpus = (environ.get("SLURM_GPUS_ON_NODE") or "").strip()
    if gpus:
        if not gpus.isdigit() or int(gpus) < 1:
            raise NodeListError(f"SLURM_GPUS_ON_NODE={gpus!r} is not a positive count; "
                                "pass --slots N")
        return [int(gpus)] * n, f"SLURM_GPUS_ON_NODE={gpus} (this node's, for every node)"
    job_gpus = (environ.get("SLURM_JOB_GPUS") or "").strip()
    if job_gpus:
        k = count_job_gpus(job_gpus)
        if k < 1:
            raise NodeListError(f"SLURM_JOB_GPUS={job_gpus!r} names no GPU; pass --slots N")
        return [k] * n, f"SLURM_JOB_GPUS={job_gpus} ({k} GPUs, for every node)"
    tasks = (environ.get("SLURM_TASKS_PER_NODE") or "").strip()
    if tasks:
        per = parse_tasks_per_node(tasks)
        if len(per) != n:
            raise NodeListError(
                f"SLURM_TASKS_PER_NODE={tasks!r} gives {len(per)} counts for the {n} nodes of "
                f"SLURM_JOB_NODELIST; pass --slots N")
        return per, f"SLURM_TASKS_PER_NODE={tasks}"
    raise NodeListError("SLURM_JOB_NODELIST is set but no slot count is: none of "
                        "SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS, SLURM_TASKS_PER_NODE; "
                        "pass --slots N")


def slurm_nodes(environ: Mapping[str, str], slots: int | None = None,
                scontrol: str | None = None) -> NodeList:
    """The allocation's nodes in SLURM_JOB_NODELIST's order: through ``scontrol`` when given
    (its path), else the built-in expander. Where scontrol gives no list (a login node with the
    client but no slurm.conf, configless mode unreachable, a timeout), the built-in expander's
    list is taken with a note naming what scontrol said; refused only when both refuse."""
    expr = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or ""
    var = "SLURM_JOB_NODELIST" if environ.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
    notes: list[str] = []
    if scontrol:
        try:
            names = scontrol_hostnames(expr, scontrol)
            how = "scontrol show hostnames"
        except ScontrolFailed as failed:
            try:
                names = expand_hostlist(expr)
            except HostlistError as exc:
                raise NodeListError(
                    f"{var}={expr!r}: `scontrol show hostnames` said: {failed.said}; the "
                    f"built-in Slurm hostlist expander: {exc}") from None
            how = (f"built-in Slurm hostlist expander: `scontrol show hostnames` failed: "
                   f"{failed.said}")
            notes.append(f"warning: {var}={expr} was expanded by the built-in Slurm hostlist "
                         f"expander ({len(names)} nodes), because `{scontrol} show hostnames` "
                         f"failed: {failed.said}")
    else:
        try:
            names = expand_hostlist(expr)
        except HostlistError as exc:
            raise NodeListError(f"{var}={expr!r}: {exc}") from None
        how = "built-in Slurm hostlist expander (no scontrol on PATH)"
    if not names:
        raise NodeListError(f"{var}={expr!r} names no node")
    dups = sorted({x for x in names if names.count(x) > 1})
    if dups:
        raise NodeListError(f"{var}={expr!r} names {', '.join(dups)} more than once")
    per, slot_source = _slots_from_slurm(environ, len(names), slots)
    nl = NodeList("slurm", f"Slurm allocation {var}={expr} ({how}; slots from {slot_source})",
                  path=var, notes=notes)
    nl.hosts = [Host(name, s, i) for i, (name, s) in enumerate(zip(names, per, strict=False), 1)]
    return nl


def skypilot_nodes(environ: Mapping[str, str], slots: int | None = None) -> NodeList:
    """SkyPilot: SKYPILOT_NODE_IPS (one per line, the head node first) and
    SKYPILOT_NUM_GPUS_PER_NODE."""
    raw = environ.get("SKYPILOT_NODE_IPS") or ""
    ips = [x.strip() for x in raw.replace(",", "\n").splitlines() if x.strip()]
    if not ips:
        raise NodeListError("SKYPILOT_NODE_IPS is set but names no address")
    dups = sorted({x for x in ips if ips.count(x) > 1})
    if dups:
        raise NodeListError(f"SKYPILOT_NODE_IPS names {', '.join(dups)} more than once")
    if slots is not None:
        per, where = slots, f"--slots {slots}"
    else:
        g = (environ.get("SKYPILOT_NUM_GPUS_PER_NODE") or "").strip()
        if not g:
            raise NodeListError("SKYPILOT_NODE_IPS is set but SKYPILOT_NUM_GPUS_PER_NODE is not; "
                                "pass --slots N")
        if not g.isdigit() or int(g) < 1:
            raise NodeListError(f"SKYPILOT_NUM_GPUS_PER_NODE={g!r}: no GPUs per node; "
                                "pass --slots N (e.g. --slots 1 on CPU nodes)")
        per, where = int(g), f"SKYPILOT_NUM_GPUS_PER_NODE={g}"
    nl = NodeList("skypilot", f"SkyPilot SKYPILOT_NODE_IPS ({len(ips)} nodes, head node first; "
                  f"slots from {where})", path="SKYPILOT_NODE_IPS")
    nl.hosts = [Host(ip, per, i) for i, ip in enumerate(ips, 1)]
    return nl


# --------------------------------------------------------------------------- MPI hostfiles

# Open MPI's hostfile lexer (orte/util/hostfile/hostfile_lex.l): these all mean "slots" ...
_OMPI_SLOTS = {"slots", "count", "cpu"}
# ... these "max_slots" ...
_OMPI_MAX = {"max_slots", "max-slots", "slots_max", "slots-max", "cpu_max", "cpu-max", "max_cpu",
             "max-cpu", "count_max", "count-max", "max_count", "max-count"}
# ... and these are placement details that DeepSpeed has no use for.
_OMPI_OTHER = {"username", "user-name", "user_name", "boards", "sockets", "sockets_per_board",
               "sockets-per-board", "cores", "cores_per_socket", "cores-per-socket", "cpu_set",
               "cpu-set", "rank", "slot"}


def _strip_comment(text: str) -> tuple[str, int | None]:
    """Drop a ``#`` or ``//`` comment (Open MPI's lexer takes both anywhere on a line)."""
    cut = [i for i in (text.find("#"), text.find("//")) if i >= 0]
    if not cut:
        return text, None
    return text[: min(cut)], min(cut) + 1


def parse_mpi_hostfile(text: str, path: str = "<mpi hostfile>", slots: int | None = None
                       ) -> NodeList:
    """Read an Open MPI (``host slots=N max_slots=M``) or MPICH / Intel MPI (``host:N``)
    machine file. Every line is judged on its own (like H1): a bad line is an error Finding
    with its line, column and the DeepSpeed line to write, the good lines are the hosts."""
    nl = NodeList("mpi-hostfile", f"MPI hostfile {path}", path=path)
    reader = _MpiReader(path, slots)
    for lineno, line in _mpi_lines(text):
        body, _comment_col = _strip_comment(line)
        if body.strip():
            reader.read_line(lineno, body)
    reader.mixed_styles()
    nl.hosts = [Host(h, s, ln) for h, (s, ln) in reader.entries.items()]
    if not nl.hosts and not any(f.severity == ERROR for f in reader.findings):
        reader.add(1, 1, ERROR, "M1-empty", "no hosts: only comments and blank lines",
                   None)
    nl.findings = sorted(reader.findings, key=lambda f: (f.line, f.column))
    return nl


def _mpi_lines(text: str) -> Iterator[tuple[int, str]]:
    """The lines of an MPI hostfile (numbered from 1), with Open MPI's ``/* ... */`` comments
    blanked out (a block may span lines) and a first line's byte-order mark dropped."""
    in_block = False
    for lineno, (content, _end) in enumerate(hf.split_lines(text), 1):
        line = content.lstrip(BOM) if lineno == 1 else content
        if in_block:  # inside /* ... */ (Open MPI's lexer)
            end = line.find("*/")
            if end < 0:
                continue
            line = " " * (end + 2) + line[end + 2:]
            in_block = False
        start = line.find("/*")
        if start >= 0 and (line.find("#") < 0 or start < line.find("#")):
            end = line.find("*/", start + 2)
            if end < 0:
                in_block = True
                line = line[:start]
            else:
                line = line[:start] + " " * (end + 2 - start) + line[end + 2:]
        yield lineno, line


@dataclass
class _MpiEntry:
    """One MPI hostfile line as its words give it: the host, its slot count (None: not given),
    the style it is written in ("mpich" for host:N, "openmpi" for slots=N), its max_slots."""

    lineno: int
    col0: int  # column of the host
    host: str
    count: int | None = None
    style: str | None = None
    max_slots: int | None = None


class _MpiReader:
    """The findings and hosts of an MPI hostfile, one line at a time."""

    def __init__(self, path: str, slots: int | None) -> None:
        self.path = path
        self.slots = slots  # --slots: the count of a line that gives none
        self.findings: list[Finding] = []
        self.entries: dict[str, tuple[int, int]] = {}  # host -> (slots, first line)
        self.styles: dict[str, int] = {}  # "openmpi"/"mpich" -> first line

    def add(self, line: int, col: int, sev: str, code: str, msg: str, fixed: str | None) -> None:
        self.findings.append(Finding(self.path, line, col, sev, code, msg, fixed))

    def read_line(self, lineno: int, body: str) -> None:
        col0 = len(body) - len(body.lstrip()) + 1
        line_start = len(self.findings)
        words = body.split()
        e = self._first_word(lineno, col0, words[0])
        if e is None:
            return
        bad = self._keywords(e, body, words[1:])
        if e.style:
            self.styles.setdefault(e.style, lineno)
        if not bad:
            self._accept(e, len(words[0]), line_start)

    def _first_word(self, lineno: int, col0: int, first: str) -> _MpiEntry | None:
        """The host (and MPICH's ``:N`` count, a ``user@`` dropped with a warning); None where
        the count after ':' is no count."""
        e = _MpiEntry(lineno, col0, first)
        if ":" in first and not first.startswith("["):
            e.host, _, rest = first.partition(":")
            nums = rest.split(":")[0]
            e.style = "mpich"
            if not nums.isdigit() or int(nums) < 1:
                self.add(lineno, col0 + len(e.host) + 1, ERROR, "M1-count",
                         f"{nums!r} after ':' is not a process count (MPICH/Intel MPI write "
                         f"host:N)", f"{e.host} slots=<N>")
                return None
            e.count = int(nums)
        if "@" in e.host:
            user, _, e.host = e.host.rpartition("@")
            self.add(lineno, col0, WARNING, "M1-user",
                     f"{user}@ gives a login user for this host; DeepSpeed's hostfile has none: "
                     "the launch logs in as the ssh config's (or --ssh-user's) user",
                     f"{e.host} slots=<N>")
        return e

    def _keywords(self, e: _MpiEntry, body: str, words: list[str]) -> bool:
        """Open MPI's ``key=value`` words after the host; True where one is an error."""
        bad = False
        for w in words:
            key, eq, val = w.partition("=")
            wcol = e.col0 + body.strip().find(w)
            k = key.lower()
            if eq and k in _OMPI_SLOTS:
                e.style = e.style or "openmpi"
                if val.isdigit() and int(val) >= 1:
                    e.count = int(val)
                    continue
                self.add(e.lineno, wcol, ERROR, "M1-slots", f"{w!r}: the slot count "
                         "is not a positive whole number", f"{e.host} slots=<N>")
            elif eq and k in _OMPI_MAX:
                e.style = e.style or "openmpi"
                e.max_slots = int(val) if val.isdigit() else e.max_slots
                continue
            elif eq and k in _OMPI_OTHER:
                self.add(e.lineno, wcol, WARNING, "M1-ignored",
                         f"{w!r} is an Open MPI placement detail that DeepSpeed does not read",
                         None)
                continue
            else:
                self.add(e.lineno, wcol, ERROR, "M1-bad-entry",
                         f"{w!r} is not an Open MPI hostfile keyword" if eq
                         else f"{w!r} after the host name is not key=value",
                         f"{e.host} slots=<N>")
            bad = True
        return bad

    def _accept(self, e: _MpiEntry, first_len: int, line_start: int) -> None:
        """A line whose words are fine: its host name as H1 judges one, its count (or
        --slots), then the line to write on its warnings, max_slots and a host given twice."""
        probe = hf.parse_hostfile_text(f"{e.host} slots=1\n", self.path)
        name_errors = [f for f in probe.errors if f.code.startswith("H1-hostname")]
        if name_errors or not e.host:
            msg = name_errors[0].message if name_errors else "no host name"
            self.add(e.lineno, e.col0, ERROR, "M1-hostname", msg, None)
            return
        count = e.count if e.count is not None else self.slots
        if count is None:
            self.add(e.lineno, e.col0 + first_len, ERROR, "M1-no-slots",
                     f"no slot count for {e.host}: Open MPI would take its core count, MPICH 1; "
                     "DeepSpeed needs slots=N (or pass --slots N)", f"{e.host} slots=<N>")
            return
        for at, found in enumerate(self.findings[line_start:], line_start):
            if found.severity == WARNING:
                self.findings[at] = dataclasses.replace(found, fixed_line=f"{e.host} slots={count}")
        if e.max_slots is not None and e.max_slots < count:
            self.add(e.lineno, e.col0, WARNING, "M1-max-slots",
                     f"max_slots={e.max_slots} is below slots={count}; DeepSpeed ignores "
                     f"max_slots and starts {count} ranks", f"{e.host} slots={count}")
        if e.host in self.entries:
            total, first = self.entries[e.host]
            self.entries[e.host] = (total + count, first)
            self.add(e.lineno, e.col0, WARNING, "M1-duplicate",
                     f"{e.host} is already on line {first}; MPI adds the slots up, DeepSpeed "
                     f"refuses a host twice: one line with the sum",
                     f"{e.host} slots={total + count}")
            return
        self.entries[e.host] = (count, e.lineno)

    def mixed_styles(self) -> None:
        """A warning where host:N lines and slots= lines share the file."""
        if len(self.styles) < 2:
            return
        first_mpich = next((f"{h} slots={c}" for h, (c, ln) in self.entries.items()
                            if ln == self.styles["mpich"]), None)
        self.add(self.styles["mpich"], 1, WARNING, "M1-mixed",
                 f"host:N lines (MPICH/Intel MPI, first on line {self.styles['mpich']}) and "
                 f"slots= lines (Open MPI, first on line {self.styles['openmpi']}) in one file",
                 first_mpich)


# --------------------------------------------------------------------------- DeepSpeed hostfile


def _open_binary(path: str) -> bytes:
    with open(path, "rb") as fd:
        return fd.read(MAX_BYTES + 1)


def load_hostfile(path: str | os.PathLike[str]) -> hf.HostfileParse:
    """Read and parse a DeepSpeed hostfile (judge.hostfile); raise HostfileError, one sentence,
    when it is not usable (missing, unreadable, binary, empty, absurd)."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise HostfileError(f"hostfile {p}: no such file") from None
    except NotADirectoryError:
        raise HostfileError(
            f"hostfile {p}: no such file (a part of the path is not a directory)"
        ) from None
    except OSError as exc:
        raise HostfileError(f"hostfile {p}: cannot read it ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise HostfileError(f"hostfile {p} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise HostfileError(f"hostfile {p} is not a regular file (a device, pipe or socket)")
    if st.st_size > MAX_BYTES:
        raise HostfileError(
            f"hostfile {p} is {st.st_size} bytes, more than {MAX_BYTES} (1 MiB): "
            "that is not a hostfile"
        )
    try:
        data = _open_binary(p)
    except PermissionError:
        raise HostfileError(f"hostfile {p}: permission denied") from None
    except OSError as exc:
        raise HostfileError(f"hostfile {p}: cannot read it ({exc.strerror})") from None
    if len(data) > MAX_BYTES:
        raise HostfileError(
            f"hostfile {p} is more than {MAX_BYTES} bytes (1 MiB): that is not a hostfile"
        )
    nul = data.find(b"\x00")
    if nul >= 0:
        raise HostfileError(f"hostfile {p} is binary (a NUL byte at offset {nul}), not text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HostfileError(
            f"hostfile {p} is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} "
            "cannot be decoded"
        ) from None
    n_lines = len(hf.split_lines(text))
    if n_lines > MAX_LINES:
        raise HostfileError(
            f"hostfile {p} has {n_lines} lines, more than {MAX_LINES}: that is not a hostfile"
        )
    if text.strip() == "" or text.strip() == BOM:
        raise HostfileError(f"hostfile {p} is empty: {example()}")
    result = hf.parse_hostfile_text(text, p)
    if result.entry_lines == 0:
        raise HostfileError(
            f"hostfile {p} has no hosts, only comments and blank lines: {example()}"
        )
    return result


def load_mpi_hostfile(path: str | os.PathLike[str], slots: int | None = None) -> NodeList:
    p = os.fspath(path)
    try:
        with open(p, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise NodeListError(f"--mpi-hostfile {p}: cannot read it ({exc.strerror})") from None
    if len(data) > MAX_BYTES or b"\x00" in data:
        raise NodeListError(f"--mpi-hostfile {p} is not a text hostfile (binary, or over 1 MiB)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NodeListError(f"--mpi-hostfile {p} is not UTF-8 (offset {exc.start})") from None
    nl = parse_mpi_hostfile(text, p, slots)
    nl.description = f"MPI hostfile {p}"
    return nl


# --------------------------------------------------------------------------- one run


def to_parse(nl: NodeList, written: str) -> hf.HostfileParse:
    """The HostfileParse the checks see: DeepSpeed's verdict and H1's lint on the DeepSpeed
    text that will be written, plus the source's own findings (with their line numbers)."""
    parse = hf.parse_hostfile_text(nl.deepspeed_text(), written)
    parse.path = nl.path
    bad = {f.line for f in parse.errors}
    hosts = [h for i, h in enumerate(nl.hosts, 1) if i not in bad]
    for f in parse.findings:
        if f.line in bad or f.severity == ERROR:
            src = nl.hosts[f.line - 1] if 0 < f.line <= len(nl.hosts) else None
            where = src.lineno if src is not None else f.line
            nl.findings.append(Finding(nl.path, where, 1, f.severity, f.code,
                                          f"{f.message} (DeepSpeed line {f.line} of {written})",
                                          f.fixed_line))
    parse.hosts = hosts
    parse.findings = sorted(nl.findings, key=lambda f: (f.line, f.column))
    return parse


def write_hostfile(path: Path, text: str) -> None:
    """Write atomically (xdist workers may write the same file at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@dataclass
class Resolved:
    nodes: NodeList
    parse: hf.HostfileParse
    hostfile: Path  # the DeepSpeed hostfile the run checks (and T2 launches with)
    description: str  # the report header's "from ..."


def choose_source(*, hostfile: str | None, hostfile_from: str, mpi_hostfile: str | None,
                  environ: Mapping[str, str], nodes_from: str | None = None) -> str | None:
    """Which source this run takes: 'hostfile', 'mpi-hostfile', 'slurm', 'skypilot' or None.
    Raises NodeListError naming both when two are given."""
    explicit = []
    if hostfile:
        explicit.append(("hostfile", f"{hostfile_from} {hostfile}"))
    if mpi_hostfile:
        explicit.append(("mpi-hostfile", f"--mpi-hostfile {mpi_hostfile}"))
    envs = []
    if environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST"):
        var = "SLURM_JOB_NODELIST" if environ.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
        envs.append(("slurm", f"{var}={environ[var]}"))
    if environ.get("SKYPILOT_NODE_IPS"):
        envs.append(("skypilot", "SKYPILOT_NODE_IPS"))
    if nodes_from:
        if explicit:
            raise NodeListError(f"two node lists given: --nodes-from {nodes_from} and "
                                f"{explicit[0][1]}; give one")
        match = [e for e in envs if e[0] == nodes_from]
        if not match:
            var = {"slurm": "SLURM_JOB_NODELIST", "skypilot": "SKYPILOT_NODE_IPS"}[nodes_from]
            raise NodeListError(f"--nodes-from {nodes_from}: {var} is not set")
        return nodes_from
    if len(explicit) > 1:
        raise NodeListError(f"two node lists given: {explicit[0][1]} and {explicit[1][1]}; "
                            "give one")
    if explicit:
        return explicit[0][0]
    if len(envs) > 1:
        raise NodeListError(f"two node lists in the environment: {envs[0][1]} and {envs[1][1]}; "
                            "choose one with --nodes-from slurm|skypilot, or pass --hostfile")
    return envs[0][0] if envs else None


def env_note(source: str, environ: Mapping[str, str]) -> str:
    """A note for the header when an explicit source wins over an allocation's list."""
    if source in ("hostfile", "mpi-hostfile"):
        if environ.get("SLURM_JOB_NODELIST"):
            return f" (SLURM_JOB_NODELIST={environ['SLURM_JOB_NODELIST']} also set: not used)"
        if environ.get("SKYPILOT_NODE_IPS"):
            return " (SKYPILOT_NODE_IPS also set: not used)"
    return ""


def resolve(source: str, *, mpi_hostfile: str | None, slots: int | None,
            environ: Mapping[str, str], out: Path) -> Resolved:
    """Read a non-hostfile source and write the DeepSpeed hostfile the run will check to `out`."""
    if source == "slurm":
        nl = slurm_nodes(environ, slots,
                         scontrol=shutil.which("scontrol", path=environ.get("PATH")))
    elif source == "skypilot":
        nl = skypilot_nodes(environ, slots)
    elif source == "mpi-hostfile":
        assert mpi_hostfile is not None
        nl = load_mpi_hostfile(Path(mpi_hostfile).expanduser(), slots)
    else:  # pragma: no cover - hostfile is read by the plugin as before
        raise ValueError(source)
    parse = to_parse(nl, str(out))
    if not parse.hosts:
        problems = "; ".join(str(f) for f in parse.errors[:5])
        raise NodeListError(f"{nl.description}: no usable host. {problems}")
    text = "".join(f"{h.name} slots={h.slots}\n" for h in parse.hosts)
    write_hostfile(out, text)
    return Resolved(nl, parse, out, f"{nl.description}, written as DeepSpeed hostfile {out}")
