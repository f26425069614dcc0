"""T1/T2 on accelerators, the parts a CPU can check (issue 17): the job's precision, optimizer
and ZeRO config by accelerator, a GPU/NPU node that trained on CPU is red naming the likely
cause, and T1 trains on the launch's own slot ids."""

from __future__ import annotations

from types import SimpleNamespace

from paths import load_script

from cluster_tests.core.settings import Settings, TrainingSettings
from cluster_tests.judge.training import trainargv as targv
from cluster_tests.judge.training import traindiag as tdiag
from cluster_tests.judge.training import trainexplain as tx
from cluster_tests.judge.training import trainresult as tres
from cluster_tests.measure import trainruns as trr
from fixtures import localtrain as local


def _job():
    return load_script(local.SCRIPT_PATH, "ct_train_smoke")


JOB = _job()


def test_precision_and_optimizer_follow_the_accelerator() -> None:
    cfg, prec, client = JOB.ds_config("cuda", True, True, 2, 16, 0.05)
    assert prec == "bf16" and cfg["bf16"] == {"enabled": True} and "fp16" not in cfg
    assert not client and cfg["optimizer"] == {"type": "Adam", "params": {"lr": 0.01}}
    assert cfg["zero_optimization"] == {"stage": 2}
    assert "zero_allow_untested_optimizer" not in cfg
    cfg, prec, _ = JOB.ds_config("cuda", False, True, 0, 16, 0.05)  # V100: no bf16
    assert prec == "fp16" and cfg["fp16"]["enabled"] and cfg["fp16"]["initial_scale_power"] == 8
    cfg, prec, _ = JOB.ds_config("npu", True, True, 0, 16, 0.05)
    assert prec == "bf16" and cfg["optimizer"]["type"] == "Adam"
    cfg, prec, client = JOB.ds_config("cpu", True, True, 0, 16, 0.05)
    assert prec == "fp32" and client and "bf16" not in cfg and "optimizer" not in cfg
    assert cfg["zero_allow_untested_optimizer"] is True
    assert JOB.ds_config("cuda", True, True, 0, 16, 0.05, "fp32")[1] == "fp32"
    assert JOB.parse_args([]).precision == "auto"


def _result(starts: dict[int, dict]) -> tres.SmokeResult:
    lines = "".join(
        f'{s["host"]}: CT_SMOKE {{"event": "start", "rank": {r}, "world_size": {len(starts)}, '
        f'"host": "{s["host"]}", "accelerator": "{s["accelerator"]}", "backend": '
        f'"{s["backend"]}", "ds_accelerator_env": '
        f'{s.get("env") and repr(s["env"]).replace(chr(39), chr(34)) or "null"}}}\n'
        for r, s in starts.items())
    return tres.parse_output(lines, len(starts))


def test_a_gpu_node_training_on_cpu_is_red_with_the_likely_cause() -> None:
    res = _result({0: {"host": "node1", "accelerator": "cuda", "backend": "nccl"},
                   1: {"host": "node2", "accelerator": "cpu", "backend": "gloo"},
                   2: {"host": "node2", "accelerator": "cpu", "backend": "gloo"}})
    inv = {"node1": ("nvidia", "8 GPUs"), "node2": ("nvidia", "8 GPUs")}
    problems = tx.accelerator_problems(res, inv)
    assert problems == [
        "node2: ranks 1,2 trained on cpu (gloo), but node2 has 8 GPUs; DeepSpeed fell back to "
        "its CPU accelerator: torch.cuda is not usable from the remote Python (a CPU-only torch "
        "build, or a driver the CUDA runtime cannot use; see test_accelerators)"]
    forwarded = tx.accelerator_problems(res, inv, {"DS_ACCELERATOR": "cpu"})
    assert "DS_ACCELERATOR=cpu was passed on from pytest's environment" in forwarded[0]
    on_node = tx.accelerator_problems(
        _result({0: {"host": "node1", "accelerator": "cpu", "backend": "gloo", "env": "cpu"}}),
        {"node1": ("ascend", "8 NPUs")})
    assert on_node == ["node1: rank 0 trained on cpu (gloo), but node1 has 8 NPUs; "
                       "DS_ACCELERATOR=cpu is set for the ranks on node1 (~/.bashrc or "
                       "~/.deepspeed_env): remove it"]
    npu = tx.accelerator_problems(
        _result({0: {"host": "node1", "accelerator": "cpu", "backend": "gloo"}}),
        {"node1": ("ascend", "8 NPUs")})
    assert "CANN's set_env.sh" in npu[0]
    # CPU nodes on CPU, unknown nodes, no result: nothing to say
    assert tx.accelerator_problems(res, {"node2": ("cpu", "no accelerator")}) == []
    assert tx.accelerator_problems(None, inv) == []


