"""Where the project's own tests find things: the repository, the package, the captured tool
outputs (tests/data/samples, sources in its SOURCES.md). Tests live one folder down
(tests/unit, tests/e2e); `tests/conftest.py` puts this folder on sys.path."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PACKAGE = REPO / "cluster_tests"
SAMPLES = TESTS / "data" / "samples"
