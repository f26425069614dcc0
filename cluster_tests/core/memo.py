"""The session's memo: each fact, login or measurement computed once for the whole session,
however many threads ask at once (the others wait for the one computing it); a failure kept and
raised again to every asker, never computed again.  And the background phases of a session
(the launch rehearsal, the port matrix), which fill its entries in threads of their own.

A computed value is kept alone (`_values`, read without the lock: asked about 1000 times per
node); its Future (a lock and a condition each, 20,000 per 1024 nodes) only hands it to whoever
waits for it then.  A failure keeps its Future.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar, cast

from cluster_tests.core.memokey import MemoKey
from cluster_tests.core.transport import wait_result

T = TypeVar("T")
_MISSING = object()  # no value in the memo (None is a value)


class Memo:
    def __init__(self) -> None:
        self._memo: dict[tuple[str, ...], Future[Any]] = {}
        #: the computed values (not the failures), read without the lock
        self._values: dict[tuple[str, ...], object] = {}
        self._lock = threading.Lock()
        self._background: list[threading.Thread] = []

    def memo(self, key: MemoKey[T], compute: Callable[[], T]) -> T:
        """Compute `key` once for the whole session, even when many threads ask at once."""
        done = self._values.get(key, _MISSING)  # computed: no lock
        if done is not _MISSING:
            return cast(T, done)
        with self._lock:
            done = self._values.get(key, _MISSING)
            if done is not _MISSING:
                return cast(T, done)
            fut = self._memo.get(key)
            owner = fut is None
            if owner:
                fut = self._memo[key] = Future()
        assert fut is not None
        if owner:
            try:
                value = compute()
            except BaseException as exc:  # noqa: BLE001 - stored, re-raised to every asker
                fut.set_exception(exc)
            else:
                self.computed(key, fut, value)
        return wait_result(fut)

    def value(self, key: MemoKey[T]) -> T | None:
        """The computed value of `key`, read without the lock (None: not computed, or failed)."""
        return cast("T | None", self._values.get(key))

    def computed(self, key: MemoKey[T], fut: Future[T], value: T) -> None:
        """`value` kept for `key`, and handed to whoever waits on `fut` now."""
        with self._lock:
            self._values[key] = value
            self._memo.pop(key, None)
        fut.set_result(value)

    def claim(self, key: MemoKey[Any]) -> Future[Any] | None:
        """`key`'s entry taken by the caller, who fills it (`computed`, or the Future's
        exception); None where another has it, or it is computed already."""
        with self._lock:
            if key in self._memo or key in self._values:
                return None
            fut: Future[Any] = Future()
            self._memo[key] = fut
            return fut

    def cached(self, key: MemoKey[T]) -> T | None:
        """A memo entry that is already computed (None otherwise); never computes or waits."""
        done = self._values.get(key, _MISSING)
        if done is not _MISSING:
            return cast(T, done)
        with self._lock:
            fut = self._memo.get(key)
        if fut is None or not fut.done() or fut.exception() is not None:
            return None
        return fut.result()

    def failed(self, key: MemoKey[Any]) -> bool:
        """Whether a memo entry is computed and failed (never computes or waits)."""
        return self.error(key) is not None

    def error(self, key: MemoKey[Any]) -> BaseException | None:
        """The failure of a memo entry computed and failed (None: not computed yet, in flight,
        or a value); never computes or waits."""
        with self._lock:
            fut = self._memo.get(key)
        return fut.exception() if fut is not None and fut.done() else None

    def settled(self, key: MemoKey[Any]) -> bool:
        """Whether `key` is computed, to a value or a failure."""
        if key in self._values:
            return True
        with self._lock:
            fut = self._memo.get(key)
        return fut is not None and fut.done()

    # -- the session's background phases ----------------------------------------------------
    def in_background(self, name: str, fn: Callable[[], object], *, wait: bool = True) -> None:
        """Run a phase of the session in a thread of its own (its readers wait for its memo
        entries, an error re-raised to each).  `wait`: the session waits for it before it ends
        (`finish_background`), for what it leaves on the nodes (listeners) is its own to stop;
        else what it has in flight is ended with the run's other commands (Cluster.close)."""
        def run() -> None:
            with contextlib.suppress(Exception):
                fn()

        thread = threading.Thread(target=run, name=name, daemon=True)
        if wait:
            with self._lock:
                self._background.append(thread)
        thread.start()

    def finish_background(self) -> None:
        """Wait for the background phases (a session that ended before reading them: -x, a
        deselection by a plugin) so that they end what they started on the nodes."""
        with self._lock:
            threads = list(self._background)
        for thread in threads:
            thread.join()
