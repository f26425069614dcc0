"""E7 end to end (issue 28): what the first step builds, on the simulated cluster, against the
real `deepspeed --hostfile` launch of a job that calls `deepspeed.init_distributed` (on the CPU
accelerator that JIT-loads DeepSpeed's deepspeed_shm_comm op through ninja and torch's build
lock in the shared TORCH_EXTENSIONS_DIR, as a user's job does).  Every fault is real: a lock
file as a killed build leaves it, ninja hidden from one node by a bind mount in its mount
namespace, a real build holding the lock."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from suite import run_suite
from test_e2e_launch import train_script

pytest.importorskip("deepspeed")

OP = "deepspeed_shm_comm"
JIT = ("-k", "test_jit_ops")
#: the job: DeepSpeed's own init (which JIT-loads the op), then one all-reduce
TRAIN = train_script("deepspeed, ",
                     'deepspeed.init_distributed("gloo", timeout=datetime.timedelta(seconds=60))')


def _kill_tagged(tag: str) -> None:
    """End the processes (on any node: the sim shares this machine's pid namespace) whose
    command line names this launch's own script, by pid."""
    me = os.getpid()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if tag in cmd and int(pid) != me:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass


def real_launch(sim, timeout: int) -> str:
    """`deepspeed --hostfile` on the rank-0 node in /root, as the user starts it, with the job
    above under a name of its own; bounded by `timeout` s, after which every process of this
    launch on every node is killed.  Returns what it printed."""
    tag = f"ct_jit_job_{random.randrange(1 << 30)}.py"
    for nd in sim.nodes:
        sim.set_env_file(nd.name, tag, TRAIN)
    port = random.randrange(31000, 32000)
    cmd = (f"cd /root && timeout -s KILL {timeout} deepspeed --hostfile {sim.hostfile} "
           f"--master_addr node1 --master_port {port} {tag} 2>&1; echo CT_LAUNCH_EXIT=$?")
    try:
        res = sim.ssh("node1", cmd, timeout=timeout + 30)
        return res.stdout + res.stderr
    finally:
        _kill_tagged(tag)


def _fixes(result) -> str:
    return (result.junit.parent / "fixes.sh").read_text()


def test_stale_lock_red_once_the_launch_hangs_fixes_sh_removes_it_then_all_green(healthy_sim):
    sim = healthy_sim
    lock = sim.stale_jit_lock(OP, age_s=2 * 3600)
    # with the training jobs: T1 would wait on the lock until its deadline, so it does not start:
    # one red (E7 on node1), T1 everywhere and T2 blocked by it
    r = run_suite(sim, "-k", "test_jit_ops or test_train")
    t1 = {f"test_train_single_node[{nd.name}]" for nd in sim.nodes}
    assert r.failed == {"test_jit_ops[node1]"}, r.describe()
    for t in t1:
        assert r.properties[t]["blocked_by"] == "test_jit_ops[node1]", r.describe()
    assert r.outcomes["test_train_multi_node"] == "skipped"
    assert ("blocked by test_jit_ops[node1]: node3: deepspeed.init_distributed would wait on the "
            "stale JIT build lock") in r.message("test_train_single_node[node3]")
    print(f"run took {r.seconds:.1f}s")
    msg = r.message("test_jit_ops[node1]")
    assert f"stale JIT build lock of the {OP} op: {lock}" in msg, msg
    assert "shared by node1, node2, node3" in msg and "2.0 h old" in msg
    for n in ("node2", "node3"):
        assert r.outcomes[f"test_jit_ops[{n}]"] == "skipped"
        assert r.message(f"test_jit_ops[{n}]").startswith("blocked by test_jit_ops[node1]: ")
        assert r.properties[f"test_jit_ops[{n}]"]["blocked_by"] == "test_jit_ops[node1]"
    script = _fixes(r)
    assert "test_jit_ops[node1]" in script and str(lock) in script
    # the real launch waits on the lock: no rank gets past deepspeed.init_distributed
    out = real_launch(sim, timeout=30)
    assert "CT_LAUNCH_OK" not in out and "CT_LAUNCH_EXIT=137" in out, out[-3000:]
    assert lock.exists()
    # the fix script, run as the user runs it, removes it; the check and the launch are green
    fix = subprocess.run(["bash", str(r.junit.parent / "fixes.sh")], capture_output=True,
                         text=True, timeout=120, check=False)
    assert fix.returncode == 0, fix.stdout + fix.stderr
    assert not lock.exists()
    again = run_suite(sim, *JIT)
    assert again.returncode == 0 and again.passed == {f"test_jit_ops[{nd.name}]"
                                                      for nd in sim.nodes}, again.describe()
    props = again.properties["test_jit_ops[node2]"]
    assert "shared with node1, node3" in props["extensions_dir"]
    assert props["jit_ops"].startswith(OP)
    out = real_launch(sim, timeout=240)  # builds the op the first time (one node, the others wait)
    assert out.count("CT_LAUNCH_OK") == 3 and "CT_LAUNCH_EXIT=0" in out, out[-3000:]


def test_ninja_hidden_from_one_node_is_red_there_and_the_launch_fails_there(healthy_sim):
    sim = healthy_sim
    hidden = sim.hide_tool("node3", "ninja")
    assert hidden, "no ninja on the nodes' PATH"
    # (bash's `command -v` still names a file it cannot execute; running it is the test)
    seen = sim.ssh("node3", "ninja --version")
    assert seen.returncode != 0, (hidden, seen.stdout)
    assert sim.ssh("node2", "ninja --version").returncode == 0
    r = run_suite(sim, *JIT)
    assert r.failed == {"test_jit_ops[node3]"}, r.describe()
    msg = r.message("test_jit_ops[node3]")
    assert "`ninja` is not found on the PATH the launch's ranks get there" in msg, msg
    assert f"Unable to JIT load the {OP} op due to ninja not being installed" in msg
    out = real_launch(sim, timeout=30)
    said = [ln for ln in out.splitlines()
            if f"Unable to JIT load the {OP} op due to ninja not being installed" in ln]
    assert said and all(ln.startswith("node3:") for ln in said), out[-3000:]
    assert "CT_LAUNCH_EXIT=0" not in out


def test_lock_held_by_a_live_build_is_not_red(healthy_sim, tmp_path):
    """A real build of the op in a fresh extensions directory that .deepspeed_env on the rank-0
    node gives every rank: its lock is held while the suite runs: a warning, no red."""
    sim = healthy_sim
    ext = sim.shared_dir / f"ext-live-{random.randrange(1 << 30)}"
    ext.mkdir()
    sim.set_env_file("node1", ".deepspeed_env", f"TORCH_EXTENSIONS_DIR={ext}\n")
    build = ("from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder as B; B().load()")
    proc = sim.popen("node2", ["bash", "-c", f"source ~/.bashrc; TORCH_EXTENSIONS_DIR={ext} "
                                             f"exec python3 -c '{build}'"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
    try:
        lock = ext / OP / "lock"
        deadline = time.monotonic() + 60
        while not lock.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert lock.exists(), "the build never took its lock"
        r = run_suite(sim, *JIT)
        assert r.returncode == 0 and not r.failed, r.describe()
        assert f"a JIT build of {OP} is running" in r.output and "on node2" in r.output
        assert str(ext) in r.properties["test_jit_ops[node1]"]["extensions_dir"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        subprocess.run(["rm", "-rf", str(ext)], check=False)
