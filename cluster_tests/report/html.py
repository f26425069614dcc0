"""The HTML report: one self-contained page (inline CSS and SVG, no scripts, nothing fetched)
that shows the run as pictures: the N×N matrices as heatmaps (SSH trust, TCP latency, pairwise
all-reduce bandwidth), C1's bandwidth against message size, the node table and the failures
with their fixes.

Everything comes from the Recorder (the tests' outcomes and properties) and the node facts the
summary uses, so the page is the same whether the run was one process or many (pytest-xdist).
The geometry is computed here; `templates/report.html.j2` only lays it out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypedDict

from cluster_tests.core import testids as ids
from cluster_tests.report.fixes import problem_of
from cluster_tests.report.summary import Outcome, Recorder, node_columns

if TYPE_CHECKING:
    from cluster_tests.report.history import Series, SeriesLine

TEMPLATE = "report.html.j2"

OK, BAD, SKIP, NONE, SELF = "#2e9e4f", "#d73027", "#bdbdbd", "#f4f4f4", "#e3e3e3"
OUTCOME_FILL = {"passed": OK, "failed": BAD, "error": BAD, "skipped": SKIP}
OUTCOME_MARK = {"passed": "✓", "failed": "✗", "error": "E", "skipped": "s"}

CELL = 44  # px per heatmap cell
LABEL = 90  # px for the row labels and the column labels


@dataclass
class Cell:
    x: int
    y: int
    fill: str
    text: str
    title: str
    cls: str  # "cell passed", "cell failed", "cell value", "cell none"
    source: str
    target: str
    dark: bool = False  # white text on a dark fill


@dataclass
class Heatmap:
    id: str
    title: str
    caption: str
    names: list[str]
    cells: list[Cell] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)  # (fill, label)

    @property
    def width(self) -> int:
        return LABEL + CELL * len(self.names) + 10

    @property
    def height(self) -> int:
        return LABEL + CELL * len(self.names) + 10

    @property
    def cell_size(self) -> int:
        return CELL

    @property
    def label(self) -> int:
        return LABEL


def _grid(names: list[str], keys: Iterable[tuple[str, str]],
          fill: Callable[[str, str], tuple[str, str, str, str] | None], *, id: str, title: str,
          caption: str, legend: list[tuple[str, str]]) -> Heatmap:
    """A heatmap with a cell (a, b) = fill(a, b) = (color, text, title, class) for each pair of
    `keys` that fill has data for; the rest of the grid is one "not run" background, so that
    the page grows with the pairs checked (2N with --pairs ring), not with N x N."""
    index = {n: i for i, n in enumerate(names)}
    hm = Heatmap(id, title, caption, names, legend=legend)
    for a, b in sorted({k for k in keys if k[0] in index and k[1] in index},
                       key=lambda k: (index[k[0]], index[k[1]])):
        got = fill(a, b)
        if got is None:
            continue
        color, text, title, cls = got
        hm.cells.append(Cell(LABEL + index[b] * CELL, LABEL + index[a] * CELL, color, text, title,
                             f"cell {cls}", a, b, dark=_dark(color)))
    return hm


def _dark(color: str) -> bool:
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return 0.299 * r + 0.587 * g + 0.114 * b < 140


def _mix(lo: str, hi: str, t: float) -> str:
    t = min(1.0, max(0.0, t))
    a = [int(lo[i:i + 2], 16) for i in (1, 3, 5)]
    b = [int(hi[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b, strict=False))


def _names(rec: Recorder, pairs: Iterable[tuple[str, str]]) -> list[str]:
    used = {n for p in pairs for n in p}
    return [n for n in rec.nodes if n in used]


def trust_heatmap(rec: Recorder) -> Heatmap | None:
    cells = rec.matrix(ids.SSH_TRUST.name)
    if not cells:
        return None

    def fill(a: str, b: str) -> tuple[str, str, str, str] | None:
        o = cells.get((a, b))
        if o is None:
            return None
        title = f"{a} -> {b}: {o.outcome}" + (f": {o.headline}" if o.headline else "")
        return OUTCOME_FILL.get(o.outcome, SKIP), OUTCOME_MARK.get(o.outcome, "?"), title, o.outcome

    return _grid(_names(rec, cells), cells, fill, id="heatmap-ssh", title="SSH trust (S4)",
                 caption="row: from, column: to; passwordless ssh with strict host keys",
                 legend=[(OK, "passed"), (BAD, "failed"), (SKIP, "skipped"), (NONE, "not run")])


#: above this many cells (64 nodes, all pairs) the latency map of a --pairs matrix run draws the
#: pairs that did not pass only: a page of 1M cells is not read, and takes minutes to make
MATRIX_CELLS = 64 * 64


def latency_heatmap(rec: Recorder) -> Heatmap | None:
    outcomes = {o.pair: o for o in rec.by_function(ids.REACHABLE.name)
                if o.pair and "*" not in o.pair}
    # --pairs matrix: the cells are the rows' (each node's node->* item), red where its mark is
    rows = rec.rows(ids.REACHABLE.name)
    big = len(rows) * len(rec.nodes) > MATRIX_CELLS
    # a big --pairs matrix: the pairs that failed or were blocked, alone (a dead node's row and
    # column, all skipped, are test_login's)
    marks = {(a, b): m for a, row in rows.items()
             for b, m in zip(rec.nodes, row, strict=False) if not big or m in "xb"}
    if not outcomes and not marks and not rows:
        return None
    caption = "median TCP handshake round trip, ms (row: from, column: to)"
    if big:
        caption += (f"; of {len(rec.nodes)}x{len(rec.nodes)} pairs only those that failed or were "
                    f"blocked are drawn; every pair's RTT is in the JSON report (latency_rtt_ms)")
        if not marks and not outcomes:
            return None
    lo = hi = lo_self = hi_self = None
    rtt: dict[tuple[str, str], float] = {}
    for a, b, v in rec.iter_latency():  # a million pairs: the range, and the drawn cells' RTTs
        if a != b:
            lo, hi = (v, v) if lo is None or hi is None else (min(lo, v), max(hi, v))
        else:
            lo_self, hi_self = ((v, v) if lo_self is None or hi_self is None
                                else (min(lo_self, v), max(hi_self, v)))
        if not big or (a, b) in marks or (a, b) in outcomes:
            rtt[(a, b)] = v
    if lo is None or hi is None:
        lo, hi = (lo_self, hi_self) if lo_self is not None and hi_self is not None else (1.0, 1.0)
    lo_c, hi_c = "#eef4fb", "#2c5d98"

    def fill(a: str, b: str) -> tuple[str, str, str, str] | None:
        o = outcomes.get((a, b))
        mark = marks.get((a, b))
        if o is None and mark is None:
            return None
        if o is not None and o.outcome in ("failed", "error"):
            return BAD, "✗", f"{a} -> {b}: {o.headline}", "failed"
        if mark == "x":
            return BAD, "✗", f"{a} -> {b}: failed (see {ids.REACHABLE.name}[{a}->*])", "failed"
        v = rtt.get((a, b))
        if v is None:
            return SKIP, "-", f"{a} -> {b}: no RTT ({o.outcome if o else 'skipped'})", "skipped"
        title = f"{a} -> {b}: TCP handshake {v:.3f} ms"
        if a == b:  # loopback: not a link, kept off the colour scale
            return SELF, f"{v:.2g}", title + " (loopback)", "value self"
        t = 0.5 if hi == lo else (v - lo) / (hi - lo)
        return _mix(lo_c, hi_c, t), f"{v:.2g}", title, "value"

    return _grid(_names(rec, [*outcomes, *marks]), [*outcomes, *marks], fill,
                 id="heatmap-latency", title="Latency (F1)", caption=caption,
                 legend=[(lo_c, f"{lo:.3g} ms"), (hi_c, f"{hi:.3g} ms"), (SELF, "loopback"),
                         (BAD, "unreachable")])


def bandwidth_heatmap(rec: Recorder) -> Heatmap | None:
    outcomes = {o.pair: o for o in rec.by_function(ids.ALLREDUCE_PAIR.name) if o.pair}
    if not outcomes:
        return None
    bw = rec.pair_bandwidth()
    values = list(bw.values()) or [1.0]
    lo, hi = min(values), max(values)
    lo_c, hi_c = "#c7e9c0", "#1f6f3b"

    def fill(a: str, b: str) -> tuple[str, str, str, str] | None:
        key = (a, b) if (a, b) in outcomes else (b, a)
        o = outcomes.get(key)
        if o is None:
            return None
        v = bw.get(key)
        if o.outcome in ("failed", "error"):
            text = f"{v:.2g}" if v is not None else "✗"
            return BAD, text, f"{a} <-> {b}: {o.headline}", "failed"
        if v is None:
            return SKIP, "-", f"{a} <-> {b}: {o.outcome}", o.outcome
        t = 0.5 if hi == lo else (v - lo) / (hi - lo)
        return _mix(lo_c, hi_c, t), f"{v:.2g}", f"{a} <-> {b}: busbw {v:.4f} GB/s", "value"

    return _grid(_names(rec, outcomes), [*outcomes, *((b, a) for a, b in outcomes)], fill,
                 id="heatmap-bandwidth",
                 title="Pairwise all-reduce bandwidth (C2)",
                 caption="busbw in GB/s at the largest size, one rank per node (symmetric)",
                 legend=[(lo_c, f"{lo:.3g} GB/s"), (hi_c, f"{hi:.3g} GB/s"),
                         (BAD, "failed or slow")])


# -- C1: bandwidth against message size ---------------------------------------------------------

class PlotPoint(TypedDict):
    x: float
    y: float
    title: str


class PlotSeries(TypedDict):
    """One polyline of a plot: its points (with their tooltips) and their SVG path."""

    name: str
    color: str
    path: str
    points: list[PlotPoint]


class Margins(NamedTuple):
    """The space around a plot's axes, in SVG pixels: for the tick labels, and a legend."""

    top: int = 20
    right: int = 20
    bottom: int = 50
    left: int = 70


