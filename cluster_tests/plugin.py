"""The pytest plugin, the package's composition root: options, hooks and fixtures, wired.

Registered through the `pytest11` entry point so that `--hostfile` exists before pytest
pre-parses the command line (PITFALLS 3).  The checks themselves are the section modules
`cluster_tests/checks/<section>.py` (core.sections), which this plugin collects.  It only wires
the run together: where the nodes come from is core.source, sharing across xdist workers is
core.workers, the report files are report.files; nothing in the package imports this module.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import fnmatch
import importlib.util
import logging
import os
import sys
import types
from pathlib import Path

import pytest

from cluster_tests.core import (
    checkhooks,
    gctune,
    ordering,
    outcome,
    reparse,
    sections,
    slurmctl,
    workers,
)
from cluster_tests.core import launch as launch_mod
from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core import source as source_mod
from cluster_tests.core import srun as srun_mod
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import CLUSTER_KEY, Cluster, Node
from cluster_tests.core.interrupt import InterruptGuard
from cluster_tests.core.labels import PairLabel, keyword_form
from cluster_tests.core.settings import Settings, add_options, read_settings
from cluster_tests.judge.healthyset import Healthy
from cluster_tests.judge.hostfile import hostparse as hf
from cluster_tests.judge.problem import Problem
from cluster_tests.report import colltable, files, junit, recordprop
from cluster_tests.report import fixes as fixes_mod
from cluster_tests.report import history as history_mod
from cluster_tests.report.masking import SecretMasker
from cluster_tests.report.summary import Recorder, progress_writer
from cluster_tests.report.trim import Trimmer

SETTINGS_KEY = pytest.StashKey[Settings]()
PARSE_KEY = pytest.StashKey[object]()
#: where the node list came from (the report header's "from ...")
SOURCE_KEY = pytest.StashKey[str]()
RECORDER_KEY = pytest.StashKey[Recorder]()
#: the report files written at the end of the run (report.files)
WRITTEN_KEY = pytest.StashKey[files.Written]()
SESSION_KEY = pytest.StashKey[pytest.Session]()
#: the environment the suite was started with (the launch's, for --then-launch)
ENVIRON_KEY = pytest.StashKey[dict[str, str]]()
GUARD_KEY = pytest.StashKey[InterruptGuard]()
# Lines that other sections (e.g. the bandwidth table) add to the terminal summary.
SUMMARY_EXTRA_KEY = pytest.StashKey[list[str]]()

#: the check modules, cluster_tests/checks/<section>.py (core.sections), collected by this plugin
CHECKS_DIR = Path(__file__).resolve().parent / "checks"


def _testinfra_active(pluginmanager: pytest.PytestPluginManager) -> bool:
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return pluginmanager.has_plugin("testinfra")
    return (importlib.util.find_spec("testinfra") is not None
            and not pluginmanager.is_blocked("testinfra"))


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    add_options(parser, have_ssh_config_flag=_testinfra_active(pluginmanager))
    if not pluginmanager.has_plugin(_JunitWriter.NAME):
        pluginmanager.register(_JunitWriter(), _JunitWriter.NAME)


class _JunitWriter:
    """--junitxml (on by default: reports/junit.xml) written test by test (report.junit)."""

    NAME = "cluster_tests_junit"

    @pytest.hookimpl(trylast=True)  # after pytest's junitxml plugin made its writer
    def pytest_configure(self, config: pytest.Config) -> None:
        junit.install(config)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.stash[ENVIRON_KEY] = dict(os.environ)  # what --then-launch starts the launch with
    config.pluginmanager.register(_session_fixtures(config), "cluster_tests.fixtures")
    config.pluginmanager.register(recordprop.plugin(config), recordprop.NAME)
    _pytest_options(config)
    settings = read_settings(config)
    if settings.quick:
        # --quick: a fast pre-flight (the collective and training checks are deselected)
        settings = dataclasses.replace(settings, timeout_connect=min(settings.timeout_connect, 5.0),
                                       timeout_command=min(settings.timeout_command, 30.0))
    config.stash[SETTINGS_KEY] = settings
    xml = getattr(config.option, "xmlpath", None)
    try:
        got = source_mod.node_list(settings, os.environ, Path(xml).parent if xml else
                                   Path(config.invocation_params.dir) / "reports")
    except source_mod.NodeListError as exc:
        raise pytest.UsageError(str(exc)) from None
    if got is None:
        return
    settings, parse, config.stash[SOURCE_KEY], notes = got
    if notes and not hasattr(config, "workerinput"):
        # (the header's "nodes from" says it too; the summary's last lines are what stays seen)
        config.stash[SUMMARY_EXTRA_KEY] = [*config.stash.get(SUMMARY_EXTRA_KEY, []), *notes]
    if settings.transport == "srun":
        try:
            settings = dataclasses.replace(settings, srun_path=srun_mod.check_usable(
                os.environ, settings.hostfile_source))
        except srun_mod.SrunError as exc:
            raise pytest.UsageError(str(exc)) from None
    config.stash[SETTINGS_KEY] = settings
    config.stash[PARSE_KEY] = parse
    _run_with(config, Cluster.create(settings, list(parse.hosts)))
    if config.args_source == pytest.Config.ArgsSource.INVOCATION_DIR:
        # No test paths given and no ini file naming them (an installed suite, run from
        # anywhere): run the checklist, not whatever test files the current directory holds.
        config.args = [str(CHECKS_DIR)]
    _add_site_checks(config, settings)
    if getattr(config.option, "xmlpath", "unset") is None and not hasattr(config, "workerinput"):
        reports = Path(config.invocation_params.dir) / "reports"
        reports.mkdir(exist_ok=True)
        config.option.xmlpath = str(reports / "junit.xml")


def _pytest_options(config: pytest.Config) -> None:
    """What the suite sets of pytest's own options: its markers, a timeout backstop, `-k`'s
    spelling of pair ids."""
    for section in sections.SECTIONS:
        config.addinivalue_line("markers", sections.marker_line(section))
    if (
        config.pluginmanager.has_plugin("timeout")
        and getattr(config.option, "timeout", "unset") is None
        and not os.environ.get("PYTEST_TIMEOUT")
        and not config.getini("timeout")
    ):
        # A backstop: every remote action has its own deadline, but no check may hang a run.
        config.option.timeout = 900
    if "->" in (getattr(config.option, "keyword", "") or ""):
        # pytest's -k grammar has no '>': `-k "node1->node2"` matches the keyword that
        # pytest_itemcollected gives every pair test (see report.keyword_form)
        config.option.keyword = keyword_form(config.option.keyword)


def _run_with(config: pytest.Config, cluster: Cluster) -> None:
    """The session's cluster in place, with the plugins of a run that has one."""
    config.stash[CLUSTER_KEY] = cluster
    # a second Ctrl-C must not cut short the cleanup of the nodes that the first one starts
    config.stash[GUARD_KEY] = guard = InterruptGuard(bool(config.option.fulltrace))
    if guard.install():
        config.pluginmanager.register(guard, "cluster_tests_interrupt")
    # --pairs: chosen once, before collection; the probes ask it which targets to reach
    spec = pairs_mod.parse_spec(cluster.settings.pairs)
    cluster.memo(pairs_mod.MEMO_KEY, lambda: pairs_mod.Selection.make(cluster.names, spec))
    config.stash[RECORDER_KEY] = recorder = Recorder(cluster.names)
    # Outcomes first: the masker's makereport wrapper (registered after it, so around it)
    # masks secrets in what Outcomes puts on the report, the Problem too
    config.pluginmanager.register(outcome.Outcomes(config), "cluster_tests_outcomes")
    config.pluginmanager.register(_SummaryPlugin(recorder), "cluster_tests_summary")
    config.pluginmanager.register(SecretMasker(cluster.secrets, recorder), "cluster_tests_mask")
    config.pluginmanager.register(Trimmer(config), "cluster_tests_trim")
    config.pluginmanager.register(gctune.Freezer(), "cluster_tests_gc")
    if config.pluginmanager.has_plugin("xdist"):
        workers.XdistPlugin.setup(config, cluster)


