"""docs/developing.md "Adding a check", followed literally for a toy check, in a copy of the
package.

The copy (pytest's tmp_path) gets what the recipe says a newcomer writes, as text edits of its
files: the fact (`node/toyprobe.py`, `section_toy`), the verdict (`judge/toy/toyjudge.py`: the
facts, the probe, the cause enum, `judge_toy` returning a Problem with a `Fix`), the check
(`checks/toy.py`, `test_toy`), the section's row in `core/sections.py` and the check's `TestId`
(with its scope), with what else the recipe names (the script's `PARTS` entry, the package's
`__init__.py`, the section marker, `cluster.require`, the run order test_testids.py spells, the
judge's unit test). Then the suite runs *from the copy* (its directory first on PYTHONPATH) on
an in-process fake cluster of 3 nodes (bench/fake_transport.py), where the toy section is
answered by running the copy's own `toyprobe.py` (prelude included, as a node runs it) on a
directory of each node's own: node3's lacks the file.

- The red shows once, and only once, wherever the recipe says it does: the terminal summary,
  fixes.sh, hostfile.healthy and summary.json; nothing else of the run is red.
- With node3 powered off instead, the toy check there is blocked by its login's red, and
  `-m toy` selects the toy check.
- The unit tests that hold a check to its place (layers, section table, test ids,
  every check's TestId), and the toy judge's own, pass on the copy.

Each step the recipe names is needed: leaving one out fails one of these tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from paths import PACKAGE, REPO

NODES = ("node1", "node2", "node3")
#: the file the toy check names, as every node sees it
TOY_FILE = "/var/lib/toy/ready"

# 1. The fact: node/<section>probe.py, a section_<name>(params) returning JSON.
TOYPROBE = '''\
"""Node-side toy probe (CHECKLIST X1): the file the check names exists on the node.

Same protocol as probe.py: argv[1] is JSON {"sections": [...], ...}; one line
`CT_PROBE_JSON:{section: data}` on stdout.  Standard library only.

Sections:
  toy     whether params["path"] exists on this node
"""

import os


def section_toy(params):
    path = params["path"]
    return {"path": path, "exists": os.path.exists(path)}


if __name__ == "__main__":
    probe_main(globals())
'''

# 2. The verdict: judge/<section>/<module>.py, pure.
JUDGE_INIT = '"""X: the toy section: a file the check names exists on every node."""\n'
TOYJUDGE = '''\
"""X1's verdict (pure): the file the check names, as node/toyprobe.py's `toy` sees it."""

from __future__ import annotations

from dataclasses import dataclass
from cluster_tests.core import testids as ids
from cluster_tests.judge.common.probes import Probe, flag, obj, text
from cluster_tests.judge.problem import Fix, Problem, SectionCause

SCRIPT = "toyprobe.py"


class ToyCause(SectionCause):
    """What can be wrong with the toy file (Problem.cause)."""

    MISSING = "toy file missing"


@dataclass(frozen=True)
class ToyFacts:
    """The toy file on one node (`toy`)."""

    path: str
    exists: bool

    @classmethod
    def read(cls, raw: object) -> ToyFacts:
        d = obj(raw, "the toy file")
        return cls(text(d.get("path")), flag(d.get("exists")))


TOY: Probe[ToyFacts] = Probe(SCRIPT, "toy", ToyFacts.read)


def judge_toy(node: str, facts: ToyFacts) -> Problem | None:
    """X1: the toy file exists on `node`."""
    if facts.exists:
        return None
    return Problem(
        (node,), ToyCause.MISSING, f"{node}: {facts.path} does not exist there.",
        fix=f"on {node}: touch {facts.path}",
        fixes=(Fix(node, f"create {facts.path}", (f"touch {facts.path}",), item=ids.TOY.item),),
        item=ids.TOY.item)
'''

# 3. The check: checks/<section>.py, the module its row in core/sections.py names.
TOYCHECK = f'''\
"""X. Toy (CHECKLIST X1): a file the check names exists on every node.
Verdicts: judge/toy/toyjudge.py."""

from __future__ import annotations

import pytest

from cluster_tests.core import outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, ProbeError
from cluster_tests.judge.toy import toyjudge
from cluster_tests.judge.toy.toyjudge import TOY

pytestmark = pytest.mark.toy

PATH = "{TOY_FILE}"


def test_toy(cluster: Cluster, node: str, record_property) -> None:
    """X1: the toy file exists on the node."""
    cluster.require(node)
    try:
        facts = cluster.probe(node, TOY, path=PATH)
    except ProbeError as exc:
        outcome.fail(exc.problem(ids.TOY.item))
    record_property("toy_file", facts.path)
    problem = toyjudge.judge_toy(node, facts)
    if problem is not None:
        outcome.fail(problem)
'''

SECTION_ROW = '''\
    Section("X", "toy", "toy", "toy", (), "a toy file exists on every node"),
'''  # before C: the checklist's quick checks before the long phases (C, T)

# The fake cluster does not know the toy section: this plugin answers it by running the copy's
# node/toyprobe.py as a node runs it (its source, prelude first, through the bootstrap), with
# the path inside that node's own root directory (TOY_ROOTS/<node>/...), and reports the path
# back as the node names it.
TOYFAKE = '''\
import json
import os
import subprocess
import sys
from pathlib import Path

import fake_transport

from cluster_tests import node as node_scripts
from cluster_tests.core.cluster import BOOTSTRAP, PROBE_MARK

ROOTS = Path(os.environ["TOY_ROOTS"])
fake_transport.SCRIPTS = (*fake_transport.SCRIPTS, "toyprobe.py")
_recorded = fake_transport.answer


def answer(node, script, section, params):
    if script != "toyprobe.py":
        return _recorded(node, script, section, params)
    root = str(ROOTS / node)
    mapped = dict(params, path=root + params["path"])
    proc = subprocess.run([sys.executable, "-S", "-c", BOOTSTRAP,
                           json.dumps({"sections": [section], **mapped})],
                          input=node_scripts.source(script), capture_output=True, timeout=60,
                          check=False)
    line = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith(PROBE_MARK)]
    if proc.returncode != 0 or not line:
        return {"error": "toyprobe.py failed: " + proc.stderr.decode()[-2000:]}
    return json.loads(line[-1][len(PROBE_MARK):].replace(root, ""))[section]


fake_transport.answer = answer
'''


# The judge's unit test (the recipe's tests/unit/test_judge_<module>.py): facts from a real run
# of the node script, here, as test_judge_storejudge.py runs storeprobe.py.
TOYJUDGE_TEST = '''\
"""judge/toy/toyjudge.py: X1's verdict, on the facts node/toyprobe.py really gives (run here,
on files of this test's own)."""

