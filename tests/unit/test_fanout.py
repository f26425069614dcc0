"""--fanout bounds the SSH handshakes from one launcher, whichever threads ask for logins at
once (two maps in parallel here, as a background phase and the tests do).  The login itself is
replaced by a counting stand-in: this is a test of the Pool's bound, not of SSH."""

from __future__ import annotations

import threading
import time

from cluster_tests.core import transport


def test_handshakes_never_exceed_fanout(monkeypatch) -> None:
    live = 0
    peak = 0
    lock = threading.Lock()

    def fake_open(self):
        nonlocal live, peak
        with lock:
            live += 1
            peak = max(peak, live)
        time.sleep(0.02)
        with lock:
            live -= 1
        return object()

    monkeypatch.setattr(transport.Connection, "_open", fake_open)
    names = [f"node{i}" for i in range(1, 41)]
    pool = transport.Pool({n: transport.SSHTarget(alias=n, hostname=n) for n in names}, fanout=3)
    half = len(names) // 2
    threads = [threading.Thread(target=pool.map,
                                args=(lambda n: pool.connection(n).connect(), part))
               for part in (names[:half], names[half:])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(pool.connection(n).connected for n in names)
    assert peak == 3
