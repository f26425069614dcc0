"""judge/env/jit.py (CHECKLIST E7) on the facts node/rehearse.py really reports, run here as a
node runs it: in a shared extensions directory holding a stale build lock (a plain file two
hours old, as a killed build leaves it), and once more with no tool on its PATH and that
directory mounted read-only. Each node of a cluster is one of those reports, or one changed
where a real cluster differs (another inode, a live holder)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from pathlib import Path

import envnode
import pytest

from cluster_tests.judge.env import jit as jj
from cluster_tests.judge.env.jit import Holder, JitCause, JitFacts
from cluster_tests.judge.env.launchlegs import LegReport

ORDER = ["node1", "node2", "node3"]
OP = "deepspeed_shm_comm"


def _jit(cwd: Path, ext: Path, **kw) -> JitFacts:
    out = envnode.rehearse(cwd, env={"TORCH_EXTENSIONS_DIR": str(ext), "DS_ACCELERATOR": "cpu",
                                     **kw.pop("env", {})}, **kw)
    report = LegReport.read(envnode.last(out, envnode.REHEARSAL_MARK))
    assert report.jit is not None
    return report.jit


@pytest.fixture(scope="module")
def ext(tmp_path_factory) -> Path:
    """The shared extensions directory: the op's stale lock, two hours old."""
    root = tmp_path_factory.mktemp("ext")
    lock = root / OP / "lock"
    lock.parent.mkdir()
    lock.write_text("")
    old = time.time() - 2 * 3600
    os.utime(lock, (old, old))
    return root


@pytest.fixture(scope="module")
def stale(ext, tmp_path_factory) -> JitFacts:
    """A healthy node's facts, but for the stale lock it sees."""
    return _jit(tmp_path_factory.mktemp("launch"), ext)


@pytest.fixture(scope="module")
def broken(ext, tmp_path_factory) -> JitFacts:
    """No ninja or compiler on the ranks' PATH, and the extensions directory read-only."""
    return _jit(tmp_path_factory.mktemp("launch"), ext, env={"PATH": "/nonexistent"},
                read_only=ext)


def _healthy(facts: JitFacts) -> JitFacts:
    return dataclasses.replace(facts, locks=())


def test_the_facts_are_what_the_node_found(stale, broken, ext):
    assert [op.name for op in stale.ops] == [OP] and stale.to_load() == [OP]
    assert stale.ext.path == str(ext) and stale.ext.source == "TORCH_EXTENSIONS_DIR"
    assert stale.ext.writable and stale.ninja.ok and stale.cxx.ok
    [lock] = stale.locks
    assert lock.path == str(ext / OP / "lock") and not lock.processes
    assert 7000 < (lock.age_s or 0) < 8000
    assert broken.locks[0].key == lock.key  # one file, seen by both
    assert not broken.ninja.ok and not broken.cxx.ok and not broken.ext.writable


def test_healthy_cluster_is_green_and_reports_the_directory_as_shared(stale):
    out = jj.judge_jit({n: _healthy(stale) for n in ORDER}, ORDER)
    assert all(not v.findings and not v.warnings and v.blocked_by is None for v in out.values())
    assert "shared with node2, node3" in out["node1"].facts["extensions_dir"]
    assert out["node2"].facts["jit_ops"] == OP
    assert jj.jit_problem("node1", out) is None


def test_stale_shared_lock_is_red_once_and_blocks_the_other_nodes(stale, ext):
    out = jj.judge_jit({n: stale for n in ORDER}, ORDER)
    lock = str(ext / OP / "lock")
    red = jj.jit_problem("node1", out)
    assert red is not None and red.cause is JitCause.STALE_LOCK and red.item == "E7"
    assert red.message.startswith(f"node1: stale JIT build lock of the {OP} op: {lock} ")
    assert "2.0 h old" in red.message and "shared by node1, node2, node3" in red.message
    assert red.fix.startswith(f"on node1: rm -f {lock} (safe now")
    assert [f.where for f in red.fixes] == ["node1"] and red.breaks == ("node2", "node3")
    for n in ("node2", "node3"):
        assert not out[n].findings and out[n].blocked_by == "node1"
        assert jj.jit_problem(n, out) is None and lock in out[n].blocked_text
        assert jj.blocked_line(out[n]).startswith("blocked by test_jit_ops[node1]: ")


def test_the_fix_removes_only_the_very_lock_found(stale, tmp_path):
    lock = tmp_path / "op" / "lock"
    lock.parent.mkdir()
    lock.write_text("")
    found = dataclasses.replace(stale.locks[0], path=str(lock), ino=lock.stat().st_ino)
    fix = jj.stale_lock_fix("node1", found)
    # a newer lock (another inode) is left alone
    other = jj.stale_lock_fix("node1", dataclasses.replace(found, ino=1))
    subprocess.run(["sh", "-c", other.commands[0]], check=True)
    assert lock.exists()
    for _ in range(2):  # idempotent
        subprocess.run(["sh", "-c", fix.commands[0]], check=True)
    assert not lock.exists()


def test_lock_held_by_a_live_build_anywhere_is_a_warning_not_red(stale):
    held = dataclasses.replace(stale.locks[0], processes=(Holder(77, True, "python train.py"),))
    facts = {"node1": stale, "node2": dataclasses.replace(stale, locks=(held,)), "node3": stale}
    out = jj.judge_jit(facts, ORDER)
    assert all(not v.findings and v.blocked_by is None for v in out.values())
    assert "pid 77 on node2 (holds it open)" in out["node1"].warnings[0]
    assert not out["node2"].warnings and not out["node3"].warnings


