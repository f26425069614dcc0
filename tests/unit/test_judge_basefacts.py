"""judge/common/basefacts.py: the base section of node/probe.py, run here as a node runs it (in
namespaces of its own, tests/probenode.py), read into BaseFacts once."""

from __future__ import annotations

import pytest
from probenode import base_facts, probe

from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.common.probes import FactsError


def test_a_real_base_probe_reads_into_its_facts() -> None:
    facts = base_facts("gpu-07", addresses=("10.77.0.9/24",), hosts="10.77.0.3 node3",
                       names=["node3"])
    assert facts.hostname == "gpu-07"
    assert "10.77.0.9" in facts.hostname_I
    got = facts.resolve["node3"]
    assert got.addrs == ("10.77.0.3",) and got.error is None


def test_a_malformed_answer_is_refused_not_misread() -> None:
    raw = probe("base")
    assert isinstance(raw, dict)
    BaseFacts.read(raw)
    with pytest.raises(FactsError):
        BaseFacts.read([raw])
