"""What a person reads at the end of a run: the N×N trust matrix, a per-node table, the fixes to
apply (each once), and the same facts as JSON for dashboards.

The recorder is fed by the plugin from `pytest_runtest_logreport`; it only keeps what the tests
reported (outcome, message, properties) plus facts already in the cluster's memo, so building
the summary never reaches a node.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO, TypedDict

import pytest

from cluster_tests.core import labels, nodetable
from cluster_tests.core import testids as ids
from cluster_tests.core.labels import PairLabel
from cluster_tests.core.nodetable import NodeTable
from cluster_tests.core.testids import Scope
from cluster_tests.judge import healthyset
from cluster_tests.judge.problem import BLOCKED_BY, ROW_MARKS, report_text
from cluster_tests.report.colltable import AllReduceResult, PairResult
from cluster_tests.report.colltable import sizes as allreduce_sizes

#: what replaces a secret value; which names are secret is judge.env.is_secret (the values of
#: such variables are collected by Cluster.secrets)
MASK = "****"


def _where(where: str, scope: str) -> str:
    """How a cause's line names where it is: its node or pair, or, for a cause no set of nodes
    avoids, that it is launch-wide or the launcher's (with the node it was found on)."""
    if scope == Scope.LAUNCH_WIDE.value:
        return f"launch-wide ({where}): " if where else "launch-wide: "
    if scope == Scope.LAUNCHER.value and where and not where.startswith(ids.LAUNCHER):
        return f"{ids.LAUNCHER} ({where}): "
    return f"{where}: " if where else ""


