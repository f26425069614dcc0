"""The suite's own `record_property` fixture, in place of pytest's.

Each time a test reaches a fixture that takes `request` (pytest's `record_property` does),
pytest builds a new FixtureDef for it and reads a signature (three times a test for
`record_property`), where 31 checks of a 4096-node run take it.  This one takes no `request`:
the test being set up is known from `pytest_runtest_setup`.  It records what pytest's records
(the test's `user_properties`: its report, JUnit, the cluster summary), under every JUnit
family, and warns of none: pytest's writer puts a test's properties into its `testcase` element
whatever the family (xunit2 included, pytest's default, though that schema has no place for
them), and the checks' numbers and Problems are this suite's output, not a test author's
choice. pytest's fixture warns once per test under xunit2, which buried a run's output in
warnings wherever the suite ran outside a project that sets `junit_family`.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import pytest

#: the plugin's name in the plugin manager
NAME = "cluster_tests.record_property"


def plugin(config: pytest.Config) -> types.ModuleType:
    """A plugin (registered by the composition root) holding the fixture and the hook that tells
    it which test is being set up; closures over the session's config."""
    holder = types.ModuleType(NAME)
    current: list[pytest.Item] = []  # the test being set up

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(item: pytest.Item) -> None:
        current[:] = [item]

    @pytest.fixture(name="record_property")
    def record_property() -> Callable[[str, object], None]:
        """Add a property to the calling test (`record_property(name, value)`): it goes into
        the test's report, JUnit (every family) and the cluster summary.  pytest's own fixture,
        without its `request`."""
        item = current[0]
        return lambda name, value: item.user_properties.append((name, value))

    holder.pytest_runtest_setup = pytest_runtest_setup  # type: ignore[attr-defined]
    holder.record_property = record_property  # type: ignore[attr-defined]
    return holder