from __future__ import annotations

import json
import subprocess
import sys

from cluster_tests import node
from cluster_tests.core.cluster import BOOTSTRAP, PROBE_MARK
from cluster_tests.judge.toy import toyjudge


def probe(section: str, **params) -> object:
    proc = subprocess.run([sys.executable, "-c", BOOTSTRAP,
                           json.dumps({"sections": [section], **params})],
                          input=node.source("toyprobe.py"), capture_output=True, timeout=60,
                          check=True)
    line = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith(PROBE_MARK)][-1]
    return json.loads(line[len(PROBE_MARK):])[section]


def test_a_file_that_exists_is_fine(tmp_path):
    (tmp_path / "ready").write_text("")
    facts = toyjudge.ToyFacts.read(probe("toy", path=str(tmp_path / "ready")))
    assert facts.exists and toyjudge.judge_toy("node1", facts) is None


def test_a_missing_file_is_red_with_the_command_that_creates_it(tmp_path):
    path = str(tmp_path / "ready")
    p = toyjudge.judge_toy("node3", toyjudge.ToyFacts.read(probe("toy", path=path)))
    assert p is not None and p.cause is toyjudge.ToyCause.MISSING and p.nodes == ("node3",)
    assert [(f.where, f.commands) for f in p.fixes] == [("node3", (f"touch {path}",))]
