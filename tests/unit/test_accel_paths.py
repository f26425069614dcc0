"""The accelerator paths of C1/C2 that a CPU can exercise (issue 17): the backend must match the
node's accelerators on every rank, the rank layout follows the launch's resource filter, the
fix texts name the right fabric, the library's own warnings are shown whatever the exit
status. The fallback check runs the real worker on gloo with a fake /dev."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cluster_tests.judge.collective import collverdict as C
from cluster_tests.judge.collective import rankplan as rk
from cluster_tests.measure import allreducerun as R
from fixtures import localcollective as LC

FAST: dict[str, Any] = {"warmup": 1, "iters": 2, "connect_timeout": 10.0, "init_timeout": 10.0,
        "op_timeout": 30.0}


def _report(backends: dict[int, str], hosts: dict[str, int]) -> C.CollectiveReport:
    ranks = rk.assign_ranks(hosts)
    events: dict[int, list[dict[str, Any]]] = {r.rank: [{"event": "start",
                                                         "backend": backends[r.rank],
                                                         "device": "cpu"},
                       {"event": "done", "ok": True}] for r in ranks}
    return C.collect(events, ranks, {r.rank: 0 for r in ranks})


def test_every_rank_reports_its_backend_and_a_gloo_node_among_gpus_is_named() -> None:
    rep = _report({0: "nccl", 1: "nccl", 2: "gloo", 3: "gloo"}, {"node1": 2, "node2": 2})
    assert rep.backends == {0: "nccl", 1: "nccl", 2: "gloo", 3: "gloo"}
    problems = C.backend_problems(rep, {"node1": ("nvidia", "8 GPUs"),
                                        "node2": ("nvidia", "8 GPUs")})
    assert problems[0] == ("ranks 2-3 (node2 local 0-1) ran on gloo, but node2 has 8 GPUs: the "
                           "launch runs nccl (A1, test_accelerators[node2])")
    assert problems[1].startswith("the ranks did not all choose the same backend (gloo: ranks "
                                  "2-3 (node2 local 0-1); nccl: ranks 0-1 (node1 local 0-1))")
    assert len(problems) == 2


def test_all_gloo_on_an_npu_cluster_is_red_and_cpu_nodes_are_fine() -> None:
    rep = _report({0: "gloo", 1: "gloo"}, {"node1": 1, "node2": 1})
    assert C.backend_problems(rep, {"node1": ("cpu", "no accelerator"),
                                    "node2": ("cpu", "no accelerator")}) == []
    npu = C.backend_problems(rep, {"node1": ("ascend", "8 NPUs"), "node2": ("ascend", "8 NPUs")})
    assert [p.split(",")[0] for p in npu] == ["rank 0 (node1 local 0) ran on gloo",
                                              "rank 1 (node2 local 0) ran on gloo"]
    assert "the launch runs hccl" in npu[0]


def test_auto_falling_to_gloo_on_a_node_with_gpu_device_files_fails_in_setup(
        tmp_path: Path) -> None:
    """The real worker, --backend auto, no CUDA here: with /dev/nvidia0 and /dev/nvidia1
    present (a fake /dev) every rank refuses gloo and says why, before any rendezvous."""
    (tmp_path / "nvidia0").touch()
    (tmp_path / "nvidia1").touch()
    import os

    env = {**os.environ, "CT_ALLREDUCE_DEV_DIR": str(tmp_path)}
    rep = LC.run_local(2, [1024], backend="auto", env=env, **FAST)
    assert rep.verdict == "failed", rep.message
    assert set(rep.failed) == {0, 1}
    stage, message = rep.failed[0]
    assert stage == "setup"
    assert "this node has 2 NVIDIA device(s)" in message and "CPU-only" in message
    assert rep.exit_codes == {0: C.EXIT_BACKEND, 1: C.EXIT_BACKEND}
    # without device files, auto is gloo and fine
    ok = LC.run_local(2, [1024], backend="auto", env={**os.environ,
                     "CT_ALLREDUCE_DEV_DIR": str(tmp_path / "none")}, **FAST)
    assert ok.verdict == "ok" and ok.backends == {0: "gloo", 1: "gloo"}, ok.message


def test_worker_argv_carries_the_nodes_slot_ids_only_when_given() -> None:
    opts = rk.WorkerOptions(sizes=[8])
    plain = rk.worker_argv("p", "s", rk.Rank(0, "n", 0), 1, "a", 1, opts)
    assert "--visible-devices" not in plain and "--local-size" not in plain
    argv = rk.worker_argv("p", "s", rk.Rank(3, "n", 1), 8, "a", 1, opts,
                         visible_devices="4,5,6,7", local_size=4)
    assert argv[-4:] == ["--visible-devices", "4,5,6,7", "--local-size", "4"]


def _cluster(include: str = "", exclude: str = "") -> Any:  # a stand-in for a Cluster
    nodes = [SimpleNamespace(name=f"node{i}", slots=8) for i in (1, 2, 3)]
    return SimpleNamespace(nodes=nodes, settings=SimpleNamespace(include=include, exclude=exclude))


def test_layout_follows_launch_include_and_exclude() -> None:
    assert R.launch_layout(_cluster()) == [(f"node{i}", list(range(8))) for i in (1, 2, 3)]
    assert R.launch_layout(_cluster(include="node1:4,5,6,7@node3")) == [
        ("node1", [4, 5, 6, 7]), ("node3", list(range(8)))]
    assert R.launch_layout(_cluster(exclude="node2:0,1")) == [
        ("node1", list(range(8))), ("node2", [2, 3, 4, 5, 6, 7]), ("node3", list(range(8)))]
    assert R.launch_layout(_cluster(include="node1:4,5"), ["node2", "node1"]) == [
        ("node1", [4, 5])]
    # a filter DeepSpeed would refuse: every slot (T2 names the filter)
    assert R.launch_layout(_cluster(include="node9")) == [
        (f"node{i}", list(range(8))) for i in (1, 2, 3)]


def _red(run: C.RemoteRun) -> str:
    """The red of a failed run as the check renders it (no network checks ran this session)."""
    return C.run_failed(run, "all-reduce", C.PortsSeen(False), item="C1").text()


def _run(report: C.CollectiveReport, stderr: dict[str, list[str]] | None = None) -> C.RemoteRun:
    return C.RemoteRun(report=report, nodes=["node1", "node2"], master="node1",
                       master_addr="10.0.0.1", port=29500, options=rk.WorkerOptions(),
                       stderr=stderr or {}, channel_exit={"node1": 0, "node2": 0})


def test_fabric_warnings_are_shown_though_the_supervisor_exited_0() -> None:
    ranks = rk.assign_ranks({"node1": 1, "node2": 1})
    events = {0: [{"event": "start", "backend": "nccl"},
                  {"event": "error", "stage": "init", "message": "DistBackendError: NCCL error"}],
              1: [{"event": "start", "backend": "nccl"},
                  {"event": "error", "stage": "init", "message": "DistBackendError: NCCL error"}]}
    rep = C.collect(events, ranks, {0: C.EXIT_INIT, 1: C.EXIT_INIT})
    err = ["node2:1234:1250 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
           "node2:1234:1250 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
           "10.0.0.1<43211> failed : Software caused connection abort", "[rank 1] backend nccl"]
    msg = _red(_run(rep, {"node2": err}))
    assert ("  node2 NCCL/HCCL said: node2:1234:1250 [0] misc/socket.cc:484 NCCL WARN "
            "socketStartConnect") in msg
    assert "NCCL INFO" not in msg


def test_hccl_init_hang_fix_names_its_ports_and_nics_and_the_device_stage_blames_the_device(
) -> None:
    ranks = rk.assign_ranks({"node1": 1, "node2": 1})
    events: dict[int, list[dict[str, Any]]] = {
              0: [{"event": "start", "backend": "hccl", "init_timeout_s": 135.0},
                  {"event": "joined"},
                  {"event": "error", "stage": "init", "message": "watchdog", "timeout": True}],
              1: [{"event": "start", "backend": "hccl", "init_timeout_s": 135.0},
                  {"event": "joined"}]}
    rep = C.collect(events, ranks, {0: C.EXIT_INIT, 1: None})
    assert rep.verdict == "hang" and rep.init_timeout_s == 135.0
    msg = _red(_run(rep))
    assert "ports 60000-60015" in msg and "hccn_tool -i <id> -net_health -g" in msg
    assert "init 135 s" in msg and "ephemeral" not in msg

    dev: dict[int, list[dict[str, Any]]] = {0: [{"event": "start", "backend": "hccl"},
               {"event": "error", "stage": "device", "message": "stage device did not finish "
                "within 120 s (watchdog): device set-up", "timeout": True}], 1: []}
    rep = C.collect(dev, ranks, {0: 5, 1: None})
    msg = _red(_run(rep))
    assert "rank 0 (node1 local 0) failed in stage device" in msg
    assert "the accelerator did not come up on node1 (not a network problem)" in msg


# rank 0's own dump from a real run on the simulated cluster (node3's INPUT dropping high ports,
# test_e2e_collective's C2 pair node2<->node3, whose store is on node3): its connect error had
# not reached the launcher when node2's did, but its stack was still in our connect step
RANK0_IN_CONNECT = """\
Thread 0x00007f19f0d156c0 (most recent call first):
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 331 in wait
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 629 in wait
  File "allreduce.py", line 354 in _run
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 982 in run
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1045 in _bootstrap_inner
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f19f1aa7b80 (most recent call first):
  File "allreduce.py", line 565 in connect
  File "allreduce.py", line 820 in main
  File "allreduce.py", line 1073 in <module>
  File "<string>", line 1 in <module>
