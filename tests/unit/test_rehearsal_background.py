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
    monkeypatch.setattr(rehearsal, "start_background",
                        lambda c, legs=True: calls.append((c, legs)))
    monkeypatch.setattr(ports, "start_background", lambda c: matrix.append(c))
    cluster: Any = object()
    env_checks.session_start(cluster, frozenset({"test_required_env", "test_env_agrees"}))
    net.session_start(cluster, frozenset({"test_reachable", "test_mtu"}))
    assert calls == []
    env_checks.session_start(cluster, frozenset({"test_versions"}))  # E3 alone (-k)
    net.session_start(cluster, frozenset({"test_socket_ifname"}))
    # E3 reads the legs; F5 the launch's exports only: the rank-0 node's part
    assert calls == [(cluster, True), (cluster, False)]
    # the port matrix likewise, for its readers only (F1 above; not F5, F6)
    assert matrix == [cluster]


class _Rank0Memo(SessionMemo):
    rank0 = type("Node", (), {"name": "node1"})()


def test_the_exports_readers_run_no_legs_and_the_whole_rehearsal_reuses_their_part(monkeypatch):
    """F5, C1 and C2 read the launch's exports: the rank-0 node's part, computed once; the pdsh
    legs (an import on every node) run only for the whole rehearsal's readers, on a copy."""
    prepares: list[str] = []
    legs: list[rehearsal.Rehearsal] = []

    def prepare(c, r):
        prepares.append(r.site)
        r.exports = {"NCCL_IB_HCA": "mlx5_0"}

    def run_legs(c, r):
        legs.append(r)
        r.legs["node1"] = rehearsal.Leg("pass", "imports")

    monkeypatch.setattr(rehearsal, "_prepare", prepare)
    monkeypatch.setattr(rehearsal, "_run_legs", run_legs)
    cluster: Any = _Rank0Memo()
    assert rehearsal.exports(cluster) == {"NCCL_IB_HCA": "mlx5_0"}
    assert rehearsal.exports(cluster) == {"NCCL_IB_HCA": "mlx5_0"}
    assert (prepares, legs) == (["node1"], [])
    whole = rehearsal.rehearse(cluster)
    assert prepares == ["node1"] and legs == [whole]
    assert whole.exports == {"NCCL_IB_HCA": "mlx5_0"} and set(whole.legs) == {"node1"}
    assert rehearsal.prepared(cluster).legs == {}  # the legs went into the copy


def test_a_rank0_that_cannot_start_the_launch_runs_no_legs(monkeypatch):
    legs: list[object] = []
    monkeypatch.setattr(rehearsal, "_prepare",
                        lambda c, r: rehearsal.Leg("fail", "no deepspeed on node1"))
    monkeypatch.setattr(rehearsal, "_run_legs", lambda c, r: legs.append(r))
    cluster: Any = _Rank0Memo()
    assert rehearsal.exports(cluster) == {}
    whole = rehearsal.rehearse(cluster)
    assert legs == [] and whole.site_problem is not None
    assert whole.leg("node2").root == "test_launch_rehearsal[node1]"


def test_the_background_start_without_legs_computes_the_rank0_part_only(monkeypatch):
    done = threading.Event()
    legs: list[object] = []

    def prepare(c, r):
        done.set()

    monkeypatch.setattr(rehearsal, "_prepare", prepare)
    monkeypatch.setattr(rehearsal, "_run_legs", lambda c, r: legs.append(r))
    cluster: Any = _Rank0Memo()
    rehearsal.start_background(cluster, legs=False)
    rehearsal.start_background(cluster, legs=False)
    assert done.wait(10)
    assert rehearsal.prepared(cluster).site == "node1" and legs == []
    assert not rehearsal.scheduled(cluster)  # S5 runs its own pdsh: no legs to read