@dataclass
class Plot:
    width: int = 680
    height: int = 320
    margins: Margins = Margins()
    series: list[PlotSeries] = field(default_factory=list)
    xticks: list[tuple[float, str]] = field(default_factory=list)
    yticks: list[tuple[float, str]] = field(default_factory=list)
    caption: str = ""

    @property
    def x0(self) -> int:
        return self.margins.left

    @property
    def x1(self) -> int:
        return self.width - self.margins.right

    @property
    def y0(self) -> int:
        return self.height - self.margins.bottom

    @property
    def y1(self) -> int:
        return self.margins.top


def _size_label(nbytes: float) -> str:
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= unit:
            return f"{nbytes / unit:g}{suffix}"
    return f"{nbytes:g}"


def _nice_step(span: float, ticks: int = 5) -> float:
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def bandwidth_plot(rec: Recorder) -> Plot | None:
    rows = [r for r in rec.allreduce_sizes() if r.get("size_bytes", 0) > 0]
    if not rows:
        return None
    plot = Plot()
    props = rec.by_function(ids.ALLREDUCE.name)[0].properties
    plot.caption = (f"all-reduce over {props.get('world_size', '?')} ranks, backend "
                    f"{props.get('backend', '?')}: bandwidth (GB/s) against message size "
                    "(bytes, log scale)")
    xs = [math.log2(r["size_bytes"]) for r in rows]
    xmin, xmax = min(xs), max(xs)
    if xmax == xmin:
        xmin, xmax = xmin - 1, xmax + 1
    ymax = max([r.get("busbw_GBps", 0) for r in rows]
               + [r.get("algbw_GBps", 0) for r in rows]) or 1.0
    step = _nice_step(ymax * 1.05)
    ytop = step * math.ceil(ymax * 1.05 / step)

    def px(x: float) -> float:
        return plot.x0 + (x - xmin) / (xmax - xmin) * (plot.x1 - plot.x0)

    def py(y: float) -> float:
        return plot.y0 - y / ytop * (plot.y0 - plot.y1)

    plot.xticks = [(px(x), _size_label(r["size_bytes"])) for x, r in zip(xs, rows, strict=False)]
    plot.yticks = [(py(i * step), f"{i * step:g}") for i in range(int(round(ytop / step)) + 1)]
    for name, key, color in (("busbw", "busbw_GBps", "#1f6f3b"),
                             ("algbw", "algbw_GBps", "#2c5d98")):
        pts = [(px(x), py(r[key]), r) for x, r in zip(xs, rows, strict=False) if key in r]
        if not pts:
            continue
        plot.series.append({
            "name": name, "color": color,
            "path": " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in pts),
            "points": [{"x": round(x, 1), "y": round(y, 1),
                        "title": f"{name} {r[key]:.4f} GB/s at {_size_label(r['size_bytes'])}B"
                                 + (f", {r['time_us']:.1f} us" if "time_us" in r else "")}
                       for x, y, r in pts],
        })
    return plot


