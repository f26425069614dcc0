"""Training smoke (checklist T1, T2): why a launch failed, from the launcher's log.

:func:`diagnose` turns the log of the real launcher (runner, pdsh, ssh, launch.py, python,
torch.distributed and the job's own ``CT_SMOKE`` events) into :class:`Diagnosis` entries, each a
cause with its evidence and a fix, naming the node where the log does (a pdsh ``host: ``
prefix, a host named in the message). The ssh failures are judge/ssh/sshfail.py's vocabulary;
the others (python, torch, rendezvous, launcher) are the rules here. :func:`root_causes`
splits the causes from their consequences (ranks that waited for a node whose launch failed).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cluster_tests.judge.problem import SectionCause
from cluster_tests.judge.ssh import sshfail
from cluster_tests.judge.ssh.sshfail import Cause
from cluster_tests.judge.training.trainresult import TAG, SmokeResult, parse_output

#: Written into the log by whoever kills a launch at its deadline (a rule below reads it).
LAUNCH_TIMEOUT_MARK = "CT_LAUNCH_TIMEOUT"

__all__ = ["CONSEQUENCE_KINDS", "LAUNCH_TIMEOUT_MARK", "SSH_KINDS", "Diagnosis", "TrainCause",
           "diagnose", "root_causes"]


class TrainCause(SectionCause):
    """What a T1/T2 red is (Problem.cause): the kinds of the diagnoses read from a launch's log
    (the ssh legs' are judge/ssh/sshfail.py's, tested to be these), then a launch's other ends."""

    SSH_PUBLICKEY = "ssh-publickey"
    SSH_HOSTKEY = "ssh-hostkey"
    SSH_RESOLVE = "ssh-resolve"
    SSH_REFUSED = "ssh-refused"
    SSH_TIMEOUT = "ssh-timeout"
    SSH_EXIT = "ssh-exit"
    LAUNCHER_SSH_CHECK = "launcher-ssh-check"
    NO_DEEPSPEED = "no-deepspeed"
    NO_TORCH = "no-torch"
    NO_MODULE = "no-module"
    COMMAND_NOT_FOUND = "command-not-found"
    CD_FAILED = "cd-failed"
    PORT_IN_USE = "port-in-use"
    MASTER_UNREACHABLE = "master-unreachable"
    RENDEZVOUS_TIMEOUT = "rendezvous-timeout"
    DIST_REFUSED = "dist-refused"
    HOSTFILE_MISSING = "hostfile-missing"
    HOSTFILE_BAD = "hostfile-bad"
    RESOURCE_POOL = "resource-pool"
    PDSH_MISSING = "pdsh-missing"
    MASTER_ADDR = "master-addr"
    LAUNCH_TIMEOUT = "launch-timeout"
    DEADLINE = "deadline"
    JOB_ERROR = "job-error"
    RANK_NOT_DONE = "rank-not-done"
    RANK_NOT_STARTED = "rank-not-started"
    # not read from the log
    SETUP_FAILED = "setup-failed"  # the job could not be put in place, or started
    RESULT = "bad-result"  # the job's own report: ranks missing, loss flat, weights differ
    WRONG_ACCELERATOR = "wrong-accelerator"  # ranks trained on another accelerator
    LAUNCH_FAILED = "launch-failed"  # the launcher's exit status, nothing else said
    BAD_OPTIONS = "bad-options"  # the training options cannot be used
    FILTER_REFUSED = "resource-filter-refused"  # DeepSpeed would refuse --include/--exclude

    def __str__(self) -> str:
        return str(self.value)


_PDSH_PREFIX = re.compile(r"^(?P<host>[A-Za-z0-9_.\-\[\]:]+?): (?P<rest>.*)$")
_NOT_HOSTS = frozenset(
    {
        "Traceback",
        "ERROR",
        "WARNING",
        "INFO",
        "DEBUG",
        "Note",
        "note",
        "bash",
        "sh",
        "ssh",
        "pdsh",
        "python",
        "python3",
        "env",
        "cd",
        "warning",
        "error",
    }
)


