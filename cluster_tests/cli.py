"""`cluster-tests`: the checklist from any directory, the same as `pytest -p cluster_tests ...`.

    cluster-tests -- deepspeed --hostfile hostfile train.py --deepspeed ds_config.json
    cluster-tests -m "not collective and not training" -- deepspeed --hostfile hostfile train.py
    cluster-tests --then-launch -- deepspeed --hostfile hostfile train.py
    cluster-tests --hostfile hostfile --lf
    cluster-tests history [--history PATH]     # the recent runs, per node and per pair

Every argument before `--` is pytest's (the plugin's options included); what follows `--` is
the launch command itself, the same as `--launch '<it, quoted>'`. `history` is
`--history-show`. With no test path given, the plugin runs its own checklist
(cluster_tests/checks/), wherever the command runs from.
"""

from __future__ import annotations

import shlex
import sys

import pytest

#: the plugin's pytest11 entry point (cluster_tests.plugin): `-p` loads it by that name even
#: where PYTEST_DISABLE_PLUGIN_AUTOLOAD is set, and is a no-op where it is already loaded
PLUGIN = "cluster_tests"


#: `cluster-tests history ...` is `cluster-tests --history-show ...` (the plugin prints it)
SUBCOMMANDS = {"history": "--history-show"}


def pytest_args(argv: list[str]) -> list[str]:
    """pytest's arguments for `cluster-tests ARGV`: the subcommand spelled as its option, and
    the launch command after `--` given as --launch."""
    args = list(argv)
    if args and args[0] in SUBCOMMANDS:
        args = [SUBCOMMANDS[args[0]], *args[1:]]
    if "--" in args:
        cut = args.index("--")
        args = [*args[:cut], f"--launch={shlex.join(args[cut + 1:])}"]
    return ["-p", PLUGIN, *args]


def main(argv: list[str] | None = None) -> int:
    return int(pytest.main(pytest_args(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
