"""node/rehearse.py's E7 facts, for real on this machine: torch's own FileBaton holding a lock
in a child process is seen as held (by its fd), a lock file alone is not, a process running in
the op's directory counts as building there; and the extensions root is torch's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fixtures.localtrain import SCRIPT_PATH

REHEARSE = SCRIPT_PATH.parent / "rehearse.py"


@pytest.fixture(scope="module")
def node() -> dict[str, Any]:
    """rehearse.py's functions, without running its main()."""
    source = REHEARSE.read_text()
    assert source.rstrip().endswith("main()")
    ns: dict[str, Any] = {"__name__": "ct_rehearse"}
    exec(compile(source.rstrip()[: -len("main()")], str(REHEARSE), "exec"), ns)  # noqa: S102
    return ns


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists()


def test_a_held_lock_has_its_holder_a_left_one_has_none(node, tmp_path):
    held, left, building = (tmp_path / n for n in ("held_op", "left_op", "building_op"))
    for d in (held, left, building):
        d.mkdir()
    (left / "lock").write_text("")
    (building / "lock").write_text("")
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time; from torch.utils.file_baton import FileBaton; "
                               "b = FileBaton(sys.argv[1]); assert b.try_acquire(); "
                               "time.sleep(60)", str(held / "lock")])
    builder = subprocess.Popen(["sleep", "60"], cwd=building)
    try:
        _wait_for(held / "lock")
        entries, locks = node["_locks"](str(tmp_path))
        by_op = {x["op"]: x for x in locks}
        assert sorted(entries) == ["building_op", "held_op", "left_op"]
        assert [p["pid"] for p in by_op["held_op"]["processes"]] == [holder.pid]
        assert by_op["held_op"]["processes"][0]["how"] == "holds"
        assert by_op["left_op"]["processes"] == []
        assert [(p["pid"], p["how"]) for p in by_op["building_op"]["processes"]] == \
            [(builder.pid, "builds")]
        assert by_op["left_op"]["ino"] == os.stat(left / "lock").st_ino
    finally:
        for p in (holder, builder):
            p.kill()
            p.wait()


def test_extensions_root_is_torchs(node, monkeypatch, tmp_path):
    from torch.utils import cpp_extension

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/x/ext")
    assert node["_ext_root"]() == ("/x/ext", "TORCH_EXTENSIONS_DIR")
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    root, source = node["_ext_root"]()
    # torch's own answer for an op (it creates the directory: under the temporary cache home)
    built = cpp_extension._get_build_directory("ct_probe_op", verbose=False)
    assert os.path.dirname(built) == root and source == "torch's default"
    assert root.startswith(str(tmp_path))


_FRESH = """
import json, sys
ns = {"__name__": "ct_rehearse"}
source = open(sys.argv[1]).read().rstrip()
exec(compile(source[: -len("main()")], sys.argv[1], "exec"), ns)
if sys.argv[2] == "root":
    import torch
    if sys.argv[3] == "changed":
        ns["BUILD_ROOT_BODY"] = "return something_else()"
    got = ns["_default_build_root"](torch)
    imported = "torch.utils.cpp_extension" in sys.modules
    from torch.utils.cpp_extension import get_default_build_root
    print(json.dumps([got, get_default_build_root(), imported]))
else:
    import deepspeed.ops
    from deepspeed.ops.op_builder.all_ops import ALL_OPS
    got = {name: ns["_compatible"](name) for name in ALL_OPS}
    probed_all = "__compatible_ops__" in deepspeed.ops.__dict__
    print(json.dumps([got, deepspeed.ops.__compatible_ops__, probed_all]))
"""


def _fresh(*args: str) -> Any:
    """Run rehearse.py's functions in a new interpreter (nothing imported yet, as on a node)."""
    import json

    proc = subprocess.run([sys.executable, "-c", _FRESH, str(REHEARSE), *args],
                          capture_output=True, text=True, check=True, timeout=120)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_build_root_is_torchs_without_importing_its_builder():
    got, torchs, imported = _fresh("root", "as-is")
    assert got == torchs and not imported  # setuptools stays out of every node's rehearsal
    # a torch whose function no longer has the known body: the function itself answers
    got, torchs, imported = _fresh("root", "changed")
    assert got == torchs and imported


def test_each_ops_compatibility_is_deepspeeds_without_probing_every_op():
    got, deepspeeds, probed_all = _fresh("ops")
    assert not probed_all  # async_io's compiler probe did not run for the other ops' answers
    assert got == {name: bool(deepspeeds.get(name, False)) for name in got}


def test_tools_and_directories(node, tmp_path):
    missing = node["_tool"](["ct-no-such-tool"])
    assert missing["ok"] is False and missing["path"] is None
    d = node["_dir_facts"](str(tmp_path / "not" / "yet"))
    assert d["exists"] is False and d["checked"] == str(tmp_path) and d["writable"] is True
    assert list(tmp_path.iterdir()) == []  # the write test left nothing


# -- the smoke job's own locks (T1/T2): a job killed mid-build leaves no stale lock behind

_HOLD = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("ct_train_smoke", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
m.record_jit_locks()
from torch.utils.cpp_extension import FileBaton   # the name torch's builder uses
b = FileBaton(sys.argv[2]); assert b.try_acquire()
if sys.argv[3] == "release":
    b.release()
else:
    print("held", flush=True); time.sleep(60)
"""


def test_the_cleanup_removes_the_lock_a_killed_job_held_and_only_that(tmp_path):
    from cluster_tests.measure import trainruns as trr

    run_dir, ext = tmp_path / "ct-train-x", tmp_path / "ext" / "op"
    run_dir.mkdir()
    ext.mkdir(parents=True)
    lock = ext / "lock"
    done = subprocess.run([sys.executable, "-c", _HOLD, str(SCRIPT_PATH), str(lock), "release"],
                          cwd=run_dir, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert not lock.exists() and list(run_dir.iterdir()) == []  # released: no record left
    job = subprocess.Popen([sys.executable, "-c", _HOLD, str(SCRIPT_PATH), str(lock), "hold"],
                           cwd=run_dir, stdout=subprocess.PIPE, text=True)
    assert job.stdout is not None and job.stdout.readline().strip() == "held"
    job.kill()
    job.wait()
    assert lock.exists()  # what a killed build leaves
    other = tmp_path / "ext" / "other_lock"
    other.write_text("")
    records = list(run_dir.glob(".ct_jit_lock.*"))
    assert len(records) == 1
    # a lock that is not the recorded file (another inode) is left alone
    fake = run_dir / ".ct_jit_lock.1.1"
    fake.write_text(f"{other.stat().st_ino + 1}\n{other}\n")
    subprocess.run(["sh", "-c", f"d={tmp_path}/ct-train-*; " + trr.RELEASE_KILLED_LOCKS],
                   check=True)
    assert not lock.exists() and other.exists()

