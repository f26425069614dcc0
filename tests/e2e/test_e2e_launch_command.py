"""The launch is the input: the suite run as most users run it, logged in to the rank-0 node, in
the project directory they launch from, with their own ssh setup and no option but the launch
command itself (`cluster-tests [pytest options] -- deepspeed --hostfile hostfile train.py ...`),
beside the real `deepspeed --hostfile` launch from the same place.

Each test is one suite run on node1 (the fast checklist: about 10-15 s here) and one or two real
launches (about 10-25 s each: three ranks importing torch and DeepSpeed on 2 cores).
"""

from __future__ import annotations

import json
import os
import random

import pytest
from suite import FAST, run_suite_on, verdict_of

NODES = ["node1", "node2", "node3"]
HOSTFILE = "".join(f"{n} slots=1\n" for n in NODES)
#: the job: a process group on gloo, one all-reduce, a line per rank, then the exit status its
#: `--exit N` argument asks for (what --then-launch must pass through)
TRAIN = """\
import datetime, sys, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=int(sys.argv[sys.argv.index(
    "--init-timeout") + 1])))
t = torch.ones(1)
dist.all_reduce(t)
print("CT_LAUNCH_OK rank=%d sum=%d" % (dist.get_rank(), int(t.item())), flush=True)
dist.destroy_process_group()
sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))
"""
CONFIG = '{"train_batch_size": 3}\n'
PROJECT = {"train.py": TRAIN, "ds_config.json": CONFIG, "hostfile": HOSTFILE}


def launch(exit: int = 0, port: int | None = None, init_timeout: int = 20) -> tuple[str, ...]:
    """The user's launch command: the project's hostfile, a port of its own (F2 checks it),
    the job's rendezvous timeout and exit status."""
    return ("deepspeed", "--hostfile", "hostfile", "--master_port",
            str(port or random.randrange(30000, 31000)), "train.py", "--deepspeed",
            "ds_config.json", "--init-timeout", str(init_timeout), "--exit", str(exit))


def launched(output: str, ranks: int) -> bool:
    return output.count("CT_LAUNCH_OK") == ranks


def projects(sim, nodes: list[str], **overrides: dict[str, str]) -> str:
    """The project directory on each of `nodes` (a node's own copy, as code synced to local
    disks is), with a node's files replaced by `overrides[node]`; its path there."""
    path = ""
    for n in nodes:
        path = sim.put_project(n, "proj", {**PROJECT, **overrides.get(n, {})})
    return path


def test_on_the_rank0_node_with_no_options_green_then_the_launch_itself(healthy_sim):
    """Logged in to node1, in the project directory, `cluster-tests --then-launch --junitxml=...
    -- deepspeed --hostfile hostfile train.py --deepspeed ds_config.json ...` (node1's own
    ssh setup: no ~/.ssh/config there, no -F anywhere): green; the header states the launch,
    its directory and the .deepspeed_env read; E8 compares the script and the config on every
    node; the run ends with the verdict and the launch; no PytestWarning (the run is outside
    the checkout, with no junit_family); then the real launch runs from there, training on
    every rank, and its exit status (3, as its script asks) is the command's."""
    sim = healthy_sim
    where = projects(sim, NODES)
    cmd = launch(exit=3)
    r = run_suite_on(sim, "node1", where, "--then-launch", *FAST, launch=cmd)
    assert r.failed == set(), r.describe()
    assert r.returncode == 3, r.describe()  # the launch's own status
    assert launched(r.output, 3), r.output[-3000:]
    line = " ".join(cmd)
    assert f"launch: {line}" in r.output
    assert (f"launch directory: {where}; .deepspeed_env read here: none; ssh as the launch "
            f"dials it") in r.output
    assert "PytestWarning" not in r.output and "junit_family" not in r.output, r.output[-3000:]
    for n in NODES:
        assert f"test_launch_files[{n}]" in r.passed
        got = r.properties[f"test_launch_files[{n}]"]["launch_files"]
        assert got == f"{where}/train.py {where}/ds_config.json", got
    summary = r.output[:r.output.index("[cluster] green: launching")].splitlines()
    assert f"The launch will work on 3 of 3 nodes: {line}" in summary[-3:], summary[-12:]