def test_local_locks_are_judged_per_node(stale):
    def local(ino: int) -> JitFacts:
        lock = dataclasses.replace(stale.locks[0], ino=ino)
        return dataclasses.replace(stale, ext=dataclasses.replace(stale.ext, ino=ino),
                                   locks=(lock,))

    facts = {"node1": _healthy(local(1)), "node2": local(2), "node3": local(3)}
    out = jj.judge_jit(facts, ORDER)
    assert not out["node1"].findings
    assert out["node2"].findings and out["node3"].findings
    assert out["node2"].blocked_by is None and "not shared" in out["node2"].facts["extensions_dir"]


def test_missing_ninja_or_compiler_is_red_on_that_node_only(stale, broken):
    facts = {"node1": _healthy(stale), "node2": dataclasses.replace(stale, locks=(),
                                                                   ninja=broken.ninja),
             "node3": dataclasses.replace(stale, locks=(), cxx=broken.cxx)}
    out = jj.judge_jit(facts, ORDER, python="/venv/bin/python")
    assert not out["node1"].findings
    ninja = jj.jit_problem("node2", out)
    assert ninja is not None and ninja.cause is JitCause.NO_NINJA
    assert f"Unable to JIT load the {OP} op due to ninja not being installed" in ninja.message
    assert ninja.fix == ("on node2: /venv/bin/python -m pip install ninja (or apt-get install "
                         "ninja-build), so that it is on that PATH")
    cxx = jj.jit_problem("node3", out)
    assert cxx is not None and cxx.cause is JitCause.NO_COMPILER
    assert "`c++` (torch's default without CXX), does not run there" in cxx.message


def test_a_node_with_nothing_usable_has_one_red_with_every_fix(stale, broken):
    """No ninja, no compiler, a read-only extensions directory, and the shared stale lock
    another node reports: one red naming all of it and the red it is also blocked by."""
    out = jj.judge_jit({"node1": stale, "node2": broken, "node3": stale}, ORDER)
    red = jj.jit_problem("node2", out)
    assert red is not None and [f.cause for f in out["node2"].findings] == [
        JitCause.NO_NINJA, JitCause.NO_COMPILER, JitCause.EXT_DIR_UNWRITABLE]
    assert "takes no file ([Errno 30] Read-only file system" in red.message
    assert red.message.endswith("node2: also blocked by test_jit_ops[node1]: the stale JIT "
                                f"build lock {stale.locks[0].path} of {OP}, in the extensions "
                                f"directory this node shares")
    assert red.fix.count("on node2: ") == 1 and "install g++" in red.fix
    assert "set TORCH_EXTENSIONS_DIR to a writable directory" in red.fix
    assert out["node2"].fixes == [] and out["node2"].blocked_by == "node1"


def test_no_toolchain_needed_when_nothing_is_jit_loaded(broken):
    op = broken.ops[0]
    nothing = dataclasses.replace(broken.ext, entries=())
    for ops in ((dataclasses.replace(op, prebuilt=True),),
                (dataclasses.replace(op, compatible=False),)):
        facts = dataclasses.replace(broken, ops=ops, ext=nothing, locks=())
        assert jj.judge_jit({"node1": facts}, ["node1"])["node1"].findings == []
    # an op built before (compatible or not) is loaded again: ninja is needed for it
    before = dataclasses.replace(broken, ops=(dataclasses.replace(op, compatible=False),),
                                 ext=dataclasses.replace(broken.ext, entries=("fused_adam",)),
                                 locks=())
    [ninja, *_] = jj.judge_jit({"node1": before}, ["node1"])["node1"].findings
    assert "JIT-load fused_adam" in ninja.text


def test_full_extensions_dir_and_unwritable_triton_cache(stale):
    full = dataclasses.replace(stale, locks=(),
                               ext=dataclasses.replace(stale.ext, free_bytes=10 << 20))
    triton = dataclasses.replace(stale, locks=(), triton=dataclasses.replace(
        stale.triton, installed=True, writable=False, write_error="[Errno 13] Permission denied"))
    out = jj.judge_jit({"node1": full, "node2": triton}, ORDER[:2])
    [small] = out["node1"].findings
    assert small.cause is JitCause.EXT_DIR_FULL and "10 MiB free, below 256 MiB" in small.text
    [tri] = out["node2"].findings
    assert tri.cause is JitCause.TRITON_CACHE_UNWRITABLE
    assert "Triton is installed and its cache directory" in tri.text


def test_the_smoke_job_waits_only_on_a_stale_lock_of_an_op_deepspeed_loads_itself(stale, ext):
    why = jj.smoke_waits_on({n: stale for n in ORDER}, ORDER, "node3")
    assert why is not None and "see test_jit_ops[node1]" in why and str(ext / OP) in why
    assert jj.stale_lock_owner({n: stale for n in ORDER}, ORDER, "node3") == ("node1", why)
    other = dataclasses.replace(stale, locks=(dataclasses.replace(
        stale.locks[0], op="cpu_adam", path=str(ext / "cpu_adam" / "lock")),))
    assert jj.smoke_waits_on({n: other for n in ORDER}, ORDER, "node1") is None
    live = dataclasses.replace(stale, locks=(dataclasses.replace(
        stale.locks[0], processes=(Holder(1, True, "python"),)),))
    assert jj.smoke_waits_on({n: live for n in ORDER}, ORDER, "node1") is None
