"""The run as pytest's config holds it: its settings, where its nodes came from, its cluster;
and what the plugin's hooks do with them: read the settings and the node list when pytest
configures (:func:`configure`), set pytest's own options as the suite wants them, say what the
report header says, tell whether the session logs in to every node at once, and give
summary.json its metadata.  The session's own fixtures (`cluster`, `settings`, `hostfile`) are
made here too (:func:`fixtures`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import types
from pathlib import Path

import pytest

from cluster_tests.core import launch as launch_mod
from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core import sections, workers
from cluster_tests.core import source as source_mod
from cluster_tests.core import srun as srun_mod
from cluster_tests.core.cluster import CLUSTER_KEY, Cluster
from cluster_tests.core.collection import CHECKS_DIR
from cluster_tests.core.interrupt import InterruptGuard
from cluster_tests.core.labels import keyword_form
from cluster_tests.core.settings import Settings, read_settings
from cluster_tests.judge.hostfile import hostparse as hf

SETTINGS_KEY = pytest.StashKey[Settings]()
PARSE_KEY = pytest.StashKey[hf.HostfileParse]()
#: where the node list came from (the report header's "from ...")
SOURCE_KEY = pytest.StashKey[str]()
SESSION_KEY = pytest.StashKey[pytest.Session]()
#: the environment the suite was started with (the launch's, for --then-launch)
ENVIRON_KEY = pytest.StashKey[dict[str, str]]()
GUARD_KEY = pytest.StashKey[InterruptGuard]()


def cluster_of(config: pytest.Config) -> Cluster | None:
    return config.stash.get(CLUSTER_KEY, None)


def the_cluster(config: pytest.Config) -> Cluster:
    """The run's cluster where the caller knows there is one (a hostfile was given)."""
    cluster = cluster_of(config)
    assert cluster is not None
    return cluster


def environ(config: pytest.Config) -> dict[str, str]:
    """The environment the suite was started with (its launch's)."""
    got: dict[str, str] = config.stash.get(ENVIRON_KEY, {}) or dict(os.environ)
    return got


def testinfra_active(pluginmanager: pytest.PytestPluginManager) -> bool:
    """Whether pytest-testinfra's plugin is loaded (it has its own --ssh-config)."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return pluginmanager.has_plugin("testinfra")
    return (importlib.util.find_spec("testinfra") is not None
            and not pluginmanager.is_blocked("testinfra"))


def configure(config: pytest.Config) -> tuple[Cluster, list[str]] | None:
    """pytest's options as the suite sets them, the run's settings, and its node list: the
    cluster, and what the summary must say of how the list was read (None: no node list)."""
    config.stash[ENVIRON_KEY] = dict(os.environ)  # what --then-launch starts the launch with
    pytest_options(config)
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
        return None
    settings, parse, config.stash[SOURCE_KEY], notes = got
    if settings.transport == "srun":
        try:
            settings = dataclasses.replace(settings, srun_path=srun_mod.check_usable(
                os.environ, settings.hostfile_source))
        except srun_mod.SrunError as exc:
            raise pytest.UsageError(str(exc)) from None
    config.stash[SETTINGS_KEY] = settings
    config.stash[PARSE_KEY] = parse
    # (the header's "nodes from" says it too; the summary's last lines are what stays seen)
    return Cluster.create(settings, list(parse.hosts)), (
        [] if hasattr(config, "workerinput") else notes)


def pytest_options(config: pytest.Config) -> None:
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
        # the collection gives every pair test (see core/labels.keyword_form)
        config.option.keyword = keyword_form(config.option.keyword)


def choose_pairs(cluster: Cluster) -> None:
    """--pairs: chosen once, before collection; the probes ask it which targets to reach."""
    spec = pairs_mod.parse_spec(cluster.settings.pairs)
    cluster.memo(pairs_mod.MEMO_KEY, lambda: pairs_mod.Selection.make(cluster.names, spec))


def guard(config: pytest.Config) -> InterruptGuard | None:
    """The plugin that keeps a second Ctrl-C from cutting short the cleanup of the nodes that
    the first one starts (None where it cannot be installed here)."""
    config.stash[GUARD_KEY] = got = InterruptGuard(bool(config.option.fulltrace))
    return got if got.install() else None


def default_paths(config: pytest.Config, settings: Settings) -> None:
    """What the run collects and writes where the command line does not say: the checklist,
    the site's own checks (--site-checks), the JUnit report in reports/."""
    if config.args_source == pytest.Config.ArgsSource.INVOCATION_DIR:
        # No test paths given and no ini file naming them (an installed suite, run from
        # anywhere): run the checklist, not whatever test files the current directory holds.
        config.args = [str(CHECKS_DIR)]
    _add_site_checks(config, settings)
    if getattr(config.option, "xmlpath", "unset") is None and not hasattr(config, "workerinput"):
        reports = Path(config.invocation_params.dir) / "reports"
        reports.mkdir(exist_ok=True)
        config.option.xmlpath = str(reports / "junit.xml")


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


