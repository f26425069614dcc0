"""Slurm after the verdict (``--slurm-drain`` / ``--slurm-resume``): which nodes to drain, which
to resume, and the exact ``scontrol`` lines, decided from the run's Problems and Slurm's own view
of its nodes (``scontrol show node -o``).

The rules are LBNL NHC's (``helpers/node-mark-offline``, ``node-mark-online``), with the suite's
own reason prefix, ``cluster-tests:``:

* drain a node that ``hostfile.healthy`` leaves out for a cause **on the node itself** (a check
  the launch needs that failed on it: ``judge/healthyset.py``'s node causes); a node left out only
  to break a bad pair, or for --world-multiple, or for a cause on the launcher (its pdsh), or
  for a cause it shares with other nodes (a stale build lock in a shared directory) drains
  nothing, and the summary says why;
* never change a node that Slurm holds for another reason: drained or down with a reason that
  does not start with the prefix (an administrator's), drained with no reason, or waiting for a
  reboot; a node the suite drained before is drained again only when its cause changed;
* resume a node whose reason starts with the prefix when it is green now: ``hostfile.healthy``
  keeps it, and the check its reason names ran in this run and passed;
* map each hostfile name to exactly one Slurm node, by NodeName, else NodeHostname, else
  NodeAddr; a name that matches none (or several) is named, never guessed.

Pure: text and Problems in, a :class:`Plan` out (core/slurmctl.py runs it).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.core.testids import Scope
from cluster_tests.judge.healthyset import Healthy, scope
from cluster_tests.judge.problem import Problem

#: the first word of every reason the suite writes; resume touches only reasons that start so
PREFIX = "cluster-tests:"
#: longest reason the suite writes (Slurm stores any length; sinfo's %E and squeue columns cut)
REASON_MAX = 200

#: the ` [user@time]` Slurm appends to a reason when it shows it
_STAMP = re.compile(r"\s*\[[^\[\]]*@[^\[\]]*\]\s*$")
#: `Key=` at the start of a field of `scontrol show node -o` (the keys are CamelCase words)
_KEY = re.compile(r"(?:^|\s)([A-Z][A-Za-z]*)=")


@dataclass(frozen=True)
class SlurmNode:
    """One node as ``scontrol show node -o`` shows it."""

    name: str  # NodeName
    hostname: str = ""  # NodeHostName
    addr: str = ""  # NodeAddr
    state: str = ""  # State=IDLE+DRAIN
    reason: str = ""  # without Slurm's " [user@time]"

    @property
    def flags(self) -> set[str]:
        """The state's words: {"IDLE", "DRAIN"}; `*` (not responding) dropped."""
        return {w.rstrip("*$~#!%@^-") for w in self.state.split("+") if w}

    @property
    def base(self) -> str:
        return self.state.split("+", 1)[0].rstrip("*$~#!%@^-")

    @property
    def drained(self) -> bool:
        """Drained or draining: no new job starts there."""
        return "DRAIN" in self.flags

    @property
    def down(self) -> bool:
        return self.base == "DOWN"

    @property
    def reboot_pending(self) -> bool:
        return bool({"REBOOT_REQUESTED", "REBOOT_ISSUED"} & self.flags)

    @property
    def ours(self) -> bool:
        return is_ours(self.reason)


def is_ours(reason: str) -> bool:
    """Whether a reason is the suite's: its first word is the prefix (NHC's LEADER rule)."""
    words = reason.split(None, 1)
    return bool(words) and words[0] == PREFIX


def parse_show_node(text: str) -> list[SlurmNode]:
    """The nodes of ``scontrol show node -o`` (one line per node, `Key=Value` fields; the values
    of OS= and Reason= hold spaces). Reason is Slurm's last field when present; it may hold
    `=` and brackets of its own, so it is taken to the end of the line."""
    nodes = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("NodeName="):
            continue
        reason = ""
        at = line.find(" Reason=")
        if at >= 0:
            reason = _STAMP.sub("", line[at + len(" Reason="):]).strip()
            line = line[:at]
        fields: dict[str, str] = {}
        marks = list(_KEY.finditer(line))
        for m, nxt in zip(marks, [*marks[1:], None], strict=True):
            end = nxt.start() if nxt is not None else len(line)
            fields.setdefault(m.group(1), line[m.end():end].strip())
        nodes.append(SlurmNode(fields.get("NodeName", ""), fields.get("NodeHostName", ""),
                               fields.get("NodeAddr", ""), fields.get("State", ""), reason))
    return nodes


