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
import gc
import importlib.util
import logging
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cluster_tests.core import outcome, reparse, sections, slurmctl, workers
from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core import source as source_mod
from cluster_tests.core import srun as srun_mod
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import CLUSTER_KEY, Cluster, Node, node_probes
from cluster_tests.core.interrupt import InterruptGuard
from cluster_tests.core.settings import Settings, add_options, read_settings
from cluster_tests.judge.hostfile import hostparse as hf
from cluster_tests.report import files, junit
from cluster_tests.report import fixes as fixes_mod
from cluster_tests.report import history as history_mod
from cluster_tests.report.summary import Recorder, keyword_form, mask, progress_writer

try:  # what the tmpdir plugin leaves on an item (private: absent from another pytest)
    from _pytest.tmpdir import tmppath_result_key
    TMPPATH_RESULT: pytest.StashKey[Any] | None = tmppath_result_key
except ImportError:  # pragma: no cover
    TMPPATH_RESULT = None

SETTINGS_KEY = pytest.StashKey[Settings]()
PARSE_KEY = pytest.StashKey[object]()
#: where the node list came from (the report header's "from ...")
SOURCE_KEY = pytest.StashKey[str]()
RECORDER_KEY = pytest.StashKey[Recorder]()
#: the report files written at the end of the run (report.files)
WRITTEN_KEY = pytest.StashKey[files.Written]()
SESSION_KEY = pytest.StashKey[pytest.Session]()
GUARD_KEY = pytest.StashKey[InterruptGuard]()
# Lines that other sections (e.g. the bandwidth table) add to the terminal summary.
SUMMARY_EXTRA_KEY = pytest.StashKey[list[Any]]()

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
    config.pluginmanager.register(_session_fixtures(config), "cluster_tests.fixtures")
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
    settings = read_settings(config)
    if settings.quick:
        # --quick: a fast pre-flight (the collective and training checks are deselected)
        settings = dataclasses.replace(settings, timeout_connect=min(settings.timeout_connect, 5.0),
                                       timeout_command=min(settings.timeout_command, 30.0))
    config.stash[SETTINGS_KEY] = settings
    if "->" in (getattr(config.option, "keyword", "") or ""):
        # pytest's -k grammar has no '>': `-k "node1->node2"` matches the keyword that
        # pytest_itemcollected gives every pair test (see report.keyword_form)
        config.option.keyword = keyword_form(config.option.keyword)
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
    nodes = [Node(h.name, h.slots, h.lineno) for h in parse.hosts]
    config.stash[CLUSTER_KEY] = cluster = Cluster.create(settings, nodes)
    # a second Ctrl-C must not cut short the cleanup of the nodes that the first one starts
    config.stash[GUARD_KEY] = guard = InterruptGuard(bool(config.option.fulltrace))
    if guard.install():
        config.pluginmanager.register(guard, "cluster_tests_interrupt")
    # --pairs: chosen once, before collection; the probes ask it which targets to reach
    spec = pairs_mod.parse_spec(settings.pairs)
    cluster.memo(pairs_mod.MEMO_KEY, lambda: pairs_mod.Selection.make(cluster.names, spec))
    config.stash[RECORDER_KEY] = recorder = Recorder([n.name for n in nodes])
    # Outcomes first: the summary plugin's makereport wrapper (registered after it, so around
    # it) masks secrets in what Outcomes puts on the report, the Problem too
    config.pluginmanager.register(outcome.Outcomes(config), "cluster_tests_outcomes")
    config.pluginmanager.register(_SummaryPlugin(recorder, config), "cluster_tests_summary")
    if config.pluginmanager.has_plugin("xdist"):
        workers.XdistPlugin.setup(config, cluster)
    if config.args_source == pytest.Config.ArgsSource.INVOCATION_DIR:
        # No test paths given and no ini file naming them (an installed suite, run from
        # anywhere): run the checklist, not whatever test files the current directory holds.
        config.args = [str(CHECKS_DIR)]
    _add_site_checks(config, settings)
    if getattr(config.option, "xmlpath", "unset") is None and not hasattr(config, "workerinput"):
        reports = Path(config.invocation_params.dir) / "reports"
        reports.mkdir(exist_ok=True)
        config.option.xmlpath = str(reports / "junit.xml")


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


#: items between two freezes of what the session holds (`_SummaryPlugin.pytest_runtest_logfinish`)
FREEZE_EVERY = 2000


