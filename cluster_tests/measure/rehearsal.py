"""The launch rehearsal over SSH (CHECKLIST E5): what `deepspeed --hostfile` runs on every node,
run from the rank-0 node through the real pdsh, with an import check in place of the training.

Once per session:

1. On the rank-0 node (through our SSH session, a non-interactive shell like the one the user's
   `deepspeed` would inherit from a script): `command -v deepspeed`, the interpreter its `#!`
   line names (DeepSpeed's ``sys.executable``), and, from that interpreter in the launch
   directory (``--launch-dir``, default the home directory), DeepSpeed's own export rules
   (``EXPORT_ENVS``, the accelerator's ``export_envs()``, ``EXCLUDE_ENVS``), its environment and
   the ``.deepspeed_env`` files it reads (envprobe.py, section ``launch``).
2. Here: the exports exactly as DeepSpeed's runner computes them (launchlegs.py).
3. On the rank-0 node: ``pdsh -S -f 1024 -t C -u D -w <the launch's hosts> "export ...; " "cd
   <dir>;" <interpreter> -u -c <rehearse.py>`` with ``PDSH_RCMD_TYPE=ssh``, the same line the
   launch sends, except that ``-m deepspeed.launcher.launch ...`` becomes the import check.
   pdsh's ``-u`` ends a leg that hangs, so that one node cannot hold up the others' verdicts.
4. Each node's verdict from its own lines of pdsh's output (launchlegs.judge_leg).

Nothing is left running: the check is a handful of imports, pdsh kills a leg at its deadline,
and the pdsh process itself runs under the session's `timeout` and run tag.
"""

from __future__ import annotations

import base64
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, ProbeError, remote_script
from cluster_tests.core.memokey import MemoKey
from cluster_tests.core.transport import ConnectError
from cluster_tests.judge.env import launchlegs
from cluster_tests.judge.hostfile import launchargs as la
from cluster_tests.judge.hostfile import resourcefilter as rf
from cluster_tests.measure import launchpy

MEMO_KEY: MemoKey[Any] = MemoKey("rehearsal", "result")
BACKGROUND: MemoKey[bool] = MemoKey("rehearsal", "background")
SCRIPT = "envprobe.py"


@dataclass
class Rehearsal:
    site: str
    launch_dir: str = ""
    python: str = ""
    accelerator: str | None = None
    hosts: list[str] = field(default_factory=list)
    exports: dict[str, str] = field(default_factory=dict)
    line: str = ""  # what each node's shell ran (the check's code abbreviated)
    #: the launch cannot even start: (kind, text) where kind is "fail" (on the rank-0 node, the
    #: others skip citing it) or "skip" (every node skips: the cause is another test's)
    site_problem: tuple[str, str, str] | None = None
    #: the launch cannot start because of the rank-0 node's .deepspeed_env (E2 lints it there)
    site_env_file: bool = False
    legs: dict[str, launchlegs.Leg] = field(default_factory=dict)
    #: what the launch's pdsh printed for each host (S5 reads rank 0's legs from it)
    outputs: dict[str, launchlegs.HostOutput] = field(default_factory=dict)
    seconds: float = 0.0
    deepspeed_version: str | None = None

    def leg(self, node: str) -> launchlegs.Leg:
        site_id = ids.LAUNCH_REHEARSAL.of(self.site)
        if self.site_problem is not None:
            kind, text, root = self.site_problem
            if kind == "skip":
                return launchlegs.Leg("skip", text, root=root)
            if node == self.site:
                return launchlegs.Leg("fail", text)
            return launchlegs.Leg("skip", f"the launch cannot start on {self.site}: see {site_id}",
                          root=site_id)
        if node not in self.legs:
            return launchlegs.Leg("skip",
                                 f"{node} is not in the launch (--launch-include/--launch-exclude)")
        return self.legs[node]


def launch_hosts(cluster: Cluster) -> list[str]:
    """The hosts pdsh gets (`-w`): the hostfile's, after the launch's include/exclude filter."""
    s = cluster.settings
    if not s.include and not s.exclude:
        return list(cluster.names)
    pool = {n.name: n.slots for n in cluster.nodes}
    try:
        active = rf.parse_resource_filter(pool, include=s.include, exclude=s.exclude)
    except rf.ResourceFilterError:
        return list(cluster.names)  # H5 reports the filter; rehearse every node meanwhile
    return [n for n in cluster.names if n in active]


def command_line(cluster: Cluster) -> str:
    """The `deepspeed` command line the rehearsal (and T2) mirror: the user's --launch-args as
    resolved (no --master_addr unless given: DeepSpeed then derives it, see H3)."""
    s = cluster.settings
    return la.command_line(str(s.hostfile), s.master_addr, s.master_port, s.include, s.exclude,
                           s.launch_passthrough)


