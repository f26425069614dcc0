"""H1's lint of one hostfile line: the traps DeepSpeed 0.19 tolerates or refuses (whitespace,
comments, hostnames, the slots field), each a Finding with its column and the corrected line.

`hostparse.parse_hostfile_text` runs :func:`lint_line` on every line and adds the checks
across lines (duplicates, line ends, the byte-order mark).  Pure: text in, findings out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from cluster_tests.judge.hostfile.hostmodel import (
    ERROR,
    MAX_HOSTNAME_CHARS,
    MAX_LABEL_CHARS,
    MAX_LINE_CHARS,
    WARNING,
    Finding,
    example,
    show,
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
            f"trailing whitespace after {show(last)}",
        )


def _lint_hostname(ln: Line, host: str, column: int) -> None:
    if host.startswith("-"):
        ln.add(
            column,
            ERROR,
            "H1-hostname-dash",
            f"host name {show(host)} starts with '-', which ssh and pdsh read as an option",
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
            f"host name {show(host)} contains {what}; a host name is letters, digits, '.', '-'",
        )
        return
    if "_" in host:
        ln.add(
            column + host.index("_"),
            WARNING,
            "H1-hostname-underscore",
            f"host name {show(host)} contains '_', which DNS does not allow",
        )
    if len(host) > MAX_HOSTNAME_CHARS or any(len(lab) > MAX_LABEL_CHARS for lab in host.split(".")):
        ln.add(
            column,
            ERROR,
            "H1-hostname-long",
            f"host name {show(host)} is too long for DNS "
            f"(at most {MAX_HOSTNAME_CHARS} characters, {MAX_LABEL_CHARS} per label)",
        )


@dataclass
class _Entry:
    """A line that is neither blank nor a comment, taken apart as the entry rules read it."""

    host: str
    rest: str  # what follows the host
    col0: int  # column of the host
    rest_col: int
    comment: str  # a '#' comment split off the line (or found later, glued to the slots)
    comment_col: int
    host_ok: bool = False
    value_m: re.Match[str] | None = None  # `slots=(\S*)` at the start of `rest`
    after: str = ""  # what follows the slots value
    slots: int | None = None


#: what an entry rule returns: stop (the line's lint is complete) or go on to the next rule
STOP, NEXT = True, False


def _rule_missing_host(ln: Line, e: _Entry) -> bool:
    if e.host.lower().startswith("slots") and "=" in e.host:
        ln.add(e.col0, ERROR, "H1-missing-host",
               f"no host name before {show(e.host)}; {example()}")
        ln.fixed = f"<host> {e.host}"
        return STOP
    return NEXT


def _rule_hostname(ln: Line, e: _Entry) -> bool:
    _lint_hostname(ln, e.host, e.col0)
    e.host_ok = not ln.has_error
    ln.host = e.host
    return NEXT


def _rule_missing_slots(ln: Line, e: _Entry) -> bool:
    if e.rest != "":
        return NEXT
    where = (f"after {show(e.host)}" if not e.comment
             else f"before the comment after {show(e.host)}")
    _slots_error(ln, e, e.col0 + len(e.host), "H1-missing-slots",
                 f"no 'slots=' {where}; DeepSpeed requires it (it does not default to 1)")
    return STOP


def _rule_slots_spelling(ln: Line, e: _Entry) -> bool:
    """Not `slots=<value>` at all: a loose spelling (`slot: 4`, `SLOTS = 4`) or something else."""
    e.value_m = re.match(r"slots=(\S*)", e.rest)
    if e.value_m:
        return NEXT
    loose = re.match(r"slots?\s*[=:]\s*(\S+)", e.rest, re.IGNORECASE)
    if loose:
        digits = _ASCII_DIGITS.match(loose.group(1))
        _slots_error(ln, e, e.rest_col, "H1-slots-syntax",
                     f"{show(loose.group())} is not written 'slots=<n>' (lower case, no spaces); "
                     "DeepSpeed rejects the line", int(digits.group()) if digits else "<N>")
        if digits:
            ln.slots = int(digits.group())
    else:
        _slots_error(ln, e, e.rest_col, "H1-bad-entry",
                     f"{show(e.rest)} after the host name is not 'slots=<n>'; {example()}")
    return STOP


def _slots_error(ln: Line, e: _Entry, col: int, code: str, message: str,
                 slots: int | str = "<N>") -> None:
    """An error about the slots part at `col`; the fixed line is `<host> slots=<slots>` when the
    host name itself is fine (else there is no fixed line to offer)."""
    ln.add(col, ERROR, code, message)
    ln.fixed = f"{e.host} slots={slots}" if e.host_ok else None


def _rule_slots_value(ln: Line, e: _Entry) -> bool:
    """The value after `slots=`: ASCII digits (a comment glued to them is split off), other
    Unicode digits DeepSpeed's `\\d+` takes, a negative number, or no number."""
    assert e.value_m is not None
    value = e.value_m.group(1)
    value_col = e.rest_col + len("slots=")
    e.after = e.rest[e.value_m.end() :]
    ds_digits = re.match(r"\d+", value)  # what DeepSpeed's \d+ takes, Unicode digits included
    ascii_digits = _ASCII_DIGITS.match(value)
    if ds_digits and ascii_digits and ds_digits.group() == ascii_digits.group():
        try:
            e.slots = int(ascii_digits.group())
        except ValueError:  # beyond Python's int digit limit; DeepSpeed raises too
            ln.add(value_col, ERROR, "H1-slots-too-large", f"slots value of {len(value)} digits")
            ln.fixed = None
            return STOP
        tail = value[ascii_digits.end() :]
        if tail.startswith("#"):
            e.comment_col = value_col + ascii_digits.end()
            e.comment = tail + e.after + e.comment
            e.after = ""
        elif tail:
            ln.add(
                value_col + ascii_digits.end(),
                ERROR,
                "H1-slots-not-integer",
                f"slots value {show(value)} is not a whole number; "
                f"DeepSpeed silently reads it as slots={e.slots}",
            )
    elif ds_digits:
        ln.add(
            value_col,
            ERROR,
            "H1-slots-non-ascii",
            f"slots value {show(value)} uses non-ASCII digits; DeepSpeed reads them as "
            f"{int(ds_digits.group()) if len(ds_digits.group()) < 4000 else 'a number'}",
        )
        try:
            e.slots = int(ds_digits.group())
        except ValueError:
            e.slots = None
    elif value.startswith("-") and _ASCII_DIGITS.match(value[1:]):
        ln.add(value_col, ERROR, "H1-slots-negative", f"slots={value} is negative")
    else:
        shown = show(value) if value else "nothing"
        ln.add(
            value_col, ERROR, "H1-slots-not-integer", f"slots= is followed by {shown}, not a number"
        )
    return NEXT