class _SummaryPlugin:
    """Feeds the run's reports to the Recorder and prints the cluster summary.  Registered per
    run (an object, not module state), only when there is a cluster to summarize."""

    def __init__(self, recorder: Recorder, config: pytest.Config) -> None:
        self.recorder = recorder
        self.config = config
        self.finished = 0

    def pytest_runtest_logfinish(self) -> None:
        """Every FREEZE_EVERY items: collect what the last ones left in cycles, then freeze
        what is alive, as at the end of collection.  What the session keeps (reports, outcomes,
        facts) then stays out of the cyclic collector's full passes, which otherwise walk all
        of it again and again: 50 s of a 4096-node run."""
        self.finished += 1
        if self.finished % FREEZE_EVERY == 0:
            gc.collect()
            gc.freeze()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.recorder.add(report)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        """Once an item has run, what plugins left on it for its own run goes: pytest-timeout's
        cancel closure, the tmpdir plugin's per-phase results (read by tmp_path's teardown, left
        on every item that has none): 300 B an item, for the whole session."""
        try:
            return (yield)
        finally:
            item.__dict__.pop("cancel_timeout", None)
            if TMPPATH_RESULT is not None and TMPPATH_RESULT in item.stash:
                del item.stash[TMPPATH_RESULT]

    @pytest.hookimpl(trylast=True, specname="pytest_runtest_logreport")
    def pytest_runtest_logreport_let_go(self, report: pytest.TestReport) -> None:
        """Once the terminal reporter has counted it, a passed setup or teardown with nothing
        captured is let go: pytest keeps every one for the whole session (two per item, 380,000
        at 4096 nodes), reads them only to print a failed test's captured teardown output, and
        looks through all of them for each failed test (quadratic on a red cluster)."""
        if report.when == "call" or not report.passed or report.sections:
            # kept (pytest's stats, to the end): its copy of the item's keywords (300 B an item)
            # is read only for the skipped summary's folding, which asks for these two
            report.keywords = {k: 1 for k in ("skip", "pytestmark") if k in report.keywords}
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        kept = reporter.stats.get("") if reporter is not None else None
        if kept and kept[-1] is report:
            kept.pop()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        """Mask secret values in what every reporter (terminal, JUnit, JSON, HTML) will show."""
        report = yield
        cluster = _cluster(item.config)
        if cluster is None:
            return report
        secrets = cluster.secrets()
        self.recorder.secrets |= secrets
        if not secrets:
            return report
        if report.longrepr is not None:
            text = report.longreprtext
            masked = mask(text, secrets)
            if masked != text:
                report.longrepr = masked
        report.sections = [(title, mask(body, secrets)) for title, body in report.sections]
        report.user_properties = [(k, mask(str(v), secrets)) for k, v in report.user_properties]
        return report

    def pytest_terminal_summary(self, terminalreporter, config: pytest.Config) -> None:
        cluster = _cluster(config)
        if cluster is None or not self.recorder.outcomes:
            return
        got_extra: list[Any] = config.stash.get(SUMMARY_EXTRA_KEY, [])
        extra = list(got_extra)
        from cluster_tests.measure.allreducerun import summary_lines as collective_lines

        if not collective_lines(config):
            # the collective section prints its own table when its fixtures ran in this process;
            # else (the xdist controller) the table comes from the recorded properties, here
            extra += self.recorder.render_bandwidth()
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
        """The run's last lines (a red run's): causes, blocked checks per red, the fix script,
        the launch."""
        if _cluster(config) is None or not self.recorder.outcomes:
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
        return self.recorder.verdict_lines(written.launch_lines, said)


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
        invocation_dir=Path(config.invocation_params.dir), history=history,
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

    def act(healthy: Any, problems: list[Any]) -> tuple[list[str], dict[str, Any]]:
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
        atexit.register(_leave, int(session.exitstatus))


def _is_the_command(config: pytest.Config) -> bool:
    """This session is the process's own: `pytest ARGS`, `python -m pytest ARGS` or
    `cluster-tests ARGS` (cli.main), not one run inside another, nor an xdist worker."""
    from cluster_tests import cli

    args = reparse.as_typed(config)
    return not hasattr(config, "workerinput") and args in (
        sys.argv[1:], ["-p", cli.PLUGIN, *sys.argv[1:]])