def launch_plan(cluster: Cluster) -> dict[str, Any]:
    """On the rank-0 node: the launch's `deepspeed` (launchpy: the user's interactive shell's,
    else the non-interactive PATH's), its interpreter and DeepSpeed's export rules (probed once)."""
    timeout = cluster.settings.timeout_command
    found = launchpy.launch_deepspeed(cluster)
    plan: dict[str, Any] = cluster.probe(
        cluster.rank0.name, "launch", script=SCRIPT, launch_dir=cluster.settings.env.launch_dir,
        import_timeout=max(60.0, timeout), timeout=max(60.0, timeout) + 30,
        **({"deepspeed": found.path} if found.path else {}))
    return {**plan, "found_by": found.how if found.path and plan.get("deepspeed") == found.path
            else "PATH"}


def launch_python(cluster: Cluster) -> str | None:
    """The interpreter every rank runs (the launch's `deepspeed`'s sys.executable), or None when
    the rank-0 node cannot tell (the rehearsal says why)."""
    try:
        plan = launch_plan(cluster)
    except (ProbeError, ConnectError):  # rank 0 down: its own red (test_login) says so
        return None
    facts = plan.get("facts") or {}
    return None if facts.get("error") else facts.get("executable")


def rehearse(cluster: Cluster) -> Rehearsal:
    return cluster.memo(MEMO_KEY, lambda: _rehearse(cluster))


def start_background(cluster: Cluster) -> None:
    """Start the rehearsal in the background, once per session, so that its imports (the rank-0
    node's launch probe, then one import per node through pdsh) overlap the other checks instead
    of following them.  Its pdsh opens one login per node, which S4's per-source fan-out leaves
    room for (sshpairs.SSHD_SAFE_FANOUT).  The checks read the same memo entry: whoever asks
    first computes, the others wait; an error is re-raised to the check that reads it."""
    started = [False]

    def claim() -> bool:
        started[0] = True
        return True

    cluster.memo(BACKGROUND, claim)
    if not started[0]:
        return
    cluster.in_background("ct-rehearsal", lambda: rehearse(cluster), wait=False)


def scheduled(cluster: Cluster) -> bool:
    """This session runs the rehearsal (started in the background after collection)."""
    return cluster.cached(BACKGROUND) is True


def _code_word(deadline: float, tag: str) -> str:
    """The rehearsal script as one `-c` word; CT_DEADLINE (pdsh's deadline for the leg) lets it
    dump its stacks just before that deadline, if it is still running (node/rehearse.py). The
    run's tag (a comment) marks the leg, and pdsh's ssh client that carries it, as the run's
    own: after Ctrl-C the run ends them on every node (`Pool.end_leftovers`)."""
    b64 = base64.b64encode(remote_script("rehearse.py")).decode()
    return f"'CT_DEADLINE={deadline:g};import base64;exec(base64.b64decode(\"{b64}\"))#{tag}'"


