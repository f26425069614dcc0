"""core/runstate.logs_in_everywhere: logins start before collection only where the session will log
in to every node anyway (it runs tests, here, over SSH, selecting by no name)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cluster_tests.core import runstate


def _config(*args: str, transport: str = "ssh", worker: bool = False, **options):
    base = {"keyword": "", "lf": False, "deselect": None, "collectonly": False,
            "setupplan": False, "setuponly": False, "showfixtures": False,
            "show_fixtures_per_test": False, "numprocesses": None}
    config = SimpleNamespace(option=SimpleNamespace(**{**base, **options}), args=list(args),
                             transport=transport)
    if worker:
        config.workerinput = {}
    return config


@pytest.fixture(autouse=True)
def _transport(monkeypatch):
    monkeypatch.setattr(runstate, "the_cluster", lambda config: SimpleNamespace(
        settings=SimpleNamespace(transport=config.transport)))


def test_a_plain_run_and_a_marker_selection_log_in_everywhere():
    assert runstate.logs_in_everywhere(_config())
    assert runstate.logs_in_everywhere(_config("cluster_tests/checks/ssh.py", markexpr="ssh"))


@pytest.mark.parametrize("config", [
    _config(keyword="node3"), _config(lf=True), _config(deselect=["x::test_a[node1]"]),
    _config("cluster_tests/checks/ssh.py::test_login[node2]"), _config(collectonly=True),
    _config(setupplan=True), _config(showfixtures=True), _config(numprocesses=2),
    _config(worker=True), _config(transport="srun")],
    ids=["-k", "--lf", "--deselect", "an id", "--collect-only", "--setup-plan", "--fixtures",
         "-n", "a worker", "srun"])
def test_a_selection_by_name_or_no_run_here_does_not(config):
    assert not runstate.logs_in_everywhere(config)
