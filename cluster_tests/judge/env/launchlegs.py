"""What `deepspeed --hostfile` runs on every node, reproduced (pure; CHECKLIST E5).

DeepSpeed 0.19's runner (``deepspeed/launcher/runner.py`` ``main()``, with
``multinode_runner.PDSHRunner``), started on the rank-0 node, does this for a multi-node launch:

1. ``env = os.environ.copy()``; ``PYTHONPATH`` gets the launch directory (``os.path.abspath('.')``)
   prepended (``curr_path + ":" + env['PYTHONPATH']``, or just ``curr_path``).
2. Every variable whose name starts with one of ``EXPORT_ENVS`` (``MLFLOW``, ``PYTHON``,
   ``MV2``, ``UCX``) or of the accelerator's ``export_envs()`` (CUDA: ``NCCL``; Ascend:
   ``ASCEND``, ``HCCL``, ``LD_LIBRARY``, ``PATH``; CPU: nothing) is exported, except the names
   ``EXCLUDE_ENVS`` drops (``NCCL_IB_HCA`` and ``UCX_NET_DEVICES`` when ``AISC_JOB_NAME`` is
   set).
3. Then every line of ``~/.deepspeed_env`` and of ``./.deepspeed_env`` (``DS_ENV_FILE`` names
   the file) is read with ``readlines()`` and split with ``key, val = var.split('=', 1)``: a line
   without ``=`` (a blank line too) raises ``ValueError`` and the launch dies on the rank-0 node.
4. ``add_export`` strips key and value and wraps a value containing a character outside
   ``[\\w@%+=:,./-]`` in double quotes, as it is (so the remote shell expands ``$`` in it, and a
   ``"`` in it unbalances the quoting).
5. The command: ``pdsh -S -f 1024 -w <hosts> "export K=V; ... " "cd <launch dir>;"
   <its sys.executable> -u -m deepspeed.launcher.launch --world_info=... --node_rank=%n ...``
   with ``PDSH_RCMD_TYPE=ssh``.  pdsh joins the words with spaces; each node's login shell runs
   the line, so a failed ``cd`` does not stop the interpreter from starting elsewhere.

The rehearsal (cluster_tests/measure/rehearsal.py) builds exactly that line with a small import
check in place of ``-m deepspeed.launcher.launch ...``; tests/unit/test_judge_launchlegs.py
compares these functions with DeepSpeed's own code.
"""

from __future__ import annotations

import io
import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.core.testids import Scope
from cluster_tests.judge.common import stacks as S
from cluster_tests.judge.common.fieldread import ByFields, by_fields
from cluster_tests.judge.common.probes import (
    FactsError,
    Probe,
    obj,
    opt_text,
    text,
    text_map,
    texts,
)
from cluster_tests.judge.env.envvars import SCRIPT, EnvCause, Package, TmpdirFacts, Versions
from cluster_tests.judge.env.jit import JitFacts
from cluster_tests.judge.problem import Problem, SectionCause
from cluster_tests.judge.ssh import sshfail

#: DeepSpeed 0.19's constants (runner.py); the rehearsal reads the installed DeepSpeed's own
#: values on the rank-0 node and falls back to these.
EXPORT_ENVS: tuple[str, ...] = ("MLFLOW", "PYTHON", "MV2", "UCX")
EXCLUDE_ENVS: Mapping[str, tuple[str, ...]] = {"AISC_JOB_NAME": ("NCCL_IB_HCA", "UCX_NET_DEVICES")}
DS_ENV_FILE = ".deepspeed_env"
PDSH_MAX_FAN_OUT = 1024
_NEEDS_QUOTES = re.compile(r"[^\w@%+=:,./-]")


class LaunchCause(SectionCause, items=(ids.LAUNCH_REHEARSAL.item,)):
    """What can stop the launch's own steps on a node, E5 (Problem.cause)."""

    LAUNCH_FAILS = "launch step fails"
    LAUNCH_HANGS = "launch step hangs"
    INTERPRETER_MISSING = "launch interpreter missing"
    INTERPRETER_BROKEN = "launch interpreter fails"
    LAUNCH_DIR_MISSING = "launch directory missing"
    IMPORT_FAILS = "launch imports fail"
    LAUNCH_CANNOT_START = "launch cannot start"
    EXPORTS_BREAK_SHELL = "launch exports break the shell"