def _is_check_module(path: Path) -> bool:
    return path.suffix == ".py" and path.stem in sections.BY_MODULE and path.parent == CHECKS_DIR


def _python_collects(path: Path, parent: pytest.Collector) -> bool:
    """Whether pytest's own Python collector takes the file: a path given on the command line,
    or a name that matches `python_files`."""
    return parent.session.isinitpath(path) or any(
        fnmatch.fnmatch(path.name, pattern) for pattern in parent.config.getini("python_files"))


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """The checks are shipped as section modules (`checks/ssh.py`), not as `test_*.py` files that
    IDEs, coverage and a project's own tooling would take for its tests: this plugin collects
    them itself, as pytest's own Module (same test functions, ids, markers, fixtures)."""
    if _is_check_module(file_path) and not _python_collects(file_path, parent):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def _add_site_checks(config: pytest.Config, settings: Settings) -> None:
    """--site-checks: the user's own test files (cluster_host, testinfra) run with the checklist."""
    from cluster_tests.core.site import site_paths

    for raw in site_paths(settings.site_checks):
        path = Path(raw).expanduser()
        if not path.is_absolute():
            path = Path(config.invocation_params.dir) / path
        if not path.exists():
            raise pytest.UsageError(f"--site-checks {raw}: no such file or directory")
        if str(path) not in config.args:
            config.args.append(str(path))