@dataclass
class NameMap:
    """Hostfile names -> Slurm nodes, and the names that matched none or several."""

    found: dict[str, SlurmNode] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    ambiguous: dict[str, list[str]] = field(default_factory=dict)


def map_names(names: Iterable[str], slurm: Sequence[SlurmNode]) -> NameMap:
    """Each hostfile name to the one Slurm node it is: its NodeName, else its NodeHostname, else
    its NodeAddr (exact, as the hostfile spells it: no short-name or DNS guess)."""
    out = NameMap()
    by: list[dict[str, list[SlurmNode]]] = [{}, {}, {}]
    for n in slurm:
        for table, key in zip(by, (n.name, n.hostname, n.addr), strict=True):
            if key:
                table.setdefault(key, []).append(n)
    for name in names:
        for table in by:
            hits = table.get(name, [])
            if len(hits) == 1:
                out.found[name] = hits[0]
                break
            if len(hits) > 1:
                out.ambiguous[name] = [h.name for h in hits]
                break
        else:
            out.unknown.append(name)
    return out


# -- what the verdict says of each node -----------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """Per node: the Problem that drains it (its own cause), or why it drains nothing."""

    drain: dict[str, Problem]
    spared: dict[str, str]  # node -> why it is left out but not drained


def _own(p: Problem) -> tuple[str, ...]:
    """The nodes whose own cause `p` is (empty for a pair, the launcher's, or a shared cause)."""
    if p.pairs or ids.LAUNCHER in p.nodes or p.breaks:
        return ()
    if scope(p) == Scope.NODE and p.nodes:
        return tuple(dict.fromkeys(p.nodes))
    return ()


def verdict(healthy: Healthy, problems: Sequence[Problem]) -> Verdict:
    """Which nodes that `healthy` leaves out to drain, each with the first of its own causes
    (in the run's order), and why each other left-out node drains nothing."""
    own: dict[str, Problem] = {}
    by_node: dict[str, list[Problem]] = {}
    for p in problems:
        for n in _own(p):
            own.setdefault(n, p)
        for n in {*p.nodes, *p.breaks, *(x for pair in p.pairs for x in pair)}:
            by_node.setdefault(n, []).append(p)
    drain: dict[str, Problem] = {}
    spared: dict[str, str] = {}
    for node in healthy.excluded:
        if node in own:
            drain[node] = own[node]
            continue
        if node in healthy.trimmed:
            spared[node] = "dropped only to keep a multiple of --world-multiple"
            continue
        if healthy.rank0 is None:
            spared[node] = ("left out because no node of the run can be rank 0, not for a cause "
                            "of its own")
            continue
        mine = by_node.get(node, [])
        shared = [p for p in mine if p.breaks and node in (*p.nodes, *p.breaks)]
        launcher = [p for p in mine if ids.LAUNCHER in p.nodes]
        if shared:
            p = shared[0]
            spared[node] = (f"left out for a cause it shares with "
                            f"{', '.join(n for n in (*p.nodes, *p.breaks) if n != node)} "
                            f"({p.check}: {p.cause}), not one of its own")
        elif launcher and all(ids.LAUNCHER in p.nodes for p in mine):
            p = launcher[0]
            spared[node] = f"left out for a cause on the launcher ({p.check}: {p.cause})"
        else:
            pair = next((p for p in mine if len(p.nodes) == 2 or p.pairs), None)
            spared[node] = ("left out only to break a bad pair"
                            + (f" ({pair.check}: {pair.cause})" if pair is not None else ""))
    return Verdict(drain, spared)


def reason(p: Problem) -> str:
    """``cluster-tests: <check id>: <cause>`` on one line, at most REASON_MAX characters."""
    text = " ".join(f"{PREFIX} {p.check or p.item}: {p.cause or p.headline}".split())
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 3].rstrip() + "..."


# -- the plan ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """One ``scontrol update``: drain or resume one Slurm node."""

    verb: str  # "drain" | "resume"
    node: str  # the hostfile name
    slurm: str  # its NodeName
    reason: str = ""

    @property
    def argv(self) -> list[str]:
        if self.verb == "drain":
            return ["scontrol", "update", f"NodeName={self.slurm}", "State=DRAIN",
                    f"Reason={self.reason}"]
        return ["scontrol", "update", f"NodeName={self.slurm}", "State=RESUME"]

    @property
    def line(self) -> str:
        """The command as a shell line: `scontrol update NodeName=n State=DRAIN Reason="..."`."""
        words = self.argv
        if self.verb == "drain":
            return " ".join(words[:-1]) + " Reason=" + _dq(self.reason)
        return " ".join(shlex.quote(w) for w in words)