@dataclass(frozen=True)
class LaunchRules:
    """The launching DeepSpeed's export rules (as read from the rank-0 node's DeepSpeed)."""

    export_prefixes: tuple[str, ...] = EXPORT_ENVS
    exclude_envs: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(EXCLUDE_ENVS))


class EnvFileCrash(ValueError):
    """A `.deepspeed_env` line that makes DeepSpeed's runner raise before anything starts."""

    def __init__(self, path: str, lineno: int, line: str) -> None:
        self.path, self.lineno, self.line = path, lineno, line
        super().__init__(
            f"{path}:{lineno}: {line.rstrip(chr(10))!r} has no '=': deepspeed's runner does "
            f"`key, val = var.split('=', maxsplit=1)` and stops with ValueError: not enough values "
            f"to unpack")


@dataclass(frozen=True)
class LaunchFacts:
    """What DeepSpeed's runner reads where it starts, as the launching interpreter reads it in
    the launch directory (envprobe.py's LAUNCH_FACTS)."""

    executable: str  # the launch's sys.executable: every rank runs it
    cwd: str  # the launch directory as that process sees it (`os.path.abspath('.')`)
    env: Mapping[str, str]
    deepspeed: str | None = None  # its version
    accelerator: str | None = None
    export_envs: tuple[str, ...] = ()  # the accelerator's export_envs()
    export_prefixes: tuple[str, ...] = ()  # runner.EXPORT_ENVS
    exclude_envs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    env_files: tuple[tuple[str, str], ...] = ()  # the .deepspeed_env files: (path, text)
    error: str | None = None  # DeepSpeed's launcher did not import

    @classmethod
    def read(cls, raw: object) -> LaunchFacts:
        d = obj(raw, "the launch's facts")
        files = d.get("env_files")
        excluded = obj(d.get("EXCLUDE_ENVS") or {}, "EXCLUDE_ENVS")
        return cls(text(d.get("executable")), text(d.get("cwd")), text_map(d.get("env")),
                   opt_text(d.get("deepspeed")), opt_text(d.get("accelerator")),
                   texts(d.get("export_envs")), texts(d.get("EXPORT_ENVS")),
                   {str(k): texts(v) for k, v in excluded.items()},
                   tuple((text(f[0]), text(f[1])) for f in files
                         if isinstance(f, list) and len(f) == 2)
                   if isinstance(files, list) else (),
                   opt_text(d.get("error")))

    def rules(self) -> LaunchRules:
        """The launching DeepSpeed's export rules (the constants above where it gave none)."""
        return LaunchRules(export_prefixes=(self.export_prefixes or EXPORT_ENVS)
                           + self.export_envs, exclude_envs=dict(self.exclude_envs))


@dataclass(frozen=True)
class LaunchPlan(ByFields, what="the launch plan"):
    """How `deepspeed --hostfile` would start on the rank-0 node (envprobe.py's `launch`): the
    `deepspeed` it runs, the interpreter that names, pdsh, and that interpreter's facts."""

    launch_dir: str
    launch_dir_ok: bool
    path: str  # the non-interactive shell's PATH
    deepspeed: str | None = None
    pdsh: str | None = None
    interpreter: str | None = None
    shebang: str | None = None
    facts: LaunchFacts | None = None
    facts_error: str | None = None


LAUNCH: Probe[LaunchPlan] = Probe(SCRIPT, "launch", LaunchPlan.read)


def quote_value(value: str) -> str:
    """`MultiNodeRunner.add_export`'s quoting of one value."""
    value = value.strip()
    if _NEEDS_QUOTES.search(value):
        value = f'"{value}"'
    return value


def env_file_lines(text: str) -> list[str]:
    """The lines as `open(path, 'r').readlines()` gives them (universal newlines)."""
    return io.StringIO(text, newline=None).readlines()