def _leave(status: int) -> None:
    """The pytest command's last act, once every report is written and every thread joined:
    run the other exit handlers (pytest's lock files, temporary directories, logging), then
    exit with the session's status without freeing, one by one, the millions of objects a big
    cluster's session holds (items, reports, facts: 3 s at 1024 nodes, 20 s at 4096).  Only
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
        f"cluster: ssh config {s.ssh_config or '(none)'}, remote python {s.remote_python}, "
        f"connect timeout {s.timeout_connect:g}s, fanout {s.fanout}",
        *([f"cluster: {sel.describe(len(cluster.nodes))} (--pairs)"]
          if (sel := pairs_mod.selection(cluster)) is not None else []),
    ]


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


def _params(item: pytest.Item) -> dict:
    """The item's cluster parameters; an empty parameter set (a hostfile with no valid host)
    leaves pytest's NOTSET in place of a node or pair, which is no parameter at all."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return {k: v for k, v in params.items() if isinstance(v, (str, tuple))}


def _touched_nodes(item: pytest.Item) -> list[str]:
    params = _params(item)
    touched: list[str] = []
    for one in ("node", "rank0_node"):
        if one in params:
            touched.append(params[one])
    if "pair" in params:
        touched.extend(n for n in params["pair"] if n != pairs_mod.ANY)
    if "launch_site" in params and params["launch_site"] != ids.LAUNCHER:
        touched.append(params["launch_site"])
    for legs in ("pdsh_leg", "rendezvous_leg"):
        if legs in params:
            touched.extend(n for n in params[legs] if n != ids.LAUNCHER)
    return touched


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    checks = [i for i in items if "cluster" in getattr(i, "fixturenames", ())]
    if checks and _cluster(config) is None:
        raise pytest.UsageError(
            "no hostfile: pass --hostfile PATH (a DeepSpeed hostfile, 'host slots=N' per line), "
            "or set CLUSTER_TESTS_HOSTFILE; or --mpi-hostfile PATH, or run inside a Slurm "
            "allocation (SLURM_JOB_NODELIST) or a SkyPilot cluster (SKYPILOT_NODE_IPS)"
        )
    # Run the checklist in its own order (core.sections: H, S, N, F, E, A, R, D, C, T), not
    # alphabetically: the quick checks that explain later failures come first, the long phases last.
    def section(item: pytest.Item) -> int:
        marks = [sections.BY_MARKER[m.name] for m in item.iter_markers()
                 if m.name in sections.BY_MARKER]
        return marks[0].order if marks else len(sections.SECTIONS)

    if checks:
        position = {id(item): i for i, item in enumerate(items)}
        is_check = {id(item) for item in checks}
        items.sort(key=lambda i: (section(i) if id(i) in is_check else -1, position[id(i)]))
    if checks and _the_cluster(config).settings.quick:
        slow = [i for i in checks
                if i.get_closest_marker("collective") or i.get_closest_marker("training")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            gone = {id(i) for i in slow}
            items[:] = [i for i in items if id(i) not in gone]
            checks = [i for i in checks if id(i) not in gone]
    for item in checks:
        params = _params(item)
        if not _the_cluster(config).nodes and item.name != ids.HOSTFILE_SYNTAX.name:
            item.add_marker(pytest.mark.skip(
                reason="the hostfile names no host DeepSpeed would launch on: see "
                       f"{ids.HOSTFILE_SYNTAX}"), append=False)
        if "cluster_host" in getattr(item, "fixturenames", ()):
            item.user_properties.append(("site_check", "testinfra"))
        if "node" in params or "rank0_node" in params:
            item.user_properties.append(("node", params.get("node") or params["rank0_node"]))
        if "pair" in params:
            item.user_properties.append(("pair", "->".join(params["pair"])))


@pytest.hookimpl(tryfirst=True)  # the order settled before xdist's workers report theirs
def pytest_collection_finish(session: pytest.Session) -> None:
    cluster = _cluster(session.config)
    if cluster is None:
        return
    _pdsh_legs_with_the_rehearsal(session.items, cluster.names[:1])
    session.config.stash[outcome.SELECTED_KEY] = frozenset(item.name for item in session.items)
    touched: list[str] = []
    for item in session.items:
        touched.extend(_touched_nodes(item))
    # which sources each pair check will run from, so that a session-wide pair probe (S4's
    # ssh_pairs) can start every source at once instead of one source per test, in turn
    sources: dict[str, list[str]] = {}
    for item in session.items:
        pair = _params(item).get("pair")
        if pair is not None and pair[0] != pairs_mod.ANY:
            sources.setdefault(getattr(item, "originalname", item.name), []).append(pair[0])
    sources = {k: list(dict.fromkeys(v)) for k, v in sources.items()}
    cluster.memo(pairs_mod.SOURCES_KEY, lambda: sources)
    if not hasattr(session.config, "workerinput"):
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        cluster.progress_sink = progress_writer(reporter, session.config.option.verbose)
    modules = dict.fromkeys(getattr(item, "module", None) for item in session.items)
    # what exists now (the items above all: 200,000 at 4096 nodes, a dozen objects each) lives
    # until the session ends; the cyclic garbage collector need not walk it on every full pass
    gc.freeze()
    if session.config.option.collectonly:
        return  # nothing runs: nothing to fetch or start on the nodes
    cluster.prefetch(touched, node_probes(cluster.settings, [m for m in modules if m is not None]))
    # background phases a check module starts for its selected tests (the launch rehearsal, the
    # port matrix); not under pytest-xdist, where each worker would start its own
    if not hasattr(session.config, "workerinput"):
        selected = frozenset(getattr(item, "originalname", item.name) for item in session.items)
        for module in modules:
            start = getattr(module, "session_start", None)
            if start is not None:
                start(cluster, selected)


def _pdsh_legs_with_the_rehearsal(items: list[pytest.Item], rank0: list[str]) -> None:
    """Where the session runs the launch rehearsal (a test that reads it is selected: each
    check module's REHEARSAL_READERS), S5's legs from the rank-0 node are read from its pdsh
    run (checks/ssh.py): they run right after the last of those readers, not in S's place,
    where they would hold every check between S and E back until the rehearsal's imports
    are done (those checks then ran one after another at its end, on one core)."""
    modules = dict.fromkeys(getattr(item, "module", None) for item in items)
    readers = frozenset().union(*(getattr(m, "REHEARSAL_READERS", frozenset())
                                  for m in modules if m is not None))
    last = max((i for i, item in enumerate(items)
                if getattr(item, "originalname", None) in readers), default=None)
    if last is None:
        return
    legs = [item for item in items[:last] if getattr(item, "originalname", None) == ids.PDSH.name
            and _params(item).get("pdsh_leg", ("",))[0] in rank0]
    if not legs:
        return
    moved = {id(item) for item in legs}
    anchor = items[last]
    kept = [item for item in items if id(item) not in moved]
    at = next(i for i, item in enumerate(kept) if item is anchor) + 1
    items[:] = kept[:at] + legs + kept[at:]


def pytest_itemcollected(item: pytest.Item) -> None:
    """`-k "node1->node2"`: pair ids get a keyword that pytest's -k grammar can spell."""
    if "->" in item.name:
        item.extra_keyword_matches.add(keyword_form(item.name))


def _session_fixtures(config: pytest.Config) -> types.ModuleType:
    """The session's own fixtures, closures over its config, in a plugin of their own (registered
    by pytest_configure).  Each time a test reaches a fixture that takes `request` (pytest's
    `pytestconfig` and `record_property` do), pytest builds a new FixtureDef for it and reads a
    signature (three times a test for `record_property`), where nearly every test of a
    4096-node run takes `cluster`, and 31 checks `record_property`."""
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

    current: list[pytest.Item] = []  # the test being set up, for record_property

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(item: pytest.Item) -> None:
        current[:] = [item]

    @pytest.fixture(name="record_property")
    def record_property() -> Callable[[str, object], None]:
        """Add a property to the calling test (`record_property(name, value)`): it goes into
        the test's report, JUnit and the cluster summary.  pytest's own fixture, without its
        `request` (see above); the same warning where the JUnit family drops properties."""
        item = current[0]
        xml = config.stash.get(junit.xml_key, None) if junit.xml_key is not None else None
        if xml is not None and xml.family not in ("xunit1", "legacy"):
            item.warn(pytest.PytestWarning(
                f"record_property is incompatible with junit_family '{xml.family}' "
                f"(use 'legacy' or 'xunit1')"))
        return lambda name, value: item.user_properties.append((name, value))

    for fn in (cluster, settings, hostfile, record_property, pytest_runtest_setup):
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
            terminalreporter.write_sep("=", "verdict: causes and launch now")
            for line in lines:
                terminalreporter.write_line(line)


@pytest.hookimpl(specname="pytest_terminal_summary")
def pytest_terminal_summary_collective(terminalreporter, config: pytest.Config) -> None:
    """C1/C2: the all-reduce bandwidth tables, when a collective check ran (its own hookimpl,
    beside any other summary part)."""
    from cluster_tests.measure.allreducerun import summary_lines

    lines = summary_lines(config)
    if lines:
        terminalreporter.write_sep("=", "all-reduce bandwidth (C1/C2)")
        for line in lines:
            terminalreporter.write_line(line)
