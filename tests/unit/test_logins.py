"""core/logins.py and core/probing.py in a real pytest session (pytester): a check whose node
cannot be logged in to is blocked by that node's login red where it runs, and else fails with
a Problem of its own (the login's cause, on the node), as a probe that gave no facts does; no
bare string."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from test_outcome import CONFTEST  # the Outcomes plugin, and the session's selected ids

pytest_plugins = ["pytester"]

CHECKS = """
import pytest
from cluster_tests.core.logins import Logins
from cluster_tests.core.memo import Memo
from cluster_tests.core.probing import ProbeCause, ProbeError, Probes
from cluster_tests.core.settings import Settings
from cluster_tests.core.transport import ConnectError, SSHTarget
from cluster_tests.judge.ssh.sshfail import Cause


class Dead:
    login_seconds = None

    def connect(self):
        raise ConnectError(SSHTarget("node3", "10.0.0.3"), Cause.REFUSED, "port 22", "start sshd")


class Pool:
    def connection(self, node):
        return Dead()


LOGINS = Logins(Settings(), Pool(), Memo(), {"ssh_logins": 0})


@pytest.mark.parametrize("node", ["node3"])
def test_login(node):
    LOGINS.require("node1")  # (not reached: the fake's every node is dead)


@pytest.mark.parametrize("node", ["node3"])
def test_mount(node):
    LOGINS.require(node)


def test_probe():
    probes = Probes(Settings(), LOGINS, Memo(), {}, progress=lambda *a: None,
                    base_params=lambda node: {})
    probes.probe = lambda node, probe: (_ for _ in ()).throw(ProbeError(
        "node2", "node2: probe 'base' gave no result", fix="look at node2",
        cause=ProbeCause.NO_RESULT))
    probes.logins = type("Up", (), {"require": lambda self, node: None})()
    probes.base("node2")
"""


def _problems(path):
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        out[case.get("name")] = (props.get("problem"), props.get("blocked_by"))
    return out


def test_a_dead_nodes_check_is_blocked_or_its_own_typed_red(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_checks=CHECKS)
    xml = pytester.path / "out.xml"
    res = pytester.runpytest("-p", "no:cacheprovider", f"--junitxml={xml}")
    assert res.parseoutcomes() == {"failed": 2, "blocked": 1}
    assert "During handling" not in res.stdout.str()
    got = _problems(xml)
    assert got["test_mount[node3]"] == (None, "test_login[node3]")  # its root runs: blocked
    red = json.loads(got["test_login[node3]"][0])
    assert (red["nodes"], red["cause"], red["scope"], red["message"]) == (
        ["node1"], "connection refused", "node",
        "node1 unreachable (connection refused): see test_login[node1]")
    probe = json.loads(got["test_probe"][0])
    assert (probe["nodes"], probe["cause"], probe["fix"]) == (
        ["node2"], "probe gave no result", "look at node2")
    # -k without the login red: the check's own red, the same Problem's text
    res = pytester.runpytest("-p", "no:cacheprovider", "-k", "mount")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["node3 unreachable (connection refused): see test_login?node3?"])
