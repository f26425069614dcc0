"""core/testids.py: the constants name real checks, and nothing spells a test name by hand.

A report that selects results by "test_allreduce", a fix table keyed by "test_master_port" or a
message that says "see test_login[node3]" goes stale silently when the check is renamed; through
the constants of core/testids.py it cannot.  This file keeps that rule after every merge:

(a) every constant names a test function of cluster_tests/checks/, in the module of its section,
    whose docstring opens with the constant's checklist item ("S1: ...");
(b) no string literal in cluster_tests/ (f-string parts included; docstrings, which explain, and
    core/testids.py, which defines, excepted) contains a test name (`test_` and a word), the
    check modules' own messages included.  Check module names (env, the section keys of the
    fixes script) come from the section table, `core/sections.py`;
(c) a Problem's or a Fix's checklist item comes from a constant too (`item=ids.SSH_TRUST.item`),
    never a literal ("S4").
"""

from __future__ import annotations

import ast
import re

import pytest
from paths import PACKAGE

from cluster_tests.core import sections
from cluster_tests.core import testids as ids
from cluster_tests.report import fixes as fixes_mod

CHECKS = PACKAGE / "checks"
DEFINES = PACKAGE / "core" / "testids.py"
TEST_NAME = re.compile(r"\btest_[a-z0-9_]+")

CONSTANTS = {k: v for k, v in vars(ids).items() if isinstance(v, ids.TestId)}


def _check_functions() -> dict[str, dict[str, str]]:
    """{check module: {test function: its docstring}}, read with ast (nothing imported)."""
    out: dict[str, dict[str, str]] = {}
    for path in sorted(CHECKS.glob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        out[path.stem] = {n.name: ast.get_docstring(n) or "" for n in tree.body
                          if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                          and n.name.startswith("test_")}
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = n.body[0] if n.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                found.add(id(first.value))
    return found


def test_id_forms() -> None:
    assert str(ids.LOGIN) == "test_login" == ids.LOGIN.name
    assert f"see {ids.LOGIN}" == "see test_login"
    assert ids.LOGIN.of("node1") == "test_login[node1]"
    assert ids.RESOLVES.of("node1", "node2") == "test_resolves[node1->node2]"
    e4 = ids.ASCEND_ENV
    assert (e4.item, e4.section, e4.module) == ("E4", "E", "env")
    assert ids.ALLREDUCE.section == "C"
    assert ids.ALLREDUCE.items == ("C1", "C3") and ids.LOGIN.items == ("S1",)
    with pytest.raises(AttributeError):
        ids.LOGIN.name = "test_other"  # type: ignore[misc]


def test_sections_are_the_check_modules() -> None:
    """The section table has one row per check module, in checklist order, as the fixes script
    sorts; letters, markers and modules are each unique."""
    assert sorted(s.module for s in sections.SECTIONS) == sorted(_check_functions())
    assert fixes_mod.ORDER == sections.ORDER == "HSNFEARDCT"
    for column in ("letter", "marker", "module"):
        assert len({getattr(s, column) for s in sections.SECTIONS}) == len(sections.SECTIONS)
    assert [s.order for s in sections.SECTIONS] == list(range(len(sections.SECTIONS)))


@pytest.mark.parametrize("const", sorted(CONSTANTS))
def test_constant_names_a_check(const: str) -> None:
    t = CONSTANTS[const]
    assert const == t.name.removeprefix("test_").upper(), "a constant is named after its test"
    functions = _check_functions()
    where = [m for m, fns in functions.items() if t.name in fns]
    assert where, f"{const}: no test function {t.name} in cluster_tests/checks/"
    assert where == [t.module], (f"{const}: {t.name} is in {where}, its section {t.section} is "
                                 f"{t.module}")
    doc = functions[t.module][t.name]
    assert doc.startswith(f"{t.item}:"), (
        f"{const}: item {t.item!r}, but {t.name}'s docstring opens {doc.split(':')[0]!r}")


def _spelled_names() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == DEFINES:
            continue
        tree = ast.parse(path.read_text(), str(path))
        skip = _docstrings(tree)
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip:
                for name in TEST_NAME.findall(n.value):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{n.lineno}: {name!r} in "
                                 f"{n.value!r}")
    return found


def test_no_test_name_spelled_by_hand() -> None:
    """Refer to a check through core/testids.py: `ids.LOGIN.name`, f"see {ids.LOGIN.of(node)}";
    add a constant there for a check that has none."""
    found = _spelled_names()
    assert not found, ("test names spelled as strings (use cluster_tests.core.testids):\n"
                       + "\n".join(found))


def _item_literals(tree: ast.AST, where: str) -> list[str]:
    """The checklist items written as literals where a Problem or a Fix takes one: an `item=`
    keyword, a Fix's fourth argument, a ProbeError's `.problem(...)`."""
    found = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        func = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        args = [k.value for k in n.keywords if k.arg == "item"]
        args += n.args[3:4] if func == "Fix" else n.args[:1] if func == "problem" else []
        found += [f"{where}:{a.lineno}: {a.value!r}" for a in args
                  if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return found


def test_no_item_spelled_by_hand() -> None:
    """(c): the item of a red is its check's (`ids.MTU.item`), so that it cannot differ from the
    docstring of the check that judged it."""
    found = [f for path in sorted(PACKAGE.rglob("*.py"))
             for f in _item_literals(ast.parse(path.read_text()), str(path.relative_to(PACKAGE)))]
    assert not found, "checklist items spelled as strings:\n" + "\n".join(found)
    planted = ast.parse('Problem((n,), c, "m", item="S4")\nFix(n, "w", (), "S2")\n'
                        'exc.problem("F4")\nFix(n, "w", (), ids.SSH_MODES.item)')
    assert len(_item_literals(planted, "x")) == 3
