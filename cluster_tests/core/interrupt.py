"""Ctrl-C: the first interrupts the run, the ones after it cannot cut its cleanup short.

The first SIGINT does what Python's own handler does: KeyboardInterrupt in the main thread,
and pytest ends the session (fixtures torn down, reports written, the run's processes ended
on every node: `Cluster.close`). A second Ctrl-C, pressed while that cleanup runs, would raise
KeyboardInterrupt in the middle of it, and pytest would then skip what is left of it (its
`pytest_unconfigure`, where the nodes are cleaned, among them): the launch would go on running
on the nodes. So every later SIGINT only says that the cleanup is under way; the cleanup is
bounded (every remote step has its own deadline), and SIGQUIT (Ctrl-\\) still ends the process
at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sysconfig
import threading
from collections.abc import Callable
from types import FrameType

import pytest

FIRST = ("\n[cluster] interrupted: ending the run and cleaning up the nodes; Ctrl-C again is "
         "ignored until that is done (Ctrl-\\ quits at once, leaving them as they are)\n")
AGAIN = "[cluster] still cleaning up the nodes...\n"


_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep


def _in_stdlib(path: str) -> bool:
    return path.startswith(_STDLIB)


class InterruptGuard:
    """SIGINT's handler for one session (`install`, `uninstall`), and a pytest plugin that
    keeps pytest's report of the interrupt short."""

    def __init__(self, fulltrace: bool = False) -> None:
        self.fulltrace = fulltrace
        self.interrupted = False
        self._previous: Callable[[int, FrameType | None], object] | int | None = None
        self._installed = False
        self._fd: int | None = None

    def install(self) -> bool:
        """Handle SIGINT, where Python's own handler has it (not under another program's
        handler, nor outside the main thread, where signals cannot be handled). Called while
        pytest does not capture output (pytest_configure): what the handler says goes to the
        standard error of that moment, the terminal, even from inside a captured test."""
        if threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return False
        with contextlib.suppress(OSError):
            self._fd = os.dup(2)
        self._previous = signal.signal(signal.SIGINT, self._handle)
        self._installed = True
        return True

    def uninstall(self) -> None:
        if self._installed and signal.getsignal(signal.SIGINT) == self._handle:
            signal.signal(signal.SIGINT, self._previous)
        self._installed = False
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Before pytest writes up the interrupt: its last entry is where the run was (not
        this handler's `raise`), and without --full-trace, where pytest shows only that entry,
        it is the only one (pytest would otherwise write up every frame of the interrupted
        stack, their sources parsed, their arguments shown: seconds on a loaded machine, before
        the nodes are cleaned up)."""
        tb = excinfo.traceback
        if tb and tb[-1].frame.code.raw is InterruptGuard._handle.__code__:
            tb = tb[:-1]
        if tb and not self.fulltrace:
            # the innermost frame outside the standard library (a wait in threading.py says
            # nothing of where the run was)
            ours = [i for i, entry in enumerate(tb) if not _in_stdlib(str(entry.path))]
            tb = tb[ours[-1]:ours[-1] + 1] if ours else tb[-1:]
        if tb:
            excinfo.traceback = tb

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = not self.interrupted
        self.interrupted = True
        self._say(FIRST if first else AGAIN)
        if first:
            raise KeyboardInterrupt

    def say(self, text: str) -> bool:
        """`text` on the standard error of pytest_configure's time; False where there is none
        (the guard was never installed, or is uninstalled)."""
        if self._fd is None:
            return False
        with contextlib.suppress(OSError):  # a closed terminal: nothing to say it on
            os.write(self._fd, text.encode())
        return True

    def _say(self, text: str) -> None:
        self.say(text)
