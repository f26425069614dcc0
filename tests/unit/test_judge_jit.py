"""judge/env/jit.py (CHECKLIST E7) on facts dicts shaped as node/rehearse.py's `jit`."""

from __future__ import annotations

import subprocess
from typing import Any

from cluster_tests.judge.env import jit as jj

ORDER = ["node1", "node2", "node3"]
EXT = "/shared/torch_extensions"
LOCK = f"{EXT}/deepspeed_shm_comm/lock"


def _facts(*, locks: list[dict[str, Any]] | None = None, ninja: bool = True, cxx: bool = True,
           ext_ino: int = 7, writable: bool = True, free: int = 50 << 30,
           ops: list[dict[str, Any]] | None = None, entries: list[str] | None = None,
           triton_installed: bool = False, triton_writable: bool = True) -> dict[str, Any]:
    return {
        "accelerator": "cpu",
        "ops": ops if ops is not None else [
            {"name": "deepspeed_shm_comm", "builder": "ShareMemCommBuilder",
             "compatible": True, "prebuilt": False}],
        "ext": {"path": EXT, "exists": True, "checked": EXT, "ino": ext_ino, "ctime_ns": 5,
                "writable": writable, "free_bytes": free, "source": "TORCH_EXTENSIONS_DIR",
                "entries": entries if entries is not None else ["deepspeed_shm_comm"],
                **({} if writable else {"write_error": "[Errno 13] Permission denied"})},
        "locks": locks or [],
        "triton": {"path": "/root/.triton/cache", "exists": False, "writable": triton_writable,
                   "installed": triton_installed, "source": "Triton's default"},
        "ninja": ({"name": "ninja", "path": "/usr/bin/ninja", "ok": True, "version": "1.11.1"}
                  if ninja else {"name": "ninja", "path": None, "ok": False,
                                 "error": "[Errno 2] No such file or directory: 'ninja'"}),
        "cxx": ({"name": "c++", "path": "/usr/bin/c++", "ok": True, "version": "c++ 12.2.0"}
                if cxx else {"name": "c++", "path": None, "ok": False, "from_env": False,
                             "error": "[Errno 2] No such file or directory: 'c++'"}),
        "path": "/venv/bin:/usr/bin",
    }