class _SummaryPlugin:
    """Feeds the run's reports to the Recorder and prints the cluster summary.  Registered per
    run (an object, not module state), only when there is a cluster to summarize."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.recorder.add(report)

    def pytest_terminal_summary(self, terminalreporter, config: pytest.Config) -> None:
        cluster = _cluster(config)
        if cluster is None or not self.recorder.outcomes:
            return
        extra: list[str] = config.stash.get(SUMMARY_EXTRA_KEY, [])
        facts = workers.node_facts(config, _cluster(config))
        lines = self.recorder.summary_lines(facts, extra=extra)
        if lines:
            terminalreporter.section("cluster summary")
            for line in lines:
                terminalreporter.line(line)
        written = config.stash.get(WRITTEN_KEY, None) or files.Written()
        for name, path in (("JSON summary", written.json_path), ("HTML report", written.html_path)):
            if path is not None:
                terminalreporter.line(f"{name}: {path}")

    def verdict(self, config: pytest.Config) -> list[str]:
        """The run's last lines: a red run's causes, blocked checks per red, the fix script and
        the launch on the healthy nodes; a green run's launch."""
        cluster = _cluster(config)
        if cluster is None or not self.recorder.outcomes:
            return []
        written = config.stash.get(WRITTEN_KEY, None) or files.Written()
        script = written.fixes
        said = ""
        if script is not None and script[1] + script[2]:
            shown = script[0]
            try:
                shown = script[0].relative_to(Path(config.invocation_params.dir))
            except ValueError:
                pass
            manual = (f" ({script[2]} of its {script[1] + script[2]} blocks need a person)"
                      if script[2] else "")
            said = f"review and run {shown}{manual}, then pytest --lf"
        if not self.recorder.red:  # what could not run here, then the launch
            return self.recorder.not_applicable() + written.launch_lines
        return self.recorder.verdict_lines(written.launch_lines, said) + launch_mod.red_lines(
            cluster.settings)


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    cluster = _cluster(config)
    recorder = config.stash.get(RECORDER_KEY, None)
    if cluster is None or recorder is None or hasattr(config, "workerinput"):
        return
    path = Path(config.invocation_params.dir) / "reports" / "summary.json"
    if config.option.xmlpath:
        path = Path(config.option.xmlpath).with_name("summary.json")
    meta = {
        "hostfile": str(cluster.settings.hostfile),
        "node_source": config.stash.get(SOURCE_KEY, ""),
        "nodes": len(cluster.nodes),
        "rank0": cluster.rank0.name if cluster.nodes else None,
        "exitstatus": int(session.exitstatus),
    }
    selection = pairs_mod.selection(cluster)
    if selection is not None:
        meta["pairs"] = selection.meta(len(cluster.nodes))
    meta.update(workers.remote_counts(config, cluster))
    s = cluster.settings
    after = s.after
    history = (None if after.no_history else files.HistoryOptions(
        _history_path(config, s, path), after.history_drop, after.history_window))
    written = files.write_all(
        path, recorder, workers.node_facts(config, cluster), meta,
        slots={n.name: n.slots for n in cluster.nodes}, world_multiple=s.world_multiple,
        hostfile=str(s.hostfile) if s.hostfile else None,
        ssh=fixes_mod.ssh_prefix(s.ssh_config, s.ssh_user, s.timeout_connect,
                                 s.accept_new_host_keys),
        command=" ".join(["pytest", *reparse.as_typed(config)]),
        html_path=Path(s.html_report).expanduser() if s.html_report else None,
        launch_dir=Path(s.env.launch_dir or config.invocation_params.dir),
        launch=s.launch_command, history=history,
        metrics_path=_under(config, after.metrics_textfile) if after.metrics_textfile else None,
        after_verdict=_slurm(cluster, recorder))
    config.stash[WRITTEN_KEY] = written
    if written.notes:
        config.stash[SUMMARY_EXTRA_KEY] = [*config.stash.get(SUMMARY_EXTRA_KEY, []), *written.notes]


