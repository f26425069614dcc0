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
from typing import NewType

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
    f-string; ``enum.StrEnum`` needs Python 3.11).

    Each vocabulary (a subclass) is known here as it is defined, so that a cause read back from
    a report's JSON is its member again (:func:`cause_of`). A vocabulary whose words another one
    shares names the checklist items (or section letters) it speaks for, which tell the two
    apart: ``class NamesCause(SectionCause, items=("N",))``."""

    def __init_subclass__(cls, items: tuple[str, ...] = (), **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        _ITEMS[cls] = items

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    def __hash__(self) -> int:  # as its words hash (Enum hashes the member's name): a cause
        return str.__hash__(self)  # read back from a report's JSON is the same key


#: every vocabulary defined so far, in the order defined, with the items it speaks for (none:
#: any)
_ITEMS: dict[type[SectionCause], tuple[str, ...]] = {}

#: the cause of a red that no judge made: pytest's one-line account of its exception, or its
#: text's first line (:func:`unjudged`); free words, in no vocabulary
Headline = NewType("Headline", str)


class OutcomeCause(SectionCause):
    """The causes the outcome layer names itself (core/outcome.py)."""

    #: one red for the pairs of a per-node item that fail for different causes
    SEVERAL_PAIRS = "several pairs fail"


def vocabularies() -> dict[type[SectionCause], tuple[str, ...]]:
    """Every vocabulary defined so far (its module imported), with the items it speaks for."""
    return dict(_ITEMS)


def cause_of(words: str, item: str = "") -> SectionCause | Headline:
    """The cause whose words are `words`, for a red of checklist `item` ("S4"): the member of
    the vocabulary that speaks for that item (or its section), else of one that names no items,
    else of any; the words as a :data:`Headline` where no vocabulary defined has them (a red no
    judge made, or a cause of another release)."""
    best: tuple[int, SectionCause] | None = None
    for vocabulary, items in _ITEMS.items():
        try:
            member = vocabulary(words)
        except ValueError:
            continue
        rank = 0 if item and (item in items or item[:1] in items) else 2 if items else 1
        if best is None or rank < best[0]:
            best = (rank, member)
    return best[1] if best is not None else Headline(words)


@dataclass(frozen=True)
class Root:
    """A red that holds another check's cause: its test id, and why (the blocked check's
    words). A judge names the roots of a cause; the check blocks on the first that runs in the
    session (``core.outcome.block``) and fails with its own red when none does."""

    check: str
    why: str


@dataclass(frozen=True)
class Fix:
    """One change on one machine. ``commands`` are POSIX shell, idempotent (a second run changes
    nothing), run in that order on ``where`` (a node of the hostfile, or the launcher). A Fix
    without commands needs a person: it is a comment in fixes.sh."""

    where: str
    what: str
    commands: tuple[str, ...] = ()
    item: str = ""  # the checklist item of the check it fixes for (`ids.SSH_MODES.item`)
    note: str = ""  # said in the block's comment (e.g. what a command cannot do for you)

    def key(self) -> tuple[str, tuple[str, ...]]:
        return (self.where, self.commands)


@dataclass(frozen=True)
class Problem:
    """What is wrong, where, and how to fix it: the whole of a red.

    ``nodes`` is where the cause is: one node, or the two nodes of a pair (source first).
    ``cause`` is a member of its section's vocabulary (a :class:`SectionCause`: "connection
    refused", "public key refused", "ports dropped"...; a :data:`Headline` only for a red that
    no judge made), ``message`` the red's text (its first line is the headline), ``fix``
    the fix in words, ``fixes`` the commands when the fix is mechanical and safe (none: a
    person must act). ``scope`` says where the cause lives, and so what leaving nodes out can
    do about it, where it differs from its check's own (core/testids.py: S4's own key refused
    on rank 0 keeps rank 0 from being rank 0; a `.deepspeed_env` line the launcher exports is
    launch-wide). ``item`` is the checklist item of the check that judged it, from that check's
    `TestId` (core/testids.py). ``check`` is the test id of the red (filled in by
    ``core.outcome.fail``)."""

    nodes: tuple[str, ...]
    cause: SectionCause | Headline
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
            item = str(d.get("item", ""))
            return cls(nodes=tuple(d["nodes"]), cause=cause_of(str(d["cause"]), item),
                       message=d["message"],
                       fix=d.get("fix", ""),
                       fixes=tuple(Fix(f["where"], f["what"], tuple(f.get("commands", ())),
                                       f.get("item", ""), f.get("note", ""))
                                   for f in d.get("fixes", ())),
                       item=item, scope=_scope(d.get("scope")),
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
    first line, no fix (a person reads it). The cause stays those words (a :data:`Headline`),
    not a member of some "unjudged" vocabulary: two such reds are one cause only where their
    headlines are the same (:meth:`Problem.key`), and the reports name them by these words.
    Nothing is read back out of the text: a check of the package fails with its judge's
    Problem (core.outcome.fail)."""
    headline = headline.strip().splitlines()[0] if headline.strip() else next(
        (ln.strip() for ln in message.splitlines() if ln.strip()), check)
    return Problem(nodes=nodes, cause=Headline(headline[:120]), message=message, check=check,
                   facts={"headline": headline})
