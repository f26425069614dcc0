"""The pytest plugin, the package's composition root: options, hooks and fixtures, wired.

Registered through the `pytest11` entry point so that `--hostfile` exists before pytest
pre-parses the command line (PITFALLS 3).  The checks themselves are the section modules
`cluster_tests/checks/<section>.py` (core.sections), which this plugin collects.  It only wires
the run together: the run's settings, node list and fixtures are core.runstate, the collection
core.collection, the run's end core.leave, sharing across xdist workers core.workers, the
report files report.files, the terminal summary report.terminal; nothing in the package imports
this module.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cluster_tests import cli
from cluster_tests.core import (
    collection,
    gctune,
    leave,
    outcome,
    reparse,
    runstate,
    slurmctl,
    workers,
)
from cluster_tests.core import launch as launch_mod
from cluster_tests.core.cluster import CLUSTER_KEY, Cluster, Node
from cluster_tests.core.settings import add_options, read_settings
from cluster_tests.report import files, junit, recordprop, terminal
from cluster_tests.report import fixes as fixes_mod
from cluster_tests.report import history as history_mod
from cluster_tests.report.masking import SecretMasker
from cluster_tests.report.summary import Recorder
from cluster_tests.report.trim import Trimmer


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    add_options(parser, have_ssh_config_flag=runstate.testinfra_active(pluginmanager))
    if not pluginmanager.has_plugin(junit.Installer.NAME):
        pluginmanager.register(junit.Installer(), junit.Installer.NAME)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(runstate.fixtures(config), "cluster_tests.fixtures")
    config.pluginmanager.register(recordprop.plugin(config), recordprop.NAME)
    got = runstate.configure(config)
    if got is None:
        return
    cluster, notes = got
    terminal.add_notes(config, notes)
    _run_with(config, cluster)
    runstate.default_paths(config, cluster.settings)


def _run_with(config: pytest.Config, cluster: Cluster) -> None:
    """The session's cluster in place, with the plugins of a run that has one."""
    config.stash[CLUSTER_KEY] = cluster
    plugins = config.pluginmanager
    guard = runstate.guard(config)
    if guard is not None:
        plugins.register(guard, "cluster_tests_interrupt")
    runstate.choose_pairs(cluster)
    config.stash[terminal.RECORDER_KEY] = recorder = Recorder(cluster.names)
    # Outcomes first: the masker's makereport wrapper (registered after it, so around it)
    # masks secrets in what Outcomes puts on the report, the Problem too
    plugins.register(outcome.Outcomes(config), "cluster_tests_outcomes")
    plugins.register(terminal.SummaryPlugin(
        recorder, lambda: workers.node_facts(config, cluster),
        launch_mod.red_lines(cluster.settings)), terminal.SummaryPlugin.NAME)
    plugins.register(SecretMasker(cluster.secrets, recorder), "cluster_tests_mask")
    plugins.register(Trimmer(config), "cluster_tests_trim")
    plugins.register(gctune.Freezer(), "cluster_tests_gc")
    if plugins.has_plugin("xdist"):
        workers.XdistPlugin.setup(config, cluster)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    return collection.check_module(file_path, parent)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The report files, written once (on the xdist controller), for the summary to name."""
    config = session.config
    cluster = _cluster(config)
    recorder = config.stash.get(terminal.RECORDER_KEY, None)
    if cluster is None or recorder is None or hasattr(config, "workerinput"):
        return
    s, after = cluster.settings, cluster.settings.after
    path = runstate.summary_path(config)
    written = files.write_all(
        path, recorder, workers.node_facts(config, cluster), runstate.meta(session, cluster),
        slots={n.name: n.slots for n in cluster.nodes}, world_multiple=s.world_multiple,
        hostfile=str(s.hostfile) if s.hostfile else None,
        ssh=fixes_mod.ssh_prefix(s.ssh_config, s.ssh_user, s.timeout_connect,
                                 s.accept_new_host_keys),
        command=" ".join(["pytest", *reparse.as_typed(config)]),
        html_path=Path(s.html_report).expanduser() if s.html_report else None,
        launch_dir=Path(s.env.launch_dir or config.invocation_params.dir),
        launch=s.launch_command, history=None if after.no_history else files.HistoryOptions.beside(
            runstate.history_given(config, s), path, after.history_drop, after.history_window),
        metrics_path=(runstate.under(config, after.metrics_textfile)
                      if after.metrics_textfile else None),
        after_verdict=slurmctl.acting(cluster.names, drain=after.slurm_drain,
                                      resume=after.slurm_resume, outcome=recorder.outcome_of))
    config.stash[files.WRITTEN_KEY] = written
    terminal.add_notes(config, written.notes)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """`--hostfile PATH`: the session run again as `--hostfile=PATH` (core.reparse: pytest took
    PATH for a test path when it looked for its rootdir and ini file).  --history-show
    (`cluster-tests history`): print the history's recent runs and exit."""
    again = reparse.run_again(config)
    if again is not None:
        return again
    if not getattr(config.option, "ct_history_show", None):
        return None
    settings = read_settings(config)
    xml = getattr(config.option, "xmlpath", None)
    beside = Path(xml) if xml else Path(config.invocation_params.dir) / "reports" / "x"
    return history_mod.print_recent(history_mod.path(
        runstate.history_given(config, settings), beside), settings.after.history_window)


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[runstate.SESSION_KEY] = session
    cluster = _cluster(session.config)
    if cluster is not None and runstate.logs_in_everywhere(session.config):
        # before collection: the handshakes overlap it (a second at 16 nodes, more at 4096)
        cluster.login_all_background()