def _dq(text: str) -> str:
    """`text` in double quotes for a POSIX shell (what the summary prints)."""
    return '"' + re.sub(r'(["\\$`])', r"\\\1", text) + '"'


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)
    #: what the summary says of the nodes left as they are, one line each
    notes: list[str] = field(default_factory=list)


def plan(names: Sequence[str], healthy: Healthy, problems: Sequence[Problem],
         slurm: Sequence[SlurmNode], *, drain: bool = True, resume: bool = True,
         outcome: Callable[[str], str | None] = lambda _test: None) -> Plan:
    """What to run on Slurm for this run's nodes `names` (drain, resume or both; without either
    flag the caller prints the same plan's lines instead of running them). `outcome(test id)` is
    the run's outcome of a test ("passed"...; None: not run)."""
    out = Plan()
    mapped = map_names(names, slurm)
    v = verdict(healthy, problems)
    kept = set(healthy.kept)
    for name in names:
        if drain and name in v.spared:
            out.notes.append(f"{name}: {v.spared[name]}: not drained")
        if name in mapped.ambiguous:
            out.notes.append(f"{name}: matches several Slurm nodes "
                             f"({', '.join(mapped.ambiguous[name])}): left alone")
            continue
        node = mapped.found.get(name)
        if node is None:
            if drain and name in v.drain:
                out.notes.append(f"{name}: Slurm knows no node of this name (no NodeName, "
                                 f"NodeHostname or NodeAddr {name}): not drained")
            continue
        label = name if node.name == name else f"{name} (Slurm {node.name})"
        if (node.drained or node.down) and not node.ours:
            said = node.reason or "no reason given"
            out.notes.append(f"{label}: {'drained' if node.drained else 'down'} in Slurm for "
                             f"another reason ({said}): not the suite's, left as is")
        elif node.reboot_pending:
            out.notes.append(f"{label}: a reboot is pending in Slurm ({node.state}): left as is")
        elif drain and name in v.drain:
            _drain(out, label, name, node, reason(v.drain[name]))
        elif resume and name in kept:
            _resume(out, label, name, node, outcome)
        elif resume and node.ours and name not in kept:
            out.notes.append(f"{label}: drained by the suite ({node.reason}) and still left out "
                             f"of hostfile.healthy: stays drained")
    return out


def _drain(out: Plan, label: str, name: str, node: SlurmNode, why: str) -> None:
    if node.drained and node.reason == why:
        out.notes.append(f"{label}: drained already, for the same cause ({why})")
    elif node.down:
        out.notes.append(f"{label}: DOWN in Slurm ({node.reason or 'no reason given'}): "
                         f"left as is")
    else:  # up, or drained by the suite for another cause: the reason says the current one
        out.actions.append(Action("drain", name, node.name, why))


def _resume(out: Plan, label: str, name: str, node: SlurmNode,
            outcome: Callable[[str], str | None]) -> None:
    if not ((node.drained or node.down) and node.ours):
        return
    check = drained_for(node.reason)
    got = outcome(check) if check else None
    if check and got != "passed":
        out.notes.append(f"{label}: drained by the suite for {check}, which "
                         + ("did not run in this run" if got is None else f"{got} in this run")
                         + ": not resumed")
        return
    out.actions.append(Action("resume", name, node.name, node.reason))


def drained_for(why: str) -> str:
    """The test id a reason of the suite names (``cluster-tests: test_login[node3]: ...``)."""
    m = re.match(re.escape(PREFIX) + r"\s+(test_\w+(?:\[[^\]]*\])?)", why)
    return m.group(1) if m else ""


def to_json(p: Plan) -> dict[str, object]:
    return {"actions": [{"verb": a.verb, "node": a.node, "slurm_node": a.slurm,
                         "reason": a.reason, "command": a.line} for a in p.actions],
            "notes": list(p.notes)}


__all__ = ["PREFIX", "Action", "NameMap", "Plan", "SlurmNode", "Verdict", "is_ours", "map_names",
           "parse_show_node", "plan", "reason", "verdict"]