def _split_prefix(line: str) -> tuple[str | None, str]:
    """``node3: text`` -> ("node3", "text"); ``pdsh@node1: node3: x`` -> ("node3", "x")."""
    line = line.rstrip("\r\n")
    if line.startswith("pdsh@"):
        _head, _, rest = line.partition(": ")
        m = _PDSH_PREFIX.match(rest)
        if m and not m.group("host").startswith("["):
            return m.group("host"), m.group("rest")
        return None, rest
    m = _PDSH_PREFIX.match(line)
    if m and not line.startswith("["):
        host = m.group("host")
        # Not hosts: "RuntimeError: ...", "torch.distributed.DistStoreError: ...", "bash: ...".
        if not re.match(r"^[\w.]+(Error|Exception|Warning|Interrupt|Exit)$", host) and (
            host not in _NOT_HOSTS
        ):
            return host, m.group("rest")
    return None, line


@dataclass
class Diagnosis:
    node: str | None
    cause: str
    evidence: list[str]
    hint: str
    kind: TrainCause

    def __str__(self) -> str:
        where = self.node or "(launcher/unknown node)"
        ev = "\n    ".join(self.evidence)
        return f"[{self.kind}] {where}: {self.cause}\n    {ev}\n  hint: {self.hint}"


@dataclass(frozen=True)
class _Rule:
    kind: TrainCause
    pattern: re.Pattern[str]
    cause: str
    hint: str
    host_group: str | None = None  # named group in pattern naming the node, if any
    ssh_cause: Cause | None = None  # where this rule sits in judge/ssh/sshfail.py's vocabulary


def _r(p: str) -> re.Pattern[str]:
    return re.compile(p, re.IGNORECASE)


def _from_words(w: sshfail.LegWords) -> _Rule:
    return _Rule(TrainCause(w.kind), _r(w.pattern), w.says, w.fix, w.host_group, w.cause)


