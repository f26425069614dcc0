"""The launch the run checks, where the suite meets it on the launcher: what the report header
says of it (the command, the launch directory, the `.deepspeed_env` files DeepSpeed's runner
reads here, how ssh is dialled), and `--then-launch`, the command run in place of this process
when the run is green.

The launcher is the machine the suite runs on: the user starts `deepspeed` there, in the launch
directory (`--launch-dir`, else the current directory, as DeepSpeed's runner takes it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from cluster_tests.core.settings import Settings

#: the name DeepSpeed's runner gives its environment file unless DS_ENV_FILE says another
DS_ENV_FILE = ".deepspeed_env"
#: the exit status of a launch command that could not be started (as a shell says it)
NOT_STARTED = 127


def env_files(launch_dir: str, environ: Mapping[str, str]) -> list[Path]:
    """The `.deepspeed_env` files DeepSpeed's runner reads when started in `launch_dir` on this
    machine (runner.py: DS_ENV_FILE's name, else .deepspeed_env, in the home directory and in
    `.`), those that exist, each once."""
    name = environ.get("DS_ENV_FILE", DS_ENV_FILE)
    found: list[Path] = []
    for where in (Path.home(), Path(launch_dir)):
        path = where / name
        if path.is_file() and path not in found:
            found.append(path)
    return found


def header_lines(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """The report header's account of the launch being checked."""
    cmd = settings.launch_command
    launch_dir = settings.env.launch_dir or os.getcwd()
    said = cmd.line() if cmd is not None else (
        "not given (cluster-tests [options] -- deepspeed --hostfile H train.py ...: the launch "
        "line printed then ends in ...)")
    read = ", ".join(map(str, env_files(launch_dir, environ))) or "none"
    ssh = (f"ssh -F {settings.ssh_config}" if settings.ssh_config is not None
           else "ssh as the launch dials it (~/.ssh/config, /etc/ssh/ssh_config)")
    return [f"launch: {said}",
            f"launch directory: {launch_dir}; .deepspeed_env read here: {read}; {ssh}"]


def then_launch(settings: Settings, environ: Mapping[str, str]) -> NoReturn:
    """Become the launch command: in the launch directory, with `environ` (the environment the
    suite was started with), so that its exit status is this process's and a Ctrl-C reaches it
    as it reaches any command started from the shell."""
    cmd = settings.launch_command
    assert cmd is not None  # (settings refuse --then-launch without it)
    argv = list(cmd.words)
    print(f"[cluster] green: launching {cmd.line()} (in {settings.env.launch_dir})", flush=True)
    try:
        os.chdir(settings.env.launch_dir or ".")
        os.execvpe(argv[0], argv, dict(environ))
    except OSError as exc:
        print(f"[cluster] --then-launch: could not start {argv[0]}: {exc}", file=sys.stderr,
              flush=True)
        os._exit(NOT_STARTED)


def red_lines(settings: Settings) -> list[str]:
    """What --then-launch says when the run is red (the launch line above is the one to run once
    the causes are fixed, or on the healthy nodes)."""
    if not settings.then_launch:
        return []
    return ["--then-launch: nothing launched (the run is red)"]
