"""The node-side prelude: every script sent with it compiles as Python 3.6 together with it,
defines none of its names, and the probe family runs locally from the combined source."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from cluster_tests import node
from cluster_tests.core.cluster import PROBE_MARK

ALL = sorted(p.name for p in node.DIR.glob("*.py") if p.name not in ("__init__.py", "prelude.py"))


def _top_names(tree: ast.Module) -> set[str]:
    names = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            names |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    return names


PRELUDE_NAMES = _top_names(ast.parse((node.DIR / "prelude.py").read_text()))


@pytest.mark.parametrize("name", ALL)
def test_combined_source_is_python36(name: str) -> None:
    ast.parse(node.source(name), filename=name, feature_version=(3, 6))


@pytest.mark.parametrize("name", sorted(node.PRELUDED))
def test_no_script_shadows_the_prelude(name: str) -> None:
    assert not _top_names(ast.parse(node.script(name).read_text())) & PRELUDE_NAMES


@pytest.mark.parametrize("name", sorted(node.PRELUDED))
def test_probe_runs_from_combined_source(name: str) -> None:
    args = json.dumps({"sections": ["no-such-section"]})
    proc = subprocess.run([sys.executable, "-", args], input=node.source(name),
                          capture_output=True, timeout=60, check=True)
    line = proc.stdout.decode().strip().splitlines()[-1]
    assert line.startswith(PROBE_MARK)
    assert json.loads(line[len(PROBE_MARK):]) == {"no-such-section": {"error": "unknown section"}}
