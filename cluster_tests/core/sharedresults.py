"""Results shared by the pytest-xdist worker processes through a directory (core.workers makes
it on the controller and hands it to each worker; `Cluster.probe` uses it when it is set).

Imports nothing of cluster_tests: core.cluster holds one, core.workers sets it up, and neither
needs the other for it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path


class SharedResults:
    """Results shared by the worker processes through a directory: the first process that asks
    for a key computes it and writes the result (or its error) there, under a file lock; the
    others wait for the lock and read it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def get(self, key: tuple[str, ...], compute: Callable[[], object],
            errors: type[Exception]) -> tuple[object, str | None, bool]:
        """(result, error text, whether it was read from another process): an exception of
        `errors` that `compute` raises is shared as its text."""
        name = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]
        path = self.directory / f"{name}.json"
        read = False
        with open(self.directory / f"{name}.lock", "w") as lock:
            while True:  # short waits, so that Ctrl-C is not held up (see remote.wait_result)
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    time.sleep(0.05)
            try:
                if path.exists():
                    stored = json.loads(path.read_text())
                    read = True
                else:
                    try:
                        stored = {"data": compute()}
                    except errors as exc:
                        stored = {"probe_error": str(exc)}
                    tmp = path.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_text(json.dumps(stored))
                    os.replace(tmp, path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        return stored.get("data"), stored.get("probe_error"), read
