"""`cluster-tests`: the checklist from any directory, the same as `pytest -p cluster_tests ...`.

    cluster-tests --hostfile /path/to/hostfile
    cluster-tests --hostfile hostfile -m "ssh or names" -n 4
    cluster-tests --hostfile hostfile --lf
    cluster-tests history [--history PATH]     # the recent runs, per node and per pair

Every argument is pytest's (the plugin's options included); `history` is `--history-show`.
With no test path given, the plugin runs its own checklist (cluster_tests/checks/), wherever
the command runs from.
"""

from __future__ import annotations

import sys

import pytest

#: the plugin's pytest11 entry point (cluster_tests.plugin): `-p` loads it by that name even
#: where PYTEST_DISABLE_PLUGIN_AUTOLOAD is set, and is a no-op where it is already loaded
PLUGIN = "cluster_tests"


#: `cluster-tests history ...` is `cluster-tests --history-show ...` (the plugin prints it)
SUBCOMMANDS = {"history": "--history-show"}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in SUBCOMMANDS:
        args = [SUBCOMMANDS[args[0]], *args[1:]]
    return int(pytest.main(["-p", PLUGIN, *args]))


if __name__ == "__main__":
    sys.exit(main())
