"""judge/env/launchfiles.py: E8's verdict on the launch directory and the files the launch names,
on the facts node/envprobe.py's `launchfiles` really gives (run here, on project directories of
this test's own: one the launcher's, one a node's), and which words of a launch command are
its files (read with DeepSpeed's own parser)."""

from __future__ import annotations

import shutil
from pathlib import Path

import envnode
import pytest

from cluster_tests.core.testids import Scope
from cluster_tests.judge.env import launchfiles
from cluster_tests.judge.env.launchfiles import LaunchFilesCause
from cluster_tests.judge.hostfile import launchargs as la

COMMAND = ("deepspeed --hostfile hostfile train.py --deepspeed ds_config.json --tokenizer tok "
           "--output_dir out --lr 0.1 --data=data.txt --missing nowhere.json")


def project(root: Path) -> Path:
    """A project directory: the script, a DeepSpeed config, a tokenizer directory, a data file,
    and an output directory of an earlier run."""
    root.mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "ds_config.json").write_text('{"train_batch_size": 8}\n')
    (root / "tok" / "sub").mkdir(parents=True)
    (root / "tok" / "vocab.json").write_text('{"a": 1}\n')
    (root / "tok" / "sub" / "merges.txt").write_text("a b\n")
    (root / "data.txt").write_text("x" * 100)
    (root / "out").mkdir()
    (root / "out" / "ckpt-1").write_text("weights")
    return root


def facts(launch_dir: Path, paths: list[str], digest_max: int = launchfiles.DIGEST_MAX
          ) -> launchfiles.LaunchFiles:
    return launchfiles.LaunchFiles.read(envnode.envprobe(
        "launchfiles", launch_dir=str(launch_dir), paths=paths, digest_max=digest_max,
        entries_max=launchfiles.ENTRIES_MAX))


@pytest.fixture
def launcher(tmp_path: Path) -> Path:
    return project(tmp_path / "launcher" / "proj")


def paths_of(launch_dir: Path) -> list[str]:
    cmd = la.parse_command(COMMAND.split())
    return [c.path for c in launchfiles.candidates(cmd, str(launch_dir))]


def test_the_script_and_the_files_the_command_names_not_its_outputs(launcher: Path) -> None:
    got = paths_of(launcher)
    assert got == [str(launcher / p) for p in ("train.py", "ds_config.json", "tok", "data.txt")]
    cmd = la.parse_command(COMMAND.split())
    flags = {c.path: c.flag for c in launchfiles.candidates(cmd, str(launcher))}
    assert flags[str(launcher / "tok")] == "--tokenizer" and flags[str(launcher / "train.py")] == ""
    # not the launch directory, nor one above it, nor a system directory
    odd = la.parse_command(["deepspeed", "t.py", "--root", ".", "--up", "..", "--tmp", "/tmp"])
    assert [c.path for c in launchfiles.candidates(odd, str(launcher))] == [str(launcher / "t.py")]


def test_the_same_copy_on_a_node_is_green(launcher: Path, tmp_path: Path) -> None:
    paths = paths_of(launcher)
    mine = facts(launcher, paths)
    assert mine.dir_ok and mine.paths[str(launcher / "train.py")].kind == "file"
    tok = mine.paths[str(launcher / "tok")]
    assert tok.kind == "dir" and tok.count == 2
    assert [e.path for e in tok.listing] == ["vocab.json", "sub/merges.txt"]
    assert launchfiles.judge_launch_files("node2", mine, mine, str(launcher / "train.py"),
                                           "node1") is None


def test_a_missing_launch_directory_is_red_with_its_path(launcher: Path, tmp_path: Path) -> None:
    ref = facts(launcher, paths_of(launcher))
    gone = facts(tmp_path / "elsewhere" / "proj", [])
    p = launchfiles.judge_launch_files("node3", gone, ref, str(launcher / "train.py"), "node1")
    assert p is not None and p.cause is LaunchFilesCause.DIR_MISSING and p.nodes == ("node3",)
    assert p.item == "E8" and "the launch directory" in p.message and "does not exist" in p.message
    assert "rsync -a" in p.fix and "node3" in p.fix


def test_a_file_that_differs_or_is_missing_names_the_node_and_the_path(
        launcher: Path, tmp_path: Path) -> None:
    paths = paths_of(launcher)
    ref = facts(launcher, paths)
    node = tmp_path / "node2"
    shutil.copytree(launcher.parent, node)
    # a node has the same paths (the same directory on every node): move its copy there
    (node / "proj" / "ds_config.json").write_text('{"train_batch_size": 9}\n')  # same size
    (node / "proj" / "tok" / "vocab.json").write_text('{"a": 12}\n')
    (node / "proj" / "data.txt").unlink()
    shutil.rmtree(launcher.parent)
    shutil.copytree(node, launcher.parent)
    mine = facts(launcher, paths)
    p = launchfiles.judge_launch_files("node2", mine, ref, str(launcher / "train.py"), "node1")
    assert p is not None and p.cause is LaunchFilesCause.FILES_MISSING and p.item == "E8"
    lines = p.message.splitlines()
    assert lines[0].startswith("node2: the launch's files are not the launcher's there")
    assert f"  - {launcher / 'data.txt'}: missing here (a file of 100 bytes" in lines[1]
    assert f"{launcher / 'ds_config.json'}: same size, other content (sha256" in p.message
    assert f"{launcher / 'tok'}: vocab.json: 10 bytes here, 9 on the launcher" in p.message
    assert "train.py" not in p.message  # the same script
    assert p.fix.startswith("copy them from the launcher (the same paths): rsync -aR ")
    assert f"{launcher / 'data.txt'} " in p.fix and "node2:/" in p.fix


def test_a_large_file_is_compared_by_size_and_a_missing_script_everywhere(
        launcher: Path, tmp_path: Path) -> None:
    paths = paths_of(launcher)
    ref = facts(launcher, paths, digest_max=10)
    assert ref.paths[str(launcher / "data.txt")].sha256 is None
    (launcher / "data.txt").write_text("y" * 100)  # other content, same size: not seen
    same_size = facts(launcher, paths, digest_max=10)
    assert launchfiles.judge_launch_files("n", same_size, ref, None, "node1") is None
    # the launcher lacks the directory (the launch starts elsewhere): the script must be there
    (launcher / "train.py").unlink()
    p = launchfiles.judge_launch_files("n", facts(launcher, paths), None,
                                       str(launcher / "train.py"), "node1")
    assert p is not None and p.cause is LaunchFilesCause.FILES_MISSING
    assert f"{launcher / 'train.py'}: the script, missing here" in p.message
    # the launcher lacks it too (a typo in the command): one launch-wide red where the launch
    # starts, not every node's
    both = facts(launcher, paths)
    typo = launchfiles.judge_launch_files("node1", both, both, str(launcher / "train.py"), "node1")
    assert typo is not None and typo.cause is LaunchFilesCause.SCRIPT_NOWHERE
    assert typo.scope == Scope.LAUNCH_WIDE and "does not exist on the launcher either" in \
        typo.message
    assert launchfiles.judge_launch_files("node2", both, both, str(launcher / "train.py"),
                                          "node1") is None
