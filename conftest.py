"""Root conftest: the checks come from the `cluster_tests` pytest plugin (entry point).

The plugin must be registered before pytest parses the command line, so that
`--hostfile /any/path` is understood (PITFALLS 3); a conftest is too late for that.  This file
only says how to install it when it is missing.
"""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    pm = config.pluginmanager
    if not pm.has_plugin("cluster_tests") and not pm.is_blocked("cluster_tests"):
        raise pytest.UsageError(
            "the cluster_tests plugin is not installed in this Python: run `make setup` "
            "(or `pip install -e .`) and use .venv/bin/pytest"
        )