# Order matters only for the order of the resulting diagnoses; every rule is tried on every line.
# The ssh failures and their words come from judge/ssh/sshfail.py (one vocabulary with S and E5).
_RULES: list[_Rule] = [
    *(_from_words(w) for w in sshfail.PDSH_LEG),
    _Rule(
        TrainCause.NO_DEEPSPEED,
        _r(r"No module named '?deepspeed'?"),
        "deepspeed is not importable by the python the launcher runs there",
        "install the same deepspeed (and torch) on that node into the interpreter at the "
        "same path as on the launching node (the launcher runs its own sys.executable there, "
        "with its own PYTHONPATH)",
    ),
    _Rule(
        TrainCause.NO_TORCH,
        _r(r"No module named '?torch'?"),
        "torch is not importable by the python the launcher runs there",
        "install the same torch into that interpreter on that node",
    ),
    _Rule(
        TrainCause.NO_MODULE,
        _r(r"ModuleNotFoundError: No module named '(?!deepspeed'|torch')(?P<m>[^']+)'"),
        "a Python module is missing there",
        "install the missing module into that node's interpreter",
    ),
    _Rule(
        TrainCause.COMMAND_NOT_FOUND,
        _r(r"(?P<cmd>\S+): command not found|(?P<path>/\S*python\S*): No such file or directory"),
        "a command or the interpreter path does not exist there (non-interactive shell PATH)",
        "install it on that node at the same path, or fix PATH for non-interactive shells "
        "(exports above the early return in ~/.bashrc, or .deepspeed_env)",
    ),
    _Rule(
        TrainCause.CD_FAILED,
        _r(r"cd: (?P<dir>\S+): No such file or directory"),
        "the launch directory does not exist there (deepspeed runs `cd <cwd>` on every node)",
        "create the same working directory on every node (or launch from a shared path)",
    ),
    _Rule(
        TrainCause.PORT_IN_USE,
        _r(r"EADDRINUSE|address already in use"),
        "the master port is already in use on the rank-0 node",
        "pick a free --master_port or stop the process that holds it (ss -ltnp)",
    ),
    _Rule(
        TrainCause.MASTER_UNREACHABLE,
        _r(
            r"trying to connect to \((?P<m>[^,()\s]+), (?P<p>\d+)\)|"
            r"failed to connect/validate to host (?P<m2>[^\s:]+):(?P<p2>\d+)"
        ),
        "this node cannot connect to the rendezvous master",
        "from this node: nc -vz -w 3 <master> <port>; check the firewall of this node (it must "
        "accept replies on high ports, e.g. -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT) "
        "and of the master (it must accept the port), and that the master name resolves here",
    ),
    _Rule(
        TrainCause.RENDEZVOUS_TIMEOUT,
        _r(
            r"Timed out after \d+ seconds waiting for clients|DistStoreError|"
            r"client socket has timed out|Socket Timeout|connect\(\) timed out|"
            r"Timed out waiting \d+ms|wait timeout after \d+ms|"
            r"Timed out initializing process group|rendezvous.*timed? ?out"
        ),
        "torch.distributed rendezvous/collective timed out: some ranks never joined or "
        "cannot reach each other",
        "look for a failed node above (ssh/python errors); else check --master_addr is "
        "reachable from every node on --master_port and high ports are open between nodes "
        "(GLOO/NCCL_SOCKET_IFNAME on the right interface)",
    ),
    _Rule(
        TrainCause.DIST_REFUSED,
        _r(
            r"(pair\.cc|gloo|c10d|TCPStore|DistNetworkError).*Connection refused|"
            r"Connection refused.*(gloo|c10d|TCPStore)|"
            r"Connection reset by peer"
        ),
        "torch.distributed connection refused/reset: master not listening, a peer died, or "
        "a firewall rejects the port",
        "check the rank-0 node listens on --master_port and that node's firewall; if a peer "
        "died, its own error is above",
    ),
    _Rule(
        TrainCause.HOSTFILE_MISSING,
        _r(r"Unable to find hostfile"),
        "the deepspeed launcher found no hostfile and ran on local resources only",
        "pass --hostfile with the path to the cluster's hostfile",
    ),
    _Rule(
        TrainCause.HOSTFILE_BAD,
        _r(r"Hostfile contains|Hostfile is empty or not formatted correctly|Bad hostfile text"),
        "the deepspeed launcher rejected the hostfile",
        "fix the hostfile: one `<host> slots=<n>` per line, no duplicate hosts",
    ),
    _Rule(
        TrainCause.RESOURCE_POOL,
        _r(
            r"not found in hostfile|No slot '\S+' specified on host|"
            r"no GPU resources available|Num nodes is >1 but no extra nodes|"
            r"Cannot specify num_nodes/gpus with include/exclude|"
            r"include_str and exclude_str are mutually exclusive|resource pool"
        ),
        "the deepspeed launcher could not build its resource pool (hostfile/include/exclude)",
        "make --include/--exclude name only hostfile hosts and existing slot indices; on "
        "CPU give --num_gpus",
    ),
    _from_words(sshfail.RUNNER_CHECK),
    _Rule(
        TrainCause.PDSH_MISSING,
        _r(r"launcher 'pdsh' not installed|pdsh: command not found"),
        "pdsh is not installed on the launching node",
        "apt-get install pdsh (and export PDSH_RCMD_TYPE=ssh)",
    ),
    _Rule(
        TrainCause.MASTER_ADDR,
        _r(r"Unable to detect suitable master address"),
        "the launcher could not find the master address (hostname -I on the first host)",
        "pass --master_addr <rank-0 node address>",
    ),
    _Rule(
        TrainCause.LAUNCH_TIMEOUT,
        _r(re.escape(LAUNCH_TIMEOUT_MARK)),
        "the whole launch exceeded its deadline and was killed",
        "see the other diagnoses for the node that held it up; raise the deadline only if "
        "the job was merely slow",
    ),
]

#: The kinds that are an ssh failure (the launch's own ssh legs).
SSH_KINDS = frozenset(r.kind for r in _RULES if r.ssh_cause is not None)

_MAX_EVIDENCE = 4

#: Diagnoses that are usually the consequence of a root cause found elsewhere in the same log
#: (ranks waiting for a node whose launch failed, a rank's own error after a peer died...).
CONSEQUENCE_KINDS = frozenset({
    TrainCause.RANK_NOT_STARTED, TrainCause.RANK_NOT_DONE, TrainCause.RENDEZVOUS_TIMEOUT,
    TrainCause.DIST_REFUSED, TrainCause.DEADLINE, TrainCause.LAUNCH_TIMEOUT, TrainCause.JOB_ERROR,
    TrainCause.SSH_EXIT, TrainCause.HOSTFILE_MISSING})


