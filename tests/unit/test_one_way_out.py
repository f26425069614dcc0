"""The rules of issue 40 that keep the code readable, read from the code itself (ast).

- a check reaches the nodes through the cluster's read-only view: never the pool of SSH
  sessions, the transport, or a command of its own (measure/ runs commands; core/ sends probes)
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
