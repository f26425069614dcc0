"""The launch command (``cluster-tests -- deepspeed ...``, ``--launch``) and ``--launch-args``
(its flags alone), read as DeepSpeed 0.19 reads them.

``parse(words)`` runs DeepSpeed's own ``deepspeed.launcher.runner.parse_args`` when deepspeed is
importable here (its defaults, aliases, abbreviations and errors), else a copy of the options the
checks use (same names, aliases and defaults).  A placeholder script ends the words, so that the
user gives flags only (a script and its arguments, if given, are ignored).
``parse_command(words)`` reads a whole launch command: the runner it starts (``deepspeed``, or
``python -m deepspeed.launcher.runner``), its flags, the user's script and the script's arguments;
:meth:`LaunchCommand.with_hostfile` and :meth:`LaunchCommand.with_exclude` give the same command
with only that flag changed, ready to paste.

The resolved values feed the whole run: H3/F2 (master address and port), H5 and the rehearsal
(include/exclude), T2 (which launches with the user's flags, adding no ``--master_addr`` they did
not give).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

SCRIPT = "ct-launch-args-placeholder.py"
DEFAULT_PORT = 29500
#: DeepSpeed's runner as a module (`python -m deepspeed.launcher.runner ...`)
RUNNER_MODULE = "deepspeed.launcher.runner"
#: the console scripts that start DeepSpeed's runner
RUNNER_SCRIPTS = ("deepspeed", "ds")
#: the launcher the suite rehearses and checks (DeepSpeed's default)
PDSH = "pdsh"

#: the runner's options whose values the suite resolves itself and re-emits (every other flag
#: is passed on as written)
RESOLVED_DESTS = ("hostfile", "include", "exclude", "master_addr", "master_port")


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
    #: DeepSpeed's --hostfile (its default /job/hostfile where not given: see `given`)
    hostfile: str = "/job/hostfile"
    launcher: str = PDSH
    num_nodes: int = -1


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


def _passthrough(words: list[str], parse_args: Callable[[list[str]], Any]) -> tuple[str, ...]:
    """The flags other than those the suite resolves itself (RESOLVED_DESTS), as written."""
    words = list(words)
    for dest in RESOLVED_DESTS:
        while (found := _flag_span(words, dest, parse_args)) is not None:
            i, span = found
            del words[i:i + span]
    return tuple(words)


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
    return _resolved(ns, default, words, parser, parse_args)


def _resolved(ns: Any, default: Any, words: Sequence[str], parser: str,
              parse_args: Callable[[list[str]], Any]) -> LaunchArgs:
    keys = ("master_addr", "master_port", "include", "exclude", "ssh_port", "hostfile",
            "launcher", "num_nodes")
    given = frozenset(k for k in keys if getattr(ns, k) != getattr(default, k))
    return LaunchArgs(master_addr=ns.master_addr or "", master_port=int(ns.master_port),
                      include=ns.include or "", exclude=ns.exclude or "",
                      ssh_port=ns.ssh_port, given=given,
                      passthrough=_passthrough(list(words), parse_args),
                      words=tuple(words), parser=parser, hostfile=str(ns.hostfile),
                      launcher=str(ns.launcher).lower(), num_nodes=int(ns.num_nodes))


@dataclass(frozen=True)
class LaunchCommand:
    """The user's launch command, as DeepSpeed's runner reads it: the runner it starts
    (``program``), the runner's flags as written, the user's script and its arguments, and what
    the flags resolve to (``args``)."""

    program: tuple[str, ...]
    flags: tuple[str, ...]
    script: str
    script_args: tuple[str, ...]
    args: LaunchArgs

    @property
    def words(self) -> tuple[str, ...]:
        return (*self.program, *self.flags, self.script, *self.script_args)

    def line(self) -> str:
        """The command as one shell line, quoted as the shell needs."""
        return shlex.join(self.words)

    def with_hostfile(self, path: str) -> LaunchCommand:
        """The same command with only its hostfile changed (added first where not given)."""
        return replace(self, flags=_set_flag(self.flags, "hostfile", "--hostfile", path))

    def with_exclude(self, hosts: Sequence[str]) -> LaunchCommand | None:
        """The same command with `hosts` added to its --exclude; None where it has --include
        (DeepSpeed refuses both: the hostfile is then the way)."""
        if self.args.include:
            return None
        spec = "@".join([*([self.args.exclude] if self.args.exclude else []), *hosts])
        return replace(self, flags=_set_flag(self.flags, "exclude", "--exclude", spec))


def _set_flag(flags: Sequence[str], dest: str, flag: str, value: str) -> tuple[str, ...]:
    """`flags` with DeepSpeed's `dest` set to `value`: where the user set it (whatever alias,
    abbreviation or `=` form), in its place; else first."""
    found = _flag_span(flags, dest)
    if found is None:
        return (flag, value, *flags)
    i, span = found
    return (*flags[:i], flag, value, *flags[i + span:])


def _flag_span(flags: Sequence[str], dest: str,
               parse_args: Callable[[list[str]], Any] | None = None) -> tuple[int, int] | None:
    """Where in `flags` the user set DeepSpeed's `dest` (the last time: argparse keeps the
    last), as (index, words), whatever alias, abbreviation or `=` form they wrote; None where
    not set. Found by asking DeepSpeed's parser which words, left out, change `dest`."""
    if parse_args is None:
        parse_args, _ = deepspeed_parser()
    try:
        given = getattr(_call(parse_args, [*flags, SCRIPT]), dest)
    except LaunchArgsError:
        return None
    if given == getattr(_call(parse_args, [SCRIPT]), dest):
        return None
    for i in reversed(range(len(flags))):
        word = flags[i]
        if not word.startswith("-"):
            continue
        span = 1 if "=" in word or (not word.startswith("--") and len(word) > 2) else 2
        try:
            ns = _call(parse_args, [*flags[:i], *flags[i + span:], SCRIPT])
        except LaunchArgsError:
            continue
        if getattr(ns, dest) != given and ns.user_script == SCRIPT:
            return i, span
    return None