def root_causes(diags: Sequence[Diagnosis]) -> tuple[list[Diagnosis], list[Diagnosis]]:
    """Split diagnoses into (root causes, consequences).

    With no root cause, everything is returned as root (then the rank's own errors are the
    best there is). ``ssh-exit`` with code 255 (ssh itself failed) counts as a root cause when
    nothing else names an ssh failure on that node.
    """
    ssh_nodes = {d.node for d in diags
                 if d.kind.startswith("ssh-") and d.kind != TrainCause.SSH_EXIT}
    roots: list[Diagnosis] = []
    rest: list[Diagnosis] = []
    for d in diags:
        is_root = d.kind not in CONSEQUENCE_KINDS or (
            d.kind == TrainCause.SSH_EXIT and "exit code 255" in d.cause and d.node not in ssh_nodes
        )
        (roots if is_root else rest).append(d)
    if not roots:
        return list(diags), []
    return roots, rest


#: One cause found, before it is merged with the same cause on the same node:
#: (kind, node, cause, fix hint, the log line or event that shows it).
Finding = tuple[TrainCause, "str | None", str, str, str]


def _shape_ssh_exit(cause: str, hint: str, m: re.Match[str], node: str | None
                    ) -> tuple[str, str]:
    code = m.group("code")
    if code == "255":
        return f"{cause} (exit code 255)", hint
    return (f"the launch on this node exited with code {code} (its ranks failed: see their "
            "errors)"), hint


def _shape_master_unreachable(cause: str, hint: str, m: re.Match[str], node: str | None
                              ) -> tuple[str, str]:
    master = m.group("m") or m.group("m2")
    port = m.group("p") or m.group("p2")
    return f"{cause} {master}:{port} (timed out or refused)", _master_hint(master, port, node)


#: log rules whose cause and fix are completed from what the line says
_SHAPES = {TrainCause.SSH_EXIT: _shape_ssh_exit,
           TrainCause.MASTER_UNREACHABLE: _shape_master_unreachable}
#: log rules whose line names another host than the failing node (the master), so that the
#: node is not looked for in the line
_NAMES_ANOTHER_HOST = {TrainCause.MASTER_UNREACHABLE}
#: log rules that mean something only with several nodes (single-node runs pass a missing
#: hostfile on purpose)
_MULTI_NODE_ONLY = {TrainCause.HOSTFILE_MISSING}


def _log_findings(text: str, known: set[str]) -> list[Finding]:
    """The launcher's and pdsh's own lines, through _RULES."""
    out: list[Finding] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line or TAG + " {" in line:
            continue
        prefix_host, _rest = _split_prefix(line)
        if (
            prefix_host
            and known
            and prefix_host not in known
            and not prefix_host.startswith("pdsh@")
        ):
            # A prefix that is not a hostfile host (e.g. "RuntimeError: ..."): not a node.
            prefix_host = None
        for rule in _RULES:
            m = rule.pattern.search(line)
            if not m:
                continue
            node = prefix_host
            if node is None and rule.host_group:
                gd = m.groupdict()
                node = gd.get(rule.host_group) or gd.get(rule.host_group + "2")
            if node is None and rule.kind not in _NAMES_ANOTHER_HOST:
                node = _host_in_line(line, known)
            if rule.kind in _MULTI_NODE_ONLY and len(known) < 2:
                continue
            cause, hint = rule.cause, rule.hint
            shape = _SHAPES.get(rule.kind)
            if shape is not None:
                cause, hint = shape(cause, hint, m, node)
            out.append((rule.kind, node, cause, hint, line.strip()))
    return out


