"""The hostfile, parsed as DeepSpeed 0.19 parses it, and linted for the traps it tolerates.

CHECKLIST items H1 (every line parses as DeepSpeed parses it, plus the traps of field
guide 000 section 3), H3 (the rank-0 node is the first host) and H5 (``--include`` /
``--exclude`` name only hosts and slots that exist).

Two views of one file are kept side by side:

* the DeepSpeed view (``HostfileParse.deepspeed_*``): a line-for-line re-implementation of
  ``deepspeed.launcher.runner._parse_hostfile`` as ``fetch_hostfile`` feeds it. DeepSpeed
  judges the whole file: the first bad line makes it raise. This module does not import
  deepspeed (the launcher machine may not have it); ``tests/unit/test_judge_hostfile.py`` proves the
  two agree.
* our per-line view (``HostfileParse.hosts`` and ``.findings``): every line is judged on its
  own, so a file with some bad lines still yields its good lines as nodes to check, while the
  bad lines fail the hostfile test with their line, column and corrected text.

Everything read from the file is data: nothing here runs a shell or a subprocess, and text
shown in messages is escaped and shortened.
"""

from __future__ import annotations

import os
import re
import stat
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
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
    "ResourceFilterError",
    "deepspeed_parse_lines",
    "load_hostfile",
    "parse_hostfile_text",
    "parse_resource_filter",
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
_SAFE_HOST = re.compile(r"[A-Za-z0-9.-]+")
_ASCII_DIGITS = re.compile(r"[0-9]+")


class HostfileError(Exception):
    """The hostfile cannot be used at all (missing, unreadable, binary, empty, absurd)."""


class ResourceFilterError(ValueError):
    """An ``--include``/``--exclude`` spec that DeepSpeed would refuse."""


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
                    f"Hostfile contains multiple entries for {host}, unable to proceed with launching"
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


# --------------------------------------------------------------------------- per-line lint


@dataclass
class _Line:
    path: str
    lineno: int
    text: str  # content without line end and without a leading BOM
    findings: list[Finding] = field(default_factory=list)
    fixed: str | None = None
    host: str | None = None
    slots: int | None = None

    def add(self, column: int, severity: str, code: str, message: str) -> None:
        self.findings.append(Finding(self.path, self.lineno, column, severity, code, message, None))

    def finish(self) -> list[Finding]:
        return [
            Finding(f.path, f.line, f.column, f.severity, f.code, f.message, self.fixed)
            for f in self.findings
        ]

    @property
    def has_error(self) -> bool:
        return any(f.severity == ERROR for f in self.findings)


def _lint_whitespace(ln: _Line, code_part: str, has_comment: bool) -> None:
    text = code_part
    stripped_left = text.lstrip()
    if stripped_left != text:
        ln.add(1, WARNING, "H1-leading-space", "whitespace before the host name")
    for i, ch in enumerate(text):
        if ch == "\t":
            ln.add(
                i + 1, WARNING, "H1-tab", "tab character; separate host and slots with one space"
            )
            break
    for i, ch in enumerate(text):
        if ch.isspace() and ch not in " \t":
            ln.add(
                i + 1,
                WARNING,
                "H1-odd-space",
                f"unusual whitespace character {ch!r} (U+{ord(ch):04X})",
            )
            break
    body = text.strip()
    offset = len(text) - len(stripped_left)
    m = re.search(r"\s\s+", body)
    if m:
        ln.add(
            offset + m.start() + 1,
            WARNING,
            "H1-double-space",
            f"{len(m.group())} whitespace characters in a row; use one space",
        )
    if not has_comment and text.rstrip() != text:
        end = text.rstrip()
        last = end.split()[-1] if end.split() else ""
        ln.add(
            len(end) + 1,
            WARNING,
            "H1-trailing-space",
            f"trailing whitespace after {_show(last)}",
        )


