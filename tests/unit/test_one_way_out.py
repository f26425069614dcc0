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


def _plain_str_enums(path) -> list[str]:
    """The classes of a module declared `(str, Enum)` (or `StrEnum`), SectionCause aside."""
    out = []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.ClassDef) and n.name != "SectionCause":
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in n.bases}
            if {"str", "Enum"} <= bases or "StrEnum" in bases:
                out.append(f"{path.name}:{n.lineno} {n.name}")
    return out


def test_every_cause_enum_is_a_section_cause(tmp_path):
    """A section's causes subclass judge/problem.py's SectionCause: a plain `(str, Enum)` hashes
    by its member's name, so the same cause read back from a report's JSON (a str) would be
    another key (test_judge_problem.py shows the SectionCause side)."""
    found = [hit for p in sorted(paths.PACKAGE.rglob("*.py")) for hit in _plain_str_enums(p)]
    assert found == [], found
    bad = tmp_path / "bad.py"
    bad.write_text("from enum import Enum\n\nclass ToyCause(str, Enum):\n    X = 'x'\n")
    assert _plain_str_enums(bad) == ["bad.py:3 ToyCause"]


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
