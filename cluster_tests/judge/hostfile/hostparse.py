"""The hostfile, parsed as DeepSpeed 0.19 parses it, and linted for the traps it tolerates.

CHECKLIST items H1 (every line parses as DeepSpeed parses it, plus the traps of field
guide 000 section 3: :func:`judge_syntax`) and H3 (the rank-0 node is the first host). The
per-line lint is ``hostlint.py``, the model both share (Host, Finding, the limits) is
``hostmodel.py``; H5's ``--include`` / ``--exclude`` filter is ``resourcefilter.py`` (all beside
this module); reading the file (``load_hostfile``) is ``core/nodelist.py``, with the other node
lists.

Two views of one file are kept side by side:

* the DeepSpeed view (``HostfileParse.deepspeed_*``): a line-for-line re-implementation of
  ``deepspeed.launcher.runner._parse_hostfile`` as ``fetch_hostfile`` feeds it. DeepSpeed
  judges the whole file: the first bad line makes it raise. This module does not import
  deepspeed (the launcher machine may not have it); ``tests/unit/test_judge_hostparse.py``
  proves the two agree.
* our per-line view (``HostfileParse.hosts`` and ``.findings``): every line is judged on its
  own, so a file with some bad lines still yields its good lines as nodes to check, while the
  bad lines fail the hostfile test with their line, column and corrected text.

Everything read from the file is data: nothing here reads a file, runs a shell or a
subprocess, and text shown in messages is escaped and shortened.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.judge.hostfile.hostlint import Line, lint_line
from cluster_tests.judge.hostfile.hostmodel import (
    BOM,
    ERROR,
    EXAMPLE_LINE,
    MAX_BYTES,
    MAX_LINE_CHARS,
    MAX_LINES,
    WARNING,
    Finding,
    Host,
    HostfileCause,
    HostfileError,
    example,
    show,
)
from cluster_tests.judge.problem import Problem

__all__ = [
    "EXAMPLE_LINE",
    "MAX_BYTES",
    "MAX_LINES",
    "MAX_LINE_CHARS",
    "Finding",
    "Host",
    "HostfileError",
    "HostfileParse",
    "deepspeed_parse_lines",
    "judge_syntax",
    "parse_hostfile_text",
    "split_lines",
]

# The exact pattern of deepspeed/launcher/runner.py::_parse_hostfile (a str pattern, so \S, \s
# and \d are Unicode-aware there too).
_DEEPSPEED_PATTERN = re.compile(r"^(\S+)\s+slots=(\d+)")


@dataclass
class HostfileParse:
    """The result of parsing one hostfile, in both views (see the module docstring)."""

    path: str
    hosts: list[Host] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    deepspeed_accepts: bool = False
    deepspeed_error: str | None = None
    deepspeed_resources: OrderedDict[str, int] | None = None
    entry_lines: int = 0  # lines that are neither blank nor comments

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    @property
    def resources(self) -> OrderedDict[str, int]:
        """Our usable hosts, host -> slots, in file order."""
        return OrderedDict((h.name, h.slots) for h in self.hosts)


# --------------------------------------------------------------------------- helpers


def split_lines(text: str) -> list[tuple[str, str]]:
    """Split text as Python's text-mode ``readlines()`` does (universal newlines: ``\\r\\n``,
    ``\\r`` and ``\\n`` each end a line; nothing else does). Returns (content, original line
    end) pairs; the last line's end may be ""."""
    out: list[tuple[str, str]] = []
    start = 0
    n = len(text)
    i = 0
    while i < n:
        ch = text[i]
        if ch == "\n":
            out.append((text[start:i], "\n"))
            start = i + 1
        elif ch == "\r":
            if i + 1 < n and text[i + 1] == "\n":
                out.append((text[start:i], "\r\n"))
                i += 1
            else:
                out.append((text[start:i], "\r"))
            start = i + 1
        i += 1
    if start < n:
        out.append((text[start:], ""))
    return out


def deepspeed_parse_lines(lines: Iterable[str]) -> OrderedDict[str, int]:
    """Re-implementation of DeepSpeed 0.19 ``_parse_hostfile``: same result, same
    ``ValueError`` messages (logging left out)."""
    resource_pool: OrderedDict[str, int] = OrderedDict()
    for raw in lines:
        line = raw.strip()
        match = _DEEPSPEED_PATTERN.search(line)
        if line.startswith("#") or line == "":
            continue
        if match:
            host = match.group(1)
            num_slots = int(match.group(2))  # may raise, as in DeepSpeed (int digit limit)
            if host in resource_pool:
                raise ValueError(
                    f"Hostfile contains multiple entries for {host}, "
                    f"unable to proceed with launching"
                )
            resource_pool[host] = num_slots
        else:
            raise ValueError(
                f"Hostfile contains a bad entry: {line}, unable to proceed with launching"
            )
    if len(resource_pool) == 0:
        raise ValueError(
            "Hostfile is empty or not formatted correctly, unable to proceed with launching."
        )
    return resource_pool