def launch_exports(
    env: Mapping[str, str],
    launch_dir: str,
    env_files: Iterable[tuple[str, str]] = (),
    rules: LaunchRules | None = None,
) -> dict[str, str]:
    """KEY -> value as it appears after `export KEY=` in the pdsh command (quoted as DeepSpeed
    quotes it).  `env` is the launching process's environment; `env_files` the `.deepspeed_env`
    files DeepSpeed finds, in its order (home, then the launch directory), as (path, text).
    Raises EnvFileCrash where DeepSpeed's runner would crash."""
    rules = rules or LaunchRules()
    env = dict(env)
    if "PYTHONPATH" in env:
        env["PYTHONPATH"] = launch_dir + ":" + env["PYTHONPATH"]
    else:
        env["PYTHONPATH"] = launch_dir
    excluded = [v for key, names in rules.exclude_envs.items() if key in env for v in names]
    exports: dict[str, str] = {}
    for var in env:
        if any(var.startswith(p) for p in rules.export_prefixes) and var not in excluded:
            exports[var.strip()] = quote_value(env[var])
    for path, body in env_files:
        for n, line in enumerate(env_file_lines(body), 1):
            if "=" not in line:
                raise EnvFileCrash(path, n, line)
            key, val = line.split("=", 1)
            exports[key.strip()] = quote_value(val)
    return exports


def exports_word(exports: Mapping[str, str]) -> str:
    """The first word after the host list: `export K=V; export K2=V2; `."""
    return "".join(f"export {k}={v}; " for k, v in exports.items())


def remote_words(exports: Mapping[str, str], launch_dir: str, python: str,
                 program: Sequence[str]) -> list[str]:
    """The words pdsh sends to every node: exports, `cd`, the interpreter, then `program`
    (for the launch: ``-u -m deepspeed.launcher.launch ...``)."""
    return [exports_word(exports), f"cd {launch_dir};", python, *program]


def remote_line(words: Sequence[str]) -> str:
    """What each node's shell runs: pdsh joins its command words with single spaces."""
    return " ".join(words)


def pdsh_argv(hosts: Sequence[str], connect_timeout: int | None = None,
              command_timeout: int | None = None) -> list[str]:
    """`pdsh -S -f 1024 -w <hosts>` as DeepSpeed runs it; the rehearsal adds pdsh's own connect
    (-t) and command (-u) timers, so that one dead or hung node cannot hold up the others."""
    argv = ["pdsh", "-S", "-f", str(PDSH_MAX_FAN_OUT)]
    if connect_timeout is not None:
        argv += ["-t", str(max(1, int(connect_timeout)))]
    if command_timeout is not None:
        argv += ["-u", str(max(1, int(command_timeout)))]
    return [*argv, "-w", ",".join(hosts)]


def shell_syntax_error(line: str) -> str | None:
    """Why a POSIX shell cannot even parse `line` (an unbalanced quote), or None.  A value with
    a `"` from `.deepspeed_env` does this on every node at once."""
    try:
        shlex.split(line, comments=False, posix=True)
    except ValueError as exc:
        return str(exc)
    return None


# -- pdsh's output -----------------------------------------------------------------------------

@dataclass
class HostOutput:
    """What pdsh printed for one host: its lines (prefix removed), and pdsh's own verdicts."""

    lines: list[str] = field(default_factory=list)
    exit_code: int | None = None  # "ssh exited with exit code N"
    pdsh_errors: list[str] = field(default_factory=list)  # "pdsh@site: host: ..." other than that

    @property
    def timed_out(self) -> bool:
        return any("command timeout" in e for e in self.pdsh_errors)


_EXIT = re.compile(r"ssh exited with exit code (\d+)")
#: faulthandler's lines: a thread's head, a frame
_DUMP_LINE = re.compile(r"^(?:(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):"
                        r"|Stack \(most recent call first\):|\s+File \".*\", line \d+ in \S+|"
                        r"\s*<no Python frame>)$")


def _labels(hosts: Sequence[str]) -> list[tuple[str, str]]:
    """(label, host) pairs, longest label first.  pdsh labels a line with the host as given,
    except that it strips the domain from names that share one (`w1.svc.local` -> `w1`), so a
    host's first label stands for it too, where no other host has that label."""
    from cluster_tests.judge.common.netfacts import is_ip

    full = set(hosts)
    short: dict[str, list[str]] = {}
    for h in hosts:
        if "." in h and not is_ip(h):
            short.setdefault(h.split(".", 1)[0], []).append(h)
    pairs = [(h, h) for h in hosts]
    pairs += [(s, hs[0]) for s, hs in short.items() if len(hs) == 1 and s not in full]
    return sorted(pairs, key=lambda p: len(p[0]), reverse=True)


