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
