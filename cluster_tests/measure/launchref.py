"""E8's reference: the launch's files as the launcher has them, which every node's copy is
compared with (judge/env/launchfiles.py).

The launcher is this machine (the suite runs where the launch starts). Its copy is described by
the very code that describes each node's (node/envprobe.py, section `launchfiles`), run here on
this interpreter, once per run; the paths are the words of the launch command that name
existing files or directories here (launchfiles.candidates).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from cluster_tests.core.cluster import BOOTSTRAP, PROBE_MARK, Cluster, remote_script
from cluster_tests.core.memokey import MemoKey
from cluster_tests.core.settings import Settings
from cluster_tests.judge.env import launchfiles
from cluster_tests.judge.env.launchfiles import LAUNCHFILES, LaunchFiles
from cluster_tests.judge.hostfile.launchargs import LaunchCommand

REFERENCE: MemoKey[LaunchFiles | None] = MemoKey("launch_files", "launcher")


def launch_dir(settings: Settings) -> str:
    """The directory the launch starts in (settings: --launch-dir, else where the suite runs)."""
    return settings.env.launch_dir or os.getcwd()


def paths(settings: Settings) -> list[str]:
    """The paths of the launch command E8 compares (none without the command)."""
    cmd: LaunchCommand | None = settings.launch_command
    if cmd is None:
        return []
    return [c.path for c in launchfiles.candidates(cmd, launch_dir(settings))]


def params(settings: Settings) -> dict[str, object]:
    """The `launchfiles` probe's parameters, the same for the launcher and every node."""
    return launchfiles.params(launch_dir(settings), paths(settings))


def script(settings: Settings) -> str | None:
    """The launch's script as an absolute path (None without the command)."""
    cmd = settings.launch_command
    return launchfiles.candidates(cmd, launch_dir(settings), lambda _: False)[0].path \
        if cmd is not None else None


def reference(cluster: Cluster) -> LaunchFiles | None:
    """The launcher's copy (None where the launch directory is not on this machine: the
    launch then starts elsewhere, and only each node's own directory and script are judged)."""
    return cluster.memo(REFERENCE, lambda: _describe_here(params(cluster.settings)))


def _describe_here(given: dict[str, object]) -> LaunchFiles | None:
    argv = [sys.executable, "-c", BOOTSTRAP,
            json.dumps({"sections": [LAUNCHFILES.section], **given})]
    proc = subprocess.run(argv, input=remote_script(LAUNCHFILES.script).decode(),
                          capture_output=True, text=True, timeout=300, check=False)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(PROBE_MARK):
            got = LAUNCHFILES.read(json.loads(line[len(PROBE_MARK):])[LAUNCHFILES.section])
            return got if got.dir_ok else None
    raise RuntimeError(f"describing the launch's files here failed: {proc.stderr[-2000:]}")
