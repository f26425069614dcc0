"""`cluster-tests`: the checklist from any directory, the same as `pytest -p <the plugin> ...`.

    cluster-tests --hostfile /path/to/hostfile
    cluster-tests --hostfile hostfile -m "ssh or names" -n 4
    cluster-tests --hostfile hostfile --lf

Every argument is pytest's (the plugin's options included). With no test path given, the plugin
runs its own checklist (cluster_tests/checks/), wherever the command runs from.
"""

from __future__ import annotations

import os
import sys

import pytest

PLUGIN = "cluster_tests.plugin"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        # the pytest11 entry point is not loaded: name the plugin, as `pytest -p` would
        args = ["-p", PLUGIN, *args]
    return int(pytest.main(args))


if __name__ == "__main__":
    sys.exit(main())