def _rule_slots_zero(ln: Line, e: _Entry) -> bool:
    if e.slots is None or e.slots != 0:
        return NEXT
    assert e.value_m is not None
    ln.add(
        e.rest_col + len("slots="),
        ERROR,
        "H1-slots-zero",
        "slots=0: DeepSpeed still starts the node in the launch, with no ranks on it",
    )
    ln.fixed = None
    ln.slots = 0
    return STOP


def _rule_after_slots(ln: Line, e: _Entry) -> bool:
    """Text after the slots count: a comment (kept for the next rule) or ignored text."""
    assert e.value_m is not None
    tail_text = e.after.strip()
    if not tail_text:
        return NEXT
    col = e.rest_col + e.value_m.end() + (len(e.after) - len(e.after.lstrip()))
    if tail_text.startswith("#"):
        e.comment_col = col
        e.comment = tail_text + e.comment
    else:
        ln.add(
            col,
            WARNING,
            "H1-extra-text",
            f"{show(tail_text)} after the slots count; DeepSpeed ignores it silently",
        )
    return NEXT


def _rule_trailing_comment(ln: Line, e: _Entry) -> bool:
    if e.comment:
        ln.add(
            e.comment_col,
            WARNING,
            "H1-trailing-comment",
            "comment after the entry; DeepSpeed 0.19 ignores it, older releases and scripts "
            "that read the hostfile do not",
        )
    return NEXT


def _rule_corrected_line(ln: Line, e: _Entry) -> bool:
    ln.slots = e.slots
    if e.host_ok:
        ln.fixed = f"{e.host} slots={e.slots}" if e.slots is not None else f"{e.host} slots=<N>"
    return STOP


#: H1's rules for an entry line, in order; each adds its findings and may end the line's lint
#: (STOP) with the corrected line it knows.
ENTRY_RULES: tuple[Callable[[Line, _Entry], bool], ...] = (
    _rule_missing_host,
    _rule_hostname,
    _rule_missing_slots,
    _rule_slots_spelling,
    _rule_slots_value,
    _rule_slots_zero,
    _rule_after_slots,
    _rule_trailing_comment,
    _rule_corrected_line,
)


def _lint_entry(ln: Line, code_part: str, comment: str) -> None:
    """Judge a line that is neither blank nor a comment (host, slots, what follows) through
    ENTRY_RULES, until one ends it."""
    body = code_part.strip()
    col0 = len(code_part) - len(code_part.lstrip()) + 1  # column of the host
    parts = body.split(None, 1)
    rest = parts[1] if len(parts) > 1 else ""
    entry = _Entry(host=parts[0], rest=rest, col0=col0, rest_col=col0 + len(body) - len(rest),
                   comment=comment, comment_col=len(code_part) + 1)
    for rule in ENTRY_RULES:
        if rule(ln, entry) is STOP:
            return


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