def split_pdsh_output(text: str, hosts: Sequence[str]) -> dict[str, HostOutput]:
    """pdsh prefixes every line with `host: `; its own messages are `pdsh@site: host: ...`.
    Labels are matched longest first (an FQDN can start with another host's name)."""
    out = {h: HostOutput() for h in hosts}
    # a label holds no ": ", so a line's label is all before its first ": " (one dict look-up
    # per line, not a scan of every host's label: pdsh output of N hosts in O(N))
    labels = dict(_labels(hosts))

    def owner(rest: str) -> tuple[str, str] | None:
        label, sep, msg = rest.partition(": ")
        host = labels.get(label) if sep else None
        return None if host is None else (host, msg)

    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if line.startswith("pdsh@"):
            got = owner(line.split(": ", 1)[1] if ": " in line else "")
            if got is None:
                continue
            host, msg = got
            m = _EXIT.search(msg)
            if m:
                out[host].exit_code = int(m.group(1))
            else:
                out[host].pdsh_errors.append(msg)
            continue
        got = owner(line)
        if got is not None:
            out[got[0]].lines.append(got[1])
    return out


# -- judging one node's leg ------------------------------------------------------------------

REHEARSAL_MARK = "CT_REHEARSAL:"
STEP_MARK = "CT_STEP:"
_SSH_FAILURE = sshfail.PDSH_LEG_FAILED  # ssh's own words in a leg (one vocabulary)


@dataclass(frozen=True)
class Step(ByFields, what="a rehearsal step"):
    """One step of the rehearsal's import check (node/rehearse.py), timed and caught."""

    step: str
    ok: bool
    error: str | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class LegReport:
    """What the rehearsal's stand-in for the launch reported from one node (node/rehearse.py's
    `CT_REHEARSAL:` line): where it ran, its import steps, what it imported from where, and
    what E3 (`versions`), E6 (`tmpdir`) and E7 (`jit`) read of that same process."""

    cwd: str
    pwd: str | None = None  # the shell's PWD: the directory as `cd` wrote it
    steps: tuple[Step, ...] = ()
    packages: Mapping[str, Package] = field(default_factory=dict)
    versions: Versions | None = None
    jit: JitFacts | None = None
    tmpdir: TmpdirFacts | None = None

    @classmethod
    def read(cls, raw: object) -> LegReport:
        d = obj(raw, "the rehearsal's report")
        packages, versions = obj(d.get("packages") or {}, "the packages"), d.get("versions")
        return by_fields(cls, d, packages={str(k): Package.read(v) for k, v in packages.items()},
                         versions=Versions.read(versions) if isinstance(versions, Mapping)
                         else None)

    @property
    def failed(self) -> list[Step]:
        return [s for s in self.steps if not s.ok]


@dataclass(frozen=True)
class Leg:
    """How the rehearsal went on one node: "ok", "fail" (red, with `text`, `fix` and `cause`)
    or "skip" (not checked: `text` says why and which test has the cause)."""

    kind: str
    text: str = ""
    fix: str = ""
    data: LegReport | None = None
    #: a skip whose cause is another red's: that red's test id (the check is blocked by it)
    root: str = ""
    #: LaunchCause, or EnvCause.ENV_FILE_BROKEN; a ProbeError's own
    cause: SectionCause = LaunchCause.LAUNCH_FAILS

    @property
    def cannot_import(self) -> bool:
        """A failed leg whose launch interpreter could not run or import (not, say, one whose
        launch directory is missing there)."""
        return self.kind == "fail" and (self.data is None or bool(self.data.failed))


#: a leg's causes that come from what the launcher hands every rank: no set of nodes avoids them
LAUNCH_WIDE = frozenset({EnvCause.ENV_FILE_BROKEN, LaunchCause.EXPORTS_BREAK_SHELL})


def leg_problem(node: str, leg: Leg, ran: str, command: str) -> Problem:
    """E5's red on `node`: its failed leg, what each node ran (`ran`: '' where the launch did
    not start) and the `deepspeed` command line the rehearsal mirrors."""
    return Problem((node,), leg.cause,
                   leg.text + (f"\n  each node ran: {ran}" if ran else "")
                   + f"\n  the launch rehearsed: {command}", fix=leg.fix,
                   item=ids.LAUNCH_REHEARSAL.item,
                   scope=Scope.LAUNCH_WIDE if leg.cause in LAUNCH_WIDE else None)