def _lint_hostname(ln: _Line, host: str, column: int) -> None:
    if host.startswith("-"):
        ln.add(
            column,
            ERROR,
            "H1-hostname-dash",
            f"host name {_show(host)} starts with '-', which ssh and pdsh read as an option",
        )
        return
    bad = [ch for ch in host if not _SAFE_HOST.fullmatch(ch) and ch != "_"]
    if bad:
        first = bad[0]
        col = column + host.index(first)
        if not first.isascii():
            what = f"non-ASCII character {first!r} (U+{ord(first):04X})"
        elif not first.isprintable():
            what = f"control character {first!r}"
        elif first in "$`;&|<>()'\"\\*?[]{}!~^%,=#":
            what = f"shell metacharacter {first!r}"
        elif first in ":@":
            what = f"{first!r}, which DeepSpeed's --include/--exclude use as a separator"
        else:
            what = f"character {first!r}"
        ln.add(
            col,
            ERROR,
            "H1-hostname-chars",
            f"host name {_show(host)} contains {what}; a host name is letters, digits, '.', '-'",
        )
        return
    if "_" in host:
        ln.add(
            column + host.index("_"),
            WARNING,
            "H1-hostname-underscore",
            f"host name {_show(host)} contains '_', which DNS does not allow",
        )
    if len(host) > MAX_HOSTNAME_CHARS or any(len(lab) > MAX_LABEL_CHARS for lab in host.split(".")):
        ln.add(
            column,
            ERROR,
            "H1-hostname-long",
            f"host name {_show(host)} is too long for DNS "
            f"(at most {MAX_HOSTNAME_CHARS} characters, {MAX_LABEL_CHARS} per label)",
        )


def _lint_entry(ln: _Line, code_part: str, comment: str) -> None:
    """Judge a line that is neither blank nor a comment: host, slots, what follows."""
    body = code_part.strip()
    col0 = len(code_part) - len(code_part.lstrip()) + 1  # column of the host
    parts = body.split(None, 1)
    host = parts[0]
    rest = parts[1] if len(parts) > 1 else ""
    rest_col = col0 + len(body) - len(rest)
    example = _example()
    comment_col = len(code_part) + 1

    if host.lower().startswith("slots") and "=" in host:
        ln.add(col0, ERROR, "H1-missing-host", f"no host name before {_show(host)}; {example}")
        ln.fixed = f"<host> {host}"
        return
    _lint_hostname(ln, host, col0)
    host_ok = not ln.has_error
    ln.host = host

    if rest == "":
        where = f"after {_show(host)}" if not comment else f"before the comment after {_show(host)}"
        ln.add(
            col0 + len(host),
            ERROR,
            "H1-missing-slots",
            f"no 'slots=' {where}; DeepSpeed requires it (it does not default to 1)",
        )
        ln.fixed = f"{host} slots=<N>" if host_ok else None
        return

    value_m = re.match(r"slots=(\S*)", rest)
    if not value_m:
        loose = re.match(r"slots?\s*[=:]\s*(\S+)", rest, re.IGNORECASE)
        if loose:
            ln.add(
                rest_col,
                ERROR,
                "H1-slots-syntax",
                f"{_show(loose.group())} is not written 'slots=<n>' (lower case, no spaces); "
                "DeepSpeed rejects the line",
            )
            digits = _ASCII_DIGITS.match(loose.group(1))
            n = digits.group() if digits else "<N>"
            ln.fixed = f"{host} slots={int(n) if digits else n}" if host_ok else None
            if digits:
                ln.slots = int(n)
        else:
            ln.add(
                rest_col,
                ERROR,
                "H1-bad-entry",
                f"{_show(rest)} after the host name is not 'slots=<n>'; {example}",
            )
            ln.fixed = f"{host} slots=<N>" if host_ok else None
        return

    value = value_m.group(1)
    value_col = rest_col + len("slots=")
    after = rest[value_m.end() :]
    ds_digits = re.match(r"\d+", value)  # what DeepSpeed's \d+ takes, Unicode digits included
    ascii_digits = _ASCII_DIGITS.match(value)
    slots: int | None = None
    if ds_digits and ascii_digits and ds_digits.group() == ascii_digits.group():
        try:
            slots = int(ascii_digits.group())
        except ValueError:  # beyond Python's int digit limit; DeepSpeed raises too
            ln.add(value_col, ERROR, "H1-slots-too-large", f"slots value of {len(value)} digits")
            ln.fixed = None
            return
        tail = value[ascii_digits.end() :]
        if tail.startswith("#"):
            comment_col = value_col + ascii_digits.end()
            comment = tail + after + comment
            after = ""
        elif tail:
            ln.add(
                value_col + ascii_digits.end(),
                ERROR,
                "H1-slots-not-integer",
                f"slots value {_show(value)} is not a whole number; "
                f"DeepSpeed silently reads it as slots={slots}",
            )
    elif ds_digits:
        ln.add(
            value_col,
            ERROR,
            "H1-slots-non-ascii",
            f"slots value {_show(value)} uses non-ASCII digits; DeepSpeed reads them as "
            f"{int(ds_digits.group()) if len(ds_digits.group()) < 4000 else 'a number'}",
        )
        try:
            slots = int(ds_digits.group())
        except ValueError:
            slots = None
    elif value.startswith("-") and _ASCII_DIGITS.match(value[1:]):
        ln.add(value_col, ERROR, "H1-slots-negative", f"slots={value} is negative")
    else:
        shown = _show(value) if value else "nothing"
        ln.add(
            value_col, ERROR, "H1-slots-not-integer", f"slots= is followed by {shown}, not a number"
        )

    if slots is not None and slots == 0:
        ln.add(
            value_col,
            ERROR,
            "H1-slots-zero",
            "slots=0: DeepSpeed still starts the node in the launch, with no ranks on it",
        )
        ln.fixed = None
        ln.slots = 0
        return

    if after.strip():
        tail_text = after.strip()
        if tail_text.startswith("#"):
            comment_col = rest_col + value_m.end() + (len(after) - len(after.lstrip()))
            comment = tail_text + comment
        else:
            col = rest_col + value_m.end() + (len(after) - len(after.lstrip()))
            ln.add(
                col,
                WARNING,
                "H1-extra-text",
                f"{_show(tail_text)} after the slots count; DeepSpeed ignores it silently",
            )
    if comment:
        ln.add(
            comment_col,
            WARNING,
            "H1-trailing-comment",
            "comment after the entry; DeepSpeed 0.19 ignores it, older releases and scripts "
            "that read the hostfile do not",
        )
    ln.slots = slots
    if host_ok:
        ln.fixed = f"{host} slots={slots}" if slots is not None else f"{host} slots=<N>"