'''

#: the unit test files that keep a check's place in the package, copied into the scratch
#: checkout, and of them the tests that RULES runs there: the import layers, the section table,
#: the test ids (every check's TestId and scope), no reaching into the remote layer
RULE_FILES = (
    "test_layers.py", "test_testids.py", "test_judge_healthyset.py", "test_one_way_out.py")
RULES = (
    "test_layers.py::test_every_module_keeps_to_its_folders_rule",
    "test_layers.py::test_module_names_are_unique_across_layers",
    "test_layers.py::test_each_module_has_one_alias_or_none",
    "test_layers.py::test_the_section_table_names_each_sections_modules",
    "test_testids.py",
    "test_judge_healthyset.py::test_every_check_says_what_the_launch_needs_of_it",
    # (not its rule that every judge module has its test file: the scratch checkout holds only
    # the toy's; that the recipe writes test_judge_toyjudge.py is shown by running it)
    "test_one_way_out.py::test_checks_never_touch_the_remote_layer",
    "test_one_way_out.py::test_checks_fail_with_a_problem_never_with_text",
    "test_one_way_out.py::test_no_parser_reads_a_fix_back_out_of_a_message",
    "test_one_way_out.py::test_every_cause_enum_is_a_section_cause",
    "test_judge_toyjudge.py",
)


def _edit(path: Path, old: str, new: str) -> None:
    """Replace `old` (which the file at `path` holds once) with `new`."""
    content = path.read_text()
    assert content.count(old) == 1, (path, old)
    path.write_text(content.replace(old, new))


def _follow_the_recipe(proj: Path) -> None:
    """README "Adding a check", step by step, in the scratch checkout `proj`."""
    pkg, tests = proj / "cluster_tests", proj / "tests" / "unit"
    # 1. the fact, and its script named in node/__init__.py's PARTS (sent with the prelude)
    (pkg / "node" / "toyprobe.py").write_text(TOYPROBE)
    _edit(pkg / "node" / "__init__.py", '    "rehearse.py":',
          '    "toyprobe.py": ("prelude.py",),\n    "rehearse.py":')
    # 2. the verdict, in a new package judge/toy/, and its unit test
    (pkg / "judge" / "toy").mkdir()
    (pkg / "judge" / "toy" / "__init__.py").write_text(JUDGE_INIT)
    (pkg / "judge" / "toy" / "toyjudge.py").write_text(TOYJUDGE)
    (tests / "test_judge_toyjudge.py").write_text(TOYJUDGE_TEST)
    # 3. the check, its section's row (and letter in the run order), its TestId
    (pkg / "checks" / "toy.py").write_text(TOYCHECK)
    _edit(pkg / "core" / "sections.py", '    Section("C", "collective"',
          SECTION_ROW + '    Section("C", "collective"')
    _edit(tests / "test_testids.py", '"HSNFEARDCT"', '"HSNFEARDXCT"')
    _edit(pkg / "core" / "testids.py", "# C. collectives",
          '# X. the toy\nTOY = TestId("test_toy", "X1", Scope.NODE)\n# C. collectives')


def _scratch(tmp_path: Path) -> Path:
    """A scratch checkout: the package (without bytecode), the project's pytest settings and
    the unit tests of RULES, with the recipe followed in it."""
    proj = tmp_path / "proj"
    shutil.copytree(PACKAGE, proj / "cluster_tests",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", proj / "pyproject.toml")
    (proj / "tests" / "unit").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "paths.py", proj / "tests" / "paths.py")
    (proj / "tests" / "conftest.py").write_text(
        "import sys\nfrom pathlib import Path\n\n"
        "sys.path.insert(0, str(Path(__file__).resolve().parent))\n")
    for name in RULE_FILES:
        shutil.copy(REPO / "tests" / "unit" / name, proj / "tests" / "unit" / name)
    _follow_the_recipe(proj)
    return proj


def _roots(tmp_path: Path) -> Path:
    """Each node's own files: node3 has the toy file's directory but not the file."""
    roots = tmp_path / "roots"
    for n in NODES:
        where = roots / n / TOY_FILE.lstrip("/")
        where.parent.mkdir(parents=True)
        if n != "node3":
            where.write_text("")
    return roots


def _run(tmp_path: Path, *args: str, dead: int = 0
         ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The suite of the recipe's copy on the fake cluster of NODES (`dead`: FAKE_DEAD, every
    dead-th node powered off); its reports directory."""
    proj = _scratch(tmp_path)
    (tmp_path / "toyfake.py").write_text(TOYFAKE)
    run = tmp_path / "run"
    run.mkdir()
    hostfile = run / "hostfile"
    hostfile.write_text("".join(f"{n} slots=2\n" for n in NODES))
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    # the copy first: its cluster_tests, not the checkout's (installed in editable mode)
    env["PYTHONPATH"] = os.pathsep.join([str(proj), str(REPO / "bench"), str(tmp_path)])
    env["TOY_ROOTS"] = str(_roots(tmp_path))
    env["FAKE_DEAD"] = str(dead)
    env["FAKE_BLOCK"] = env["FAKE_FLAKY"] = ""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "fake_transport", "-p", "toyfake",
         "-p", "no:cacheprovider", "--hostfile", str(hostfile), "--pairs", "ring", "-q", "-rfs",
         *args, str(proj / "cluster_tests")],
        cwd=run, env=env, capture_output=True, text=True, timeout=300, check=False)
    reports = run / "reports"
    assert (reports / "junit.xml").exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc, reports


def _outcomes(reports: Path) -> dict[str, str]:
    """{test id: outcome} of summary.json's tests."""
    return {t["test_id"]: t["outcome"]
            for t in json.loads((reports / "summary.json").read_text())["tests"]}


def _block(text: str, first: str, end: str) -> str:
    """The lines of `text` from the one starting with `first` up to the next starting `end`."""
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith(first))
    j = next((k for k, ln in enumerate(lines[i + 1:], i + 1) if ln.startswith(end)), len(lines))
    return "\n".join(lines[i:j])


def test_a_toy_check_added_by_the_recipe_is_one_red_in_every_report(tmp_path: Path) -> None:
    proc, reports = _run(tmp_path, "-m", "not collective and not training")
    out = proc.stdout[-4000:] + proc.stderr[-4000:]

    # the copy's check ran on every node (the checkout has none), and the run's one red is
    # node3's: everything else on the fake cluster passes or skips
    got = _outcomes(reports)
    assert {n: got.get(f"test_toy[{n}]") for n in NODES} == {
        "node1": "passed", "node2": "passed", "node3": "failed"}, out
    assert [t for t, o in got.items() if o not in ("passed", "skipped")] == ["test_toy[node3]"]
    assert proc.returncode == 1, out
    assert proc.stdout.rstrip().splitlines()[-1].startswith("1 failed, "), out

    # the terminal summary: one cause, listed once, with the fix fixes.sh holds
    causes = _block(proc.stdout, "Causes (", "review and run")
    assert causes.splitlines() == [
        "Causes (1; one red each, the checks they block skipped):",
        "  node3: toy file missing (test_toy[node3])",
        f"      fix (fixes.sh): create {TOY_FILE}"], causes
    launch = _block(proc.stdout, "Launch now", "deepspeed --hostfile")
    assert launch.count("node3: test_toy[node3]: toy file missing") == 1, launch

    # summary.json: the cause once, at node3, its fix scripted
    summary = json.loads((reports / "summary.json").read_text())
    assert summary["causes"] == [{
        "where": "node3", "cause": "toy file missing",
        "headline": f"node3: {TOY_FILE} does not exist there.", "checks": ["test_toy[node3]"],
        "blocks": 0, "fix": f"create {TOY_FILE}", "scripted": True, "scope": "node"}], \
        summary["causes"]
    assert summary["fixes"] == [f"create {TOY_FILE}"]
    assert summary["healthy"]["kept"] == ["node1", "node2"]
    assert summary["healthy"]["excluded"] == [
        {"node": "node3", "causes": ["test_toy[node3]: toy file missing"]}]

    # fixes.sh: its command once, run on node3
    script = (reports / "fixes.sh").read_text()
    assert script.count(f"touch {TOY_FILE}") == 1, script
    line = next(ln for ln in script.splitlines() if f"touch {TOY_FILE}" in ln)
    assert line.startswith("ssh ") and " node3 " in line, line
    assert "# answers: test_toy[node3]" in script and script.count("# --- ") == 1, script

    # hostfile.healthy: node3 left out, the others kept
    healthy = (reports / "hostfile.healthy").read_text()
    hosts = [ln.split()[0] for ln in healthy.splitlines() if ln.strip() and ln[0] != "#"]
    assert hosts == ["node1", "node2"], healthy


def test_the_toy_check_on_a_dead_node_is_blocked_by_its_login(tmp_path: Path) -> None:
    """One cause, one red: node3 powered off (FAKE_DEAD=3) is test_login[node3]'s red; the toy
    check there is blocked naming it (the recipe's `cluster.require`), and `-m toy` selects the
    toy check by its section's marker."""
    proc, reports = _run(tmp_path, "-m", "toy or ssh", dead=3)
    out = proc.stdout[-4000:] + proc.stderr[-4000:]
    got = _outcomes(reports)
    assert {n: got.get(f"test_toy[{n}]") for n in NODES} == {
        "node1": "passed", "node2": "passed", "node3": "skipped"}, out
    assert [t for t, o in got.items() if o not in ("passed", "skipped")] == ["test_login[node3]"]
    tests = json.loads((reports / "summary.json").read_text())["tests"]
    toy3 = next(t for t in tests if t["test_id"] == "test_toy[node3]")
    assert toy3["properties"].get("blocked_by") == "test_login[node3]", toy3
    assert {t["module"].rsplit("/", 1)[-1] for t in tests} == {"ssh.py", "toy.py"}


def test_the_toy_check_keeps_the_rules_the_unit_tests_enforce(tmp_path: Path) -> None:
    """The unit tests that hold every check to its place (RULES: the import layers, the section
    table, the test ids and scopes, no reaching into the remote layer), and the toy judge's
    own unit test, pass on the copy with the toy check in it."""
    proj = _scratch(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = str(proj)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v",
         *(f"tests/unit/{n}" for n in RULES)],
        cwd=proj, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.returncode == 0, out
    for name in ("test_a_file_that_exists_is_fine",
                 "test_a_missing_file_is_red_with_the_command_that_creates_it",
                 "test_the_section_table_names_each_sections_modules",
                 "test_sections_are_the_check_modules",
                 "test_every_check_says_what_the_launch_needs_of_it"):
        assert any(name in ln and "PASSED" in ln for ln in proc.stdout.splitlines()), (name, out)