def _lock(processes: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    return {"op": "deepspeed_shm_comm", "path": LOCK, "age_s": 7200.0, "ino": 4242,
            "mtime_ns": 99, "activity_age_s": 7200.0, "processes": processes or [], **kw}


def test_healthy_cluster_is_green_and_reports_the_directory_as_shared():
    out = jj.judge_jit({n: _facts() for n in ORDER}, ORDER)
    assert all(not v.problems and not v.warnings and v.blocked_by is None for v in out.values())
    assert "shared with node2, node3" in out["node1"].facts["extensions_dir"]
    assert out["node2"].facts["jit_ops"] == "deepspeed_shm_comm"


def test_stale_shared_lock_is_red_once_and_blocks_the_other_nodes():
    out = jj.judge_jit({n: _facts(locks=[_lock()]) for n in ORDER}, ORDER)
    red = out["node1"]
    assert len(red.problems) == 1 and "stale JIT build lock of the deepspeed_shm_comm op" in \
        red.problems[0]
    assert LOCK in red.problems[0] and "2.0 h old" in red.problems[0]
    assert "shared by node1, node2, node3" in red.problems[0]
    assert [f.where for f in red.fixes] == ["node1"]
    for n in ("node2", "node3"):
        assert not out[n].problems and out[n].blocked_by == "node1"
        assert LOCK in out[n].blocked_text


def test_the_fix_removes_only_the_very_lock_found(tmp_path):
    lock = tmp_path / "op" / "lock"
    lock.parent.mkdir()
    lock.write_text("")
    fix = jj.stale_lock_fix("node1", {"op": "op", "path": str(lock), "ino": lock.stat().st_ino})
    # a newer lock (another inode) is left alone
    other = jj.stale_lock_fix("node1", {"op": "op", "path": str(lock), "ino": 1})
    subprocess.run(["sh", "-c", other.commands[0]], check=True)
    assert lock.exists()
    for _ in range(2):  # idempotent
        subprocess.run(["sh", "-c", fix.commands[0]], check=True)
    assert not lock.exists()


def test_lock_held_by_a_live_build_anywhere_is_a_warning_not_red():
    holder = {"pid": 77, "how": "holds", "cmd": "python train.py", "cwd": "/job"}
    facts = {"node1": _facts(locks=[_lock()]), "node2": _facts(locks=[_lock([holder])]),
             "node3": _facts(locks=[_lock()])}
    out = jj.judge_jit(facts, ORDER)
    assert all(not v.problems and v.blocked_by is None for v in out.values())
    assert "pid 77 on node2 (holds it open)" in out["node1"].warnings[0]
    assert not out["node2"].warnings and not out["node3"].warnings


def test_local_locks_are_judged_per_node():
    facts = {"node1": _facts(ext_ino=1), "node2": _facts(ext_ino=2, locks=[_lock(ino=1)]),
             "node3": _facts(ext_ino=3, locks=[_lock(ino=2)])}
    out = jj.judge_jit(facts, ORDER)
    assert not out["node1"].problems
    assert out["node2"].problems and out["node3"].problems
    assert out["node2"].blocked_by is None and "not shared" in out["node2"].facts["extensions_dir"]


def test_missing_ninja_or_compiler_is_red_on_that_node_only():
    facts = {"node1": _facts(), "node2": _facts(ninja=False), "node3": _facts(cxx=False)}
    out = jj.judge_jit(facts, ORDER)
    assert not out["node1"].problems
    assert "Unable to JIT load the deepspeed_shm_comm op due to ninja not being installed" in \
        out["node2"].problems[0]
    assert "-m pip install ninja" in out["node2"].problems[0]
    assert "`c++` (torch's default without CXX), does not run there" in out["node3"].problems[0]


def test_no_toolchain_needed_when_nothing_is_jit_loaded():
    prebuilt = [{"name": "deepspeed_shm_comm", "compatible": True, "prebuilt": True}]
    incompatible = [{"name": "deepspeed_shm_comm", "compatible": False, "prebuilt": False}]
    for ops in (prebuilt, incompatible):
        out = jj.judge_jit({"node1": _facts(ninja=False, cxx=False, ops=ops, entries=[])},
                           ["node1"])
        assert out["node1"].problems == []
    # an op built before (compatible or not) is loaded again: ninja is needed for it
    out = jj.judge_jit({"node1": _facts(ninja=False, ops=incompatible, entries=["fused_adam"])},
                       ["node1"])
    assert "JIT-load fused_adam" in out["node1"].problems[0]


def test_unwritable_or_full_extensions_dir_and_unwritable_triton_cache():
    out = jj.judge_jit({"node1": _facts(writable=False), "node2": _facts(free=10 << 20),
                        "node3": _facts(triton_installed=True, triton_writable=False)}, ORDER)
    assert "takes no file ([Errno 13] Permission denied" in out["node1"].problems[0]
    assert "10 MiB free, below 256 MiB" in out["node2"].problems[0]
    assert "Triton is installed and its cache directory" in out["node3"].problems[0]


def test_blocked_node_with_a_problem_of_its_own_fails_and_names_the_blocker():
    facts = {n: _facts(locks=[_lock()], ninja=(n != "node2")) for n in ORDER}
    out = jj.judge_jit(facts, ORDER)
    assert out["node2"].problems and out["node2"].blocked_by == "node1"
    assert out["node2"].fixes == []


def test_the_smoke_job_waits_only_on_a_stale_lock_of_an_op_deepspeed_loads_itself():
    facts = {n: _facts(locks=[_lock()]) for n in ORDER}
    why = jj.smoke_waits_on(facts, ORDER, "node3")
    assert why is not None and "see test_jit_ops[node1]" in why and LOCK in why
    other = _lock(op="cpu_adam", path=f"{EXT}/cpu_adam/lock")
    assert jj.smoke_waits_on({n: _facts(locks=[other]) for n in ORDER}, ORDER, "node1") is None
    live = _lock([{"pid": 1, "how": "holds", "cmd": "python"}])
    assert jj.smoke_waits_on({n: _facts(locks=[live]) for n in ORDER}, ORDER, "node1") is None
