"""What a person reads at the end of a run: the N×N trust matrix, a per-node table, the fixes to
apply (each once), and the same facts as JSON for dashboards.

The recorder is fed by the plugin from `pytest_runtest_logreport`; it only keeps what the tests
reported (outcome, message, properties) plus facts already in the cluster's memo, so building
the summary never reaches a node.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
MASK = "****"


def looks_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def mask(text: str, secrets: set[str]) -> str:
    """Replace every known secret value in `text` (longest first, so no partial leaks)."""
    for value in sorted(secrets, key=len, reverse=True):
        if len(value) >= 3:
            text = text.replace(value, MASK)
    return text


@dataclass
class Outcome:
    test_id: str  # "test_ssh_trust[node1->node3]"
    function: str  # "test_ssh_trust"
    module: str
    outcome: str  # passed | failed | skipped | error
    message: str = ""
    node: str | None = None
    pair: tuple[str, str] | None = None
    seconds: float = 0.0
    properties: dict[str, Any] = field(default_factory=dict)

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

    @property
    def fixes(self) -> list[str]:
        out = []
        for line in self.message.splitlines():
            m = re.match(r"\s*fix(, on ([^:]+))?:\s*(.+)", line)
            if m:
                where = f"on {m.group(2)}: " if m.group(2) else ""
                out.append(where + m.group(3).strip())
        return out


_MARK = {"passed": ".", "failed": "X", "error": "E", "skipped": "s"}


def _clean_message(text: str) -> str:
    text = text.strip()
    if text.startswith("Failed: "):
        text = text[len("Failed: "):]
    return text


@dataclass
class Recorder:
    nodes: list[str]
    started: float = field(default_factory=time.time)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    secrets: set[str] = field(default_factory=set)

    def add(self, report: Any) -> None:
        """Record one pytest TestReport (call phase, or a failed/skipped setup)."""
        if report.when != "call" and not (report.failed or report.skipped):
            return
        props = dict(report.user_properties)
        test_id = report.nodeid.split("::")[-1]
        outcome = report.outcome if report.when == "call" else ("error" if report.failed else "skipped")
        message = ""
        if report.failed:
            message = _clean_message(report.longreprtext)
        elif report.skipped and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2]).removeprefix("Skipped: ")
        pair = tuple(props["pair"].split("->", 1)) if "pair" in props else None
        self.outcomes[test_id] = Outcome(
            test_id=test_id,
            function=test_id.split("[")[0],
            module=report.nodeid.split("::")[0],
            outcome=outcome,
            message=mask(message, self.secrets),
            node=props.get("node"),
            pair=pair,  # type: ignore[arg-type]
            seconds=report.duration,
            properties={k: v for k, v in props.items() if k not in ("node", "pair")},
        )

    # -- views ---------------------------------------------------------------------------------
    def by_function(self, function: str) -> list[Outcome]:
        return [o for o in self.outcomes.values() if o.function == function]

    def matrix(self, function: str = "test_ssh_trust") -> dict[tuple[str, str], Outcome]:
        return {o.pair: o for o in self.by_function(function) if o.pair}

    def fixes(self) -> list[str]:
        seen: dict[str, None] = {}
        for o in self.outcomes.values():
            if o.outcome in ("failed", "error"):
                for f in o.fixes:
                    seen.setdefault(f, None)
        return list(seen)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes.values():
            out[o.outcome] = out.get(o.outcome, 0) + 1
        return out

    # -- rendering -----------------------------------------------------------------------------
    def render_matrix(self, function: str = "test_ssh_trust", title: str = "SSH trust") -> list[str]:
        cells = self.matrix(function)
        if not cells:
            return []
        names = [n for n in self.nodes if any(n in p for p in cells)]
        width = max(6, *(len(n) for n in names)) + 1
        lines = [f"{title} (row: from, column: to; . ok, X failed, s skipped, - not run):",
                 " " * width + "".join(n.rjust(width) for n in names)]
        for a in names:
            row = a.ljust(width)
            for b in names:
                o = cells.get((a, b))
                row += (_MARK.get(o.outcome, "?") if o else "-").rjust(width)
            lines.append(row)
        for (a, b), o in sorted(cells.items()):
            if o.outcome in ("failed", "error"):
                lines.append(f"  {a}->{b}: {o.headline[:160]}")
        return lines

    def render_nodes(self, facts: dict[str, dict[str, str]]) -> list[str]:
        """A row per node: reachable, hostname, slots... (`facts` from the cluster memo)."""
        if not facts:
            return []
        columns = ["node"] + sorted({k for f in facts.values() for k in f}, key=_column_order)
        rows = [[n] + [facts.get(n, {}).get(c, "") for c in columns[1:]] for n in self.nodes if n in facts]
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
        out = ["Nodes:", "  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths))]
        out += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
        return out

    def summary_lines(self, facts: dict[str, dict[str, str]], extra: list[str] | None = None) -> list[str]:
        lines: list[str] = []
        for block in (self.render_matrix(), self.render_nodes(facts), extra or []):
            if block:
                lines += block + [""]
        fixes = self.fixes()
        if fixes:
            lines.append(f"Fixes to apply ({len(fixes)}, each once):")
            lines += [f"  - {f}" for f in fixes]
        return lines

    def to_json(self, facts: dict[str, dict[str, str]], meta: dict[str, Any]) -> dict[str, Any]:
        trust = {a: {b: o.outcome for (x, b), o in self.matrix().items() if x == a} for a in self.nodes}
        return {
            "meta": {**meta, "started": self.started, "finished": time.time(), "counts": self.counts()},
            "nodes": [{"name": n, **facts.get(n, {})} for n in self.nodes],
            "trust": trust,
            "fixes": self.fixes(),
            "tests": [
                {**asdict(o), "pair": "->".join(o.pair) if o.pair else None, "headline": o.headline}
                for o in self.outcomes.values()
            ],
        }

    def write_json(self, path: Path, facts: dict[str, dict[str, str]], meta: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(facts, meta), indent=2, default=str))


_ORDER = ["reachable", "login", "hostname", "slots", "accelerators", "python", "torch", "deepspeed"]


def _column_order(name: str) -> tuple[int, str]:
    return (_ORDER.index(name) if name in _ORDER else len(_ORDER), name)