"""


def test_own_store_blamed_on_rank_0_whichever_connect_deadline_speaks_first() -> None:
    ranks = rk.assign_ranks({"node1": 1, "node2": 1})
    peer_failed = {"event": "error", "stage": "connect", "message": "cannot reach the "
                   "rendezvous store at 10.0.0.1:29500 within 5 s", "timeout": True}
    own = "node1 cannot reach its own rendezvous store at 10.0.0.1:29500"
    # rank 0's own words first
    events: dict[int, list[dict[str, Any]]] = {
        0: [{"event": "start", "backend": "gloo"},
            {**peer_failed, "message": "cannot create (listen on, then connect to) the "
             "rendezvous store at 10.0.0.1:29500 within 5 s"}],
        1: [{"event": "start", "backend": "gloo"}, peer_failed]}
    rep = C.collect(events, ranks, {0: C.EXIT_CONNECT, 1: C.EXIT_CONNECT})
    assert own in _red(_run(rep))
    # rank 1's first, rank 0 stopped before its own came in: its stack says where it was
    events = {0: [{"event": "start", "backend": "gloo"}],
              1: [{"event": "start", "backend": "gloo"}, peer_failed]}
    rep = C.collect(events, ranks, {0: None, 1: C.EXIT_CONNECT})
    run = _run(rep)
    run.stacks[0] = RANK0_IN_CONNECT
    assert own in _red(run)
    # rank 0 past its connect (waiting for the others in the rendezvous): the path is to blame
    run.stacks[0] = RANK0_IN_CONNECT.replace("line 565 in connect", "line 340 in rendezvous")
    msg = _red(run)
    assert own not in msg and "fix: let node2 reach node1 at 10.0.0.1:29500" in msg
    run.stacks.clear()  # no stack: no evidence against rank 0's node either
    assert own not in _red(run)