def _under(config: pytest.Config, raw: str) -> Path:
    """A path option as given, relative to where pytest was started."""
    path = Path(raw).expanduser()
    return path if path.is_absolute() else Path(config.invocation_params.dir) / path


def _history_path(config: pytest.Config, s: Settings, json_path: Path | None = None) -> Path:
    """--history, else history.sqlite beside the JUnit file (reports/ by default)."""
    if s.after.history:
        return _under(config, s.after.history)
    if json_path is None:
        xml = getattr(config.option, "xmlpath", None)
        json_path = (Path(xml) if xml else Path(config.invocation_params.dir) / "reports" / "x")
    return json_path.with_name(history_mod.FILE_NAME)


def _slurm(cluster: Cluster, recorder: Recorder) -> files.AfterVerdict:
    """What the verdict does in Slurm (core/slurmctl.py), for report/files.py to call once
    hostfile.healthy is decided."""
    after = cluster.settings.after

    def act(healthy: Healthy, problems: list[Problem]) -> tuple[list[str], dict[str, object]]:
        def outcome(test_id: str) -> str | None:
            got = recorder.outcomes.get(test_id)
            return got.outcome if got is not None else None

        report = slurmctl.after_verdict(cluster.names, healthy, problems,
                                        drain=after.slurm_drain, resume=after.slurm_resume,
                                        outcome=outcome)
        return report.lines, report.json

    return act


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
    path = _history_path(config, settings)
    try:
        lines = history_mod.show(path, settings.after.history_window)
    except history_mod.HistoryError as exc:
        print(f"cluster-tests history: {exc}", file=sys.stderr)
        return 4
    print("\n".join(lines))
    return 0


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[SESSION_KEY] = session
    cluster = _cluster(session.config)
    if cluster is not None and _logs_in_everywhere(session.config):
        # before collection: the handshakes overlap it (a second at 16 nodes, more at 4096)
        cluster.login_all_background()


def _logs_in_everywhere(config: pytest.Config) -> bool:
    """Whether this session will log in to every node, known before collection: it runs tests
    (not --collect-only, --setup-plan, --fixtures), here (not an xdist controller or worker),
    over SSH, and selects by no name (no -k, --lf, --deselect, test ids), which every node's
    items would pass or fail together."""
    o = config.option
    if hasattr(config, "workerinput") or getattr(o, "numprocesses", None):
        return False
    if _the_cluster(config).settings.transport != "ssh":
        return False
    if any(getattr(o, name, None) for name in (
            "keyword", "lf", "deselect", "collectonly", "setupplan", "setuponly",
            "showfixtures", "show_fixtures_per_test")):
        return False
    return not any("::" in str(a) for a in config.args)


