"""C1-C3: the all-reduce worker run for real on gloo/127.0.0.1, and the verdict on its events
(judge/collective/collverdict.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paths import SAMPLES, load_script

from cluster_tests.judge.collective import collopts as copts
from cluster_tests.judge.collective import collverdict as C
from cluster_tests.judge.collective import rankplan as rk
from cluster_tests.report import colltable
from fixtures import localcollective as LC

FAST: dict[str, Any] = {"warmup": 2, "iters": 5, "connect_timeout": 10.0, "init_timeout": 10.0,
        "op_timeout": 30.0}


def assert_gone(report: C.CollectiveReport, expected: int) -> None:
    """Every started worker, and anything in its process group, is gone."""
    assert len(report.pids) == expected
    for pid in report.pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)


# --- real local runs (C1) --------------------------------------------------------------------


@pytest.mark.parametrize(("world", "sizes"), [(2, "8,1K,64K,1M,4M"), (3, "8,4K,256K")])
def test_gloo_allreduce_is_correct_and_reported_as_nccl_tests(world: int, sizes: str) -> None:
    report = LC.run_local(world, copts.parse_sizes(sizes), **FAST)

    assert report.verdict == "ok", report.message
    assert report.backend == "gloo"
    assert [row.size_bytes for row in report.rows] == copts.parse_sizes(sizes)
    factor = 2 * (world - 1) / world
    for row in report.rows:
        assert row.wrong == 0
        assert row.nranks_reported == world
        assert row.count == row.size_bytes // 4
        assert row.time_us > 0
        assert row.algbw_GBps == row.size_bytes / (row.time_us * 1e-6) / 1e9
        assert row.busbw_GBps == row.algbw_GBps * factor
    table = colltable.table(colltable.AllReduceResult.of(report))
    assert copts.UNITS_LEGEND in table
    assert "# timed: avg time per op of 5 back-to-back in-place all_reduce calls" in table
    assert f"{report.rows[-1].size_bytes:12d}" in table
    assert_gone(report, world)


def test_worker_result_lines_carry_the_busbw_formula() -> None:
    seen: list[dict] = []
    report = LC.run_local(2, [4096], on_event=lambda rank, ev, proc: seen.append(ev), **FAST)
    results = [ev for ev in seen if ev["event"] == "result"]
    assert report.ok and len(results) == 2
    for ev in results:
        assert ev["busbw_GBps"] == ev["algbw_GBps"] * (2 * (2 - 1) / 2)
        assert ev["wrong"] == 0 and ev["time_us"] > 0
    assert {ev["event"] for ev in seen} >= {"start", "joined", "init_ok", "result", "done"}
    assert report.exit_codes == {0: C.EXIT_OK, 1: C.EXIT_OK}


def test_one_rank_has_zero_busbw_as_nccl_tests_prints() -> None:
    report = LC.run_local(1, [1024], **FAST)
    assert report.ok, report.message
    (row,) = report.rows
    assert row.algbw_GBps > 0
    assert row.busbw_GBps == 0.0


# --- formula against nccl-tests' own output --------------------------------------------------


def test_busbw_factor_is_nccl_tests_allreduce_factor() -> None:
    assert C.allreduce_busbw_factor(1) == 0.0
    assert C.allreduce_busbw_factor(2) == 1.0
    assert C.allreduce_busbw_factor(8) == 1.75
    assert C.allreduce_busbw_factor(16) == 1.875
    with pytest.raises(ValueError):
        C.allreduce_busbw_factor(0)


@pytest.mark.parametrize(("sample", "nranks"), [
    ("nccl-tests-all-reduce-perf-1node-8gpu.txt", 8),
    ("nccl-tests-all-reduce-perf-2node-16gpu.txt", 16),
])
def test_formula_reproduces_nccl_tests_rows(sample: str, nranks: int) -> None:
    rows = [line.split() for line in (SAMPLES / sample).read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    assert rows
    for cols in rows:
        size, time_us, algbw, busbw = int(cols[0]), float(cols[5]), float(cols[6]), float(cols[7])
        # nccl-tests prints time with 4 significant digits and bandwidths to 0.01.
        assert C.algbw_gbps(size, time_us) == pytest.approx(algbw, rel=2e-3, abs=0.006)
        assert algbw * C.allreduce_busbw_factor(nranks) == pytest.approx(busbw, abs=0.02)


# --- hangs and missing ranks (C3) ------------------------------------------------------------


def test_rank_that_never_starts_is_named_and_nothing_is_left_running() -> None:
    report = LC.run_local(2, [1024], **{**FAST, "connect_timeout": 2.0}, start_ranks=[0])
    assert report.verdict == "missing"
    assert report.missing == [1]
    assert report.failed[0][0] == "rendezvous"
    assert report.exit_codes == {0: C.EXIT_MISSING}
    assert report.message.startswith("rank 1 (127.0.0.1 local 1) never joined the rendezvous "
                                     "at 127.0.0.1:")
    assert report.message.endswith(" within 2 s")
    assert_gone(report, 1)


def test_missing_rank_zero_fails_the_others_at_connect() -> None:
    report = LC.run_local(2, [1024], **{**FAST, "connect_timeout": 2.0}, start_ranks=[1])
    assert report.verdict == "failed"
    assert report.failed[1][0] == "connect"
    assert report.exit_codes == {1: C.EXIT_CONNECT}
    assert "rank 1 (127.0.0.1 local 1) failed in stage connect" in report.message
    assert "rank 0 (127.0.0.1 local 0) printed nothing" in report.message
    assert_gone(report, 1)


def test_a_rank_whose_store_ends_in_the_rendezvous_still_says_where_it_waited() -> None:
    """World 3, rank 2 never comes. Rank 1 starts after rank 0 has imported torch, so rank 0
    (the store) reaches the rendezvous deadline first and ends: rank 1's next store call fails
    before its own deadline, and before the launcher's request for its stack could reach it.
    It dumps its stack itself, in the rendezvous, as a rank at its own deadline does."""
    import json

    ranks = rk.assign_ranks({"127.0.0.1": 3})
    port = LC.free_port()
    options = rk.WorkerOptions(sizes=[1024], backend="gloo", dtype="float32", warmup=1, iters=1,
                               connect_timeout=3.0, init_timeout=5.0, op_timeout=5.0,
                               size_seconds=1.0)
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "PYTHONUNBUFFERED": "1"}
    env.pop("CT_STACK_FD", None)  # the dump goes to stderr

    def start(rank: int) -> subprocess.Popen[bytes]:
        argv = rk.worker_argv(sys.executable, LC.WORKER_SCRIPT, ranks[rank], 3, "127.0.0.1",
                              port, options)
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                start_new_session=True)

    procs = [start(0)]
    try:
        assert procs[0].stdout is not None
        for raw in procs[0].stdout:  # rank 0 has imported torch: its deadline comes first
            if b'"start"' in raw:
                break
        procs.append(start(1))
        out, err = procs[1].communicate(timeout=60)
        procs[0].communicate(timeout=30)
    finally:
        for proc in procs:
            LC.kill_group(proc)
    events = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    errors = [e for e in events if e.get("event") == "error"]
    assert [e["stage"] for e in errors] == ["rendezvous"], events
    assert "store error during rendezvous" in errors[0]["message"], errors
    assert [p.returncode for p in procs] == [C.EXIT_MISSING, C.EXIT_MISSING]
    dump = err.decode(errors="replace")
    # faulthandler's dump (torch's own error text holds no Python frame), read as the red reads
    # it: where rank 0 said it was at its own deadline
    assert re.search(r'File ".*allreduce\.py", line \d+ in rendezvous', dump), dump
    from cluster_tests.judge.common import stacks as S

    assert S.where(S.main_thread(S.parse(dump))) == "in rendezvous (allreduce.py)", dump


def test_rank_that_joins_but_never_inits_trips_the_init_watchdog() -> None:
    """A peer that registers in the rendezvous store and then never builds its communicator
    (what a rank wedged before init_process_group looks like from outside)."""
    from torch.distributed import TCPStore

    port = LC.free_port()
    held: list[object] = []

    def join_as_rank_1() -> None:
        import datetime
        import json

        store = TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=10))
        store.set("joined/1", json.dumps({"host": "phantom", "label": "", "local_rank": 1,
                                          "pid": os.getpid()}))
        store.add("joined_count", 1)
        held.append(store)

    def on_event(rank: int, event: dict, proc: subprocess.Popen[bytes]) -> None:
        if rank == 0 and event["event"] == "start":
            threading.Thread(target=join_as_rank_1, daemon=True).start()

    report = LC.run_local(2, [1024], **{**FAST, "init_timeout": 2.0}, start_ranks=[0],
                         port=port, on_event=on_event)
    assert report.verdict == "hang", report.message
    assert report.stuck_stage == "init"
    assert report.stuck == [1]
    assert report.failed[0][0] == "init"
    assert report.exit_codes == {0: C.EXIT_INIT}
    assert report.message.startswith("rank 1 (127.0.0.1 local 1) stuck in communicator init")
    assert_gone(report, 1)


def test_rank_stopped_mid_sweep_trips_the_collective_watchdog() -> None:
    def on_event(rank: int, event: dict, proc: subprocess.Popen[bytes]) -> None:
        if rank == 1 and event["event"] == "init_ok":
            os.kill(proc.pid, signal.SIGSTOP)

    report = LC.run_local(2, copts.parse_sizes("1M,4M"), warmup=2, iters=50, connect_timeout=10,
                         init_timeout=10, op_timeout=3, grace=1.0, on_event=on_event)
    assert report.verdict == "hang", report.message
    assert report.stuck_stage == "collective"
    assert report.stuck == [1]
    assert report.failed == {0: ("collective", report.failed[0][1])}
    assert "within 3 s (watchdog)" in report.failed[0][1]
    assert report.exit_codes[0] == C.EXIT_COLLECTIVE
    assert report.exit_codes[1] == -signal.SIGKILL
    assert "rank 1 (127.0.0.1 local 1) stuck in the all-reduce sweep" in report.message
    assert_gone(report, 2)


def test_slow_link_stops_the_sweep_instead_of_running_into_the_watchdog() -> None:
    """A per-size budget far below one 16M call: the first size is still measured (at least one
    timed call), the 16M size, predicted from 1K above the budget, ends the sweep with a `stopped`
    event before any call of it, and the busbw check fails."""
    report = LC.run_local(2, copts.parse_sizes("1K,16M,64M"), **FAST, size_seconds=0.0005)
    assert report.verdict == "ok", report.message
    assert [row.size_bytes for row in report.rows] == [1024]
    iters = report.rows[0].iters
    assert iters is not None and 1 <= iters <= 5 and report.iters == 5
    if iters < 5:
        assert (f"# slow link: fewer timed calls at 1KB ({report.rows[0].iters})"
                in colltable.table(colltable.AllReduceResult.of(report)))
    assert report.stopped is not None
    assert report.stopped.size_bytes == 16 << 20 and report.stopped.skipped == (16 << 20, 64 << 20)
    assert report.stopped.op_seconds > 0.0005
    assert "sweep stopped before 16MB" in report.message
    assert ("# sweep stopped before 16MB: one all_reduce of that size would take about"
            in colltable.table(colltable.AllReduceResult.of(report)))
    verdict = C.judge_busbw(report.rows, stopped=report.stopped)
    assert verdict.judged and not verdict.ok
    assert "not measured: 16MB, 64MB" in verdict.message
    assert_gone(report, 2)


def test_a_sweep_stopped_before_any_size_says_why() -> None:
    ranks = rk.assign_ranks({"node1": 1, "node2": 1})
    stopped = {"event": "stopped", "size_bytes": 1 << 30, "op_seconds": 70.0,
               "left_seconds": 100.0, "size_seconds": 10.0, "skipped": [1 << 30]}
    events: dict[int, list[dict[str, Any]]] = {r.rank: [{"event": "start", "backend": "gloo"},
                                                        {"event": "joined"},
                       {"event": "init_ok"}, stopped, {"event": "done", "ok": True}]
              for r in ranks}
    report = C.collect(events, ranks, {0: 0, 1: 0})
    assert report.verdict == "incomplete" and not report.rows
    assert report.message.startswith("sweep stopped before 1GB: one all_reduce of that size took "
                                     "70.00 s"), report.message


def _worker_module():
    return load_script(LC.WORKER_SCRIPT, "ct_allreduce_worker")


def test_plan_keeps_the_asked_counts_on_a_healthy_link() -> None:
    plan = _worker_module().plan_size
    assert plan(0.001, 100.0, 5, 20, 10.0, True) == (4, 20)
    assert plan(0.0, 100.0, 0, 20, 10.0, False) == (0, 20)


def test_plan_shrinks_warmup_and_iters_to_the_size_budget() -> None:
    plan = _worker_module().plan_size
    assert plan(2.8, 100.0, 5, 20, 10.0, False) == (0, 3)  # C2's throttled pair: 3 timed calls
    assert plan(1.0, 100.0, 5, 20, 10.0, True) == (2, 8)
    assert plan(1.0, 6.0, 5, 20, 10.0, True) == (0, 3)  # half the time left: 3 s
    assert plan(9.0, 100.0, 5, 20, 10.0, False) == (0, 1)  # first size: at least one call


def test_plan_ends_the_sweep_when_one_call_is_over_budget() -> None:
    plan = _worker_module().plan_size
    assert plan(11.0, 100.0, 5, 20, 10.0, True) is None  # a size measured already
    assert plan(11.0, 100.0, 5, 20, 10.0, False) == (0, 1)  # nothing measured yet: one call
    assert plan(30.0, 50.0, 5, 20, 100.0, False) is None  # would not finish in the time left


@given(op=st.floats(1e-6, 50.0), left=st.floats(0.0, 500.0), warmup=st.integers(0, 10),
       iters=st.integers(1, 100), budget=st.floats(0.01, 60.0), measured=st.booleans())
def test_plan_never_exceeds_what_was_asked_or_the_time_left(op, left, warmup, iters, budget,
                                                              measured) -> None:
    plan = _worker_module().plan_size(op, left, warmup, iters, budget, measured)
    if plan is None:
        assert op * 2 > left or (measured and op > budget)
        return
    more, timed = plan
    assert 0 <= more <= max(warmup - 1, 0) and 1 <= timed <= iters
    # the calls the plan adds fit the size's budget (or are the single call that must be made)
    assert (more + timed) * op <= max(min(budget, left / 2), op) * (1 + 1e-9)


# --- the verdict on events (pure) ----------------------------------------------------------


def test_collect_names_missing_ranks_by_host_and_local_rank() -> None:
    ranks = rk.assign_ranks({"node1": 4, "node2": 4, "node3": 4})
    events: dict[int, list[dict]] = {r.rank: [{"event": "start", "backend": "nccl"}]
                                     for r in ranks if r.host != "node3"}
    events[0].append({"event": "missing_ranks", "missing": [8, 9, 10, 11],
                      "master": "node1:29500", "timeout_s": 20.0})
    events[0].append({"event": "error", "stage": "rendezvous", "message": "...",
                      "timeout": True})
    report = C.collect(events, ranks)
    assert report.verdict == "missing"
    assert report.message == ("ranks 8-11 (node3 local 0-3) never joined the rendezvous at "
                              "node1:29500 within 20 s")


def test_collect_counts_wrong_elements() -> None:
    ranks = rk.assign_ranks({"a": 2})
    row = {"event": "result", "size_bytes": 1024, "count": 256, "dtype": "float32",
           "time_us": 10.0}
    events: dict[int, list[dict[str, Any]]] = {0: [{**row, "wrong": 0}, {"event": "done"}],
              1: [{**row, "wrong": 3}, {"event": "done"}]}
    report = C.collect(events, ranks)
    assert report.verdict == "wrong"
    assert report.rows[0].wrong == 3
    assert report.rows[0].algbw_GBps == pytest.approx(0.1024)
    assert report.message == "3 wrong elements at sizes 1K"


# --- issue 26: --collective-budget -----------------------------------------------------------


def test_stopped_by_prediction_names_the_budget() -> None:
    from cluster_tests.judge.collective import collverdict as C

    s = C.Stopped(size_bytes=16 << 20, op_seconds=3.41, size_seconds=2.5,
                   skipped=(16 << 20,), predicted=True, budget_s=30.0)
    text = s.describe()
    assert "one all_reduce of that size would take about 3.41 s (scaled from the last size " \
        "measured)" in text
    assert "budget 2.5 s per size, its share of --collective-budget 30 s" in text
    plain = C.Stopped(size_bytes=16 << 20, op_seconds=3.41, size_seconds=10.0, skipped=())
    assert "took 3.41 s (budget 10 s per size, --collective-size-seconds)" in plain.describe()


# --- the reds (Problem) of a run ---------------------------------------------------------------


def _two_node_run(events: dict[int, list[dict[str, Any]]],
                  exit_codes: dict[int, int | None]) -> C.RemoteRun:
    ranks = rk.assign_ranks({"node1": 1, "node2": 1})
    return C.RemoteRun(report=C.collect(events, ranks, exit_codes), nodes=["node1", "node2"],
                       master="node1", master_addr="10.0.0.1", port=29500,
                       options=rk.WorkerOptions())


def test_a_run_that_never_joined_is_red_on_the_node_that_could_not_join() -> None:
    run = _two_node_run({0: [{"event": "start", "backend": "gloo"},
                             {"event": "missing_ranks", "missing": [1], "master": "node1:29500",
                              "timeout_s": 5.0}], 1: []}, {0: C.EXIT_MISSING, 1: None})
    red = C.run_failed(run, "all-reduce over 2 ranks", C.PortsSeen(False), item="C1")
    assert red.cause == C.CollectiveCause.MISSING and red.item == "C1"
    assert red.nodes == ("node2",)
    assert red.message.startswith("all-reduce over 2 ranks: rank 1 (node2 local 0) never joined "
                                  "the rendezvous at node1:29500 within 5 s")
    assert red.fix.startswith("let node2 reach node1 at 10.0.0.1:29500 over TCP")
    # C2: the pair is where the red is, whatever ranks failed; F3's closed ports are shown
    seen = C.PortsSeen(True, (C.ClosedPort("node2", "node1", 29500, "timed out"),))
    red = C.run_failed(run, "node1<->node2", seen, item="C2", where=("node1", "node2"),
                       after=["  node2 is in 2 of 2 failing pairs"])
    assert red.nodes == ("node1", "node2") and red.message.endswith("failing pairs")
    assert ("  network: the network checks (F) of this session found closed ports: "
            "node2->node1 port 29500: timed out") in red.message


def test_blocked_ports_down_nodes_and_leftovers_are_reds_of_their_own() -> None:
    blocked = [C.BlockedPair("node1", "node3", ((40001, "timed out"), (40002, "timed out")),
                             "test_high_ports[node1->node3]")]
    red = C.ports_blocked("all-reduce over every rank of node1, node3", blocked, item="C1")
    assert red.nodes == ("node3",) and red.cause == C.CollectiveCause.PORTS_BLOCKED
    assert ("not run: the network checks found that node3 takes no connection from node1 "
            "(40001 timed out, 40002 timed out; see test_high_ports[node1->node3])") in red.message
    assert red.fix == "open the ports (see those tests' fixes), then rerun `-m collective`"
    down = C.node_down("node2", item="C2", where=("node1", "node2"))
    assert down.message == "node2 unreachable: see test_login[node2]"
    run = _two_node_run({0: [{"event": "done"}], 1: [{"event": "done"}]}, {0: 0, 1: 0})
    assert C.leftover([run], item="C1") is None
    run.unconfirmed = {"node2": {1: 4242}}
    left = C.leftover([run], item="C1")
    assert left is not None and left.nodes == ("node2",)
    assert left.message.endswith("node2: kill 4242")


def test_wrong_backend_socket_fallback_and_low_busbw_are_reds() -> None:
    ranks = rk.assign_ranks({"node1": 1, "node2": 1})
    events: dict[int, list[dict[str, Any]]] = {
        r.rank: [{"event": "start", "backend": "gloo" if r.host == "node2" else "nccl"},
                 {"event": "done"}] for r in ranks}
    report = C.collect(events, ranks, {0: 0, 1: 0})
    gpus = {"node1": ("nvidia", "8 GPUs"), "node2": ("nvidia", "8 GPUs")}
    red = C.wrong_backend(report, gpus, "all-reduce over 2 ranks", item="C1")
    assert red is not None and red.cause == C.CollectiveCause.WRONG_BACKEND
    assert red.nodes == ("node1", "node2")  # the ranks disagree: every node they ran on
    assert "rank 1 (node2 local 0) ran on gloo, but node2 has 8 GPUs" in red.message
    assert C.wrong_backend(report, {}, "x", item="C1") is not None  # they disagree anyway
    assert C.socket_fallback({}) is None
    fell = C.socket_fallback({"node2": "node2: NCCL used sockets (NET/Socket) ..."})
    assert fell is not None and fell.nodes == ("node2",) and fell.item == "C1"
    assert C.busbw_problem(report, C.BusbwVerdict(True, True, "fine")) is None
    low = C.busbw_problem(report, C.BusbwVerdict(False, True, "busbw 1.0 GB/s < 2.0"))
    assert low is not None and low.cause == C.CollectiveCause.BUSBW_LOW
    bad = C.baseline_unreadable("/x.json", "No such file")
    assert bad.message == "--busbw-baseline /x.json: cannot read it: No such file"