def _job_errors(res: SmokeResult) -> list[Finding]:
    """What the job's ranks reported failing: a deadline, or an exception."""
    out: list[Finding] = []
    for r, rr in sorted(res.ranks.items()):
        for e in rr.errors:
            node = rr.host or e.host
            if e.kind == "deadline":
                out.append((
                    TrainCause.DEADLINE,
                    node,
                    f"the job's deadline was exceeded there (rank {r} in phase {e.phase})",
                    "a rank that stops in dist-init waits for ranks that never joined (see "
                    "other diagnoses); otherwise raise the deadline (the job's --deadline, the "
                    "suite's --training-deadline) if the node is just slow",
                    e.line(),
                ))
            else:
                out.append((
                    TrainCause.JOB_ERROR,
                    node,
                    f"the job raised {e.kind} there: {e.message}",
                    "see the traceback in the log for that rank",
                    e.line(),
                ))
    return out


def _ranks_not_done(res: SmokeResult) -> list[Finding]:
    """Ranks that started and neither finished nor reported an error."""
    if not res.expected:
        return []
    started_not_done = [r for r in res.missing_ranks if r in res.ranks and res.ranks[r].started]
    return [(
        TrainCause.RANK_NOT_DONE,
        res.ranks[r].host or res.rank_hosts.get(r),
        f"rank {r} started but never reported done (killed, crashed or hung)",
        "look at that node's lines above; a hang in training means a peer died or the "
        "network between nodes drops traffic",
        f"rank {r} started, no done event",
    ) for r in started_not_done if not res.ranks[r].errors]


def _ranks_not_started(res: SmokeResult) -> list[Finding]:
    """Ranks that never passed torch.distributed init, by node."""
    if not res.expected:
        return []
    never = [r for r in res.not_started_ranks if r not in res.ranks or not res.ranks[r].errors]
    by_node: dict[str | None, list[int]] = {}
    for r in never:
        by_node.setdefault(res.rank_hosts.get(r), []).append(r)
    return [(
        TrainCause.RANK_NOT_STARTED,
        node,
        f"ranks {rs} never started (never passed torch.distributed init)",
        "that node's launch failed or it cannot reach the master: see its lines",
        f"no start event from ranks {rs}",
    ) for node, rs in by_node.items()]


#: where the causes of a failed launch are found, in the order they are reported: the log's own
#: lines, then the job's events
_JOB_SOURCES = (_job_errors, _ranks_not_done, _ranks_not_started)


def diagnose(
    text: str,
    expected_ranks: int | None = None,
    hosts: Sequence[str] | None = None,
) -> list[Diagnosis]:
    """Turn a launcher log into causes that name the node where possible.

    ``hosts`` (the hostfile's hosts) lets a pdsh prefix or a host named inside a message be
    matched to a node; lines without one get ``node=None`` (the launching node, or unknown).
    The same cause on the same node is one Diagnosis, with up to _MAX_EVIDENCE lines.
    """
    known = set(hosts or ())
    found: dict[tuple[TrainCause, str | None], Diagnosis] = {}
    res = parse_output(text, expected_ranks=expected_ranks)
    findings = _log_findings(text, known)
    for source in _JOB_SOURCES:
        findings += source(res)
    for kind, node, cause, hint, line in findings:
        d = found.get((kind, node))
        if d is None:
            d = found[(kind, node)] = Diagnosis(node=node, cause=cause, evidence=[], hint=hint,
                                                kind=kind)
        if line not in d.evidence and len(d.evidence) < _MAX_EVIDENCE:
            d.evidence.append(line)
    return list(found.values())


def _master_hint(master: str, port: str, node: str | None) -> str:
    where = f"on {node}" if node else "on that node"
    if master in ("127.0.0.1", "localhost", "::1"):
        return (
            f"{where}, the firewall drops connections to the node's own loopback "
            f"({master}:{port}): accept loopback before any DROP rule: "
            "iptables -I INPUT -i lo -j ACCEPT"
        )
    return (
        f"{where}: nc -vz -w 3 {master} {port}; its firewall must accept the "
        "replies on high ports (iptables -I INPUT -m conntrack --ctstate ESTABLISHED,RELATED "
        f"-j ACCEPT) and {master}'s must accept tcp/{port} and high ports from the nodes; "
        f"{master} must resolve here to the address it listens on"
    )


def _host_in_line(line: str, known: set[str]) -> str | None:
    for h in sorted(known, key=len, reverse=True):
        if re.search(r"(?<![\w.\-])" + re.escape(h) + r"(?![\w\-]|\.\w)", line):
            return h
    return None
