"""The rehearsal started in the background after collection (measure/rehearsal.start_background,
checks' session_start): once per session, the rank-0 probe first, the pdsh legs only after the
`quiet` phase (S4's ssh matrix), and only when a reader of the rehearsal is selected."""

from __future__ import annotations

import threading
from typing import Any

from cluster_tests.checks import env as env_checks
from cluster_tests.checks import network as net_checks
from cluster_tests.core.cluster import Cluster
from cluster_tests.measure import rehearsal


class _Memo:
    """Just the session memo of Cluster (its own code, thread-safe futures)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._memo: dict[Any, Any] = {}

    memo = Cluster.memo


def test_started_once_plan_then_quiet_then_legs(monkeypatch):
    order: list[str] = []
    done = threading.Event()
    release = threading.Event()
    monkeypatch.setattr(rehearsal, "launch_plan", lambda c: order.append("plan"))

    def rehearse(c):
        order.append("legs")
        done.set()

    monkeypatch.setattr(rehearsal, "rehearse", rehearse)

    def quiet():
        release.wait(10)
        order.append("quiet")

    cluster: Any = _Memo()
    rehearsal.start_background(cluster, quiet=quiet)
    rehearsal.start_background(cluster, quiet=quiet)  # a second section asking: no second run
    # the pdsh legs wait for the quiet phase
    assert not done.wait(0.3)
    release.set()
    assert done.wait(10)
    assert order == ["plan", "quiet", "legs"]


def test_a_failing_step_does_not_stop_the_next(monkeypatch):
    done = threading.Event()

    def plan(c):
        raise RuntimeError("rank 0 down")

    monkeypatch.setattr(rehearsal, "launch_plan", plan)
    monkeypatch.setattr(rehearsal, "rehearse", lambda c: done.set())
    rehearsal.start_background(_Memo(), quiet=None)  # type: ignore[arg-type]
    assert done.wait(10)


def test_started_only_for_the_readers_of_the_rehearsal(monkeypatch):
    calls: list[object] = []
    monkeypatch.setattr(rehearsal, "start_background", lambda c, quiet=None: calls.append(c))
    cluster: Any = object()
    env_checks.session_start(cluster, frozenset({"test_required_env", "test_env_agrees"}))
    net_checks.session_start(cluster, frozenset({"test_reachable", "test_mtu"}))
    assert calls == []
    env_checks.session_start(cluster, frozenset({"test_versions"}))  # E3 alone (-k)
    net_checks.session_start(cluster, frozenset({"test_socket_ifname"}))
    assert calls == [cluster, cluster]
