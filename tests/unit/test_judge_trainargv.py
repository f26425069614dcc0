"""T1/T2: the launcher command lines (judge/training/trainargv.py) of a node's job and of the
multi-node launch."""

from __future__ import annotations

import pytest

from cluster_tests.judge.training import trainargv as targv


def test_single_node_argv() -> None:
    argv = targv.single_node_argv("/v/bin/deepspeed", "/s/train_smoke.py", 8, 29611,
                                  ["--steps", "5"])
    assert argv == [
        "/v/bin/deepspeed", "--hostfile", targv.NO_HOSTFILE, "--num_gpus", "8",
        "--master_port", "29611", "/s/train_smoke.py", "--steps", "5",
    ]  # fmt: skip
    argv = targv.single_node_argv("/usr/bin/python3", "x.py", 2, 1, [])
    assert argv[:4] == ["/usr/bin/python3", "-u", "-m", "deepspeed.launcher.runner"]
    with pytest.raises(ValueError):
        targv.single_node_argv("deepspeed", "x.py", 0, 1, [])


def test_multi_node_argv() -> None:
    argv = targv.multi_node_argv(
        "deepspeed",
        "/h",
        "10.0.0.1",
        29500,
        "t.py",
        include="node1@node2:0,1",
        extra=["--steps", "5"],
    )
    assert argv == [
        "deepspeed", "--hostfile", "/h", "--master_addr", "10.0.0.1", "--master_port", "29500",
        "--include", "node1@node2:0,1", "t.py", "--steps", "5",
    ]  # fmt: skip
    assert "--exclude" in targv.multi_node_argv("ds", "/h", "a", 1, "t.py", exclude="node3")
    # no --master_addr the user did not give: DeepSpeed derives it as in the user's launch
    assert targv.multi_node_argv("ds", "/h", None, 1, "t.py") == [
        "ds", "--hostfile", "/h", "--master_port", "1", "t.py"]
    with pytest.raises(ValueError):
        targv.multi_node_argv("ds", "/h", "a", 1, "t.py", include="a", exclude="b")