def test_a_breaking_line_in_the_launch_directorys_deepspeed_env_is_one_launch_wide_red(
        healthy_sim):
    """`.deepspeed_env` in the project directory (DeepSpeed reads it beside ~/.deepspeed_env,
    from `.` on the launcher) with a line that stops DeepSpeed's runner: one red, launch-wide,
    naming that file and line; no set of nodes is offered (no hostfile.healthy); --then-launch
    launches nothing; the real launch from there fails on every node."""
    sim = healthy_sim
    where = projects(sim, NODES)
    sim.set_env_file("node1", "proj/.deepspeed_env", "NCCL_DEBUG=INFO\nNCCL_IB_DISABLE\n")
    cmd = launch()
    r = run_suite_on(sim, "node1", where, "--then-launch", *FAST, launch=cmd)
    assert r.returncode == 1 and r.failed == {"test_deepspeed_env[node1]"}, r.describe()
    assert f".deepspeed_env read here: {where}/.deepspeed_env" in r.output
    verdict = verdict_of(r.output)
    cause = [ln for ln in verdict if "(test_deepspeed_env[node1]" in ln][0]
    assert cause.startswith("  launch-wide (node1): "), cause
    fix = verdict[verdict.index(cause) + 1]
    assert f"in {where}/.deepspeed_env (the launch directory's): line 2" in fix, fix
    assert "Launch now: no set of nodes launches until this is fixed" in r.output
    assert "--then-launch: nothing launched (the run is red)" in r.output
    assert not launched(r.output, 1) and "[cluster] green" not in r.output
    summary = json.loads(r.junit.with_name("summary.json").read_text())
    assert summary["healthy"]["file"] is None and not summary["healthy"]["launchable"]
    assert not r.junit.with_name("hostfile.healthy").exists()
    out = sim.ssh("node1", f"cd {where} && timeout -s KILL 100 {' '.join(cmd)} 2>&1",
                  timeout=110)
    said = out.stdout + out.stderr
    assert out.returncode != 0 and "not enough values to unpack" in said, said[-3000:]


@pytest.mark.parametrize("shape", ["not synced"])
def test_code_not_synced_is_one_red_per_node_naming_the_path(healthy_sim, shape):
    """node3 has no project directory (the code was never synced there); on node2 the script is
    missing and the config differs. One red each, naming the node and the paths; the
    rehearsal on node3 is blocked by it. The real launch from node1 fails (node3's rank cannot
    start, node1's waits for it); the launch line printed, the user's own command on
    hostfile.healthy, trains."""
    sim = healthy_sim
    other = CONFIG.replace("3", "32")
    where = projects(sim, ["node1", "node2"], node2={"ds_config.json": other})
    os.unlink(sim.node("node2").paths["home"] / "proj" / "train.py")
    port = random.randrange(30000, 31000)
    cmd = launch(port=port)
    r = run_suite_on(sim, "node1", where, *FAST, launch=cmd)
    assert r.failed == {"test_launch_files[node2]", "test_launch_files[node3]"}, r.describe()
    node3 = r.message("test_launch_files[node3]")
    assert f"node3: the launch directory {where} does not exist there" in node3, node3
    node2 = r.message("test_launch_files[node2]")
    assert f"{where}/train.py: missing here" in node2, node2
    assert (f"{where}/ds_config.json: {len(other)} bytes here, {len(CONFIG)} on the "
            f"launcher") in node2, node2
    assert r.properties["test_launch_rehearsal[node3]"]["blocked_by"] == \
        "test_launch_files[node3]", r.describe()
    healthy = r.junit.with_name("hostfile.healthy")
    assert healthy.read_text() == "node1 slots=1\n"
    last = " ".join(cmd).replace("--hostfile hostfile", f"--hostfile {healthy}")
    assert last in r.output.splitlines()[-3:], r.output[-2000:]
    failing = sim.ssh("node1", f"cd {where} && timeout -s KILL 60 "
                               f"{' '.join(launch(port=port + 1, init_timeout=8))} 2>&1",
                      timeout=70)
    assert failing.returncode != 0 and not launched(failing.stdout, 3), failing.stdout[-3000:]
    ok = sim.ssh("node1", f"cd {where} && timeout -s KILL 100 {last} 2>&1", timeout=110)
    assert ok.returncode == 0 and launched(ok.stdout, 1), ok.stdout[-3000:]
