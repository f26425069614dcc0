"""How the checklist is collected: the check modules (`cluster_tests/checks/<section>.py`,
core/sections.py) taken as pytest modules, each check parametrized over the nodes and pairs of
the hostfile (readable ids: `node3`, `node1->node3`), put in checklist order, deselected by
--quick, labelled with where it runs (core/labels.py: `node`, `pair`), and, once the selection
is known, the session's prefetch and background phases started for what it selected.

The plugin's collection hooks call these (cluster_tests/plugin.py).
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

from cluster_tests.core import checkhooks, gctune, ordering, outcome, sections
from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster
from cluster_tests.core.labels import NODE, PAIR, SITE_CHECK, PairLabel, keyword_form
from cluster_tests.core.progress import progress_writer

#: the check modules, cluster_tests/checks/<section>.py (core.sections), collected by the plugin
CHECKS_DIR = Path(__file__).resolve().parent.parent / "checks"

NO_HOSTFILE = ("no hostfile: pass --hostfile PATH (a DeepSpeed hostfile, 'host slots=N' per "
               "line), or set CLUSTER_TESTS_HOSTFILE; or --mpi-hostfile PATH, or run inside a "
               "Slurm allocation (SLURM_JOB_NODELIST) or a SkyPilot cluster (SKYPILOT_NODE_IPS)")


def _is_check_module(path: Path) -> bool:
    return path.suffix == ".py" and path.stem in sections.BY_MODULE and path.parent == CHECKS_DIR


def _python_collects(path: Path, parent: pytest.Collector) -> bool:
    """Whether pytest's own Python collector takes the file: a path given on the command line,
    or a name that matches `python_files`."""
    return parent.session.isinitpath(path) or any(
        fnmatch.fnmatch(path.name, pattern) for pattern in parent.config.getini("python_files"))


def check_module(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """The checks are shipped as section modules (`checks/ssh.py`), not as `test_*.py` files that
    IDEs, coverage and a project's own tooling would take for its tests: the plugin collects
    them itself, as pytest's own Module (same test functions, ids, markers, fixtures)."""
    if _is_check_module(file_path) and not _python_collects(file_path, parent):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def parametrize(metafunc: pytest.Metafunc, cluster: Cluster | None) -> None:
    """A check's nodes and pairs as its parameters, named in its ids."""
    if "cluster" not in metafunc.fixturenames:
        return  # not a check (e.g. the project's own tests, which may have a `node` of their own)
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


def select(config: pytest.Config, items: list[pytest.Item], cluster: Cluster | None) -> None:
    """The checks among `items` in checklist order, --quick's slow ones deselected, each
    labelled; skipped where the hostfile names no node.  No node list: a usage error."""
    checks = [i for i in items if "cluster" in getattr(i, "fixturenames", ())]
    if not checks:
        return
    if cluster is None:
        raise pytest.UsageError(NO_HOSTFILE)
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
        label(item)


def label(item: pytest.Item) -> None:
    """The check's nodes as properties (JUnit, the summary, core/labels.py): `node`, or `pair` as
    "a->b" (C2's unordered pairs "a<->b")."""
    params = ordering.item_params(item)
    if "cluster_host" in getattr(item, "fixturenames", ()):
        item.user_properties.append((SITE_CHECK, "testinfra"))
    node = params.get("node") or params.get("rank0_node")
    if node:
        item.user_properties.append((NODE, node))
    pair = params.get("pair")
    if isinstance(pair, tuple):
        item.user_properties.append((PAIR, str(PairLabel(*pair))))
    pair = params.get("node_pair")
    if isinstance(pair, tuple):
        item.user_properties.append((PAIR, str(PairLabel(*pair, ordered=False))))


def keyword(item: pytest.Item) -> None:
    """`-k "node1->node2"`: pair ids get a keyword that pytest's -k grammar can spell."""
    if "->" in item.name:
        item.extra_keyword_matches.add(keyword_form(item.name))


def finish(session: pytest.Session, cluster: Cluster) -> None:
    """The selection known: S5's legs placed with the rehearsal, the selected ids for
    core/outcome.py, progress to the terminal, and (unless nothing runs) every touched node's
    logins and probes started, and the background phases the selected tests read."""
    items = session.items
    ordering.pdsh_legs_with_the_rehearsal(items, cluster.names[:1])
    session.config.stash[outcome.SELECTED_KEY] = frozenset(item.name for item in items)
    touched = [n for item in items for n in ordering.touched_nodes(item)]
    # which sources each pair check will run from, so that a session-wide pair probe (S4's
    # ssh_pairs) can start every source at once instead of one source per test, in turn
    sources = ordering.pair_sources(items)
    cluster.memo(pairs_mod.SOURCES_KEY, lambda: sources)
    worker = hasattr(session.config, "workerinput")
    if not worker:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        cluster.progress_sink = progress_writer(reporter, session.config.option.verbose)
    modules = ordering.selected_modules(items)
    gctune.freeze_what_lives()  # the items above all, until the session ends
    if session.config.option.collectonly:
        return  # nothing runs: nothing to fetch or start on the nodes
    cluster.prefetch(touched, checkhooks.node_probes(cluster.settings, modules))
    # background phases a check module starts for its selected tests (the launch rehearsal, the
    # port matrix); not under pytest-xdist, where each worker would start its own
    if not worker:
        selected = frozenset(getattr(item, "originalname", item.name) for item in items)
        checkhooks.start_phases(modules, cluster, selected)