# -- the history: C1 and each pair's C2 busbw over the recent runs -------------------------------

#: the colours of the history plot's series (C1 first), in turn
PALETTE = ("#1f6f3b", "#2c5d98", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02",
           "#a6761d", "#666666", "#1b9e77", "#984ea3", "#ff7f00", "#377eb8")
#: pairs drawn at most (those whose newest figure is lowest against their own median first)
HISTORY_PAIRS = 12


def history_plot(series: Series) -> Plot | None:
    """C1's busbw and each C2 pair's, per run of this node list (report/history.py's series):
    one polyline each, x the runs oldest to newest, y GB/s."""
    runs = series.get("runs") or []
    c1 = series.get("c1")
    pairs = series.get("pairs") or {}
    lines: list[tuple[str, dict[int, float]]] = []
    if c1 is not None and c1["values"] and c1["size_bytes"] is not None:
        lines.append((f"C1 at {_size_label(c1['size_bytes'])}B", c1["values"]))

    def slide(item: tuple[str, SeriesLine]) -> float:
        values = [v for _, v in sorted(item[1]["values"].items())]
        mid = sorted(values)[len(values) // 2] if values else 0
        return values[-1] / mid if values and mid else 1.0

    ranked = sorted(pairs.items(), key=slide)
    for key, data in ranked[:HISTORY_PAIRS]:
        lines.append((f"C2 {key}", data["values"]))
    if not runs or not lines:
        return None
    order = [r["id"] for r in runs]
    index = {r: i for i, r in enumerate(order)}
    ymax = max((v for _, values in lines for v in values.values()), default=0.0) or 1.0
    step = _nice_step(ymax * 1.05)
    ytop = step * math.ceil(ymax * 1.05 / step)
    plot = Plot(width=860, height=340, margins=Margins(right=200))
    span = max(1, len(order) - 1)

    def px(i: int) -> float:
        return plot.x0 + (i / span if len(order) > 1 else 0.5) * (plot.x1 - plot.x0)

    def py(y: float) -> float:
        return plot.y0 - y / ytop * (plot.y0 - plot.y1)

    plot.caption = (f"busbw (GB/s) of C1 and of each node pair's C2 over the last {len(order)} "
                    f"runs of these nodes (the history file), oldest left"
                    + (f"; {HISTORY_PAIRS} of {len(pairs)} pairs drawn, those lowest against "
                       f"their own median first" if len(pairs) > HISTORY_PAIRS else ""))
    every = max(1, len(order) // 10)
    plot.xticks = [(px(i), f"#{r}") for i, r in enumerate(order) if i % every == 0
                   or i == len(order) - 1]
    plot.yticks = [(py(i * step), f"{i * step:g}") for i in range(int(round(ytop / step)) + 1)]
    for k, (name, values) in enumerate(lines):
        pts = [(px(index[r]), py(v), r, v) for r, v in sorted(values.items(), key=lambda x:
                                                                  index.get(x[0], -1))
               if r in index]
        if not pts:
            continue
        color = PALETTE[k % len(PALETTE)]
        plot.series.append({
            "name": name, "color": color,
            "path": " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in pts),
            "points": [{"x": round(x, 1), "y": round(y, 1), "title": f"{name}: {v:.4g} GB/s in "
                        f"run #{r}"} for x, y, r, v in pts],
        })
    return plot if plot.series else None


# -- the page -----------------------------------------------------------------------------------

def _failure(o: Outcome, blocks: int) -> dict[str, object]:
    """A red, from the Problem it carries (its fix in words, and what fixes.sh runs for it)."""
    p = problem_of(o)
    where = (p.where if p is not None and p.nodes else
             o.node or ("->".join(o.pair) if o.pair else ""))
    fixes = ([p.fix] if p is not None and p.fix else []) + [
        f"fixes.sh: {f.what}" for f in (p.fixes if p is not None else ()) if f.commands]
    return {"id": o.test_id, "module": o.module, "outcome": o.outcome, "where": where,
            "headline": o.headline, "message": o.message, "fixes": fixes,
            "blocks": blocks, "stacks": _stack_groups(o)}


def _stack_groups(o: Outcome) -> list[dict[str, object]]:
    """The ranks' stacks at a deadline, by group (C1/C2, T1/T2's ``stack_groups`` property)."""
    groups = o.properties.get("stack_groups")
    if isinstance(groups, str):  # read back from a JUnit file: the property's repr
        import ast

        try:
            groups = ast.literal_eval(groups)
        except (ValueError, SyntaxError):
            return []
    return [g for g in groups if isinstance(g, dict)] if isinstance(groups, list) else []


def context(rec: Recorder, facts: dict[str, dict[str, str]],
            meta: Mapping[str, object], history: Series | None = None) -> dict[str, object]:
    columns, same = node_columns(facts) if facts else (["node"], {})
    blocked = rec.blocked_counts()
    failures = [_failure(o, blocked.get(o.test_id, 0)) for o in rec.outcomes.values()
                if o.outcome in ("failed", "error")]
    counts = rec.counts()
    heatmaps = [h for h in (trust_heatmap(rec), latency_heatmap(rec), bandwidth_heatmap(rec)) if h]
    return {
        "title": f"cluster report: {len(rec.nodes)} nodes",
        "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime()),
        "meta": meta,
        "counts": counts,
        "verdict": "red" if counts.get("failed") or counts.get("error") else "green",
        "nodes": rec.nodes,
        "columns": columns,
        "rows": [[n] + [facts.get(n, {}).get(c, "") for c in columns[1:]]
                 for n in rec.nodes if n in facts],
        "same": same,
        "heatmaps": heatmaps,
        "none_fill": NONE,
        "plot": bandwidth_plot(rec),
        "history_plot": history_plot(history or {}),
        "sizes": rec.allreduce_sizes(),
        "failures": failures,
        "fixes": rec.fixes(),
        "skipped": [o for o in rec.outcomes.values() if o.outcome == "skipped"],
    }


def render(rec: Recorder, facts: dict[str, dict[str, str]], meta: Mapping[str, object],
           history: Series | None = None) -> str:
    import jinja2  # here, not at import: only the run that writes a report needs it

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("cluster_tests.report", "templates"),
        autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
    )
    return env.get_template(TEMPLATE).render(**context(rec, facts, meta, history))


def write(path: Path, rec: Recorder, facts: dict[str, dict[str, str]],
          meta: Mapping[str, object], history: Series | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(rec, facts, meta, history), encoding="utf-8")
    return path
