"""Fixtures of the project's own tests.

`sim` is one healthy 3-node simulated cluster for the whole test session (fixtures/sim.py);
every test that injects faults gets it through `healthy_sim`, which undoes that test's faults
afterwards (`sim.restore()`), so the next test starts from a healthy cluster again.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fixtures.sim import SimCluster  # noqa: E402


@pytest.fixture(scope="session")
def sim(tmp_path_factory: pytest.TempPathFactory):
    state = tmp_path_factory.mktemp("sim3")
    with SimCluster(state, nodes=3, slots=1) as cluster:
        yield cluster


@pytest.fixture
def healthy_sim(sim):
    sim.restore()
    yield sim
    sim.restore()
