"""How a run ends: the background phases waited for and the nodes cleaned up, then, for the
pytest command itself, its exit, once every report is written and every thread joined: run the
other exit handlers (pytest's lock files, temporary directories, logging), then exit with the
session's status without freeing, one by one, the millions of objects a big cluster's session
holds (items, reports, facts: 3 s at 1024 nodes, 20 s at 4096), or, with --then-launch on a
green run, become the launch command (core/launch.py).  Only the command itself does this (its
arguments are the process's), never a session run inside another (pytest.main, pytester), and
never an xdist worker.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
from collections.abc import Sequence

import pytest

from cluster_tests.core import launch as launch_mod
from cluster_tests.core import reparse
from cluster_tests.core.runstate import GUARD_KEY, SESSION_KEY, cluster_of, environ
from cluster_tests.core.settings import Settings


def end(config: pytest.Config, command_forms: Sequence[list[str]]) -> None:
    """The run's end (pytest_unconfigure): the background phases waited for (not after Ctrl-C:
    closing ends what they started), the nodes' leftovers ended and the connections closed, the
    Ctrl-C guard taken out; then, where this session is the command's own (its arguments are
    one of `command_forms`: what the process was started with, as pytest's), the exit
    arranged (:func:`leave`)."""
    cluster = cluster_of(config)
    session = config.stash.get(SESSION_KEY, None)
    try:
        if cluster is not None:
            if session is not None and session.exitstatus != pytest.ExitCode.INTERRUPTED:
                cluster.finish_background()  # (after Ctrl-C: close() ends what they started)
            left = cluster.close()
            if left:
                say(config, cluster.leftover_report(left))
    finally:
        guard = config.stash.get(GUARD_KEY, None)
        if guard is not None:
            guard.uninstall()
    if session is not None and cluster is not None and is_the_command(config, command_forms):
        status = int(session.exitstatus)
        launch = (cluster.settings if cluster.settings.then_launch and status == 0
                  and session.testscollected else None)
        atexit.register(leave, status, launch, environ(config))


def say(config: pytest.Config, text: str) -> None:
    """`text` on the terminal, even while pytest still captures output (the Ctrl-C guard's
    copy of the standard error of pytest_configure's time), else on sys.stderr."""
    guard = config.stash.get(GUARD_KEY, None)
    if guard is None or not guard.say(text):
        sys.stderr.write(text)
        sys.stderr.flush()


def is_the_command(config: pytest.Config, command_forms: Sequence[list[str]]) -> bool:
    """This session is the process's own: `pytest ARGS`, `python -m pytest ARGS` or
    `cluster-tests ARGS` (`command_forms`: the process's arguments as pytest's), not one run
    inside another, nor an xdist worker."""
    args = reparse.as_typed(config)
    return not hasattr(config, "workerinput") and args in command_forms


def leave(status: int, launch: Settings | None = None,
          environ: dict[str, str] | None = None) -> None:
    """The pytest command's last act (see the module's docstring): `launch`, the settings of a
    green run's --then-launch."""
    atexit.unregister(leave)
    run_others = getattr(atexit, "_run_exitfuncs", None)
    if run_others is None:  # not CPython: leave as usual
        return
    run_others()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if launch is not None:
        launch_mod.then_launch(launch, environ if environ is not None else dict(os.environ))
    os._exit(status)
