"""judge/hostfile/launchargs.py: --launch-args read as DeepSpeed's runner reads its flags (its own
argparse where deepspeed is importable, the built-in copy otherwise: both must agree)."""

from __future__ import annotations

import pytest

from cluster_tests.judge.hostfile import launchargs as la

PARSERS = [pytest.param(None, id="deepspeed"),
           pytest.param(la._fallback_parse_args, id="builtin")]


@pytest.mark.parametrize("parse_args", PARSERS)
def test_defaults_are_deepspeeds(parse_args) -> None:
    if parse_args is None:
        pytest.importorskip("deepspeed")
    a = la.parse("", parse_args)
    assert (a.master_addr, a.master_port, a.include, a.exclude, a.ssh_port) == ("", 29500, "", "",
                                                                                None)
    assert a.given == frozenset() and a.passthrough == ()


@pytest.mark.parametrize("parse_args", PARSERS)
def test_flags_aliases_and_passthrough(parse_args) -> None:
    if parse_args is None:
        pytest.importorskip("deepspeed")
    a = la.parse("--master_port=29600 -i node1@node2:0 --ssh_port 2222 "
                 "--launcher_args '-f 8' --master_addr 10.0.0.1", parse_args)
    assert (a.master_addr, a.master_port, a.include, a.ssh_port) == ("10.0.0.1", 29600,
                                                                     "node1@node2:0", 2222)
    assert a.given == {"master_addr", "master_port", "include", "ssh_port"}
    assert a.passthrough == ("--ssh_port", "2222", "--launcher_args", "-f 8")
    # the script and its arguments, if the user wrote them, are not launcher flags
    b = la.parse("--exclude node3 train.py --lr 1", parse_args)
    assert b.exclude == "node3" and b.passthrough == ()


@pytest.mark.parametrize("parse_args", PARSERS)
def test_what_deepspeed_refuses_is_refused(parse_args) -> None:
    if parse_args is None:
        pytest.importorskip("deepspeed")
    with pytest.raises(la.LaunchArgsError, match="invalid int value"):
        la.parse("--master_port abc", parse_args)
    with pytest.raises(la.LaunchArgsError, match="mutually exclusive"):
        la.parse("--include a --exclude b", parse_args)
    with pytest.raises(la.LaunchArgsError):
        la.parse("--master_port '29500", parse_args)


def test_merge_and_command_line() -> None:
    assert la.merge("--master-port", 29500, False, 29600, True) == 29600
    assert la.merge("--master-port", 29700, True, 29500, False) == 29700
    assert la.merge("--master-addr", "node1", True, "node1", True) == "node1"
    with pytest.raises(la.LaunchArgsError, match="disagree"):
        la.merge("--master-port", 29700, True, 29600, True)
    line = la.command_line("/h", None, 29500, exclude="node3", passthrough=("--ssh_port", "22"))
    assert line == "deepspeed --hostfile /h --exclude node3 --ssh_port 22 '<script>'"


@pytest.mark.parametrize("parse_args", PARSERS)
def test_a_launch_command_is_read_as_the_runner_reads_it(parse_args) -> None:
    if parse_args is None:
        pytest.importorskip("deepspeed")
    words = ["deepspeed", "--hostf=hf", "--master_port", "29600", "--ssh_port", "22", "train.py",
             "--deepspeed", "ds.json", "--hostfile", "not-the-runners"]
    c = la.parse_command(words, parse_args)
    assert (c.program, c.script) == (("deepspeed",), "train.py")
    assert c.flags == ("--hostf=hf", "--master_port", "29600", "--ssh_port", "22")
    assert c.script_args == ("--deepspeed", "ds.json", "--hostfile", "not-the-runners")
    assert (c.args.hostfile, c.args.master_port, c.args.ssh_port) == ("hf", 29600, 22)
    assert c.args.given == {"hostfile", "master_port", "ssh_port"}
    assert c.args.passthrough == ("--ssh_port", "22")  # the abbreviated --hostfile is resolved
    assert c.line() == " ".join(words)
    module = la.parse_command(["/v/bin/python3", "-m", la.RUNNER_MODULE, "-Hhf", "t.py"],
                              parse_args)
    assert module.program == ("/v/bin/python3", "-m", la.RUNNER_MODULE)
    assert module.args.hostfile == "hf" and "hostfile" not in la.parse_command(
        ["/opt/bin/deepspeed", "t.py"], parse_args).args.given


def test_the_launch_line_changes_only_the_hostfile_or_the_exclude() -> None:
    pytest.importorskip("deepspeed")
    c = la.parse_command(["deepspeed", "--hostf=hf", "--master_port", "29600", "train.py",
                          "--lr", "1"])
    assert c.with_hostfile("reports/hostfile.healthy").line() == (
        "deepspeed --hostfile reports/hostfile.healthy --master_port 29600 train.py --lr 1")
    excluded = c.with_exclude(["node3"])
    assert excluded is not None and excluded.line() == (  # the hostfile flag stays as written
        "deepspeed --exclude node3 --hostf=hf --master_port 29600 train.py --lr 1")
    ex = la.parse_command(["deepspeed", "-H", "hf", "-e", "node2", "train.py"]).with_exclude(
        ["node3"])
    assert ex is not None and ex.line() == "deepspeed -H hf --exclude node2@node3 train.py"
    bare = la.parse_command(["deepspeed", "train.py"])
    assert bare.with_hostfile("h h").line() == "deepspeed --hostfile 'h h' train.py"
    assert la.parse_command(["deepspeed", "-i", "node1", "t.py"]).with_exclude(["node3"]) is None


def test_what_is_not_deepspeeds_runner_is_refused() -> None:
    for words in (["torchrun", "train.py"], ["python3", "train.py"], []):
        with pytest.raises(la.LaunchArgsError, match="give DeepSpeed's launcher"):
            la.parse_command(words)
    with pytest.raises(la.LaunchArgsError):
        la.parse_command(["deepspeed", "--master_port", "x", "train.py"])