def logs_in_everywhere(config: pytest.Config) -> bool:
    """Whether this session will log in to every node, known before collection: it runs tests
    (not --collect-only, --setup-plan, --fixtures), here (not an xdist controller or worker),
    over SSH, and selects by no name (no -k, --lf, --deselect, test ids), which every node's
    items would pass or fail together."""
    o = config.option
    if hasattr(config, "workerinput") or getattr(o, "numprocesses", None):
        return False
    if the_cluster(config).settings.transport != "ssh":
        return False
    if any(getattr(o, name, None) for name in (
            "keyword", "lf", "deselect", "collectonly", "setupplan", "setuponly",
            "showfixtures", "show_fixtures_per_test")):
        return False
    return not any("::" in str(a) for a in config.args)


def header_lines(config: pytest.Config) -> list[str]:
    """The report header's account of the run: its nodes, how they are reached, the launch."""
    cluster = cluster_of(config)
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
        *launch_mod.header_lines(s, environ(config)),
    ]


def under(config: pytest.Config, raw: str) -> Path:
    """A path option as given, relative to where pytest was started."""
    path = Path(raw).expanduser()
    return path if path.is_absolute() else Path(config.invocation_params.dir) / path


def summary_path(config: pytest.Config) -> Path:
    """summary.json's path: beside the JUnit report, else reports/ where pytest was started;
    the other report files go beside it."""
    if config.option.xmlpath:
        return Path(config.option.xmlpath).with_name("summary.json")
    return Path(config.invocation_params.dir) / "reports" / "summary.json"


def history_given(config: pytest.Config, settings: Settings) -> Path | None:
    """--history, where given (else the history file goes beside the reports)."""
    return under(config, settings.after.history) if settings.after.history else None


def meta(session: pytest.Session, cluster: Cluster) -> dict[str, object]:
    """summary.json's `meta`: where the nodes came from, how many, rank 0, the exit status, the
    pairs checked, and what the run did remotely (every xdist worker included)."""
    config = session.config
    got: dict[str, object] = {
        "hostfile": str(cluster.settings.hostfile),
        "node_source": config.stash.get(SOURCE_KEY, ""),
        "nodes": len(cluster.nodes),
        "rank0": cluster.rank0.name if cluster.nodes else None,
        "exitstatus": int(session.exitstatus),
    }
    selection = pairs_mod.selection(cluster)
    if selection is not None:
        got["pairs"] = selection.meta(len(cluster.nodes))
    got.update(workers.remote_counts(config, cluster))
    return got


def fixtures(config: pytest.Config) -> types.ModuleType:
    """The session's own fixtures, closures over its config, in a plugin of their own (the
    plugin registers it when pytest configures).  Each time a test reaches a fixture that takes
    `request` (pytest's `pytestconfig` does), pytest builds a new FixtureDef for it and reads a
    signature, where nearly every test of a 4096-node run takes `cluster` (`record_property`:
    report/recordprop)."""
    holder = types.ModuleType("cluster_tests.fixtures")

    @pytest.fixture(scope="session", name="cluster")
    def cluster() -> Cluster:
        """The run's cluster: its nodes, logins, probes and memo (core/cluster.py)."""
        c = cluster_of(config)
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
        return config.stash[PARSE_KEY]

    for fn in (cluster, settings, hostfile):
        setattr(holder, fn.__name__, fn)
    return holder