def pytest_unconfigure(config: pytest.Config) -> None:
    leave.end(config, (sys.argv[1:], cli.pytest_args(sys.argv[1:])))


def pytest_report_header(config: pytest.Config) -> list[str]:
    return runstate.header_lines(config)


def _cluster(config: pytest.Config) -> Cluster | None:
    return config.stash.get(CLUSTER_KEY, None)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    collection.parametrize(metafunc, _cluster(metafunc.config))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    collection.select(config, items, _cluster(config))


@pytest.hookimpl(tryfirst=True)  # the order settled before xdist's workers report theirs
def pytest_collection_finish(session: pytest.Session) -> None:
    cluster = _cluster(session.config)
    if cluster is not None:
        collection.finish(session, cluster)


def pytest_itemcollected(item: pytest.Item) -> None:
    collection.keyword(item)


@pytest.fixture(scope="session")
def nodes(cluster: Cluster) -> list[Node]:
    return list(cluster.nodes)


@pytest.fixture
def cluster_host(cluster: Cluster, node: str):
    """A pytest-testinfra host for each node of the hostfile (test ids: the node names), for a
    site's own checks::

        def test_nccl(cluster_host):
            assert cluster_host.package("libnccl2").version.startswith("2.21")

        def test_output_mount(cluster_host):
            assert cluster_host.mount_point("/mnt/output").exists

    Commands go through the run's own SSH session to the node (same ssh config, user and strict
    known_hosts as every check; never testinfra's WarningPolicy), each with the
    --timeout-command deadline. Results join the cluster summary, JUnit and `-k node3`. Put
    the file next to the hostfile and pass --site-checks FILE (or give its path to pytest)."""
    from cluster_tests.core.site import host_for

    cluster.require(node)
    return host_for(cluster, node)


@pytest.hookimpl(specname="pytest_terminal_summary")
def pytest_terminal_summary_after(terminalreporter, config: pytest.Config) -> None:
    """After the verdict: the history's warnings, Slurm, the metrics file."""
    terminal.after_verdict(terminalreporter, config)


@pytest.hookimpl(specname="pytest_terminal_summary", wrapper=True, tryfirst=True)
def pytest_terminal_summary_verdict(terminalreporter, config: pytest.Config):
    """The run's last word, after every other part of the summary, pytest's own short test
    summary (``-r``) included, right above its final count.  Outermost of the summary's
    wrappers (tryfirst), so that it ends after the terminal reporter's."""
    try:
        return (yield)
    finally:
        terminal.verdict(terminalreporter, config)


@pytest.hookimpl(specname="pytest_terminal_summary")
def pytest_terminal_summary_collective(terminalreporter, config: pytest.Config) -> None:
    """C1/C2: the all-reduce bandwidth tables (its own hookimpl, beside any other summary
    part)."""
    terminal.collective(terminalreporter, config)
