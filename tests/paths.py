"""Where the project's own tests find things: the repository, the package, the captured tool
outputs (tests/data/samples, sources in its SOURCES.md). Tests live one folder down
(tests/unit, tests/e2e); `tests/conftest.py` puts this folder on sys.path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PACKAGE = REPO / "cluster_tests"
SAMPLES = TESTS / "data" / "samples"


def load_script(path: Path, name: str, *, register: bool = False) -> ModuleType:
    """Import the script at `path` (a node script, a bench script) as the module `name`;
    `register`: put it in sys.modules first (its dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"cannot import {path}"
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