def _item_ranges(items: list[str], order: Mapping[str, int]) -> str:
    """Checklist items in checklist order, runs of one section's numbers as ranges: "R1-R3, R7"."""
    got = sorted(dict.fromkeys(items), key=lambda i: (order.get(i, len(order)), i))
    out: list[str] = []
    run: list[str] = []

    def follows(item: str, last: str) -> bool:
        """`item` is the next number of `last`'s section (R3 after R2)."""
        return (item[:1] == last[:1] and item[1:].isdigit() and last[1:].isdigit()
                and int(item[1:]) == int(last[1:]) + 1)

    for item in [*got, ""]:
        if run and item and follows(item, run[-1]):
            run.append(item)
            continue
        if run:
            out.append(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [item] if item else []
    return ", ".join(out)


class Cause(TypedDict):
    """One cause of a run's reds, as summary.json's `causes` lists it (Recorder.causes)."""

    where: str
    cause: str
    headline: str
    checks: list[str]
    blocks: int
    fix: str
    scripted: bool
    #: where the cause lives (core/testids.Scope's value): "launch-wide" and "launcher" are
    #: causes no set of nodes avoids
    scope: str


def mask(text: str, secrets: set[str]) -> str:
    """Replace every known secret value in `text` (longest first, so no partial leaks)."""
    for value in sorted(secrets, key=len, reverse=True):
        if len(value) >= 3:
            text = text.replace(value, MASK)
    return text


@dataclass(slots=True)
class Outcome:
    test_id: str  # "test_ssh_trust[node1->node3]"
    function: str  # "test_ssh_trust"
    module: str
    outcome: str  # passed | failed | skipped | error
    message: str = ""
    node: str | None = None
    pair: tuple[str, str] | None = None
    seconds: float = 0.0
    properties: dict[str, object] = field(default_factory=dict)
    #: a pair check's pair is ordered (from, to), or either way (C2's, `a<->b`)
    ordered: bool = True

    @property
    def headline(self) -> str:
        """The first line of the message that says what is wrong (the cause)."""
        for line in self.message.splitlines():
            line = line.strip()
            if line and not line.startswith(("Failed:", "fix")):
                if self.pair:  # "node1 -> node3: cause" is said by the matrix row already
                    line = re.sub(r"^\S+ -> \S+: ", "", line)
                return line
        return ""


_MARK = {"passed": ".", "failed": "X", "error": "E", "skipped": "s"}
#: the most nodes the terminal's pair matrix shows whole (Recorder.render_matrix)
MATRIX_NODES = 48


@dataclass
class Recorder:
    nodes: list[str]
    started: float = field(default_factory=time.time)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    secrets: set[str] = field(default_factory=set)

    def add(self, report: pytest.TestReport) -> None:
        """Record one pytest TestReport (call phase, or a failed/skipped setup)."""
        if report.when != "call" and not (report.failed or report.skipped):
            return
        props = dict(report.user_properties)
        test_id = report.nodeid.split("::")[-1]
        outcome = (report.outcome if report.when == "call"
                   else ("error" if report.failed else "skipped"))
        message = ""
        if report.failed:
            message = report_text(report.longreprtext)
        elif report.skipped and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2]).removeprefix("Skipped: ")
        label = PairLabel.read(props[labels.PAIR]) if labels.PAIR in props else None
        node = props.get(labels.NODE)
        self.outcomes[test_id] = Outcome(
            test_id=test_id,
            function=sys.intern(test_id.split("[")[0]),  # one string per check, not per item
            module=sys.intern(report.nodeid.split("::")[0]),
            outcome=outcome,
            message=mask(message, self.secrets),
            node=None if node is None else str(node),
            pair=label.nodes if label is not None else None,
            seconds=report.duration,
            properties={k: v for k, v in props.items() if k not in (labels.NODE, labels.PAIR)},
            ordered=label.ordered if label is not None else True,
        )

    # -- views ---------------------------------------------------------------------------------
    def outcome_of(self, test_id: str) -> str | None:
        """How the check `test_id` ended (None: it did not run)."""
        got = self.outcomes.get(test_id)
        return got.outcome if got is not None else None

    def by_function(self, function: str) -> list[Outcome]:
        return [o for o in self.outcomes.values() if o.function == function]

    def matrix(self, function: str = ids.SSH_TRUST.name) -> dict[tuple[str, str], Outcome]:
        return {o.pair: o for o in self.by_function(function) if o.pair}

    def fixes(self, causes: list[Cause] | None = None) -> list[str]:
        """The fix of each cause, once (of `causes`, where the caller has them already)."""
        return list(dict.fromkeys(c["fix"] for c in (causes if causes is not None
                                                      else self.causes()) if c["fix"]))

    @property
    def red(self) -> bool:
        """Whether any check failed (or errored)."""
        return any(o.outcome in ("failed", "error") for o in self.outcomes.values())

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes.values():
            out[o.outcome] = out.get(o.outcome, 0) + 1
        return out

    # -- rendering -----------------------------------------------------------------------------
    def render_matrix(self, function: str = ids.SSH_TRUST.name,
                      title: str = "SSH trust") -> list[str]:
        """The pairs' marks as a matrix (row: from, column: to), and a line per red pair.  Up to
        MATRIX_NODES nodes, the whole matrix; beyond (a 4096-node matrix is 150 MB of text), the
        rows and columns of the nodes in a pair that did not pass, or past MATRIX_NODES such
        nodes a line each for the first of them; the red pairs' lines stop at MATRIX_NODES too.
        The whole matrix is in the JSON summary (`trust`) and the HTML report."""
        cells = self.matrix(function)
        if not cells:
            return []
        involved = {n for pair in cells for n in pair}
        names = [n for n in self.nodes if n in involved]
        shown = names
        lines: list[str] = []
        if len(names) > MATRIX_NODES:
            not_ok = {n for pair, o in cells.items() if o.outcome != "passed" for n in pair}
            shown = [n for n in names if n in not_ok]
            passed = sum(o.outcome == "passed" for o in cells.values())
            lines.append(f"{title}: {len(cells)} pairs over {len(names)} nodes, {passed} passed"
                         + (f"; the {len(shown)} nodes in a pair that did not pass:" if shown
                            else "") + " (every pair: summary.json's trust, the HTML report)")
        if shown and len(shown) <= MATRIX_NODES:
            lines += self._matrix_lines(cells, shown, title)
        elif shown:
            lines += self._node_lines(cells, shown)
        red = sorted((pair, o) for pair, o in cells.items() if o.outcome in ("failed", "error"))
        lines += [f"  {a}->{b}: {o.headline[:160]}" for (a, b), o in red[:MATRIX_NODES]]
        if len(red) > MATRIX_NODES:
            lines.append(f"  ... and {len(red) - MATRIX_NODES} more red pairs (causes above)")
        return lines

    @staticmethod
    def _matrix_lines(cells: dict[tuple[str, str], Outcome], names: list[str],
                      title: str) -> list[str]:
        width = max(6, *(len(n) for n in names)) + 1
        lines = [f"{title} (row: from, column: to; . ok, X failed, s skipped, - not run):",
                 " " * width + "".join(n.rjust(width) for n in names)]
        for a in names:
            lines.append(a.ljust(width) + "".join(
                (_MARK.get(o.outcome, "?") if (o := cells.get((a, b))) else "-").rjust(width)
                for b in names))
        return lines

    @staticmethod
    def _node_lines(cells: dict[tuple[str, str], Outcome], names: list[str]) -> list[str]:
        """A line per node (the first MATRIX_NODES of `names`): its pairs that did not pass, from
        it and to it, of its pairs."""
        out_of: dict[str, list[int]] = {n: [0, 0, 0, 0] for n in names}
        for (a, b), o in cells.items():
            bad = o.outcome != "passed"
            if a in out_of:
                out_of[a][0] += bad
                out_of[a][1] += 1
            if b in out_of:
                out_of[b][2] += bad
                out_of[b][3] += 1
        lines = [f"  {n}: from it {f} of {fn} did not pass, to it {t} of {tn}"
                 for n, (f, fn, t, tn) in list(out_of.items())[:MATRIX_NODES]]
        if len(names) > MATRIX_NODES:
            lines.append(f"  ... and {len(names) - MATRIX_NODES} more nodes")
        return lines

    def render_nodes(self, facts: dict[str, dict[str, str]]) -> list[str]:
        """A row per node: reachable, hostname, slots, accelerators, interface, and the versions
        that differ across nodes (`facts` from the cluster memo); equal versions in one line."""
        if not facts:
            return []
        columns, same = node_columns(facts)
        rows = [[n] + [facts.get(n, {}).get(c, "") for c in columns[1:]]
                for n in self.nodes if n in facts]
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
        out = ["Nodes:", ("  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths,
                                                                       strict=False))).rstrip()]
        out += [("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False))).rstrip()
                for r in rows]
        if same:
            out.append("  same on every node: " + ", ".join(f"{k} {v}" for k, v in same.items()))
        return out

    # -- numbers from the tests' properties (available on the xdist controller too) ------------
    def latency(self, rows: bool = True) -> dict[tuple[str, str], float]:
        """F1: TCP handshake RTT in ms per ordered pair (test_reachable's `rtt_ms`, or under
        --pairs matrix the `rtt_row` of each node's node->* item; `rows=False`: not those)."""
        return {(a, b): v for a, b, v in self.iter_latency(rows)}

    def iter_latency(self, rows: bool = True) -> Iterator[tuple[str, str, float]]:
        """:meth:`latency` as (a, b, ms), one at a time: a 1024-node matrix has a million."""
        for o in self.by_function(ids.REACHABLE.name):
            if o.pair and "*" not in o.pair and (v := _number(o.properties.get("rtt_ms"))) \
                    is not None:
                yield o.pair[0], o.pair[1], v
        for a, values in (self.rows(ids.REACHABLE.name, "rtt_row") if rows else {}).items():
            for b, cell in zip(self.nodes, values.split(), strict=False):
                if cell != "-":
                    yield a, b, float(cell)

    def latency_medians(self, nodes: Iterable[str]) -> dict[str, float]:
        """Each node's median F1 RTT (ms) to and from its peers, over every pair measured (a node
        with none is left out): the median of what :meth:`iter_latency` gives at either end.

        A 4096-node matrix has 16.7 M RTTs, each counted at both ends: its rows are read in
        bulk (each distinct word parsed once, a row an `array` of float32 whose missing cells
        and the node's own are +inf), each node's column is taken in turn from all rows at once
        (`zip`), and each median is mapped back to the value it was parsed from."""
        wanted = set(nodes)
        inf = math.inf
        parsed = _Parsed()
        exact: dict[float, float] = {}  # float32 -> the value it stands for
        extra: dict[str, list[float]] = {}  # the pair items' RTTs, by node
        for o in self.by_function(ids.REACHABLE.name):
            if o.pair and "*" not in o.pair and o.pair[0] != o.pair[1] \
                    and (v := _number(o.properties.get("rtt_ms"))) is not None:
                exact.setdefault(array("f", [v])[0], v)
                for n in o.pair:
                    extra.setdefault(n, []).append(v)
        names = self.nodes
        index = {n: i for i, n in enumerate(names)}
        rows: dict[str, array] = {}
        for a, text in self.rows(ids.REACHABLE.name, "rtt_row").items():
            row = rows[a] = array("f", map(parsed.__getitem__, text.split()[:len(names)]))
            row.extend([inf] * (len(names) - len(row)))
            if (i := index.get(a)) is not None:
                row[i] = inf  # a's own cell: not a pair
        for v in parsed.values():
            exact.setdefault(array("f", [v])[0], v)

        def median(n: str, column: Iterable[float]) -> float | None:
            got = array("f", column)
            got.extend(rows.get(n, ()))
            got.extend(extra.get(n, ()))
            finite = len(got) - got.count(inf)
            if not finite:
                return None
            mid = sorted(got)[finite // 2]
            return exact.get(mid, mid)

        found: dict[str, float | None] = {}
        if rows:
            for b, column in zip(names, zip(*rows.values(), strict=True), strict=True):
                if b in wanted:
                    found[b] = median(b, column)
        out: dict[str, float] = {}
        for n in nodes:
            v = found[n] if n in found else median(n, ())
            if v is not None:
                out[n] = v
        return out

    def rows(self, function: str, prop: str = "row") -> dict[str, str]:
        """Under --pairs matrix: each node's row of a per-node check (its node->* item's `prop`:
        one mark or value per peer, in hostfile order)."""
        return {o.pair[0]: str(o.properties[prop]) for o in self.by_function(function)
                if o.pair and o.pair[1] == "*" and prop in o.properties}

    def pair_bandwidth(self) -> dict[tuple[str, str], float]:
        """C2: busbw in GB/s per unordered node pair (test_allreduce_pair's `busbw_GBps`)."""
        return {o.pair: v for o in self.by_function(ids.ALLREDUCE_PAIR.name)
                if o.pair and (v := _number(o.properties.get("busbw_GBps"))) is not None}

    def allreduce(self) -> AllReduceResult | None:
        """C1's run, as its test recorded it (report/colltable.py; None: C1 did not run)."""
        for o in self.by_function(ids.ALLREDUCE.name):
            if AllReduceResult.PROPERTY in o.properties:
                return AllReduceResult.from_json(o.properties[AllReduceResult.PROPERTY])
        return None

    def allreduce_sizes(self) -> list[dict[str, float]]:
        """C1: one row per message size (size_bytes, time_us, algbw_GBps, busbw_GBps)."""
        return allreduce_sizes(self.allreduce())

    def pair_results(self) -> list[PairResult]:
        """C2: each pair's row of its table, as its test recorded it (report/colltable.py)."""
        got = (PairResult.from_json(o.properties[PairResult.PROPERTY])
               for o in self.by_function(ids.ALLREDUCE_PAIR.name)
               if PairResult.PROPERTY in o.properties)
        return [r for r in got if r is not None]

    def render_site(self) -> list[str]:
        """The site's own checks (cluster_host / testinfra): a row per check, a mark per node,
        then one line per red node with its cause."""
        site = [o for o in self.outcomes.values() if o.properties.get("site_check")]
        if not site:
            return []
        lines = ["Site checks (testinfra; . ok, X failed, s skipped):"]
        rows: dict[str, dict[str, Outcome]] = {}
        for o in site:
            rows.setdefault(o.function, {})[o.node or o.test_id] = o
        for function, cells in rows.items():
            marks = "  ".join(f"{n} {_MARK.get(c.outcome, '?')}" for n, c in cells.items())
            lines.append(f"  {function}: {marks}")
        for o in site:
            if o.outcome in ("failed", "error"):
                # an assert in a test file: its "E   ..." line says what is wrong
                said = next((ln[1:].strip() for ln in o.message.splitlines()
                             if ln.startswith("E ") and ln[1:].strip()), o.headline)
                lines.append(f"  {o.test_id}: {said[:160]}")
        return lines

    def blocked_counts(self) -> dict[str, int]:
        """How many checks each red blocks (test id -> count)."""
        out: dict[str, int] = {}
        for o in self.outcomes.values():
            root = o.properties.get(BLOCKED_BY) if o.outcome == "skipped" else None
            if root:
                out[str(root)] = out.get(str(root), 0) + 1
        return out

    def not_applicable(self) -> list[str]:
        """What could not run here and why, one line per kind (the checks that do not apply,
        not those blocked by a red): the checklist items, the reason (each node's name taken
        out), and where ("on all 4 nodes", "on node2, node3")."""
        kinds: dict[str, tuple[list[str], list[str]]] = {}
        for o in self.outcomes.values():
            if o.outcome != "skipped" or o.properties.get(BLOCKED_BY):
                continue
            reason = next((ln.strip() for ln in o.message.splitlines() if ln.strip()), "skipped")
            ends = list(dict.fromkeys([o.node] if o.node else o.pair or ()))
            pair = [f"{o.pair[0]}{arrow}{o.pair[1]}" for arrow in ("->", " -> ")] if o.pair else []
            for prefix in (*pair, *ends):
                if reason.startswith(f"{prefix}: "):
                    reason = reason[len(prefix) + 2:]
                    break
            check = ids.BY_NAME.get(o.function)
            items, nodes = kinds.setdefault(reason, ([], []))
            item = check.item.split()[0] if check is not None else o.function
            if item not in items:
                items.append(item)
            nodes += [n for n in ends if n not in nodes]
        order = {t.item.split()[0]: i for i, t in enumerate(ids.CHECKS)}
        lines = []
        for reason, (items, nodes) in sorted(
                kinds.items(), key=lambda kv: min(order.get(i, len(order)) for i in kv[1][0])):
            where = ("" if not nodes else f" (all {len(nodes)} nodes)"
                     if set(nodes) >= set(self.nodes) and len(self.nodes) > 1
                     else f" ({', '.join(nodes[:4])}{', ...' if len(nodes) > 4 else ''})")
            lines.append(f"  {_item_ranges(items, order)}: {reason[:140]}{where}")
        return ["Not applicable here:", *lines] if lines else []

    def causes(self) -> list[Cause]:
        """One entry per cause of the run's reds (reds with one fix are one cause): where, what,
        the reds, how many checks it blocks, the fix and whether fixes.sh runs it."""
        from cluster_tests.report.fixes import blocks

        counts = self.blocked_counts()
        out: list[Cause] = []
        for b in blocks(self.outcomes.values()):
            p = b.problem
            fix = "; ".join(f.what for f in b.commands) if b.commands else (
                p.fix or "; ".join(f.what for f in b.fixes))
            said = p.facts.get("headline")
            out.append({"where": p.where, "cause": p.cause,
                        "headline": str(said) if said else p.headline,
                        "checks": list(b.tests), "blocks": sum(counts.get(t, 0) for t in b.tests),
                        "fix": fix, "scripted": bool(b.commands),
                        "scope": healthyset.scope(p).value})
        return out

    def render_causes(self, causes: list[Cause] | None = None) -> list[str]:
        causes = self.causes() if causes is None else causes
        if not causes:
            return []
        lines = [f"Causes ({len(causes)}; one red each, the checks they block skipped):"]
        for c in causes:
            where = _where(c["where"], c.get("scope", ""))
            blocks = (f"; blocks {c['blocks']} check{'s' if c['blocks'] != 1 else ''}"
                      if c["blocks"] else "")
            what = (c["cause"] if c["cause"] and not c["cause"].startswith("test_")
                    else c["headline"])
            lines.append(f"  {where}{what[:160]} ({', '.join(c['checks'][:3])}"
                         f"{', ...' if len(c['checks']) > 3 else ''}{blocks})")
            if c["fix"]:
                how = "fixes.sh" if c["scripted"] else "needs a person"
                lines.append(f"      fix ({how}): {c['fix'][:300]}")
        return lines

    def render_blocked(self, causes: list[Cause] | None = None) -> list[str]:
        """One line per red that blocks checks: "67 checks blocked by test_login[node3]", the
        reds of `causes` first, in their order (pytest lists no line per blocked check)."""
        counts = self.blocked_counts()
        order = [t for c in (causes if causes is not None else self.causes()) for t in c["checks"]]
        roots = [t for t in dict.fromkeys([*order, *counts]) if counts.get(t)]
        return [f"{counts[t]} check{'s' if counts[t] != 1 else ''} blocked by {t}" for t in roots]

    def verdict_lines(self, launch: list[str] | None = None, fix_script: str = "") -> list[str]:
        """What a red run ends with, the last lines on the screen above pytest's count: the
        causes (one each, with the fix), the checks each red blocks (one line per red), the fix
        script, then the launch (`launch`: report/healthy.py's lines, the launch line last)."""
        causes = self.causes()
        lines = self.render_causes(causes) + self.render_blocked(causes)
        if fix_script:
            lines.append(fix_script)
        return lines + list(launch or [])

    def summary_lines(self, facts: dict[str, dict[str, str]], extra: list[str] | None = None
                      ) -> list[str]:
        """The cluster summary's tables (the causes and the launch close the run: see
        :meth:`verdict_lines`)."""
        lines: list[str] = []
        for block in (self.render_matrix(), self.render_nodes(facts),
                      self.render_site(), extra or []):
            if block:
                lines += block + [""]
        while lines and not lines[-1]:
            lines.pop()
        return lines

    def pairs(self) -> list[dict[str, object]]:
        """One entry per ordered pair that any check touched: outcome per check, and numbers
        with their units in the key (rtt_ms, jitter_ms, busbw_GBps...)."""
        out: dict[tuple[str, str, str], dict[str, object]] = {}
        checks: dict[tuple[str, str, str], dict[str, str]] = {}  # each entry's "checks"
        for o in self.outcomes.values():
            if not o.pair:
                continue
            arrow = "->" if o.ordered else "<->"  # C2: unordered
            key = (o.pair[0], o.pair[1], arrow)
            if key not in out:
                checks[key] = {}
                out[key] = {"pair": arrow.join(o.pair), "from": o.pair[0], "to": o.pair[1],
                            "checks": checks[key]}
            entry = out[key]
            checks[key][o.function] = o.outcome
            for k, v in o.properties.items():
                if (num := _number(v)) is not None and _has_unit(k):
                    entry[k] = num
        index = {n: i for i, n in enumerate(self.nodes)}
        return [out[k] for k in sorted(out, key=lambda k: (k[2] != "->",
                                                           index.get(k[0], len(index)),
                                                           index.get(k[1], len(index))))]

    def to_json(self, facts: dict[str, dict[str, str]], meta: Mapping[str, object],
                extra: Mapping[str, object] | None = None, tests: bool = True
                ) -> dict[str, object]:
        trust: dict[str, dict[str, str]] = {a: {} for a in self.nodes}
        for (a, b), o in self.matrix().items():  # one pass over the outcomes, not one per node
            trust.setdefault(a, {})[b] = o.outcome
        c1 = self.by_function(ids.ALLREDUCE.name)
        causes = self.causes()
        end = meta.get("finished")  # one end for every report
        finished = float(end) if isinstance(end, int | float | str) and end else time.time()
        return {
            "meta": {**meta, "started": self.started, "finished": finished,
                     "duration_s": round(finished - self.started, 3), "counts": self.counts()},
            "nodes": [{"name": n, **_node_json(facts.get(n, {}))} for n in self.nodes],
            "trust": trust,
            "pairs": self.pairs(),
            # --pairs matrix: a row per node (a mark, an RTT per peer, in `order`), not N*N keys
            **({"port_matrix": {"order": list(self.nodes), "marks": ROW_MARKS,
                                "rows": {f: rows for f in (ids.REACHABLE.name, ids.HIGH_PORTS.name)
                                         if (rows := self.rows(f))},
                                "rtt_ms_rows": self.rows(ids.REACHABLE.name, "rtt_row")}}
               if self.rows(ids.HIGH_PORTS.name) or self.rows(ids.REACHABLE.name) else {}),
            "latency_rtt_ms": {f"{a}->{b}": v
                               for (a, b), v in sorted(self.latency(rows=False).items())},
            "allreduce": {
                "sizes": self.allreduce_sizes(),
                "busbw_GBps": _number(c1[0].properties.get("busbw_GBps")) if c1 else None,
                "pair_busbw_GBps": {f"{a}<->{b}": v
                                    for (a, b), v in sorted(self.pair_bandwidth().items())},
            },
            "fixes": self.fixes(causes),
            "causes": causes,
            **(extra or {}),
            **({"tests": [_test_json(o) for o in self.outcomes.values()]} if tests else {}),
        }

    def write_json(self, path: Path, facts: dict[str, dict[str, str]], meta: Mapping[str, object],
                   extra: Mapping[str, object] | None = None) -> None:
        """:meth:`to_json` to `path`, written part by part (`_write_json`), its `tests` one per
        line as they are made: the whole document as objects, then as one string, was the run's
        peak of memory on a big cluster (192,000 tests and 4096 latency rows at 4096 nodes)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        head = self.to_json(facts, meta, extra, tests=False)
        with path.open("w") as out:
            out.write("{")
            for key, value in head.items():
                out.write(f"\n  {json.dumps(key)}: ")
                _write_json(out, value, 1)
                out.write(",")
            out.write('\n  "tests": [')
            sep = "\n    "
            for o in self.outcomes.values():
                out.write(sep + json.dumps(_test_json(o), default=str))
                sep = ",\n    "
            out.write("\n  ]\n}")


#: how deep `_write_json` lays a document out, one key or item a line; deeper values are a line
EXPANDED = 4


def _write_json(out: TextIO, value: object, level: int) -> None:
    """`value` as JSON to `out`, laid out as `json.dumps(indent=2)` does down to EXPANDED levels
    and each deeper value on one line, every line encoded by itself (json's C encoder: Python's
    indenting encoder builds the whole text of a 4096-node latency map in memory, slowly)."""
    pad = "\n" + "  " * (level + 1)
    if level < EXPANDED and value and isinstance(value, dict):
        out.write("{")
        sep = pad
        for k, v in value.items():
            out.write(sep + json.dumps({k: None}, default=str)[1:-7] + ": ")
            _write_json(out, v, level + 1)
            sep = "," + pad
        out.write("\n" + "  " * level + "}")
    elif level < EXPANDED and value and isinstance(value, list | tuple):
        out.write("[")
        sep = pad
        for v in value:
            out.write(sep)
            _write_json(out, v, level + 1)
            sep = "," + pad
        out.write("\n" + "  " * level + "]")
    else:
        out.write(json.dumps(value, default=str))


class _Parsed(dict[str, float]):
    """A row's word -> its RTT ("-": none, +inf), each distinct word parsed once."""

    def __missing__(self, word: str) -> float:
        value = self[word] = math.inf if word == "-" else float(word)
        return value


def _test_json(o: Outcome) -> dict[str, object]:
    got = asdict(o)
    del got["ordered"]  # (its pair is "a->b" either way)
    return {**got, "pair": "->".join(o.pair) if o.pair else None, "headline": o.headline}


def node_columns(facts: dict[str, dict[str, str]]) -> tuple[list[str], dict[str, str]]:
    """(columns of the node table, {version: value} equal on every node and so left out), in the
    layout the sections declared (`core/nodetable.py`; the facts' own where they carry one)."""
    lay = facts.layout if isinstance(facts, NodeTable) else nodetable.layout()
    keys = nodetable.column_order({k for f in facts.values() for k in f}, lay)
    same: dict[str, str] = {}
    for k in [k for k in keys if lay.get(k, (0, False))[1]]:
        values = {f.get(k, "") for f in facts.values()}
        if len(values) == 1 and len(facts) > 1:
            same[k] = values.pop()
    return ["node"] + [k for k in keys if k not in same], same


def _node_json(row: dict[str, str]) -> dict[str, object]:
    out: dict[str, object] = dict(row)
    login = row.get("login", "")
    if login.endswith("s") and (num := _number(login[:-1])) is not None:
        del out["login"]
        out["login_s"] = num
    if "slots" in row and row["slots"].isdigit():
        out["slots"] = int(row["slots"])
    return out


_UNITS = ("_ms", "_us", "_s", "_seconds", "_GBps", "_Gbps", "_bytes", "_GB", "_MB")


def _has_unit(key: str) -> bool:
    return key.endswith(_UNITS)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return None
