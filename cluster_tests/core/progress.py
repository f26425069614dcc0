"""Progress of the run's long phases ("probing nodes: 12/32"), written through pytest's terminal
reporter: where `Cluster.progress` reports go (core/cluster.py), set by the collection
(core/collection.py) when the terminal shows them (-v, or a terminal; never -q, never from an
xdist worker)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol


class Progress:
    """Progress of long phases, written through pytest's terminal reporter: a line per phase
    when it has run a second or more, then at most every `every` seconds, and when done.
    Thread-safe (the node probes report from the fan-out threads)."""

    def __init__(self, write: Callable[[str], None], every: float = 2.0, first: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.write = write
        self.every = every
        self.first = first
        self.clock = clock
        self._phases: dict[str, list[float]] = {}  # phase -> [started, last written (0: never)]
        self._lock = threading.Lock()

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = self.clock()
        with self._lock:
            state = self._phases.get(phase)
            if state is None or (done == 0 and state[1] == -1):
                state = self._phases[phase] = [now, 0.0]
            started, last = state
            if last == -1:  # finished already
                return
            finished = total > 0 and done >= total
            if finished:
                show = last > 0
                state[1] = -1
            else:
                show = (now - started >= self.first) and (last == 0 or now - last >= self.every)
                if show:
                    state[1] = now
            if not show:
                return
        pct = f" ({100 * done // total}%)" if total else ""
        self.write(f"[cluster] {phase}: {done}/{total}{pct}" + (" done" if finished else ""))


class _Terminal(Protocol):
    """What the progress lines need of pytest's terminal reporter."""

    def ensure_newline(self) -> None: ...

    def write_line(self, line: str) -> None: ...


def progress_writer(terminalreporter: _Terminal | None, verbose: int,
                    isatty: bool | None = None) -> Progress | None:
    """The progress sink for a run: None with -q, or when neither verbose nor a tty."""
    if terminalreporter is None or verbose < 0:
        return None
    tty = sys.stdout.isatty() if isatty is None else isatty
    if verbose < 1 and not tty:
        return None
    lock = threading.Lock()

    def write(line: str) -> None:
        with lock:
            terminalreporter.ensure_newline()
            terminalreporter.write_line(line)

    return Progress(write)
