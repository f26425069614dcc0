"""The folder rule of cluster_tests/ (README "Developing / Where code goes"), as an import graph:
every import of every module (at the top, inside functions, under TYPE_CHECKING) is parsed with
`ast`, and every module a module reaches through a chain of imports (the transitive closure,
not only its own imports) is checked against what its folder may use.

    node/     nothing of cluster_tests (the scripts run alone on the nodes)
    judge/    judge/ only (pure judgement), and core.testids/core.sections (dependency-free
              constants: the test ids its messages cite, the section table)
    report/   judge/, report/, core.memokey, core.nodetable, core.testids, core.sections,
              core.labels, core.pytestprivate
    core/     core/ and judge/
    measure/  core/, judge/, node/, measure/
    checks/   anything but another checks module
    plugin    the composition root (cluster_tests/plugin.py): it wires every layer together,
              and no module of the package imports it
    cli       the `cluster-tests` command: pytest and the plugin's name, nothing else

One exception, in EXCEPTIONS with its reason: core.probing reads node/ (the scripts it sends).

And no import circles: no module reaches itself through imports (inside functions included: a
circle "cut" by a function-level import is still a circle), but those in KNOWN_CIRCLES, each
with the issue that cuts it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import paths
import pytest

PACKAGE = "cluster_tests"
ROOT = paths.PACKAGE

#: what report/ may use of core/: keys, the node table and its column declarations, test-id
#: and section constants, the properties that say where a check ran, and the one module of
#: pytest's private parts (report/junit.py's writer, report/trim.py); not the cluster, the
#: settings or the transport
REPORT_CORE = {"core.memokey", "core.nodetable", "core.testids", "core.sections",
               "core.labels", "core.pytestprivate"}
#: what judge/ may use of core/: the test-id constants ("see test_login[node3]" in a message
#: goes through them, so a renamed test cannot leave a stale reference); pure constants, no I/O
JUDGE_CORE = {"core.testids", "core.sections"}

#: the composition root: may use every layer; no module may use it
ROOT_MODULE = "plugin"

#: (importer, imported) pairs allowed against the rule, each with its reason; at most one.
EXCEPTIONS = {
    # Probes.probe sends a node script (`node.source(name)`: the file, with the prelude for
    # the probe family) to run it: core reads the node/ folder; nothing of node/ runs here.
    ("core.probing", "node"),
}


#: import circles not cut yet, each with the issue that cuts it; taken out when it is cut
KNOWN_CIRCLES: set[frozenset[str]] = set()  # none left: issue 40 cut the last two


def module_name(path: Path) -> str:
    """`core.cluster` for cluster_tests/core/cluster.py, `node` for cluster_tests/node/__init__.py,
    "" for the package's own __init__."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split(".")) if name else ROOT
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(source: str, name: str, is_package: bool = False) -> set[str]:
    """The cluster_tests modules that `source` (the module `name`) imports, relative to the
    package (`core.cluster`); `from cluster_tests.judge import env` counts as `judge.env`."""
    found: set[str] = set()
    here = name.split(".") if name else []
    if not is_package:
        here = here[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)] if node.level > 1 else here
                mod = ".".join([PACKAGE, *base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            targets = [mod]
            if mod == PACKAGE or mod.startswith(PACKAGE + "."):
                inner = mod[len(PACKAGE) + 1:]
                subs = [f"{inner}.{a.name}".lstrip(".") for a in node.names]
                if any(_is_module(s) for s in subs):
                    targets = [f"{PACKAGE}.{s}" for s in subs if _is_module(s)]
        else:
            continue
        for t in targets:
            if t == PACKAGE or t.startswith(PACKAGE + "."):
                found.add(t[len(PACKAGE) + 1:])
    return found


def _folder(module: str) -> str:
    return module.split(".")[0]


def allowed(importer: str, imported: str) -> bool:
    """Whether the folder rule lets `importer` import `imported` (both relative to the package)."""
    if (importer, imported) in EXCEPTIONS:
        return True
    src, dst = _folder(importer), _folder(imported)
    if imported == ROOT_MODULE:
        return False
    if importer == ROOT_MODULE:
        return True
    if src == "cli":
        return False
    if src == "node":
        return False
    if src == "judge":
        return dst == "judge" or imported in JUDGE_CORE
    if src == "report":
        return dst in ("judge", "report") or imported in REPORT_CORE
    if src == "core":
        return dst in ("core", "judge")
    if src == "measure":
        return dst in ("core", "judge", "node", "measure")
    if src == "checks":
        return dst != "checks" or imported == "checks"
    return True  # the package's own __init__


def _modules() -> list[tuple[str, Path]]:
    return sorted((module_name(p), p) for p in ROOT.rglob("*.py"))


def _graph() -> dict[str, set[str]]:
    """{module: the modules it imports itself}; a package's import counts as its __init__'s."""
    return {m: imports_of(p.read_text(), m, p.name == "__init__.py") for m, p in _modules()}


def chains(graph: dict[str, set[str]], start: str) -> dict[str, list[str]]:
    """Every module `start` reaches through imports, each with one shortest chain to it
    ([start, ..., module]). An EXCEPTIONS edge is not taken: what the exception allows is read,
    not run (core.probing reads the node/ scripts it sends), and it is allowed on its own edge."""
    found: dict[str, list[str]] = {}
    todo = [[start]]
    while todo:
        path = todo.pop(0)
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt in found or nxt == start or (path[-1], nxt) in EXCEPTIONS:
                continue
            found[nxt] = [*path, nxt]
            todo.append(found[nxt])
    return found


def test_every_module_keeps_to_its_folders_rule() -> None:
    """Through every chain of imports, not only its own: judge/ reaching core.cluster through a
    core module that imports it is as impure as importing it."""
    modules = _modules()
    assert {_folder(m) for m, _ in modules if m} >= {"checks", "judge", "measure", "node",
                                                      "report", "core", ROOT_MODULE}
    graph = _graph()
    broken = []
    for m, p in modules:
        if not m:
            continue
        for reached, chain in sorted(chains(graph, m).items()):
            if not allowed(m, reached):
                broken.append(f"{PACKAGE}/{p.relative_to(ROOT)} reaches {reached}: "
                              + " -> ".join(chain))
    assert not broken, "imports against the folder rule (README: Where code goes):\n  " + \
        "\n  ".join(broken)


def test_at_most_one_exception_and_it_is_still_needed() -> None:
    """An exception that no module uses any more is taken out of EXCEPTIONS."""
    assert len(EXCEPTIONS) <= 1
    used = {(m, imp) for m, imps in _graph().items() for imp in imps}
    assert EXCEPTIONS <= used, sorted(EXCEPTIONS - used)


def test_nothing_imports_the_composition_root() -> None:
    graph = _graph()
    assert ROOT_MODULE in graph
    assert not [m for m, imps in graph.items() if ROOT_MODULE in imps]


def test_chains_are_followed() -> None:
    graph = {"judge.a": {"core.testids", "core.x"}, "core.x": {"core.probing"},
             "core.probing": {"node"}, "node": set()}
    got = chains(graph, "judge.a")
    assert got["core.probing"] == ["judge.a", "core.x", "core.probing"]
    assert not allowed("judge.a", "core.probing")
    assert "node" not in got  # the exception's edge is not a chain


@pytest.mark.parametrize(("importer", "source", "imported", "ok"), [
    ("judge.env.envvars", "from cluster_tests.core.cluster import Cluster", "core.cluster",
     False),
    ("judge.env.envvars", "def f():\n    from cluster_tests.judge.common import tooloutput",
     "judge.common.tooloutput", True),
    ("judge.ssh.sshmodes", "from cluster_tests.report import fixes as fx", "report.fixes",
     False),
    ("judge.env.launchlegs", "from cluster_tests.core.testids import S4", "core.testids", True),
    ("report.html", "from . import summary", "report.summary", True),
    ("report.html", "from ..core.testids import S4", "core.testids", True),
    ("report.fixes", "from ..core import memokey", "core.memokey", True),
    ("report.html", "from cluster_tests.core.cluster import Cluster", "core.cluster", False),
    ("core.cluster", "from cluster_tests.report.summary import mask", "report.summary", False),
    ("plugin", "from cluster_tests.report import html", "report.html", True),
    ("core.cluster", "from cluster_tests import plugin", "plugin", False),
    ("checks.ssh", "from cluster_tests.plugin import CHECKS_DIR", "plugin", False),
    ("measure.ports", "from cluster_tests.checks import network", "checks.network",
     False),
    ("measure.ports", "import cluster_tests.node", "node", True),
    ("checks.env", "from cluster_tests.checks.ssh import LAUNCHER", "checks.ssh",
     False),
    ("checks.env", "from cluster_tests.measure import envfacts", "measure.envfacts", True),
    ("node.probe", "from cluster_tests import node", "node", False),
])
def test_the_rule_reads_imports_as_written(importer: str, source: str, imported: str,
                                           ok: bool) -> None:
    assert imports_of(source, importer) == {imported}
    assert allowed(importer, imported) is ok


# -- no import circles (issue 40) -----------------------------------------------------------------


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph`: each set of modules that reach one another (a strongly
    connected component of two or more, or a module importing itself), as one circle through
    them ([m, ..., m]), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = {stack.pop()}
            while v not in comp:
                comp.add(stack.pop())
            if len(comp) > 1 or v in graph.get(v, ()):
                found.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for comp in found:
        start = min(comp)
        inside = {m: graph.get(m, set()) & comp for m in comp}
        back = [c for c in chains(inside, start).values() if start in graph.get(c[-1], ())]
        out.append([*min(back, key=len, default=[start]), start])
    return sorted(out)


def test_no_import_circles() -> None:
    """A module that reaches itself through its imports (hostparse -> hostlint -> hostparse) is
    two modules that cannot be read, tested or moved apart: the model they share goes into a
    module of its own (judge/hostfile/hostmodel.py)."""
    found = circles(_graph())
    new = [" -> ".join(c) for c in found if frozenset(c) not in KNOWN_CIRCLES]
    assert new == [], "import circles:\n  " + "\n  ".join(new)


def test_each_known_circle_is_still_there() -> None:
    """A circle cut is taken out of KNOWN_CIRCLES."""
    found = {frozenset(c) for c in circles(_graph())}
    assert KNOWN_CIRCLES <= found, sorted(sorted(c) for c in KNOWN_CIRCLES - found)


def test_a_circle_closed_inside_a_function_is_found() -> None:
    graph = {
        "judge.hostfile.hostparse": imports_of(
            "def parse():\n    from cluster_tests.judge.hostfile.hostlint import lint_line\n",
            "judge.hostfile.hostparse"),
        "judge.hostfile.hostlint": imports_of(
            "from cluster_tests.judge.hostfile.hostparse import Finding\n",
            "judge.hostfile.hostlint"),
        "judge.hostfile.hostmodel": set(),
        "core.a": {"core.a"},
    }
    assert circles(graph) == [
        ["core.a", "core.a"],
        ["judge.hostfile.hostlint", "judge.hostfile.hostparse", "judge.hostfile.hostlint"]]
    graph["judge.hostfile.hostlint"] = {"judge.hostfile.hostmodel"}
    graph["core.a"] = set()
    assert circles(graph) == []


# -- finding a verdict from an id (issue 40) ----------------------------------------------------


def test_module_names_are_unique_across_layers() -> None:
    """A name read in an import or a traceback says which file it is: no two modules of the
    package share a file name (a section's check module and its judge package share the
    section's name, which the section table pairs)."""
    seen: dict[str, list[str]] = {}
    for name, path in _modules():
        if path.name != "__init__.py":
            seen.setdefault(path.stem, []).append(name)
    assert {k: v for k, v in seen.items() if len(v) > 1} == {}


def test_each_module_has_one_alias_or_none() -> None:
    """`from cluster_tests.judge.training import traindiag as tdiag` everywhere, or never `as`."""
    aliases: dict[str, set[str]] = {}
    for path in [*ROOT.rglob("*.py"), *paths.REPO.joinpath("tests").rglob("*.py"),
                 *paths.REPO.joinpath("bench").rglob("*.py"),
                 *paths.REPO.joinpath("fixtures").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
                for a in node.names:
                    full = f"{node.module}.{a.name}"[len(PACKAGE) + 1:]
                    if _is_module(full):
                        aliases.setdefault(full, set()).add(a.asname or a.name)
    several = {m: sorted(a) for m, a in aliases.items() if len(a) > 1}
    assert several == {}


def test_the_section_table_names_each_sections_modules() -> None:
    """core/sections.py: from a checklist letter to its check module, judge package and measure
    modules in one hop; every judge package is a section's (or the shared `common`)."""
    from cluster_tests.core import sections

    for s in sections.SECTIONS:
        assert _is_module(f"checks.{s.module}"), s
        assert (ROOT / "judge" / s.judge / "__init__.py").is_file(), s
        for m in s.measure:
            assert _is_module(f"measure.{m}"), (s, m)
    packages = {p.parent.name for p in (ROOT / "judge").glob("*/__init__.py")}
    assert packages == {s.judge for s in sections.SECTIONS} | {"common"}
    measured = [m for s in sections.SECTIONS for m in s.measure]
    assert len(measured) == len(set(measured))  # each measure module is one section's