def rehearsal_data(out: HostOutput) -> LegReport | None:
    """The report a leg printed last (None: none, or one this version cannot read)."""
    import json

    for line in reversed(out.lines):
        if line.startswith(REHEARSAL_MARK):
            try:
                return LegReport.read(json.loads(line[len(REHEARSAL_MARK):]))
            except (ValueError, FactsError):
                return None
    return None


def ssh_failed(out: HostOutput) -> bool:
    """pdsh's ssh leg to the host failed (ssh's own exit code 255, with ssh's words or nothing
    at all from the host), so no command of the leg ran there."""
    return out.exit_code == 255 and (not out.lines
                                     or any(_SSH_FAILURE.search(ln) for ln in out.lines))


def leg_reached(out: HostOutput) -> bool | None:
    """Did pdsh's ssh leg reach the host?  True: the command ran there (the rehearsal's own
    lines, the remote command's exit code, or its output and a clean end); False: ssh failed
    (`ssh_failed`); None: the output cannot tell (nothing from the host, or a leg that pdsh
    ended or gave up on before the host said anything of its own)."""
    if ssh_failed(out):
        return False
    if any(line.startswith((STEP_MARK, REHEARSAL_MARK)) for line in out.lines):
        return True
    if out.exit_code is not None:  # pdsh -S: the remote command's own (255: without ssh's words)
        return True
    if out.timed_out or out.pdsh_errors or not out.lines:
        return None
    return True


def last_step(out: HostOutput) -> str | None:
    steps = [line[len(STEP_MARK):] for line in out.lines if line.startswith(STEP_MARK)]
    return steps[-1] if steps else None


def stack_at_deadline(out: HostOutput) -> str:
    """Where the leg's main thread was when its own faulthandler fired, 5 s before pdsh's
    deadline (node/rehearse.py): 'importing deepspeed (at ...)', or '' without a dump."""
    threads = S.parse("\n".join(out.lines))
    main = S.main_thread(threads)
    if main is None or not main.frames:
        return ""
    return f"{S.where(main)}, at {main.frames[0].short}"


def _said(out: HostOutput, limit: int = 12) -> str:
    dump = S.parse("\n".join(out.lines))
    lines = [ln for ln in out.lines if not ln.startswith((STEP_MARK, REHEARSAL_MARK))]
    if dump:  # the stack dump is told apart (stack_at_deadline); keep what the leg said
        lines = [ln for ln in lines if not _DUMP_LINE.match(ln)]
    lines += [f"(pdsh: {e})" for e in out.pdsh_errors]
    if out.exit_code is not None:
        lines.append(f"(exit {out.exit_code})")
    return "\n    ".join(lines[-limit:]) or "(nothing)"


def _fix_for_import(error: str, node: str, site: str, python: str,
                    packages: Mapping[str, Package]) -> str:
    m = re.search(r"No module named '([^']+)'", error)
    top = m.group(1).split(".")[0] if m else None
    stray = packages.get(top or "")
    if stray is not None and stray.imported and (stray.file is None or stray.version is None
                                                 or stray.owned is False):
        where = os.path.dirname(stray.file) if stray.file else ", ".join(stray.paths)
        return (f"on {node}: remove or rename {where}: it shadows the installed {top} on the "
                f"launch's sys.path (see {ids.VERSIONS.of(node)})")
    if m:
        return (f"on {node}: install {top} into {python} (the interpreter the launch runs on every "
                f"node, as on {site}), e.g. `{python} -m pip install {top}==<the version on "
                f"{site}>`; or, if a stray '{top}' directory or file on sys.path shadows it (see "
                f"{ids.VERSIONS.of(node)}), remove that")
    return (f"on {node}: repair the environment of {python} (compare `{python} -m pip list` with "
            f"{site}'s; {ids.VERSIONS.of(node)} shows what it imports from where)")


@dataclass(frozen=True)
class LegContext:
    """What every leg of one rehearsal is judged against."""

    site: str  # the rank-0 node, where the launch starts
    python: str  # the launch's interpreter
    launch_dir: str
    deadline: float  # pdsh's deadline for a leg (s)
    exports: Mapping[str, str] = field(default_factory=dict)  # what the launch exports


