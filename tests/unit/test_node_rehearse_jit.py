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

from cluster_tests.measure.localtrain import SCRIPT_PATH

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


def test_tools_and_directories(node, tmp_path):
    missing = node["_tool"](["ct-no-such-tool"])
    assert missing["ok"] is False and missing["path"] is None
    d = node["_dir_facts"](str(tmp_path / "not" / "yet"))
    assert d["exists"] is False and d["checked"] == str(tmp_path) and d["writable"] is True
    assert list(tmp_path.iterdir()) == []  # the write test left nothing