def pytest_unconfigure(config: pytest.Config) -> None:
    cluster = config.stash.get(CLUSTER_KEY, None)
    session = config.stash.get(SESSION_KEY, None)
    try:
        if cluster is not None:
            if session is not None and session.exitstatus != pytest.ExitCode.INTERRUPTED:
                cluster.finish_background()  # (after Ctrl-C: close() ends what they started)
            cluster.close()
    finally:
        guard = config.stash.get(GUARD_KEY, None)
        if guard is not None:
            guard.uninstall()
    if session is not None and cluster is not None and _is_the_command(config):
        status = int(session.exitstatus)
        launch = (cluster.settings if cluster.settings.then_launch and status == 0
                  and session.testscollected else None)
        atexit.register(_leave, status, launch, _environ(config))


def _is_the_command(config: pytest.Config) -> bool:
    """This session is the process's own: `pytest ARGS`, `python -m pytest ARGS` or
    `cluster-tests ARGS` (cli.main), not one run inside another, nor an xdist worker."""
    from cluster_tests import cli

    args = reparse.as_typed(config)
    return not hasattr(config, "workerinput") and args in (
        sys.argv[1:], cli.pytest_args(sys.argv[1:]))


def _leave(status: int, launch: Settings | None = None,
           environ: dict[str, str] | None = None) -> None:
    """The pytest command's last act, once every report is written and every thread joined:
    run the other exit handlers (pytest's lock files, temporary directories, logging), then
    exit with the session's status without freeing, one by one, the millions of objects a big
    cluster's session holds (items, reports, facts: 3 s at 1024 nodes, 20 s at 4096), or, with
    --then-launch on a green run (`launch`), become the launch command (core/launch.py).  Only
    the command itself does this (its arguments are the process's), never a session run
    inside another (pytest.main, pytester), and never an xdist worker."""
    atexit.unregister(_leave)
    run_others = getattr(atexit, "_run_exitfuncs", None)
    if run_others is None:  # not CPython: leave as usual
        return
    run_others()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if launch is not None:
        launch_mod.then_launch(launch, environ if environ is not None else dict(os.environ))
    os._exit(status)


def pytest_report_header(config: pytest.Config) -> list[str]:
    cluster = config.stash.get(CLUSTER_KEY, None)
    if cluster is None:
        return []
    s = cluster.settings
    names = ", ".join(cluster.names[:8]) + (", ..." if len(cluster.names) > 8 else "")
    return [
        f"cluster: {len(cluster.nodes)} nodes from {config.stash.get(SOURCE_KEY, s.hostfile)} "
        f"({names}); rank 0: "
        f"{cluster.rank0.name if cluster.nodes else '-'}",
        f"cluster: remote python {s.remote_python}, connect timeout {s.timeout_connect:g}s, "
        f"fanout {s.fanout}",
        *([f"cluster: {sel.describe(len(cluster.nodes))} (--pairs)"]
          if (sel := pairs_mod.selection(cluster)) is not None else []),
        *launch_mod.header_lines(s, _environ(config)),
    ]


def _environ(config: pytest.Config) -> dict[str, str]:
    """The environment the suite was started with (its launch's)."""
    got: dict[str, str] = config.stash.get(ENVIRON_KEY, {}) or dict(os.environ)
    return got


def _cluster(config: pytest.Config) -> Cluster | None:
    return config.stash.get(CLUSTER_KEY, None)