def judge_leg(node: str, out: HostOutput, ctx: LegContext, replay: str) -> Leg:
    """The verdict on one node's pdsh leg of the rehearsal.  `replay` is a command the user can
    run to see the failure for themselves."""
    data = rehearsal_data(out)
    if data is None:
        return _no_report(node, out, ctx, replay)
    where = f"{node} (pdsh from {ctx.site})"
    problems: list[str] = []
    fixes: list[str] = []
    # the shell's PWD after `cd <dir>` is <dir> as written; getcwd() is the physical path
    here = {os.path.normpath(p) for p in (data.pwd, data.cwd) if p}
    moved = os.path.normpath(ctx.launch_dir) not in here
    if moved:
        said = [ln for ln in out.lines if "cd:" in ln or "cd " in ln] or [
            "the directory is missing"]
        problems.append(
            f"`cd {ctx.launch_dir}` failed there ({said[0]}), "
            f"so the launch starts its ranks in {data.cwd}, where the training script is "
            f"not found")
        fixes.append(f"on {node}: create or mount {ctx.launch_dir} there (the same path as on "
                     f"{ctx.site}), or start deepspeed in a directory that every node has "
                     f"(--launch-dir)")
    problems += [f"`{s.step}` failed: {s.error}" for s in data.failed]
    if data.failed:
        fixes.append(_fix_for_import(data.failed[0].error or "", node, ctx.site, ctx.python,
                                     data.packages))
    if not problems:
        return Leg("ok", data=data)
    return Leg("fail",
               f"{where}: the launch would fail there:\n  - " + "\n  - ".join(problems)
               + f"\n  replay: {replay}",
               "; ".join(dict.fromkeys(fixes)), data=data,
               cause=LaunchCause.LAUNCH_DIR_MISSING if moved else LaunchCause.IMPORT_FAILS)


def _no_report(node: str, out: HostOutput, ctx: LegContext, replay: str) -> Leg:
    """The verdict on a leg that printed no report: it hung, ssh failed, or the interpreter
    did not start or failed before its first import."""
    where, python = f"{node} (pdsh from {ctx.site})", ctx.python
    if out.timed_out:
        step, stack = last_step(out), stack_at_deadline(out)
        return Leg("fail",
                   f"{where}: the launch's step did not finish within {ctx.deadline:g} s"
                   + (f" (stuck in `{step}`)" if step else " (the interpreter never started)")
                   + "; every other rank would wait for this node in rendezvous.\n"
                   + (f"  where it was, 5 s before: {stack}\n" if stack else "")
                   + f"  it said:\n    {_said(out)}",
                   f"on {node}: time `{python} -c 'import deepspeed'` in {ctx.launch_dir}: a hung "
                   f"NFS mount or a slow ~/.bashrc (try: {replay})", cause=LaunchCause.LAUNCH_HANGS)
    if ssh_failed(out):
        return Leg("skip", f"{ctx.site} cannot reach {node} through pdsh's ssh: see "
                   f"{ids.PDSH.of(ctx.site, node)}", root=ids.PDSH.of(ctx.site, node))
    said = "\n".join(out.lines)
    if (out.exit_code == 127 or f"{python}: No such file or directory" in said
            or f"{python}: not found" in said):
        return Leg("fail",
                   f"{where}: the launch runs {python} there "
                   f"(the interpreter of `deepspeed` on {ctx.site}), which does not exist on "
                   f"{node}:\n    {_said(out)}",
                   f"on {node}: install the same environment at the same path ({python}); "
                   f"deepspeed starts every rank with the rank-0 node's interpreter path",
                   cause=LaunchCause.INTERPRETER_MISSING)
    if out.exit_code == 126:
        return Leg("fail", f"{where}: {python} cannot be executed there:\n    {_said(out)}",
                   f"on {node}: chmod +x {python}, or reinstall that environment",
                   cause=LaunchCause.INTERPRETER_BROKEN)
    return Leg("fail",
               f"{where}: {python} failed before it could import anything"
               f"{_startup_hint(said, ctx)}:\n    {_said(out)}",
               f"on {node}: run `{replay}` and fix what it prints (look for PYTHON* exports in "
               f"~/.bashrc there)", cause=LaunchCause.INTERPRETER_BROKEN)


def _startup_hint(said: str, ctx: LegContext) -> str:
    """Why an interpreter may fail before its first import: a PYTHONHOME, or no stdlib."""
    home = re.search(r"PYTHONHOME = '([^']*)'", said)
    if home:
        origin = (f"deepspeed exports it from {ctx.site}'s environment"
                  if "PYTHONHOME" in ctx.exports else
                  f"not from {ctx.site}: the node's own ~/.bashrc sets it?")
        return f" (PYTHONHOME is {home.group(1)!r} there; {origin})"
    if "init_fs_encoding" in said or "No module named 'encodings'" in said:
        return (" (the interpreter cannot find its standard library: a PYTHONHOME or "
                "PYTHONPATH that the node's own ~/.bashrc sets?)")
    return ""


