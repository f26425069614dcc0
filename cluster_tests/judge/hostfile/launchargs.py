"""``--launch-args``: the flags the user gives ``deepspeed``, read as DeepSpeed 0.19 reads them.

``parse(words)`` runs DeepSpeed's own ``deepspeed.launcher.runner.parse_args`` when deepspeed is
importable here (its defaults, aliases, abbreviations and errors), else a copy of the options the
checks use (same names, aliases and defaults).  A placeholder script ends the words, so that the
user gives flags only (a script and its arguments, if given, are ignored).

The resolved values feed the whole run: H3/F2 (master address and port), H5 and the rehearsal
(include/exclude), T2 (which launches with the user's flags, adding no ``--master_addr`` they did
not give).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SCRIPT = "ct-launch-args-placeholder.py"
DEFAULT_PORT = 29500

#: flags whose values the suite resolves itself and re-emits (everything else is passed on)
RESOLVED = {"-H": 1, "--hostfile": 1, "-i": 1, "--include": 1, "-e": 1, "--exclude": 1,
            "--master_addr": 1, "--master_port": 1}


class LaunchArgsError(ValueError):
    """DeepSpeed's launcher would refuse these flags."""


@dataclass(frozen=True)
class LaunchArgs:
    master_addr: str = ""
    master_port: int = DEFAULT_PORT
    include: str = ""
    exclude: str = ""
    ssh_port: int | None = None
    #: the flags given explicitly, by their dest (master_addr, master_port, include...)
    given: frozenset[str] = frozenset()
    #: the user's flags other than RESOLVED, in their order, to pass on to deepspeed as given
    passthrough: tuple[str, ...] = ()
    words: tuple[str, ...] = field(default=())
    parser: str = "deepspeed"  # or "builtin"


def _fallback_parse_args(args: list[str]) -> argparse.Namespace:
    """The options of deepspeed/launcher/runner.py (0.19) that the checks read, as it declares
    them, with the rest of its flags so that a valid line is not refused."""
    p = argparse.ArgumentParser(prog="deepspeed")
    p.add_argument("-H", "--hostfile", type=str, default="/job/hostfile")
    p.add_argument("-i", "--include", type=str, default="")
    p.add_argument("-e", "--exclude", type=str, default="")
    p.add_argument("--num_nodes", type=int, default=-1)
    p.add_argument("--num_gpus", "--num_accelerators", type=int, default=-1)
    p.add_argument("--master_port", default=DEFAULT_PORT, type=int)
    p.add_argument("--master_addr", default="", type=str)
    p.add_argument("--node_rank", default=-1, type=int)
    p.add_argument("--launcher", default="pdsh", type=str)
    p.add_argument("--launcher_args", default="", type=str)
    for flag in ("--module", "--no_python", "--no_local_rank", "--no_ssh", "--no_ssh_check",
                 "--force_multi", "--save_pid", "--bind_cores_to_rank", "-q", "--quiet"):
        if flag == "-q":
            continue
        p.add_argument(*(("-q", "--quiet") if flag == "--quiet" else (flag,)), action="store_true")
    p.add_argument("--enable_each_rank_log", default="None", type=str)
    p.add_argument("--autotuning", default="", choices=["tune", "run"], type=str)
    p.add_argument("user_script", type=str)
    p.add_argument("user_args", nargs=argparse.REMAINDER)
    p.add_argument("--bind_core_list", type=str, default=None)
    p.add_argument("--ssh_port", type=int, default=None)
    p.add_argument("--venv_script", type=str, default=None)
    p.add_argument("--log_level", type=str, default="info",
                   choices=["debug", "info", "warning", "error", "critical"])
    return p.parse_args(args)


def deepspeed_parser() -> tuple[Callable[[list[str]], Any], str]:
    """DeepSpeed's own ``parse_args`` if importable, else the built-in copy."""
    try:
        from deepspeed.launcher import runner
    except Exception:  # noqa: BLE001 - not installed here, or broken: the copy will do
        return _fallback_parse_args, "builtin"
    return runner.parse_args, "deepspeed"


def _call(parse_args: Callable[[list[str]], Any], args: list[str]) -> Any:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parse_args(args)
    except SystemExit:
        text = err.getvalue().strip().splitlines()
        raise LaunchArgsError(text[-1] if text
                              else "refused by DeepSpeed's argument parser") from None


def _passthrough(words: list[str]) -> tuple[str, ...]:
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        name = w.split("=", 1)[0]
        if name in RESOLVED:
            i += 1 if "=" in w else 2
            continue
        out.append(w)
        i += 1
    return tuple(out)


def parse(text: str, parse_args: Callable[[list[str]], Any] | None = None,
          parser: str = "deepspeed") -> LaunchArgs:
    """The user's ``deepspeed`` flags (one shell-quoted string), resolved as DeepSpeed does."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise LaunchArgsError(str(exc)) from None
    if parse_args is None:
        parse_args, parser = deepspeed_parser()
    default = _call(parse_args, [SCRIPT])
    ns = _call(parse_args, [*words, SCRIPT])
    if ns.user_script != SCRIPT:  # the user wrote the script too: keep the flags before it
        cut = words.index(ns.user_script)
        words = words[:cut]
        ns = _call(parse_args, [*words, SCRIPT])
    if ns.include and ns.exclude:
        raise LaunchArgsError("--include and --exclude are mutually exclusive in DeepSpeed")
    keys = ("master_addr", "master_port", "include", "exclude", "ssh_port", "hostfile")
    given = frozenset(k for k in keys if getattr(ns, k) != getattr(default, k))
    return LaunchArgs(master_addr=ns.master_addr or "", master_port=int(ns.master_port),
                      include=ns.include or "", exclude=ns.exclude or "",
                      ssh_port=ns.ssh_port, given=given, passthrough=_passthrough(words),
                      words=tuple(words), parser=parser)


def merge(option: str, ours: Any, ours_given: bool, theirs: Any, theirs_given: bool) -> Any:
    """One value from the suite's own option and --launch-args; LaunchArgsError when both are
    given and differ."""
    if ours_given and theirs_given and str(ours) != str(theirs):
        raise LaunchArgsError(f"{option} {ours} and --launch-args' {theirs} disagree: give one")
    return theirs if theirs_given else ours


def command_line(hostfile: str, master_addr: str | None, master_port: int, include: str = "",
                 exclude: str = "", passthrough: tuple[str, ...] = (),
                 script: str = "<script>") -> str:
    """The ``deepspeed`` command line the checks mirror (for reports)."""
    argv = ["deepspeed", "--hostfile", hostfile]
    if master_addr:
        argv += ["--master_addr", master_addr]
    if master_port != DEFAULT_PORT:
        argv += ["--master_port", str(master_port)]
    if include:
        argv += ["--include", include]
    if exclude:
        argv += ["--exclude", exclude]
    return shlex.join([*argv, *passthrough, script])
