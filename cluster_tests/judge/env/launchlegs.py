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
check in place of ``-m deepspeed.launcher.launch ...``; tests/unit/test_judge_launch.py compares
these functions with DeepSpeed's own code.
"""

from __future__ import annotations

import io
import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.judge.common import stacks as S
from cluster_tests.judge.ssh import sshfail

#: DeepSpeed 0.19's constants (runner.py); the rehearsal reads the installed DeepSpeed's own
#: values on the rank-0 node and falls back to these.
EXPORT_ENVS: tuple[str, ...] = ("MLFLOW", "PYTHON", "MV2", "UCX")
EXCLUDE_ENVS: Mapping[str, tuple[str, ...]] = {"AISC_JOB_NAME": ("NCCL_IB_HCA", "UCX_NET_DEVICES")}
DS_ENV_FILE = ".deepspeed_env"
PDSH_MAX_FAN_OUT = 1024
#: export_envs() of DeepSpeed's accelerators, by accelerator name (accelerator/*_accelerator.py)
ACCELERATOR_EXPORTS: Mapping[str, tuple[str, ...]] = {
    "cuda": ("NCCL",), "npu": ("ASCEND", "HCCL", "LD_LIBRARY", "PATH"), "cpu": (),
}
_NEEDS_QUOTES = re.compile(r"[^\w@%+=:,./-]")


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
    for path, text in env_files:
        for n, line in enumerate(env_file_lines(text), 1):
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
class Leg:
    """How the rehearsal went on one node: "ok", "fail" (red, with `text` and `fix`) or "skip"
    (not checked: `text` says why and which test has the cause)."""

    kind: str
    text: str = ""
    fix: str = ""
    data: dict | None = None
    #: a skip whose cause is another red's: that red's test id (the check is blocked by it)
    root: str = ""


def rehearsal_data(out: HostOutput) -> dict | None:
    import json

    for line in reversed(out.lines):
        if line.startswith(REHEARSAL_MARK):
            try:
                return json.loads(line[len(REHEARSAL_MARK):])
            except ValueError:
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
                    packages: Mapping[str, Mapping[str, object]]) -> str:
    m = re.search(r"No module named '([^']+)'", error)
    top = m.group(1).split(".")[0] if m else None
    stray = packages.get(top or "") or {}
    file = stray.get("file")
    if stray.get("imported") and (file is None or stray.get("version") is None
                                  or stray.get("owned") is False):
        where = (os.path.dirname(str(file)) if file
                 else ", ".join(str(x) for x in stray.get("paths") or []))  # type: ignore[attr-defined]
        return (f"on {node}: remove or rename {where}: it shadows the installed {top} on the "
                f"launch's sys.path (see {ids.VERSIONS.of(node)})")
    if m:
        return (f"on {node}: install {top} into {python} (the interpreter the launch runs on every "
                f"node, as on {site}), e.g. `{python} -m pip install {top}==<the version on "
                f"{site}>`; or, if a stray '{top}' directory or file on sys.path shadows it (see "
                f"{ids.VERSIONS.of(node)}), remove that")
    return (f"on {node}: repair the environment of {python} (compare `{python} -m pip list` with "
            f"{site}'s; {ids.VERSIONS.of(node)} shows what it imports from where)")


def judge_leg(node: str, out: HostOutput, *, site: str, python: str, launch_dir: str,
              deadline: float, replay: str, exports: Mapping[str, str] | None = None) -> Leg:
    """The verdict on one node's pdsh leg of the rehearsal.  `replay` is a command the user can
    run to see the failure for themselves."""
    data = rehearsal_data(out)
    where = f"{node} (pdsh from {site})"
    if data is None:
        if out.timed_out:
            step = last_step(out)
            stack = stack_at_deadline(out)
            return Leg("fail",
                       f"{where}: the launch's step did not finish within {deadline:g} s"
                       + (f" (stuck in `{step}`)" if step else " (the interpreter never started)")
                       + "; every other rank would wait for this node in rendezvous.\n"
                       + (f"  where it was, 5 s before: {stack}\n" if stack else "")
                       + f"  it said:\n    {_said(out)}",
                       f"on {node}: time `{python} -c 'import deepspeed'` in {launch_dir}: a hung "
                       f"NFS mount or a slow ~/.bashrc (try: {replay})")
        if ssh_failed(out):
            return Leg("skip", f"{site} cannot reach {node} through pdsh's ssh: see "
                       f"{ids.PDSH.of(site, node)}", root=ids.PDSH.of(site, node))
        text = "\n".join(out.lines)
        if (out.exit_code == 127 or f"{python}: No such file or directory" in text
                or f"{python}: not found" in text):
            return Leg("fail",
                       f"{where}: the launch runs {python} there "
                       f"(the interpreter of `deepspeed` on {site}), which does not exist on "
                       f"{node}:\n    {_said(out)}",
                       f"on {node}: install the same environment at the same path ({python}); "
                       f"deepspeed starts every rank with the rank-0 node's interpreter path")
        if out.exit_code == 126:
            return Leg("fail", f"{where}: {python} cannot be executed there:\n    {_said(out)}",
                       f"on {node}: chmod +x {python}, or reinstall that environment")
        hint = ""
        home = re.search(r"PYTHONHOME = '([^']*)'", text)
        if home:
            origin = (f"deepspeed exports it from {site}'s environment" if "PYTHONHOME" in
                      (exports or {}) else f"not from {site}: the node's own ~/.bashrc sets it?")
            hint = f" (PYTHONHOME is {home.group(1)!r} there; {origin})"
        elif "init_fs_encoding" in text or "No module named 'encodings'" in text:
            hint = (" (the interpreter cannot find its standard library: a PYTHONHOME or "
                    "PYTHONPATH that the node's own ~/.bashrc sets?)")
        return Leg("fail",
                   f"{where}: {python} failed before it could import anything{hint}:\n"
                   f"    {_said(out)}",
                   f"on {node}: run `{replay}` and fix what it prints (look for PYTHON* exports in "
                   f"~/.bashrc there)")
    problems: list[str] = []
    fixes: list[str] = []
    # the shell's PWD after `cd <dir>` is <dir> as written; getcwd() is the physical path
    here = {os.path.normpath(p) for p in (data.get("pwd"), data.get("cwd")) if p}
    if os.path.normpath(launch_dir) not in here:
        said = [ln for ln in out.lines if "cd:" in ln or "cd " in ln]
        problems.append(
            f"`cd {launch_dir}` failed there ({said[0] if said else 'the directory is missing'}), "
            f"so the launch starts its ranks in {data.get('cwd')}, where the training script is "
            f"not found")
        fixes.append(f"on {node}: create or mount {launch_dir} there (the same path as on {site}), "
                     f"or start deepspeed in a directory that every node has (--launch-dir)")
    failed = [s for s in data.get("steps", []) if not s.get("ok")]
    for s in failed:
        problems.append(f"`{s['step']}` failed: {s.get('error')}")
    if failed:
        fixes.append(_fix_for_import(failed[0].get("error") or "", node, site, python,
                                     data.get("packages") or {}))
    if not problems:
        return Leg("ok", data=data)
    return Leg("fail",
               f"{where}: the launch would fail there:\n  - " + "\n  - ".join(problems)
               + f"\n  replay: {replay}",
               "; ".join(dict.fromkeys(fixes)), data=data)


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
