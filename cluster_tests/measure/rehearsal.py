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
4. Each node's verdict from its own lines of pdsh's output (launchlegs.judge_leg), its report
   read once, where it arrives, into typed facts (launchlegs.LegReport).

Nothing is left running: the check is a handful of imports, pdsh kills a leg at its deadline,
and the pdsh process itself runs under the session's `timeout` and run tag.
"""

from __future__ import annotations

import base64
import dataclasses
import shlex
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, ProbeError, remote_script
from cluster_tests.core.memokey import MemoKey
from cluster_tests.core.transport import ConnectError
from cluster_tests.judge.env import launchlegs
from cluster_tests.judge.env.jit import JitFacts
from cluster_tests.judge.env.launchlegs import LAUNCH, HostOutput, LaunchPlan, Leg
from cluster_tests.judge.hostfile import launchargs as la
from cluster_tests.judge.hostfile import resourcefilter as rf
from cluster_tests.measure import launchpy

BACKGROUND: MemoKey[bool] = MemoKey("rehearsal", "background")
BACKGROUND_PREPARED: MemoKey[bool] = MemoKey("rehearsal", "background-prepared")


@dataclass
class Rehearsal:
    site: str
    launch_dir: str = ""
    python: str = ""
    accelerator: str | None = None
    hosts: list[str] = field(default_factory=list)
    exports: dict[str, str] = field(default_factory=dict)
    line: str = ""  # what each node's shell ran (the check's code abbreviated)
    #: the launch cannot even start: its leg on the rank-0 node ("fail": the other nodes skip
    #: citing it), or every node's ("skip": the cause is another test's)
    site_problem: Leg | None = None
    #: the launch cannot start because of the rank-0 node's .deepspeed_env (E2 lints it there)
    site_env_file: bool = False
    legs: dict[str, Leg] = field(default_factory=dict)
    #: what the launch's pdsh printed for each host (S5 reads rank 0's legs from it)
    outputs: dict[str, HostOutput] = field(default_factory=dict)
    seconds: float = 0.0
    deepspeed_version: str | None = None

    def leg(self, node: str) -> Leg:
        site_id = ids.LAUNCH_REHEARSAL.of(self.site)
        if self.site_problem is not None:
            if self.site_problem.kind == "skip" or node == self.site:
                return self.site_problem
            return Leg("skip", f"the launch cannot start on {self.site}: see {site_id}",
                       root=site_id)
        if node not in self.legs:
            return Leg("skip", f"{node} is not in the launch (--launch-include/--launch-exclude)")
        return self.legs[node]

    def jit_facts(self, nodes: Iterable[str]) -> dict[str, JitFacts | None]:
        """node -> E7's facts as its leg reported them (None: it reported none)."""
        return {n: (data.jit if (data := self.leg(n).data) is not None else None) for n in nodes}


MEMO_KEY: MemoKey[Rehearsal] = MemoKey("rehearsal", "result")
PREPARED: MemoKey[Rehearsal] = MemoKey("rehearsal", "prepared")


def launch_hosts(cluster: Cluster) -> list[str]:
    """The hosts pdsh gets (`-w`): the hostfile's, after the launch's include/exclude filter,
    the first --num_nodes of them where the launch gives it (as DeepSpeed's runner takes them)."""
    s = cluster.settings
    hosts = list(cluster.names)
    if s.include or s.exclude:
        pool = {n.name: n.slots for n in cluster.nodes}
        try:
            active = rf.parse_resource_filter(pool, include=s.include, exclude=s.exclude)
            hosts = [n for n in cluster.names if n in active]
        except rf.ResourceFilterError:
            pass  # H5 reports the filter; rehearse every node meanwhile
    return hosts[:s.num_nodes] if s.num_nodes > 0 else hosts


def command_line(cluster: Cluster) -> str:
    """The `deepspeed` command line the rehearsal (and T2) mirror: the user's launch command
    where given, else their --launch-args as resolved (no --master_addr unless given: DeepSpeed
    then derives it, see H3)."""
    s = cluster.settings
    if s.launch_command is not None:
        return s.launch_command.line()
    return la.command_line(str(s.hostfile), s.master_addr, s.master_port, s.include, s.exclude,
                           s.launch_passthrough)


def launch_params(cluster: Cluster) -> dict[str, object]:
    """The parameters of the rank-0 node's `launch` probe: the launch directory, the import's
    deadline, and the launch's `deepspeed` (launchpy: the user's interactive shell's, where
    found; else the node's non-interactive PATH's)."""
    timeout = cluster.settings.timeout_command
    found = launchpy.launch_deepspeed(cluster)
    return {"launch_dir": cluster.settings.env.launch_dir, "import_timeout": max(60.0, timeout),
            "timeout": max(60.0, timeout) + 30,
            **({"deepspeed": found.path} if found.path else {})}


def launch_plan(cluster: Cluster) -> LaunchPlan:
    """On the rank-0 node: the launch's `deepspeed`, its interpreter and DeepSpeed's export
    rules (probed once)."""
    return cluster.probe(cluster.rank0.name, LAUNCH, **launch_params(cluster))


def launch_python(cluster: Cluster) -> str | None:
    """The interpreter every rank runs (the launch's `deepspeed`'s sys.executable), or None when
    the rank-0 node cannot tell (the rehearsal says why)."""
    try:
        plan = launch_plan(cluster)
    except (ProbeError, ConnectError):  # rank 0 down: its own red (test_login) says so
        return None
    return None if plan.facts is None or plan.facts.error else plan.facts.executable


