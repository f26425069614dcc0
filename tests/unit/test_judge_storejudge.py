"""judge/storage/storejudge.py: D1 and D2's verdicts, on the facts node/storeprobe.py really
gives (run here, on directories of this test's own)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cluster_tests import node
from cluster_tests.core.cluster import BOOTSTRAP, PROBE_MARK
from cluster_tests.judge.storage import storejudge


def probe(section: str, read_only: Path | None = None, **params) -> object:
    """node/storeprobe.py's answer for `section`, run here as a node runs it (with `read_only`
    bind-mounted read-only over itself, in a mount namespace of its own)."""
    ro = ([] if read_only is None else
          ["unshare", "--mount", "--propagation", "private", "sh", "-c",
           'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"',
           "sh", str(read_only)])
    proc = subprocess.run([*ro, sys.executable, "-c", BOOTSTRAP,
                           json.dumps({"sections": [section], **params})],
                          input=node.source("storeprobe.py"), capture_output=True, timeout=60,
                          check=True)
    line = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith(PROBE_MARK)][-1]
    return json.loads(line[len(PROBE_MARK):])[section]


def test_a_writable_directory_with_room_is_fine(tmp_path):
    facts = storejudge.DirFacts.read(probe("dir", path=str(tmp_path)))
    assert facts.usable and facts.free_bytes and facts.mount is not None
    assert storejudge.judge_dir("node1", facts, min_free_gb=0.001) is None


def test_a_missing_directory_is_red_with_the_mount_fix(tmp_path):
    facts = storejudge.DirFacts.read(probe("dir", path=str(tmp_path / "ckpt")))
    p = storejudge.judge_dir("node3", facts, min_free_gb=1)
    assert p is not None and p.cause is storejudge.StorageCause.MISSING and p.nodes == ("node3",)
    assert p.item == "D1" and f"output directory {tmp_path / 'ckpt'} does not exist" in p.message
    assert p.fix.startswith(f"on node3: mount the shared volume at {tmp_path / 'ckpt'}")
    (tmp_path / "file").write_text("x")
    not_dir = storejudge.DirFacts.read(probe("dir", path=str(tmp_path / "file")))
    p = storejudge.judge_dir("node3", not_dir, 1)
    assert p is not None and p.cause is storejudge.StorageCause.NOT_A_DIRECTORY


def test_a_directory_on_a_read_only_mount_is_red(tmp_path):
    """The output directory remounted read-only (in a mount namespace of the probe's own: root
    writes anywhere else)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    facts = storejudge.DirFacts.read(probe("dir", path=str(ro), read_only=ro))
    assert facts.is_dir and not facts.writable
    p = storejudge.judge_dir("n", facts, 0)
    assert p is not None and p.cause is storejudge.StorageCause.NOT_WRITABLE
    assert "cannot create a file in" in p.message and "Read-only file system" in p.message
    assert "remount it read-write" in p.fix


def test_short_of_space_names_the_room_and_the_option(tmp_path):
    facts = storejudge.DirFacts.read(probe("dir", path=str(tmp_path)))
    assert facts.free_bytes is not None
    need = facts.free_bytes / 1e9 * 2 + 1
    p = storejudge.judge_dir("node2", facts, min_free_gb=need)
    assert p is not None and p.cause is storejudge.StorageCause.SHORT_OF_SPACE
    assert f"less than --min-free-gb {need:g}" in p.message and "--output-dir" in p.fix


def test_a_token_read_back_on_the_other_node_is_shared_and_a_missing_one_is_not(tmp_path):
    path, session = str(tmp_path), "s1"
    written = storejudge.Written.read(probe("write", path=path, session=session, owner="node1",
                                    token="abc"))
    assert written.ok
    back = storejudge.READ.read(probe("read", path=path, session=session, writers=["node1"]))
    here = storejudge.DirFacts.read(probe("dir", path=path))
    assert storejudge.judge_shared("node1", "node2", path, written, back["node1"], "abc", here,
                           here) is None
    # another node's private directory: the token is not there
    other = tmp_path / "elsewhere"
    other.mkdir()
    none = storejudge.READ.read(probe("read", path=str(other), session=session,
                              writers=["node1"]))["node1"]
    p = storejudge.judge_shared("node1", "node3", path, written, none, "abc", here, here)
    assert p is not None and p.cause is storejudge.StorageCause.NOT_SHARED
    assert p.nodes == ("node1", "node3")
    assert "node3 finds no such file" in p.message and p.fix.startswith("mount the same volume")
    stale = storejudge.ReadBack(True, "other")
    p = storejudge.judge_shared("node1", "node3", path, written, stale, "abc", here, here)
    assert p is not None and "node3 reads different content" in p.message
    removed = storejudge.Removed.read(probe("remove", path=path, session=session, owner="node1"))
    assert removed.removed


def test_an_answer_of_another_shape_is_refused():
    with pytest.raises(ValueError):
        storejudge.DirFacts.read(["not", "an", "object"])