def _split_comment(text: str) -> tuple[str, str]:
    """Split off a '#' comment that starts a token or follows the slots digits."""
    m = re.search(r"(?:^|\s)(#.*)$", text)
    if m:
        return text[: m.start(1)], m.group(1)
    m = re.search(r"slots=[0-9]+(#.*)$", text)
    if m:
        return text[: m.start(1)], m.group(1)
    return text, ""


def _lint_line(path: str, lineno: int, text: str) -> _Line:
    ln = _Line(path, lineno, text)
    body = text.strip()
    if body == "":
        if text:
            ln.add(1, WARNING, "H1-blank-whitespace", "line of only whitespace")
        return ln
    if body.startswith("#"):
        ln.add(
            len(text) - len(text.lstrip()) + 1,
            WARNING,
            "H1-comment",
            "comment line; DeepSpeed 0.19 skips it, but older DeepSpeed releases and scripts "
            "that read the hostfile fail on it",
        )
        return ln
    if len(text) > MAX_LINE_CHARS:
        ln.add(
            MAX_LINE_CHARS + 1,
            ERROR,
            "H1-long-line",
            f"line of {len(text)} characters; a hostfile line is '<host> slots=<n>'",
        )
        return ln
    code_part, comment = _split_comment(text)
    _lint_whitespace(ln, code_part, bool(comment))
    if code_part.strip() == "":  # "#" glued after only whitespace is handled above
        return ln
    _lint_entry(ln, code_part, comment)
    return ln


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
    crlf = [i for i, (_, end) in enumerate(raw_lines, 1) if end == "\r\n"]
    lone_cr = [i for i, (_, end) in enumerate(raw_lines, 1) if end == "\r"]
    seen: dict[str, int] = {}
    seen_folded: dict[str, tuple[str, int]] = {}
    lines: list[_Line] = []
    for lineno, (content, _end) in enumerate(raw_lines, 1):
        bom = lineno == 1 and content.startswith(_BOM)
        ln = _lint_line(path, lineno, content[1:] if bom else content)
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
                    f"host {_show(ln.host)} is already on line {prev}; DeepSpeed refuses a host twice",
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


# --------------------------------------------------------------------------- the file


def _open_binary(path: str) -> bytes:
    with open(path, "rb") as fd:
        return fd.read(MAX_BYTES + 1)


