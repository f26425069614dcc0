"""Section H's shared model: what the hostfile's parse (``hostparse.py``), its per-line lint
(``hostlint.py``), the node lists (``core/nodelist.py``) and H's judges all speak of.

A :class:`Host` (a usable entry), a :class:`Finding` (one problem on one line, with the line to
write instead), the severities, the limits of what is still a hostfile, how text read from the
file is shown in a message (:func:`show`), and :class:`HostfileCause`, the causes of section H's
reds (``Problem.cause``). Both the parse and the lint import this module, neither imports the
other's model. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster_tests.judge.problem import SectionCause

EXAMPLE_LINE = "node1 slots=8"
MAX_BYTES = 1024 * 1024
MAX_LINES = 100_000
MAX_LINE_CHARS = 1024
MAX_HOSTNAME_CHARS = 253
MAX_LABEL_CHARS = 63
#: the UTF-8 byte-order mark, as it reads once decoded
BOM = "\ufeff"

ERROR = "error"
WARNING = "warning"


class HostfileCause(SectionCause):
    """What can be wrong with the hostfile and what it says of the cluster (Problem.cause)."""

    REFUSED = "hostfile will not launch"  # H1: DeepSpeed refuses it, or a line breaks the launch
    ADDRESS_NOT_THE_NODES = "hostfile address not the node's"  # H2
    NAME_LEADS_ELSEWHERE = "the name leads elsewhere"  # H2
    NAME_LEADS_NOWHERE = "the name leads nowhere"  # H2
    SSH_CHECK_FAILS = "deepspeed's ssh check fails"  # H3
    MASTER_ADDR_NOT_DERIVED = "master address not derived"  # H3
    MASTER_ADDR_PRINTED = "master address is a startup file's word"  # H3
    MASTER_ADDR_NOT_RANK0 = "master address not rank 0's"  # H3
    MASTER_ADDR_UNREACHABLE = "master address unreachable"  # H3
    MASTER_ADDR_SHARED = "master address owned by a peer too"  # H3
    TOO_MANY_SLOTS = "more slots than accelerators"  # H4
    FILTER_REFUSED = "resource filter refused"  # H5
    FILTER_EMPTY = "resource filter leaves no slot"  # H5


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
        fix = "remove the line" if self.fixed_line is None else f"write: {show(self.fixed_line)}"
        return f"{self.path}:{self.line}:{self.column}: {self.severity}: {self.message}; {fix}"


def show(text: str, limit: int = 80) -> str:
    """Quote text for a message: escaped like repr (so control characters, ANSI codes and
    odd Unicode are visible and inert) and shortened."""
    shown = text if len(text) <= limit else text[:limit]
    quoted = repr(shown)
    if len(text) > limit:
        quoted += f"... ({len(text)} characters)"
    return quoted


def example() -> str:
    """What a hostfile line looks like, for a message about one that does not."""
    return f"expected lines like {show(EXAMPLE_LINE)}"
