"""H1's lint of one hostfile line: the traps DeepSpeed 0.19 tolerates or refuses (whitespace,
comments, hostnames, the slots field), each a Finding with its column and the corrected line.

`judge.hostfile.parse_hostfile_text` runs :func:`lint_line` on every line and adds the checks
across lines (duplicates, line ends, the byte-order mark).  Pure: text in, findings out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cluster_tests.judge.hostfile import (
    ERROR,
    MAX_HOSTNAME_CHARS,
    MAX_LABEL_CHARS,
    MAX_LINE_CHARS,
    WARNING,
    Finding,
    _example,
    _show,
)

_SAFE_HOST = re.compile(r"[A-Za-z0-9.-]+")
_ASCII_DIGITS = re.compile(r"[0-9]+")


@dataclass
class Line:
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


def _lint_whitespace(ln: Line, code_part: str, has_comment: bool) -> None:
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


def _lint_hostname(ln: Line, host: str, column: int) -> None:
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


def _lint_entry(ln: Line, code_part: str, comment: str) -> None:
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


def lint_line(path: str, lineno: int, text: str) -> Line:
    ln = Line(path, lineno, text)
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
