"""Typed facts at the node boundary (judge/common/facts.py): a probe's JSON is read once into
values, from what the node scripts really print. (The port matrix's facts:
tests/unit/test_judge_portfacts.py.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from paths import PACKAGE

from cluster_tests.judge.common import facts
from cluster_tests.judge.common.probes import FactsError
from cluster_tests.judge.ssh import sshfail, sshmodes

PRELUDE = PACKAGE / "node" / "prelude.py"


def _run_on_node(argv: list[str]) -> dict:
    """node/prelude.py's run_command, run for real in a fresh interpreter as on a node; its JSON."""
    code = (f"exec(open({str(PRELUDE)!r}).read())\nimport json, sys\n"
            f"print(json.dumps(run_command({argv!r}, 10, 4000, 4000)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


def test_command_reads_what_run_command_prints() -> None:
    ok = facts.Command.read(_run_on_node(["sh", "-c", "echo out; echo err >&2"]), "sh")
    assert ok.ok and (ok.rc, ok.out, ok.err) == (0, "out\n", "err\n")
    assert ok.seconds is not None and ok.seconds >= 0
    missing = facts.Command.read(_run_on_node(["/nonexistent/tool"]), "tool")
    assert not missing.ok and missing.rc == 127 and "command not found" in missing.err


@pytest.mark.parametrize("raw", [None, [], {}, {"rc": None}, {"rc": "0"}, {"rc": True}])
def test_a_command_without_an_exit_status_is_an_unreadable_answer(raw: object) -> None:
    """Another version's node script: a FactsError naming what was read, never a KeyError."""
    with pytest.raises(FactsError, match="the ssh leg to b"):
        sshmodes.read_legs({"b": raw})


def test_ssh_leg_names_the_cause_from_openssh_own_words() -> None:
    """A real OpenSSH client failing to resolve its target, as S4's probe runs it."""
    raw = _run_on_node(["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=2",
                        "-T", "ct-no-such-host.invalid", "true"])
    legs = sshmodes.read_legs({"ct-no-such-host.invalid": raw})
    leg = legs["ct-no-such-host.invalid"]
    assert not leg.ok and leg.cause is sshfail.Cause.DNS
    assert "Could not resolve hostname" in leg.evidence
    fine = sshmodes.read_legs({"b": {"rc": 0, "out": "", "err": ""}})["b"]
    assert fine.ok and fine.cause is None and fine.evidence == "exit 0"