def _program(words: Sequence[str]) -> int:
    """How many of `words` start DeepSpeed's runner: `deepspeed` (or `ds`, by any path), or
    `python -m deepspeed.launcher.runner`; 0 where they start something else."""
    if not words:
        return 0
    first = os.path.basename(words[0])
    if first in RUNNER_SCRIPTS:
        return 1
    if first.startswith("python") and list(words[1:3]) == ["-m", RUNNER_MODULE]:
        return 3
    return 0


def parse_command(words: Sequence[str], parse_args: Callable[[list[str]], Any] | None = None,
                  parser: str = "deepspeed") -> LaunchCommand:
    """A whole launch command (its words as the shell splits them), read with DeepSpeed's
    parser; LaunchArgsError where it is not DeepSpeed's runner or the runner refuses it."""
    words = list(words)
    start = _program(words)
    if not start:
        shown = shlex.join(words[:3]) or "(nothing)"
        raise LaunchArgsError(
            f"the launch command starts with {shown!r}: give DeepSpeed's launcher, "
            f"`deepspeed --hostfile H ... train.py ...` (or `python -m {RUNNER_MODULE} ...`)")
    if parse_args is None:
        parse_args, parser = deepspeed_parser()
    rest = words[start:]
    ns = _call(parse_args, rest)
    if not ns.user_script:
        raise LaunchArgsError("the launch command names no training script")
    # the flags end where the script starts: the first place where the words before it,
    # with the script after them, parse to the same script and no arguments
    cut = next((i for i, w in enumerate(rest) if w == ns.user_script and not _call_or_none(
        parse_args, [*rest[:i], SCRIPT], lambda got: got.user_script != SCRIPT
        or bool(got.user_args))), None)
    if cut is None:  # (not reached: argparse takes the script from these very words)
        raise LaunchArgsError(f"cannot tell the flags from the script {ns.user_script!r}")
    flags = rest[:cut]
    if ns.include and ns.exclude:
        raise LaunchArgsError("--include and --exclude are mutually exclusive in DeepSpeed")
    default = _call(parse_args, [SCRIPT])
    flags_ns = _call(parse_args, [*flags, SCRIPT])
    return LaunchCommand(tuple(words[:start]), tuple(flags), ns.user_script,
                         tuple(ns.user_args),
                         _resolved(flags_ns, default, flags, parser, parse_args))


def _call_or_none(parse_args: Callable[[list[str]], Any], args: list[str],
                  bad: Callable[[Any], bool]) -> bool:
    """Whether `args` fail to parse, or parse to what `bad` says is not wanted."""
    try:
        return bool(bad(_call(parse_args, args)))
    except LaunchArgsError:
        return True


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
