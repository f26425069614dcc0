"""`pytest --hostfile /elsewhere/hostfile` runs as `pytest --hostfile=/elsewhere/hostfile`.

pytest finds its rootdir and ini file before it loads any plugin, from the command line parsed
with only its own options known (PITFALLS 3).  `--hostfile /tmp/x/hostfile` is then an unknown
flag followed by a test path: the rootdir becomes /tmp/x, the project's ini file is not found,
and its addopts (-ra), junit_family, timeout and testpaths are lost, the test ids made relative
to /tmp/x.  The equals form is one token, which that first parse passes over, so it keeps them.

pytest offers no public way to find the rootdir and ini file again once the plugin is loaded.
So where the command line gives an option of this suite with its value as the next argument and
that value names an existing path (the only values the first parse takes for test paths: it
ignores a path that does not exist), the plugin's `pytest_cmdline_main` runs the session again,
before anything of it is configured, with those options in the equals form (:func:`joined`),
through `pytest.main`, and returns its exit status.  The arguments as the user typed them travel
with it (:class:`AsTyped`), for what reports the command line (fixes.sh) and for knowing the
session is the command's own (core/leave.is_the_command).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

import pytest

from cluster_tests.core.settings import VALUE_FLAGS


def joined(args: Sequence[str], invocation_dir: Path,
           flags: Collection[str] = VALUE_FLAGS) -> list[str] | None:
    """`args` with every `FLAG VALUE` of `flags` whose value names an existing path (relative to
    `invocation_dir`) as `FLAG=VALUE`; None where there is none (the session is as typed).
    Arguments after `--` are left as they are."""
    out: list[str] = []
    changed = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.extend(args[i:])
            break
        value = args[i + 1] if i + 1 < len(args) else None
        if (arg in flags and value is not None and not value.startswith("-")
                and (invocation_dir / value).exists()):
            out.append(f"{arg}={value}")
            changed = True
            i += 2
            continue
        out.append(arg)
        i += 1
    return out if changed else None


class AsTyped:
    """The arguments of a session as typed, handed to the session run again with the equals form
    (a plugin object of its `pytest.main`, read back from `config.invocation_params.plugins`)."""

    def __init__(self, args: Sequence[str]) -> None:
        self.args = tuple(args)


def as_typed(config: pytest.Config) -> list[str]:
    """The session's command-line arguments as the user typed them."""
    for plugin in config.invocation_params.plugins or ():
        if isinstance(plugin, AsTyped):
            return list(plugin.args)
    return list(config.invocation_params.args)


def run_again(config: pytest.Config) -> int | None:
    """The exit status of the session run again with the equals form, where the command line
    needs it (see the module docstring); None where it does not (and in xdist workers, whose
    options come from the controller)."""
    if hasattr(config, "workerinput"):
        return None
    params = config.invocation_params
    args = joined(params.args, Path(params.dir))
    if args is None or Path.cwd() != Path(params.dir):  # (pytest.main starts from the cwd)
        return None
    return int(pytest.main(args, plugins=[*(params.plugins or ()), AsTyped(params.args)]))