def parse_hostfile_text(text: str, path: str = "<hostfile>") -> HostfileParse:
    """Parse hostfile text (as read from disk, line ends untranslated) in both views.

    Never raises for bad content: every problem is a Finding. ``load_hostfile`` adds the
    checks on the file itself (missing, binary, empty, too large)."""
    result = HostfileParse(path=path)
    raw_lines = split_lines(text)
    # DeepSpeed's view: Python's readlines() has translated the line ends to "\n".
    try:
        result.deepspeed_resources = deepspeed_parse_lines(
            c + ("\n" if e else "") for c, e in raw_lines
        )
        result.deepspeed_accepts = True
    except ValueError as exc:
        result.deepspeed_error = str(exc)

    findings: list[Finding] = []
    for ln in _lint_lines(path, raw_lines, result):
        ln.findings.sort(key=lambda f: f.column)
        findings.extend(ln.finish())
        if not ln.has_error and ln.host is not None and ln.slots is not None:
            result.hosts.append(Host(ln.host, ln.slots, ln.lineno))
    findings.extend(_line_end_findings(path, raw_lines, findings))
    if result.entry_lines == 0:
        findings.append(Finding(path, 1, 1, ERROR, "H1-empty",
                                f"no hosts: the hostfile has only comments and blank lines; "
                                f"{example()}", EXAMPLE_LINE))
    findings.sort(key=lambda f: (f.line, f.column))
    result.findings = findings
    return result


def _lint_lines(path: str, raw_lines: list[tuple[str, str]], result: HostfileParse
                ) -> list[Line]:
    """Every line linted on its own (hostlint), then across lines: the byte-order mark of the
    first, a host given twice. Counts the entry lines into `result`."""
    seen: dict[str, int] = {}
    seen_folded: dict[str, tuple[str, int]] = {}
    lines: list[Line] = []
    for lineno, (content, _end) in enumerate(raw_lines, 1):
        bom = lineno == 1 and content.startswith(BOM)
        ln = lint_line(path, lineno, content[1:] if bom else content)
        if bom:
            ln.add(1, ERROR, "H1-bom",
                   "the file starts with a UTF-8 byte-order mark (BOM); DeepSpeed keeps it as "
                   "part of the first line, so the host name no longer resolves (or the line is "
                   "refused)")
        if ln.host is not None and ln.slots is not None:
            result.entry_lines += 1
            _check_duplicate(ln, ln.host, seen, seen_folded)
        elif ln.text.strip() and not ln.text.strip().startswith("#"):
            result.entry_lines += 1
        lines.append(ln)
    return lines


def _check_duplicate(ln: Line, host: str, seen: dict[str, int],
                     seen_folded: dict[str, tuple[str, int]]) -> None:
    """A host already on an earlier line (or one differing only in letter case) is an error
    with no line to write; else the host is remembered."""
    prev = seen.get(host)
    folded = seen_folded.get(host.lower())
    if prev is not None:
        ln.add(1, ERROR, "H1-duplicate",
               f"host {show(host)} is already on line {prev}; DeepSpeed refuses a host twice")
        ln.fixed = None
    elif folded is not None:
        ln.add(1, ERROR, "H1-case-duplicate",
               f"host {show(host)} differs only in letter case from {show(folded[0])} on line "
               f"{folded[1]}: the same machine to DNS, two hosts to DeepSpeed")
        ln.fixed = None
    else:
        seen[host] = ln.lineno
        seen_folded[host.lower()] = (host, ln.lineno)


def _line_end_findings(path: str, raw_lines: list[tuple[str, str]],
                       findings: list[Finding]) -> list[Finding]:
    """One warning for all the lines with Windows line ends, one for those with bare carriage
    returns, each at the first of them (with that line as the lint would write it)."""
    crlf = [i for i, (_, end) in enumerate(raw_lines, 1) if end == "\r\n"]
    lone_cr = [i for i, (_, end) in enumerate(raw_lines, 1) if end == "\r"]
    out: list[Finding] = []
    for at, code, message in (
        (crlf, "H1-crlf", f"Windows (CRLF) line ends on {len(crlf)} line(s), first here; "
         "convert the file with dos2unix"),
        (lone_cr, "H1-cr", f"a bare carriage return (CR) ends {len(lone_cr)} line(s), first "
         "here; Python splits lines there but most tools do not: use '\\n' line ends"),
    ):
        if not at:
            continue
        first = at[0]
        content = raw_lines[first - 1][0]
        fixed = next((f.fixed_line for f in findings if f.line == first), content)
        out.append(Finding(path, first, len(content) + 1, WARNING, code, message, fixed))
    return out


def judge_syntax(parse: HostfileParse) -> Problem | None:
    """H1: the hostfile as DeepSpeed takes it, and its lines that break the launch (None: it
    launches; its traps are ``parse.warnings``). One red for the file, each bad line with its
    line, column and the line to write."""
    problems = [str(f) for f in parse.errors]
    if not parse.deepspeed_accepts and parse.deepspeed_error:
        problems.insert(0, f"{parse.path}: deepspeed --hostfile would stop with: "
                           f"{parse.deepspeed_error}")
    if not problems:
        return None
    return Problem(
        (), HostfileCause.REFUSED,
        "the hostfile will not launch as it is:\n" + "\n".join(problems),
        fix=f"edit {parse.path}: write each line named above as its finding says (or remove "
            f"it), then rerun", item=ids.HOSTFILE_SYNTAX.item,
        facts={"lines": sorted({f.line for f in parse.errors})})