# -- the launch cannot start on the rank-0 node ----------------------------------------------

def judge_plan(site: str, plan: LaunchPlan) -> Leg | None:
    """Why the launch cannot start on `site` (the rank-0 node) at all, as its Leg there ("skip"
    where another check's red holds the cause), or None."""
    where = f"{site} (rank 0, where `deepspeed --hostfile` starts)"
    if not plan.deepspeed:
        return Leg("skip", f"{where} has no `deepspeed`, neither on the PATH of a non-interactive "
                           f"shell ({plan.path}) nor in an interactive one: see "
                           f"{ids.REQUIRED_ENV.of(site)}", root=ids.REQUIRED_ENV.of(site))
    if not plan.pdsh:
        return Leg("skip", f"{where} has no pdsh: see {ids.PDSH_INSTALLED.of(site)}",
                   root=ids.PDSH_INSTALLED.of(site))
    if not plan.launch_dir_ok:
        return Leg("fail", f"{where}: the launch directory {plan.launch_dir} does not exist "
                           f"there.", "create it, or pass the directory you start deepspeed in "
                                      "as --launch-dir", cause=LaunchCause.LAUNCH_DIR_MISSING)
    if not plan.interpreter:
        return Leg("fail", f"{where}: cannot tell which interpreter {plan.deepspeed} runs (its "
                           f"first line: {plan.shebang!r}).",
                   f"on {site}: reinstall deepspeed (pip install --force-reinstall deepspeed)",
                   cause=LaunchCause.LAUNCH_CANNOT_START)
    if plan.facts_error or plan.facts is None:
        said = str(plan.facts_error).replace("\n", "\n    ")
        return Leg("fail", f"{where}: {plan.interpreter} (the interpreter of {plan.deepspeed}) "
                           f"cannot run DeepSpeed's launcher in {plan.launch_dir}:\n    {said}",
                   f"on {site}: repair that environment (pip install deepspeed with "
                   f"{plan.interpreter})", cause=LaunchCause.LAUNCH_CANNOT_START)
    facts = plan.facts
    if facts.error:
        return Leg("fail", f"{where}: DeepSpeed's launcher does not import with "
                           f"{facts.executable} in {plan.launch_dir}:\n    "
                           + facts.error.strip().splitlines()[-1],
                   f"on {site}: repair that environment ({facts.executable} -m pip install "
                   f"deepspeed), or remove what shadows it in {plan.launch_dir}",
                   cause=LaunchCause.IMPORT_FAILS)
    return None


def env_file_stops(site: str, exc: EnvFileCrash) -> Leg:
    """The launch dies on `site` reading its `.deepspeed_env` (E2 names the line)."""
    return Leg("fail", f"{site}: `deepspeed --hostfile` would stop on {site} before starting any "
                       f"rank: {exc}",
               f"on {site}: delete that line or write NAME=value (see "
               f"{ids.DEEPSPEED_ENV.of(site)})", cause=EnvCause.ENV_FILE_BROKEN)


def exports_break(site: str, bad: Sequence[str]) -> Leg:
    """The exports the launch sends from `site` break every node's shell (`export_problems`)."""
    return Leg("fail", f"{site}: the exports deepspeed sends to every node (from {site}'s "
                       f"environment and .deepspeed_env) break every node's shell:\n  - "
                       + "\n  - ".join(bad),
               f"on {site}: correct those lines of .deepspeed_env (see "
               f"{ids.DEEPSPEED_ENV.of(site)})", cause=LaunchCause.EXPORTS_BREAK_SHELL)


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def export_problems(exports: Mapping[str, str]) -> list[str]:
    """Exports that no node's shell can run as written (the same on every node)."""
    bad = [f"`export {k}=...`: '{k}' is not a valid variable name" for k in exports
           if not _IDENT.match(k)]
    err = shell_syntax_error(exports_word(exports))
    if err:
        bad.append(f"the exports line cannot be parsed by a shell ({err}): a value with a "
                   f"double quote, which deepspeed wraps in double quotes as it is")
    return bad
