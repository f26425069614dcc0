"""The rehearsal started in the background after collection (measure/rehearsal.start_background,
checks' session_start): once per session, and only when a reader of the rehearsal is selected."""

from __future__ import annotations

import threading
import time
from typing import Any

from memostub import SessionMemo

from cluster_tests.checks import env as env_checks
from cluster_tests.checks import network as net
from cluster_tests.measure import ports, rehearsal


def test_started_once_per_session(monkeypatch):
    calls: list[str] = []
    done = threading.Event()
    release = threading.Event()

    def rehearse(c):
        release.wait(10)
        calls.append("rehearse")
        done.set()

    monkeypatch.setattr(rehearsal, "rehearse", rehearse)
    cluster: Any = SessionMemo()
    rehearsal.start_background(cluster)
    rehearsal.start_background(cluster)  # a second section asking: no second run
    release.set()
    assert done.wait(10)
    time.sleep(0.2)
    assert calls == ["rehearse"]


def test_an_error_stays_in_the_thread(monkeypatch):
    done = threading.Event()

    def rehearse(c):
        done.set()
        raise RuntimeError("rank 0 down")  # re-raised to the check that reads the memo

    monkeypatch.setattr(rehearsal, "rehearse", rehearse)
    rehearsal.start_background(SessionMemo())  # type: ignore[arg-type]
    assert done.wait(10)


def test_started_only_for_the_readers_of_the_rehearsal(monkeypatch):
    calls: list[object] = []
    matrix: list[object] = []
    monkeypatch.setattr(rehearsal, "start_background", lambda c: calls.append(c))
    monkeypatch.setattr(ports, "start_background", lambda c: matrix.append(c))
    cluster: Any = object()
    env_checks.session_start(cluster, frozenset({"test_required_env", "test_env_agrees"}))
    net.session_start(cluster, frozenset({"test_reachable", "test_mtu"}))
    assert calls == []
    env_checks.session_start(cluster, frozenset({"test_versions"}))  # E3 alone (-k)
    net.session_start(cluster, frozenset({"test_socket_ifname"}))
    assert calls == [cluster, cluster]
    # the port matrix likewise, for its readers only (F1 above; not F5, F6)
    assert matrix == [cluster]