def load_hostfile(path: str | os.PathLike[str]) -> HostfileParse:
    """Read and parse a hostfile; raise HostfileError, one sentence, when it is not usable."""
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
    n_lines = len(split_lines(text))
    if n_lines > MAX_LINES:
        raise HostfileError(
            f"hostfile {p} has {n_lines} lines, more than {MAX_LINES}: that is not a hostfile"
        )
    if text.strip() == "" or text.strip() == _BOM:
        raise HostfileError(f"hostfile {p} is empty: {_example()}")
    result = parse_hostfile_text(text, p)
    if result.entry_lines == 0:
        raise HostfileError(
            f"hostfile {p} has no hosts, only comments and blank lines: {_example()}"
        )
    return result


# --------------------------------------------------------------------------- H5 and H3

SlotSpec = int | Sequence[int]


def _parse_node_config(node_config: str) -> tuple[str, list[int]]:
    if ":" not in node_config:
        return node_config, []
    pieces = node_config.split(":")
    if len(pieces) != 2:
        raise ResourceFilterError(
            f"node spec {_show(node_config)} has {len(pieces) - 1} ':'; "
            "write NAME or NAME:SLOT[,SLOT...]"
        )
    hostname, slot_text = pieces
    slots: list[int] = []
    for piece in slot_text.split(","):
        try:
            slots.append(int(piece))
        except ValueError:
            raise ResourceFilterError(
                f"slot {_show(piece)} in {_show(node_config)} is not a slot index (0, 1, ...)"
            ) from None
    return hostname, slots


def parse_resource_filter(
    hosts: Mapping[str, SlotSpec], include: str = "", exclude: str = ""
) -> OrderedDict[str, list[int]]:
    """DeepSpeed 0.19 ``parse_inclusion_exclusion`` / ``parse_resource_filter``.

    ``hosts`` maps host -> slot count (as the hostfile gives it; DeepSpeed turns n into slots
    ``[0, n)``) or host -> list of slot indices. Same results and same failures as DeepSpeed,
    raised as ResourceFilterError (a ValueError) naming the bad host or slot. DeepSpeed
    quirks kept on purpose: a host given both whole and with slots (``a@a:0``) means only
    those slots; slots are sorted and de-duplicated; the result follows the hostfile order;
    hosts left with no slots are dropped, so the result may be empty.
    """
    host_info: OrderedDict[str, list[int]] = OrderedDict(
        (h, list(range(s)) if isinstance(s, int) else list(s)) for h, s in hosts.items()
    )
    if include != "" and exclude != "":
        raise ResourceFilterError(
            "--include and --exclude are mutually exclusive; give only one of them"
        )
    if include == "" and exclude == "":
        return host_info
    option = "--include" if include else "--exclude"
    spec = include if include else exclude

    merged: dict[str, list[int]] = {}
    for node_config in spec.split("@"):
        hostname, slots = _parse_node_config(node_config)
        merged.setdefault(hostname, []).extend(slots)
    node_configs = {k: sorted(set(v)) for k, v in merged.items()}

    filtered: dict[str, list[int]] = {h: list(s) for h, s in host_info.items()} if exclude else {}
    for hostname, slots in node_configs.items():
        if hostname not in host_info:
            raise ResourceFilterError(
                f"{option} names host {_show(hostname)}, which is not in the hostfile "
                f"(hosts: {', '.join(host_info) or 'none'})"
            )
        if slots:
            for slot in slots:
                if slot not in host_info[hostname]:
                    raise ResourceFilterError(
                        f"{option} names slot {slot} on host {_show(hostname)}, which has slots "
                        f"{_slot_range(host_info[hostname])}"
                    )
            if include:
                filtered[hostname] = slots
            else:
                for slot in slots:
                    filtered[hostname].remove(slot)
        elif include:
            filtered[hostname] = host_info[hostname]
        else:
            filtered[hostname] = []

    ordered: OrderedDict[str, list[int]] = OrderedDict()
    for host in host_info:
        if host in filtered:
            kept = list(dict.fromkeys(filtered[host]))
            if kept:
                ordered[host] = kept
    return ordered


def _slot_range(slots: Sequence[int]) -> str:
    if not slots:
        return "none (slots=0)"
    if list(slots) == list(range(len(slots))):
        return f"0..{len(slots) - 1}"
    return ", ".join(str(s) for s in slots)


