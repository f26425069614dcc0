"""The unit of a failure: one :class:`Problem` per cause, made where the cause is judged.

A check fails with a Problem (``core.outcome.fail``); the plugin puts it on the failed report
as the ``problem`` JUnit property (JSON), so that it travels through pytest-xdist and into the
JUnit file. Everything downstream reads that value, never the message text or the test name:
the summary groups the run's Problems by cause (:meth:`Problem.key`), ``fixes.sh`` takes
their commands (:attr:`Problem.fixes`), and ``hostfile.healthy`` reads where each one is and
what leaving nodes out can do about it (:attr:`Problem.scope`, else its check's own).

A check that fails only because a cause already reported elsewhere holds is *blocked*, not red:
it is skipped naming the red that holds the cause (``core.outcome.block``).

Pure data, no I/O: every layer may build or read it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from enum import Enum

from cluster_tests.core.testids import Scope

#: the JUnit / report property that carries a failed check's Problem (JSON)
PROPERTY = "problem"
#: the JUnit / report property of a blocked check: the test id of the red that blocks it
BLOCKED_BY = "blocked_by"
#: a pair's mark in the `row` property of a per-node item (`test_high_ports[node3->*]` under
#: --pairs matrix: one mark per peer, in hostfile order; the reports' port matrix)
ROW_MARKS = {"passed": ".", "failed": "x", "blocked": "b", "skipped": "s"}


class SectionCause(str, Enum):
    """The base of a section's causes (``Problem.cause``): a ``str`` whose text is its value
    wherever it is printed (a plain ``(str, Enum)`` formats as ``StorageCause.MISSING`` in an
    f-string; ``enum.StrEnum`` needs Python 3.11)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    def __hash__(self) -> int:  # as its words hash (Enum hashes the member's name): a cause
        return str.__hash__(self)  # read back from a report's JSON is the same key


@dataclass(frozen=True)
class Fix:
    """One change on one machine. ``commands`` are POSIX shell, idempotent (a second run changes
    nothing), run in that order on ``where`` (a node of the hostfile, or the launcher). A Fix
    without commands needs a person: it is a comment in fixes.sh."""

    where: str
    what: str
    commands: tuple[str, ...] = ()
    item: str = ""  # checklist item, e.g. "S2"
    note: str = ""  # said in the block's comment (e.g. what a command cannot do for you)

    def key(self) -> tuple[str, tuple[str, ...]]:
        return (self.where, self.commands)


@dataclass(frozen=True)
class Problem:
    """What is wrong, where, and how to fix it: the whole of a red.

    ``nodes`` is where the cause is: one node, or the two nodes of a pair (source first).
    ``cause`` is a word of its section's vocabulary ("connection refused", "public key refused",
    "ports dropped"...), ``message`` the red's text (its first line is the headline), ``fix``
    the fix in words, ``fixes`` the commands when the fix is mechanical and safe (none: a
    person must act). ``scope`` says where the cause lives, and so what leaving nodes out can
    do about it, where it differs from its check's own (core/testids.py: S4's own key refused
    on rank 0 keeps rank 0 from being rank 0; a `.deepspeed_env` line the launcher exports is
    launch-wide). ``check`` is the test id of the red (filled in by ``core.outcome.fail``)."""

    nodes: tuple[str, ...]
    cause: str
    message: str
    fix: str = ""
    fixes: tuple[Fix, ...] = ()
    item: str = ""
    scope: Scope | None = None
    check: str = ""
    #: the ordered pairs the cause breaks, where it is a node's but hits pairs (a node's
    #: firewall): hostfile.healthy drops one node of each
    pairs: tuple[tuple[str, str], ...] = ()
    #: other nodes the same cause stops (a stale build lock in a directory they share): their
    #: checks are blocked by this red, and hostfile.healthy leaves them out with its node
    breaks: tuple[str, ...] = ()
    #: numbers or names a report may show beside it
    facts: dict[str, object] = field(default_factory=dict, compare=False, hash=False)

    @property
    def where(self) -> str:
        return "->".join(self.nodes)

    @property
    def headline(self) -> str:
        return self.message.strip().splitlines()[0] if self.message.strip() else self.cause

    def key(self) -> tuple[str, tuple[str, ...], str]:
        """Two reds with the same key are one cause (the same change fixes both)."""
        cmds = tuple(sorted({c for f in self.fixes for c in (f.where, *f.commands)}))
        if cmds:
            return ("cmd", cmds, "")
        return (self.cause, self.nodes, self.fix)

    def text(self) -> str:
        """The red's message: the text, then the fix in words (once)."""
        out = self.message.rstrip()
        if self.fix and self.fix not in out:
            out += f"\n  fix: {self.fix}"
        return out

    # -- travelling as a property ----------------------------------------------------------------
    def to_json(self) -> str:
        d = asdict(self)
        d["scope"] = self.scope.value if self.scope is not None else None
        return json.dumps(d)

    @classmethod
    def from_json(cls, raw: str) -> Problem | None:
        try:
            d = json.loads(raw)
            return cls(nodes=tuple(d["nodes"]), cause=d["cause"], message=d["message"],
                       fix=d.get("fix", ""),
                       fixes=tuple(Fix(f["where"], f["what"], tuple(f.get("commands", ())),
                                       f.get("item", ""), f.get("note", ""))
                                   for f in d.get("fixes", ())),
                       item=d.get("item", ""), scope=_scope(d.get("scope")),
                       check=d.get("check", ""),
                       pairs=tuple((str(a), str(b)) for a, b in d.get("pairs", ())),
                       breaks=tuple(str(n) for n in d.get("breaks", ())),
                       facts=dict(d.get("facts", {})))
        except (ValueError, KeyError, TypeError):
            return None


def _scope(value: object) -> Scope | None:
    """A scope read back from JSON (None: its check's own, or a value this release lacks)."""
    try:
        return Scope(value) if value else None
    except ValueError:
        return None


# -- the text of a red that was not made from a Problem -----------------------------------------


def report_text(text: str) -> str:
    """A failed report's text as the check wrote it: without the "[gw1] linux -- Python ..." line
    pytest-xdist puts first, nor pytest's "Failed: "."""
    text = re.sub(r"^\[gw\d+\] [^\n]*\n", "", text.strip()).strip()
    return text.removeprefix("Failed: ")


def unjudged(nodes: tuple[str, ...], message: str, check: str = "", headline: str = ""
             ) -> Problem:
    """The Problem of a red that no judge made (a site check's assertion, a crash): its text as
    it is, the cause its `headline` (pytest's one-line account of the exception) or else its
    first line, no fix (a person reads it). Nothing is read back out of the text: a check of
    the package fails with its judge's Problem (core.outcome.fail)."""
    headline = headline.strip().splitlines()[0] if headline.strip() else next(
        (ln.strip() for ln in message.splitlines() if ln.strip()), check)
    return Problem(nodes=nodes, cause=headline[:120], message=message, check=check,
                   facts={"headline": headline})
