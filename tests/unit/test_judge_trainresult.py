"""The training job's protocol (node/train_smoke.py) and its reader (judge/training/trainresult.py)
agree.

The job runs alone on the nodes and cannot import the judge: it keeps its own copy of the tag
and the exit codes, compared here without importing it (it needs torch)."""

from __future__ import annotations

import ast

from cluster_tests.judge.training import trainresult as tres
from fixtures import localtrain


def _constants() -> dict[str, object]:
    tree = ast.parse(localtrain.SCRIPT_PATH.read_text())
    return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in ("TAG", "EXIT_DEADLINE", "EXIT_ERROR")}


def test_job_constants_are_the_readers() -> None:
    assert _constants() == {"TAG": tres.TAG, "EXIT_DEADLINE": tres.EXIT_DEADLINE,
                            "EXIT_ERROR": tres.EXIT_ERROR}


def test_parse_output_reads_pdsh_prefixed_events() -> None:
    log = "\n".join([
        'node2: CT_SMOKE {"event": "start", "rank": 1, "world_size": 2, "host": "node2"}',
        'CT_SMOKE {"event": "start", "rank": 0, "world_size": 2, "host": "node1"}',
        'node2: CT_SMOKE {"event": "done", "rank": 1, "first_loss": 1.0, "last_loss": 0.1, '
        '"weights_sha256": "ab"}',
        'CT_SMOKE {"event": "done", "rank": 0, "first_loss": 1.0, "last_loss": 0.1, '
        '"weights_sha256": "ab"}',
    ])
    res = tres.parse_output(log)
    assert res.ok and res.expected == 2 and res.ranks[1].host == "node2"


def test_t2_ssh_leg_fixes_name_the_rank0_node() -> None:
    """T2's message for pdsh's ssh legs (the fixes come from judge/ssh/sshfail.py's FIX)."""
    from cluster_tests.core.settings import Settings, TrainingSettings
    from cluster_tests.judge.training import traindiag as tdiag
    from cluster_tests.judge.training import trainexplain as tx
    from cluster_tests.measure import trainruns as trr

    cfg = trr.config_from_settings(Settings(training=TrainingSettings(steps=10, deadline=30.0)),
                                   environ={})
    launch = tx.Launch("T2", "node1", ["node1", "node2"], 2, "cmd", exit_status=1)
    launch.diagnoses = tdiag.diagnose("node2: u@node2: Permission denied (publickey).\n"
                                      "node2: Host key verification failed.\n",
                                      hosts=["node1", "node2"])
    red = tx.launch_failed(launch, cfg)
    assert red.nodes == ("node2",) and red.cause == tdiag.TrainCause.SSH_PUBLICKEY
    assert ("  node1 -> node2: ssh key login refused (publickey): the launcher's key is not "
            "accepted there (pdsh's ssh leg from the rank-0 node)\n"
            "    node2: u@node2: Permission denied (publickey).\n") in red.message
    # each root cause's fix, in their order: the key, then the host key read out of band
    assert red.fix.startswith(
        "on node2: append node1's public key (node1:~/.ssh/id_*.pub) to "
        "~/.ssh/authorized_keys (ssh-copy-id node2, run on node1); modes: chmod 700 "
        "~/.ssh; chmod 600 ~/.ssh/authorized_keys; see test_ssh_trust[node1->node2]; ")
    assert ("node1 does not know node2's host key: read node2's fingerprint out of band "
            "(on node2's console: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)") in red.fix
    assert red.fix.endswith("; see test_ssh_trust[node1->node2]")
    assert "\n  fix: on node2: append node1's public key" in red.text()


def test_a_ranks_own_stack_dump_is_read_with_its_host() -> None:
    """The watchdog's ``stack`` event (node/train_smoke.py dump_own_stack, run here for real):
    the dump per rank, and the rank's own host over the launcher's "localhost"."""
    import json
    import runpy

    from cluster_tests.judge.common import stacks as S

    smoke = runpy.run_path(str(localtrain.SCRIPT_PATH), run_name="not_main")
    text = smoke["dump_own_stack"]()
    assert "most recent call first" in text
    line = "CT_SMOKE " + json.dumps({"event": "stack", "rank": 0, "text": text, "host": "node1"})
    start = "CT_SMOKE " + json.dumps({"event": "start", "rank": 0, "host": "node1",
                                      "world_size": 1})
    result = tres.parse_output(f"{start}\n{line}\n", expected_ranks=1)
    assert result.stacks == {0: text}
    assert result.hosts()[0] == "node1"
    assert S.parse(result.stacks[0])  # faulthandler's own format, as judge/stacks reads it
