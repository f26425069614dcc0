"""Is this figure normal for this cluster? The run's numbers against the history of earlier runs
(``report/history.py`` reads them from the history file): a pair's C2 busbw, or the cluster's
C1 busbw, below ``--history-drop`` (0.7) x its own median over its last ``--history-window``
(10) passing runs; a node red in 3 or more of its last 5 runs ("flapping").

Pure: numbers in, :class:`Drop` and :class:`Flapping` out, each with the words of its warning.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

#: below this fraction of its median a figure has dropped (--history-drop)
DROP = 0.7
#: how many earlier passing runs the median is taken over (--history-window)
WINDOW = 10
#: fewer earlier passing runs than this: no median yet, no warning
MIN_RUNS = 3
#: a node red in FLAP_RED or more of its last FLAP_RUNS runs is flapping
FLAP_RUNS = 5
FLAP_RED = 3


@dataclass(frozen=True)
class Drop:
    """A figure below `ratio` x the median of its last passing runs."""

    what: str  # "C2 node1<->node2 busbw at 1M" / "C1 busbw at 1M"
    value: float
    median: float
    runs: int  # how many earlier passing runs the median is over
    threshold: float  # the --history-drop used

    @property
    def ratio(self) -> float:
        return self.value / self.median if self.median else 0.0

    def text(self, unit: str = "GB/s") -> str:
        return (f"{self.what}: {self.value:.4g} {unit}, {self.ratio:.2f}x its median "
                f"{self.median:.4g} {unit} over its last {self.runs} passing runs "
                f"(below {self.threshold:g}x: --history-drop)")


def drop(what: str, value: float | None, history: Sequence[float | None], *, ratio: float = DROP,
         window: int = WINDOW, min_runs: int = MIN_RUNS) -> Drop | None:
    """`value` against the median of `history` (earlier passing runs' values, newest first; the
    first `window` count): a Drop when it is below `ratio` x that median. None when the value is
    missing, or the history too short to have a median (fewer than `min_runs`)."""
    past = [v for v in history[:window] if v is not None and v > 0]
    if value is None or len(past) < min_runs:
        return None
    median = statistics.median(past)
    if median > 0 and value < ratio * median:
        return Drop(what, value, median, len(past), ratio)
    return None


def drops(values: Mapping[str, float], history: Mapping[str, Sequence[float | None]], *,
          ratio: float = DROP, window: int = WINDOW, min_runs: int = MIN_RUNS) -> list[Drop]:
    """:func:`drop` for each figure of `values` (key -> this run's value), in their order."""
    out = []
    for key, value in values.items():
        d = drop(key, value, history.get(key, ()), ratio=ratio, window=window,
                 min_runs=min_runs)
        if d is not None:
            out.append(d)
    return out


@dataclass(frozen=True)
class Flapping:
    node: str
    red: int  # of `runs`
    runs: int
    causes: tuple[str, ...]  # each cause seen, once, newest first

    def text(self) -> str:
        return (f"{self.node} flapping: red in {self.red} of its last {self.runs} runs ("
                + "; ".join(self.causes[:4]) + (", ..." if len(self.causes) > 4 else "") + ")")


def flapping(history: Mapping[str, Sequence[tuple[bool, Iterable[str]]]], *,
             runs: int = FLAP_RUNS, red: int = FLAP_RED) -> list[Flapping]:
    """Nodes red in `red` or more of their last `runs` runs; `history`: node -> (red, its causes)
    per run, newest first (this run included)."""
    out = []
    for node, seen in history.items():
        last = list(seen)[:runs]
        reds = [causes for was_red, causes in last if was_red]
        if len(reds) >= red:
            causes = tuple(dict.fromkeys(c for cs in reds for c in cs))
            out.append(Flapping(node, len(reds), len(last), causes))
    return out