def _rehearse(cluster: Cluster) -> Rehearsal:
    start = time.monotonic()
    site = cluster.rank0.name
    r = Rehearsal(site=site)
    err = cluster.login_error(site)
    if err is not None:
        r.site_problem = ("skip", f"{site} (rank 0, where deepspeed starts) unreachable "
                                  f"({err.cause.value}): see {ids.LOGIN.of(site)}",
                          ids.LOGIN.of(site))
        return r
    timeout = cluster.settings.timeout_command
    try:
        plan = launch_plan(cluster)
    except ProbeError as exc:
        r.site_problem = ("fail", str(exc), "")
        return r
    r.launch_dir = plan["launch_dir"]
    problem = _site_problem(site, plan)
    if problem is not None:
        r.site_problem = problem
        return r
    facts: dict[str, Any] = plan["facts"]
    # DeepSpeed writes `cd {os.path.abspath('.')}`: the launch directory as its process sees it
    r.launch_dir = facts.get("cwd") or r.launch_dir
    r.python = facts["executable"]
    r.accelerator = facts.get("accelerator")
    r.deepspeed_version = facts.get("deepspeed")
    rules = launchlegs.LaunchRules(
        export_prefixes=tuple(facts.get("EXPORT_ENVS") or launchlegs.EXPORT_ENVS)
        + tuple(facts.get("export_envs") or ()),
        exclude_envs={k: tuple(v) for k, v in (facts.get("EXCLUDE_ENVS") or {}).items()},
    )
    try:
        r.exports = launchlegs.launch_exports(facts["env"], facts["cwd"],
                                      [tuple(f) for f in facts.get("env_files") or []], rules)
    except launchlegs.EnvFileCrash as exc:
        r.site_env_file = True
        r.site_problem = ("fail", f"{site}: `deepspeed --hostfile` would stop on {site} before "
                                  f"starting any rank: {exc}\n  fix, on {site}: delete that line "
                                  f"or write NAME=value (see {ids.DEEPSPEED_ENV.of(site)})", "")
        return r
    bad = launchlegs.export_problems(r.exports)
    if bad:
        r.site_env_file = True
        r.site_problem = ("fail", f"{site}: the exports deepspeed sends to every node (from "
                                  f"{site}'s environment and .deepspeed_env) break every node's "
                                  f"shell:\n  - " + "\n  - ".join(bad)
                                  + f"\n  fix, on {site}: correct those lines of .deepspeed_env "
                                  f"(see {ids.DEEPSPEED_ENV.of(site)})", "")
        return r
    r.hosts = launch_hosts(cluster)
    connect = cluster.settings.timeout_connect
    deadline = max(60.0, timeout)
    words = launchlegs.remote_words(r.exports, r.launch_dir, r.python,
                                   ["-u", "-c", _code_word(deadline, cluster.pool.tag)])
    r.line = launchlegs.remote_line(words[:-1] + ["'<import check>'"])
    argv = launchlegs.pdsh_argv(r.hosts, connect_timeout=int(connect),
                                command_timeout=int(deadline))
    ssh_args = f"-o BatchMode=yes -o ConnectTimeout={int(connect)}"
    command = (f"cd {shlex.quote(r.launch_dir)} && PDSH_RCMD_TYPE=ssh "
               f"PDSH_SSH_ARGS_APPEND=\"$PDSH_SSH_ARGS_APPEND {ssh_args}\" "
               + shlex.join([*argv, *words]))
    res = cluster.run(site, command, timeout=connect + deadline + 30)
    r.outputs = outputs = launchlegs.split_pdsh_output(res.stdout + "\n" + res.stderr, r.hosts)
    replay_line = launchlegs.remote_line(
        words[:-2] + ["-c", "\"import deepspeed.launcher.launch\""])
    for node in r.hosts:
        r.legs[node] = launchlegs.judge_leg(node, outputs[node], site=site, python=r.python,
                                    launch_dir=r.launch_dir, deadline=deadline,
                                    replay=f"ssh {node} {shlex.quote(replay_line)}",
                                    exports=r.exports)
    r.seconds = time.monotonic() - start
    return r


def _site_problem(site: str, plan: dict[str, Any]) -> tuple[str, str, str] | None:
    where = f"{site} (rank 0, where `deepspeed --hostfile` starts)"
    if not plan.get("deepspeed"):
        return ("skip", f"{where} has no `deepspeed`, neither on the PATH of a non-interactive "
                        f"shell ({plan.get('path')}) nor in an interactive one: see "
                        f"{ids.REQUIRED_ENV.of(site)}", ids.REQUIRED_ENV.of(site))
    if not plan.get("pdsh"):
        return ("skip", f"{where} has no pdsh: see {ids.PDSH_INSTALLED.of(site)}",
                ids.PDSH_INSTALLED.of(site))
    if not plan.get("launch_dir_ok"):
        return ("fail", f"{where}: the launch directory {plan['launch_dir']} does not exist there."
                        f"\n  fix: create it, or pass the directory you start deepspeed in as "
                        f"--launch-dir", "")
    if not plan.get("interpreter"):
        return ("fail", f"{where}: cannot tell which interpreter {plan['deepspeed']} runs (its "
                        f"first line: {plan.get('shebang')!r}).\n  fix, on {site}: reinstall "
                        f"deepspeed (pip install --force-reinstall deepspeed)", "")
    if plan.get("facts_error") or "facts" not in plan:
        return ("fail", f"{where}: {plan.get('interpreter')} (the interpreter of "
                        f"{plan['deepspeed']}) cannot run DeepSpeed's launcher in "
                        f"{plan['launch_dir']}:\n    "
                        + str(plan.get("facts_error")).replace("\n", "\n    ")
                        + f"\n  fix, on {site}: repair that environment (pip install deepspeed "
                        f"with {plan.get('interpreter')})", "")
    facts = plan["facts"]
    if facts.get("error"):
        return ("fail", f"{where}: DeepSpeed's launcher does not import with "
                        f"{facts.get('executable')} in {plan['launch_dir']}:\n    "
                        + facts["error"].strip().splitlines()[-1]
                        + f"\n  fix, on {site}: repair that environment ({facts.get('executable')} "
                        f"-m pip install deepspeed), or remove what shadows it in "
                        f"{plan['launch_dir']}", "")
    return None
