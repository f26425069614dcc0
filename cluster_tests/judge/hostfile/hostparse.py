"""The hostfile, parsed as DeepSpeed 0.19 parses it, and linted for the traps it tolerates.

CHECKLIST items H1 (every line parses as DeepSpeed parses it, plus the traps of field
guide 000 section 3) and H3 (the rank-0 node is the first host). The per-line lint is
``hostlint.py``; H5's ``--include`` / ``--exclude`` filter is ``resourcefilter.py`` (both
beside this module); reading the file (``load_hostfile``) is ``core/nodelist.py``, with the other
node lists.

Two views of one file are kept side by side:

* the DeepSpeed view (``HostfileParse.deepspeed_*``): a line-for-line re-implementation of
  ``deepspeed.launcher.runner._parse_hostfile`` as ``fetch_hostfile`` feeds it. DeepSpeed
  judges the whole file: the first bad line makes it raise. This module does not import
  deepspeed (the launcher machine may not have it); ``tests/unit/test_judge_hostfile.py`` proves the
  two agree.
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
    "parse_hostfile_text",
    "split_lines",
]

EXAMPLE_LINE = "node1 slots=8"
MAX_BYTES = 1024 * 1024
MAX_LINES = 100_000
MAX_LINE_CHARS = 1024
MAX_HOSTNAME_CHARS = 253
MAX_LABEL_CHARS = 63

ERROR = "error"
WARNING = "warning"

# The exact pattern of deepspeed/launcher/runner.py::_parse_hostfile (a str pattern, so \S, \s
# and \d are Unicode-aware there too).
_DEEPSPEED_PATTERN = re.compile(r"^(\S+)\s+slots=(\d+)")
_BOM = "\ufeff"


class HostfileError(Exception):
    """The hostfile cannot be used at all (missing, unreadable, binary, empty, absurd)."""


@dataclass(frozen=True)
class Host:
    """One usable hostfile entry."""

    name: str
    slots: int
    lineno: int


@dataclass(frozen=True)
class Finding:
    """One problem on one line, with the line as it should be written."""

    path: str
    line: int
    column: int
    severity: str  # "error": DeepSpeed rejects it or the launch will fail; "warning": a trap
    code: str
    message: str
    fixed_line: str | None

    def __str__(self) -> str:
        fix = "remove the line" if self.fixed_line is None else f"write: {_show(self.fixed_line)}"
        return f"{self.path}:{self.line}:{self.column}: {self.severity}: {self.message}; {fix}"


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


def _show(text: str, limit: int = 80) -> str:
    """Quote text for a message: escaped like repr (so control characters, ANSI codes and
    odd Unicode are visible and inert) and shortened."""
    shown = text if len(text) <= limit else text[:limit]
    quoted = repr(shown)
    if len(text) > limit:
        quoted += f"... ({len(text)} characters)"
    return quoted


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
    from cluster_tests.judge.hostfile.hostlint import Line, lint_line  # it uses this module's model

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
    crlf = [i for i, (_, end) in enumerate(raw_lines, 1) if end == "\r\n"]
    lone_cr = [i for i, (_, end) in enumerate(raw_lines, 1) if end == "\r"]
    seen: dict[str, int] = {}
    seen_folded: dict[str, tuple[str, int]] = {}
    lines: list[Line] = []
    for lineno, (content, _end) in enumerate(raw_lines, 1):
        bom = lineno == 1 and content.startswith(_BOM)
        ln = lint_line(path, lineno, content[1:] if bom else content)
        if bom:
            ln.add(
                1,
                ERROR,
                "H1-bom",
                "the file starts with a UTF-8 byte-order mark (BOM); DeepSpeed keeps it as part of "
                "the first line, so the host name no longer resolves (or the line is refused)",
            )
        if ln.host is not None and ln.slots is not None:
            result.entry_lines += 1
            prev = seen.get(ln.host)
            folded = seen_folded.get(ln.host.lower())
            if prev is not None:
                ln.add(
                    1,
                    ERROR,
                    "H1-duplicate",
                    f"host {_show(ln.host)} is already on line {prev}; "
                    f"DeepSpeed refuses a host twice",
                )
                ln.fixed = None
            elif folded is not None:
                ln.add(
                    1,
                    ERROR,
                    "H1-case-duplicate",
                    f"host {_show(ln.host)} differs only in letter case from {_show(folded[0])} on "
                    f"line {folded[1]}: the same machine to DNS, two hosts to DeepSpeed",
                )
                ln.fixed = None
            else:
                seen[ln.host] = lineno
                seen_folded[ln.host.lower()] = (ln.host, lineno)
        elif ln.text.strip() and not ln.text.strip().startswith("#"):
            result.entry_lines += 1
        lines.append(ln)

    for ln in lines:
        ln.findings.sort(key=lambda f: f.column)
        findings.extend(ln.finish())
        if not ln.has_error and ln.host is not None and ln.slots is not None:
            result.hosts.append(Host(ln.host, ln.slots, ln.lineno))

    def line_ends(at: list[int], code: str, message: str) -> None:
        """One warning for all the lines `at` with odd line ends, at the first of them."""
        if not at:
            return
        first = at[0]
        content = raw_lines[first - 1][0]
        fixed = next((f.fixed_line for f in findings if f.line == first), content)
        findings.append(Finding(path, first, len(content) + 1, WARNING, code, message, fixed))

    line_ends(crlf, "H1-crlf", f"Windows (CRLF) line ends on {len(crlf)} line(s), first here; "
              "convert the file with dos2unix")
    line_ends(lone_cr, "H1-cr", f"a bare carriage return (CR) ends {len(lone_cr)} line(s), first "
              "here; Python splits lines there but most tools do not: use '\\n' line ends")
    if result.entry_lines == 0:
        findings.append(
            Finding(
                path,
                1,
                1,
                ERROR,
                "H1-empty",
                f"no hosts: the hostfile has only comments and blank lines; {_example()}",
                EXAMPLE_LINE,
            )
        )
    findings.sort(key=lambda f: (f.line, f.column))
    result.findings = findings
    return result


def _example() -> str:
    return f"expected lines like {_show(EXAMPLE_LINE)}"