def test_the_launch_is_not_ok_and_explains_the_accelerator() -> None:
    cfg = trr.config_from_settings(Settings(training=TrainingSettings(steps=10, deadline=30.0)),
                                   environ={})
    launch = tx.Launch("T1-node2", "node2", ["node2"], 1, "cmd", exit_status=0)
    launch.result = SimpleNamespace(ok=True, problems=lambda: [])  # type: ignore[assignment]
    assert launch.ok
    launch.accel_problems = ["node2: rank 0 trained on cpu (gloo), but node2 has 8 GPUs; x"]
    assert not launch.ok
    red = tx.launch_failed(launch, cfg)
    assert "  node2: rank 0 trained on cpu (gloo), but node2 has 8 GPUs; x" in red.text()
    assert red.cause == tdiag.TrainCause.WRONG_ACCELERATOR and red.nodes == ("node2",)
    assert tx.short_cause(launch).startswith("node2: rank 0 trained on cpu")


def test_t1_trains_on_the_launch_slot_ids() -> None:
    assert "--num_gpus" in targv.single_node_argv("python3", "s.py", 4, 29500)
    argv = targv.single_node_argv("python3", "s.py", 4, 29500, include="localhost:4,5,6,7")
    assert "--num_gpus" not in argv
    assert argv[argv.index("--include") + 1] == "localhost:4,5,6,7"
    nodes = [SimpleNamespace(name=f"node{i}", slots=8) for i in (1, 2)]
    cluster = SimpleNamespace(nodes=nodes, node=lambda n: next(x for x in nodes if x.name == n))

    def runs(include: str = "", exclude: str = "") -> trr.TrainingRuns:
        c = SimpleNamespace(include=include, exclude=exclude)
        return trr.TrainingRuns(cluster, c, None)  # type: ignore[arg-type]

    assert runs().local_include("node1") is None
    assert runs("node1:0,1").local_include("node1") is None  # the same devices as --num_gpus 2
    assert runs("node1:4,5,6,7@node2").local_include("node1") == "localhost:4,5,6,7"
    assert runs("node1:4,5,6,7@node2").local_include("node2") is None
    assert runs(exclude="node2:0").local_include("node2") == "localhost:1,2,3,4,5,6,7"
    assert runs("node9").local_include("node1") is None  # a bad filter: T2 reports it


def test_jobs_build_where_the_launch_exports_the_jit_directories() -> None:
    """A TORCH_EXTENSIONS_DIR (or CXX) that the launch exports, e.g. from the launch directory's
    .deepspeed_env, reaches T1's and T2's job too; what a node's own shell sets needs nothing."""
    from cluster_tests.measure import rehearsal

    r = rehearsal.Rehearsal(site="node1", exports={"TORCH_EXTENSIONS_DIR": '"/scratch/ext dir"',
                                                   "CXX": "g++-12", "NCCL_DEBUG": "INFO"})
    memo = {rehearsal.MEMO_KEY: r}
    cluster = SimpleNamespace(cached=memo.get)
    c = SimpleNamespace(forward_env=(("DS_ACCELERATOR", "cpu"),))
    runs = trr.TrainingRuns(cluster, c, None)  # type: ignore[arg-type]
    assert runs._env_pairs() == [("DS_ACCELERATOR", "cpu"),
                                 ("TORCH_EXTENSIONS_DIR", "/scratch/ext dir"), ("CXX", "g++-12")]
    memo.clear()
    assert runs._env_pairs() == [("DS_ACCELERATOR", "cpu")]


def test_refused_options_and_filters_are_reds_without_a_node() -> None:
    bad = tx.options_refused("--training-steps must be at least 2, got 1")
    assert bad.nodes == () and bad.item == "T1" and bad.cause == tdiag.TrainCause.BAD_OPTIONS
    assert bad.text() == "--training-steps must be at least 2, got 1"
    refused = tx.filter_refused("node9 is not in the hostfile")
    assert refused.item == "T2" and refused.cause == tdiag.TrainCause.FILTER_REFUSED
    assert refused.text() == (
        "DeepSpeed will refuse the launch's resource filter: node9 is not in the hostfile\n"
        "  fix: make --launch-include/--launch-exclude name only hostfile hosts and existing "
        "slot indices")


def test_every_job_carries_the_run_tag_in_its_run_id() -> None:
    """T1's and T2's --run-id hold the run's tag, which the end-of-run sweep looks for on every
    node (pdsh's legs and the ranks they start included); without a tag, only the label."""
    c = SimpleNamespace()
    tagged = trr.TrainingRuns(None, c, None, "ct-run-0123abcd")  # type: ignore[arg-type]
    assert tagged.run_id("t2") == f"{tagged.session_id}-t2.ct-run-0123abcd"
    untagged = trr.TrainingRuns(None, c, None)  # type: ignore[arg-type]
    assert untagged.run_id("t2") == f"{untagged.session_id}-t2"