def rehearse(cluster: Cluster) -> Rehearsal:
    """The whole rehearsal: what the launch works out on the rank-0 node (:func:`prepared`),
    then its pdsh legs to every host, each judged."""
    return cluster.memo(MEMO_KEY, lambda: _rehearse(cluster))


def prepared(cluster: Cluster) -> Rehearsal:
    """What the launch works out on the rank-0 node before pdsh: its interpreter, directory and
    exports (or why it cannot start there), without the legs. The readers of the exports alone
    (F5, C1, C2) read this: a session that runs neither E nor S5 runs no import check over pdsh
    on every node for them."""
    return cluster.memo(PREPARED, lambda: _prepared(cluster))


def exports(cluster: Cluster) -> dict[str, str]:
    """The variables the launch exports to every rank (DeepSpeed's rules on the rank-0 node;
    empty where it cannot start there, E5 says why)."""
    return prepared(cluster).exports


def start_background(cluster: Cluster, *, legs: bool = True) -> None:
    """Start the rehearsal in the background, once per session, so that its imports (the rank-0
    node's launch probe, then, with `legs`, one import per node through pdsh) overlap the other
    checks instead of following them.  Its pdsh opens one login per node, which S4's per-source
    fan-out leaves room for (sshpairs.SSHD_SAFE_FANOUT).  The checks read the same memo entry:
    whoever asks first computes, the others wait; an error is re-raised to the check that reads
    it. Without `legs`: the rank-0 node's part only (:func:`prepared`)."""
    started = [False]

    def claim() -> bool:
        started[0] = True
        return True

    cluster.memo(BACKGROUND if legs else BACKGROUND_PREPARED, claim)
    if not started[0]:
        return
    work = (lambda: rehearse(cluster)) if legs else (lambda: prepared(cluster))
    cluster.in_background("ct-rehearsal", work, wait=False)


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
    # a copy: the legs go into this one, the prepared one stays as the exports' readers saw it
    r = dataclasses.replace(prepared(cluster), hosts=[], legs={}, outputs={})
    if r.site_problem is None:
        _run_legs(cluster, r)
        r.seconds = time.monotonic() - start
    return r


def _prepared(cluster: Cluster) -> Rehearsal:
    r = Rehearsal(site=cluster.rank0.name)
    r.site_problem = _prepare(cluster, r)
    return r


def _prepare(cluster: Cluster, r: Rehearsal) -> Leg | None:
    """What the launch works out on the rank-0 node before pdsh (its interpreter, directory and
    exports, into `r`); or why it cannot start there, as that node's leg."""
    site = r.site
    err = cluster.login_error(site)
    if err is not None:
        return Leg("skip", f"{site} (rank 0, where deepspeed starts) unreachable "
                           f"({err.cause.value}): see {ids.LOGIN.of(site)}",
                   root=ids.LOGIN.of(site))
    try:
        plan = launch_plan(cluster)
    except ProbeError as exc:
        return Leg("fail", exc.message, exc.fix, cause=exc.cause)
    r.launch_dir = plan.launch_dir
    problem = launchlegs.judge_plan(site, plan)
    if problem is not None:
        return problem
    facts = plan.facts
    assert facts is not None  # judge_plan fails a plan without them
    # DeepSpeed writes `cd {os.path.abspath('.')}`: the launch directory as its process sees it
    r.launch_dir = facts.cwd or r.launch_dir
    r.python, r.accelerator, r.deepspeed_version = facts.executable, facts.accelerator, \
        facts.deepspeed
    try:
        r.exports = launchlegs.launch_exports(facts.env, facts.cwd, facts.env_files,
                                              facts.rules())
    except launchlegs.EnvFileCrash as exc:
        r.site_env_file = True
        return launchlegs.env_file_stops(site, exc)
    bad = launchlegs.export_problems(r.exports)
    if bad:
        r.site_env_file = True
        return launchlegs.exports_break(site, bad)
    return None


def _run_legs(cluster: Cluster, r: Rehearsal) -> None:
    """pdsh from the rank-0 node, as the launch runs it, and each node's leg judged."""
    r.hosts = launch_hosts(cluster)
    connect = cluster.settings.timeout_connect
    deadline = max(60.0, cluster.settings.timeout_command)
    words = launchlegs.remote_words(r.exports, r.launch_dir, r.python,
                                    ["-u", "-c", _code_word(deadline, cluster.pool.tag)])
    r.line = launchlegs.remote_line(words[:-1] + ["'<import check>'"])
    argv = launchlegs.pdsh_argv(r.hosts, connect_timeout=int(connect),
                                command_timeout=int(deadline))
    ssh_args = f"-o BatchMode=yes -o ConnectTimeout={int(connect)}"
    command = (f"cd {shlex.quote(r.launch_dir)} && PDSH_RCMD_TYPE=ssh "
               f"PDSH_SSH_ARGS_APPEND=\"$PDSH_SSH_ARGS_APPEND {ssh_args}\" "
               + shlex.join([*argv, *words]))
    res = cluster.run(r.site, command, timeout=connect + deadline + 30)
    r.outputs = launchlegs.split_pdsh_output(res.stdout + "\n" + res.stderr, r.hosts)
    replay_line = launchlegs.remote_line(
        words[:-2] + ["-c", "\"import deepspeed.launcher.launch\""])
    ctx = launchlegs.LegContext(r.site, r.python, r.launch_dir, deadline, r.exports)
    for node in r.hosts:
        r.legs[node] = launchlegs.judge_leg(node, r.outputs[node], ctx,
                                            f"ssh {node} {shlex.quote(replay_line)}")