def _the_cluster(config: pytest.Config) -> Cluster:
    """The run's cluster where the caller knows there is one (a hostfile was given)."""
    cluster = _cluster(config)
    assert cluster is not None
    return cluster


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cluster" not in metafunc.fixturenames:
        return  # not a check (e.g. the project's own tests, which may have a `node` of their own)
    cluster = _cluster(metafunc.config)
    names = cluster.names if cluster else []
    if "node" in metafunc.fixturenames:
        metafunc.parametrize("node", names, ids=names)
    if "pair" in metafunc.fixturenames:
        sel = pairs_mod.selection(cluster) if cluster else None
        if sel is not None and sel.per_node and pairs_mod.is_per_node(metafunc.function):
            pairs = pairs_mod.node_items(names)  # --pairs matrix: node->* and *->node
        else:
            pairs = list(sel.pairs) if sel is not None else [(a, b) for a in names for b in names]
        metafunc.parametrize("pair", pairs, ids=[f"{a}->{b}" for a, b in pairs])
    if "launch_site" in metafunc.fixturenames:
        sites = [ids.LAUNCHER, *names[:1]]
        metafunc.parametrize("launch_site", sites, ids=sites)
    if "rank0_node" in metafunc.fixturenames:
        # checks about the rank-0 node alone (H3): its name in the id
        metafunc.parametrize("rank0_node", names[:1], ids=names[:1])
    if "rendezvous_leg" in metafunc.fixturenames:
        # F2: every node to the rank-0 node's rendezvous port, both ends in the id
        legs = [(n, names[0]) for n in names] if names else []
        metafunc.parametrize("rendezvous_leg", legs, ids=[f"{a}->{b}" for a, b in legs])
    if "pdsh_leg" in metafunc.fixturenames:
        # S5: from each launch site (the launcher, the rank-0 node) to every node, so that a
        # node that pdsh cannot reach is red under its own name, not the site's
        legs = [(site, t) for site in [ids.LAUNCHER, *names[:1]] for t in names]
        metafunc.parametrize("pdsh_leg", legs, ids=[f"{a}->{b}" for a, b in legs])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    checks = [i for i in items if "cluster" in getattr(i, "fixturenames", ())]
    if not checks:
        return
    cluster = _cluster(config)
    if cluster is None:
        raise pytest.UsageError(
            "no hostfile: pass --hostfile PATH (a DeepSpeed hostfile, 'host slots=N' per line), "
            "or set CLUSTER_TESTS_HOSTFILE; or --mpi-hostfile PATH, or run inside a Slurm "
            "allocation (SLURM_JOB_NODELIST) or a SkyPilot cluster (SKYPILOT_NODE_IPS)"
        )
    ordering.in_checklist_order(items, checks)
    if cluster.settings.quick:
        slow = [i for i in checks
                if i.get_closest_marker("collective") or i.get_closest_marker("training")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            gone = {id(i) for i in slow}
            items[:] = [i for i in items if id(i) not in gone]
            checks = [i for i in checks if id(i) not in gone]
    for item in checks:
        if not cluster.nodes and item.name != ids.HOSTFILE_SYNTAX.name:
            item.add_marker(pytest.mark.skip(
                reason="the hostfile names no host DeepSpeed would launch on: see "
                       f"{ids.HOSTFILE_SYNTAX}"), append=False)
        _label(item)


def _label(item: pytest.Item) -> None:
    """The check's nodes as properties (JUnit, the summary): `node`, or `pair` as "a->b"."""
    params = ordering.item_params(item)
    if "cluster_host" in getattr(item, "fixturenames", ()):
        item.user_properties.append(("site_check", "testinfra"))
    node = params.get("node") or params.get("rank0_node")
    if node:
        item.user_properties.append(("node", node))
    pair = params.get("pair")
    if isinstance(pair, tuple):
        item.user_properties.append(("pair", str(PairLabel(*pair))))
    pair = params.get("node_pair")  # C2's, either way
    if isinstance(pair, tuple):
        item.user_properties.append(("pair", str(PairLabel(*pair, ordered=False))))


@pytest.hookimpl(tryfirst=True)  # the order settled before xdist's workers report theirs
def pytest_collection_finish(session: pytest.Session) -> None:
    cluster = _cluster(session.config)
    if cluster is None:
        return
    items = session.items
    ordering.pdsh_legs_with_the_rehearsal(items, cluster.names[:1])
    session.config.stash[outcome.SELECTED_KEY] = frozenset(item.name for item in items)
    touched = [n for item in items for n in ordering.touched_nodes(item)]
    # which sources each pair check will run from, so that a session-wide pair probe (S4's
    # ssh_pairs) can start every source at once instead of one source per test, in turn
    sources = ordering.pair_sources(items)
    cluster.memo(pairs_mod.SOURCES_KEY, lambda: sources)
    if not hasattr(session.config, "workerinput"):
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        cluster.progress_sink = progress_writer(reporter, session.config.option.verbose)
    modules = ordering.selected_modules(items)
    gctune.freeze_what_lives()  # the items above all, until the session ends
    if session.config.option.collectonly:
        return  # nothing runs: nothing to fetch or start on the nodes
    cluster.prefetch(touched, checkhooks.node_probes(cluster.settings, modules))
    # background phases a check module starts for its selected tests (the launch rehearsal, the
    # port matrix); not under pytest-xdist, where each worker would start its own
    if not hasattr(session.config, "workerinput"):
        selected = frozenset(getattr(item, "originalname", item.name) for item in items)
        checkhooks.start_phases(modules, cluster, selected)


def pytest_itemcollected(item: pytest.Item) -> None:
    """`-k "node1->node2"`: pair ids get a keyword that pytest's -k grammar can spell."""
    if "->" in item.name:
        item.extra_keyword_matches.add(keyword_form(item.name))


def _session_fixtures(config: pytest.Config) -> types.ModuleType:
    """The session's own fixtures, closures over its config, in a plugin of their own (registered
    by pytest_configure).  Each time a test reaches a fixture that takes `request` (pytest's
    `pytestconfig` does), pytest builds a new FixtureDef for it and reads a signature, where
    nearly every test of a 4096-node run takes `cluster` (`record_property`: report/recordprop)."""
    holder = types.ModuleType("cluster_tests.fixtures")

    @pytest.fixture(scope="session", name="cluster")
    def cluster() -> Cluster:
        """The run's cluster: its nodes, logins, probes and memo (core/cluster.py)."""
        c = _cluster(config)
        if c is None:
            pytest.fail("no hostfile given (--hostfile)", pytrace=False)
        return c

    @pytest.fixture(scope="session", name="settings")
    def settings() -> Settings:
        """The run's settings (the command line and the ini file, read once)."""
        return config.stash[SETTINGS_KEY]

    @pytest.fixture(scope="session", name="hostfile")
    def hostfile(cluster: Cluster) -> hf.HostfileParse:
        """The parsed hostfile: hosts in DeepSpeed's order, per-line findings, DeepSpeed's
        verdict."""
        return config.stash[PARSE_KEY]  # type: ignore[return-value]

    for fn in (cluster, settings, hostfile):
        setattr(holder, fn.__name__, fn)
    return holder


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
    """After the verdict: the history's warnings (trends, or why it was not written), what
    was done in Slurm (or would be), where the metrics went."""
    written = config.stash.get(WRITTEN_KEY, None)
    if written is None:
        return
    if written.history_lines:
        terminalreporter.write_sep("=", f"history ({written.history_path})")
        for line in written.history_lines:
            terminalreporter.write_line(line)
    if written.slurm_lines:
        terminalreporter.write_sep("=", "slurm")
        for line in written.slurm_lines:
            terminalreporter.write_line(line)
    if written.metrics_path is not None:
        terminalreporter.write_line(f"metrics textfile: {written.metrics_path}")


@pytest.hookimpl(specname="pytest_terminal_summary", wrapper=True, tryfirst=True)
def pytest_terminal_summary_verdict(terminalreporter, config: pytest.Config):
    """The run's last word, after every other part of the summary, pytest's own short test
    summary (``-r``) included, right above its final count: the causes, the checks each red
    blocks, and the launch now (hostfile.healthy, the launch line last).  Outermost of the
    summary's wrappers (tryfirst), so that it ends after the terminal reporter's."""
    try:
        return (yield)
    finally:
        plugin = config.pluginmanager.get_plugin("cluster_tests_summary")
        lines = plugin.verdict(config) if isinstance(plugin, _SummaryPlugin) else []
        if lines:
            red = isinstance(plugin, _SummaryPlugin) and plugin.recorder.red
            terminalreporter.write_sep("=", "verdict: causes and launch now" if red
                                       else "verdict: the launch will work")
            for line in lines:
                terminalreporter.write_line(line)


@pytest.hookimpl(specname="pytest_terminal_summary")
def pytest_terminal_summary_collective(terminalreporter, config: pytest.Config) -> None:
    """C1/C2: the all-reduce bandwidth tables, when a collective check ran (its own hookimpl,
    beside any other summary part)."""
    recorder = config.stash.get(RECORDER_KEY, None)
    lines = colltable.tables(recorder.allreduce(), recorder.pair_results()) if recorder else []
    if lines:
        terminalreporter.write_sep("=", "all-reduce bandwidth (C1/C2)")
        for line in lines:
            terminalreporter.write_line(line)
