"""The training job's protocol (node/train_smoke.py) and its reader (judge/trainresult.py) agree.

The job runs alone on the nodes and cannot import the judge: it keeps its own copy of the tag
and the exit codes, compared here without importing it (it needs torch)."""

from __future__ import annotations

import ast

from cluster_tests.judge import trainresult as tres
from cluster_tests.measure import localtrain


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
        'node2: CT_SMOKE {"event": "done", "rank": 1, "first_loss": 1.0, "last_loss": 0.1, "weights_sha256": "ab"}',
        'CT_SMOKE {"event": "done", "rank": 0, "first_loss": 1.0, "last_loss": 0.1, "weights_sha256": "ab"}',
    ])
    res = tres.parse_output(log)
    assert res.ok and res.expected == 2 and res.ranks[1].host == "node2"
