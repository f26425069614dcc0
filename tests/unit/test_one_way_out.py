"""The rules of issue 40 that keep the code readable, read from the code itself (ast).

- a check reaches the nodes through the cluster's read-only view: never the pool of SSH
  sessions, the transport, or a command of its own (measure/ runs commands; core/ sends probes);
- a check fails with its judge's Problem (`outcome.fail`), never with text (`pytest.fail`);
- nothing reads a fix back out of a red's text: judge/problem.py keeps no such parser.
"""

from __future__ import annotations

import ast

import paths

CHECKS = paths.PACKAGE / "checks"
#: what a check may not reach of the cluster (the remote layer, or its private state)
REMOTE = {"pool", "transport", "run", "stream", "_memo", "_values", "_lock", "srun"}


def _attributes(path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    return [(n.lineno, n.attr) for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "cluster" and n.attr in REMOTE]


def test_checks_never_touch_the_remote_layer():
    found = {f"{p.name}:{line}": attr for p in sorted(CHECKS.glob("*.py"))
             for line, attr in _attributes(p)}
    assert found == {}, found


def _calls(path, owner: str, name: str) -> list[int]:
    tree = ast.parse(path.read_text())
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == name and isinstance(n.func.value, ast.Name)
            and n.func.value.id == owner]


def test_checks_fail_with_a_problem_never_with_text():
    found = {f"{p.name}:{line}" for p in sorted(CHECKS.glob("*.py"))
             for line in _calls(p, "pytest", "fail")}
    assert found == set(), sorted(found)


def test_no_parser_reads_a_fix_back_out_of_a_message():
    tree = ast.parse((paths.PACKAGE / "judge" / "problem.py").read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert not names & {"from_text", "fix_lines", "said_fix", "node_problems", "listed_problem"}


def test_the_rule_finds_a_text_red(tmp_path):
    """The rule above reads what it should: a check module that fails with text is found."""
    bad = tmp_path / "bad.py"
    bad.write_text("import pytest\n\ndef test_x():\n    pytest.fail('node3: broken')\n")
    assert _calls(bad, "pytest", "fail") == [4]


def test_every_judge_module_has_its_test_file():
    """A newcomer finds a verdict's tests by its module's name: judge/<x>/<m>.py has
    tests/unit/test_judge_<m>.py."""
    tests = paths.REPO / "tests" / "unit"
    modules = [p for p in (paths.PACKAGE / "judge").rglob("*.py") if p.name != "__init__.py"]
    missing = sorted(p.relative_to(paths.PACKAGE).as_posix() for p in modules
                     if not (tests / f"test_judge_{p.stem}.py").exists())
    assert missing == []
