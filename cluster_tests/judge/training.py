"""Training smoke (checklist T1, T2): launcher-side helpers.

The job itself is ``node/train_smoke.py`` (standalone; torch + deepspeed only). This
module builds the real launcher's command lines, reads the job's tagged output back
(``CT_SMOKE {json}`` lines, possibly prefixed with ``host: `` by pdsh and interleaved across
ranks), turns launcher/pdsh/ssh/python/torch.distributed failures into causes that name the
node, and runs the single-node job on this machine (for the project's own tests).

Single node (T1). DeepSpeed's runner, without a hostfile, takes the local slots from the
accelerator's device count; ``--num_gpus K`` overrides it with ``range(K)`` on every
accelerator, CPU included (the CPU accelerator would otherwise count NUMA nodes or read
``LOCAL_SIZE``). An explicit ``--hostfile`` that does not exist keeps a cluster's
``/job/hostfile`` (the runner's default path) from turning a single-node run into a pdsh launch
of the whole cluster; the runner only warns "Unable to find hostfile". The master address is
then 127.0.0.1 and no ssh is used::

    deepspeed --hostfile /nonexistent/ct-no-hostfile --num_gpus K --master_port P \
        train_smoke.py --steps 20 --deadline 300

On CPU set ``DS_ACCELERATOR=cpu``: the backend is gloo unless oneCCL's
``oneccl_bindings_for_pytorch`` is importable (then ccl). The job marks DeepSpeed's
``deepspeed_shm_comm`` op unavailable so the CPU backend does not JIT-build it (about 30 s on
2 cores; only inference all-reduce uses it); ``--jit-shm`` restores the build.

Multi node (T2)::

    deepspeed --hostfile H --master_addr A --master_port P [--include S] [--exclude S] \
        train_smoke.py --steps 20 --deadline 300
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster_tests import node
from cluster_tests.judge.sshfail import Cause

TAG = "CT_SMOKE"
SCRIPT_PATH = node.script("train_smoke.py")
EXIT_DEADLINE = 3
EXIT_ERROR = 4
NO_HOSTFILE = "/nonexistent/ct-no-hostfile"
LAUNCH_TIMEOUT_MARK = "CT_LAUNCH_TIMEOUT"
DEFAULT_MIN_DROP = 0.25

__all__ = [
    "SCRIPT_PATH",
    "TAG",
    "Diagnosis",
    "LaunchInfo",
    "RankResult",
    "SmokeResult",
    "diagnose",
    "find_deepspeed",
    "multi_node_argv",
    "parse_output",
    "run_local_single_node",
    "single_node_argv",
]


# --------------------------------------------------------------------------- argv builders


def single_node_argv(
    python_or_deepspeed: str,
    script: str | os.PathLike[str],
    slots: int,
    master_port: int,
    extra: Sequence[str] = (),
    launcher_args: Sequence[str] = (),
    include: str | None = None,
) -> list[str]:
    """The command line that runs the job on this node alone, on ``slots`` local ranks.

    ``launcher_args`` go to the launcher (before the script), ``extra`` to the job.
    ``include`` (``localhost:4,5,6,7``) replaces ``--num_gpus``: the launch's own slot ids, when
    --launch-include/--launch-exclude leave this node other devices than 0..slots-1 (launch.py
    then sets CUDA_VISIBLE_DEVICES/ASCEND_RT_VISIBLE_DEVICES to them).

    ``python_or_deepspeed`` is either the ``deepspeed`` launcher script or a Python interpreter
    (then ``python -u -m deepspeed.launcher.runner`` is used: same launcher, useful when the
    ``deepspeed`` entry point is not on PATH in a non-interactive shell).
    """
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    which = ["--include", include] if include else ["--num_gpus", str(slots)]
    return _launcher(python_or_deepspeed) + [
        "--hostfile",
        NO_HOSTFILE,
        *which,
        "--master_port",
        str(master_port),
        *launcher_args,
        str(script),
        *extra,
    ]


def multi_node_argv(
    deepspeed: str,
    hostfile: str | os.PathLike[str],
    master_addr: str,
    master_port: int,
    script: str | os.PathLike[str],
    include: str | None = None,
    exclude: str | None = None,
    extra: Sequence[str] = (),
    launcher_args: Sequence[str] = (),
) -> list[str]:
    """``deepspeed --hostfile H --master_addr A --master_port P [--include ..] [--exclude ..]``.

    ``deepspeed`` may also be a Python interpreter (``python -u -m deepspeed.launcher.runner``,
    as in :func:`single_node_argv`). ``launcher_args`` go to the launcher, ``extra`` to the job.
    """
    if include and exclude:
        raise ValueError("--include and --exclude are mutually exclusive in DeepSpeed")
    argv = [
        *_launcher(deepspeed),
        "--hostfile",
        str(hostfile),
        "--master_addr",
        master_addr,
        "--master_port",
        str(master_port),
    ]
    if include:
        argv += ["--include", include]
    if exclude:
        argv += ["--exclude", exclude]
    return argv + [*launcher_args, str(script), *extra]


def _launcher(python_or_deepspeed: str) -> list[str]:
    if re.fullmatch(r"python(\d+(\.\d+)*)?", Path(python_or_deepspeed).name):
        return [str(python_or_deepspeed), "-u", "-m", "deepspeed.launcher.runner"]
    return [str(python_or_deepspeed)]


def find_deepspeed() -> str:
    """The ``deepspeed`` launcher next to this interpreter, else the one on PATH."""
    here = Path(sys.executable).parent / "deepspeed"
    if here.is_file():
        return str(here)
    found = shutil.which("deepspeed")
    if found:
        return found
    raise FileNotFoundError("deepspeed launcher not found next to the interpreter nor on PATH")


# --------------------------------------------------------------------------- parsing


@dataclass
class RankResult:
    rank: int
    host: str | None = None  # pdsh prefix if any, else the host the rank reported
    local_rank: int | None = None
    started: bool = False
    done: bool = False
    first_loss: float | None = None
    last_loss: float | None = None
    losses: list[float] = field(default_factory=list)
    weights_sha256: str | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    start: dict[str, Any] = field(default_factory=dict)

    def loss_fell(self, min_drop: float = DEFAULT_MIN_DROP) -> bool:
        """last < first * (1 - min_drop)."""
        if self.first_loss is None or self.last_loss is None:
            return False
        return self.last_loss < self.first_loss * (1.0 - min_drop)


@dataclass
class LaunchInfo:
    argv: list[str]
    returncode: int | None
    pgid: int
    elapsed_s: float
    timed_out: bool


@dataclass
class SmokeResult:
    ranks: dict[int, RankResult]
    expected_ranks: int | None
    world_size: int | None
    events: list[dict[str, Any]]
    rank_hosts: dict[int, str] = field(default_factory=dict)  # from the launcher's rank mapping
    min_drop: float = DEFAULT_MIN_DROP
    launch: LaunchInfo | None = None

    @property
    def expected(self) -> int:
        if self.expected_ranks is not None:
            return self.expected_ranks
        if self.world_size is not None:
            return self.world_size
        return len(self.ranks)

    @property
    def missing_ranks(self) -> list[int]:
        """Expected ranks that never reported done (never started, or died, or hung)."""
        return [r for r in range(self.expected) if r not in self.ranks or not self.ranks[r].done]

    @property
    def not_started_ranks(self) -> list[int]:
        return [r for r in range(self.expected) if r not in self.ranks or not self.ranks[r].started]

    @property
    def loss_not_falling(self) -> list[int]:
        return sorted(
            r for r, rr in self.ranks.items() if rr.done and not rr.loss_fell(self.min_drop)
        )

    @property
    def hashes(self) -> dict[int, str]:
        return {r: rr.weights_sha256 for r, rr in self.ranks.items() if rr.weights_sha256}

    @property
    def hashes_identical(self) -> bool:
        return len(set(self.hashes.values())) == 1

    @property
    def ok(self) -> bool:
        return (
            self.expected > 0
            and not self.missing_ranks
            and not self.loss_not_falling
            and self.hashes_identical
            and not any(rr.errors for rr in self.ranks.values())
            and (self.launch is None or self.launch.returncode == 0)
        )

    def problems(self) -> list[str]:
        out: list[str] = []
        if self.expected == 0:
            out.append(f"no {TAG} output at all: the job never started")
        if self.missing_ranks:
            out.append(f"ranks never reported done: {_fmt_ranks(self.missing_ranks, self)}")
        for r in self.loss_not_falling:
            rr = self.ranks[r]
            out.append(
                f"rank {r} loss did not fall by {self.min_drop:.0%}: "
                f"first {rr.first_loss:.4g}, last {rr.last_loss:.4g}"
            )
        if len(set(self.hashes.values())) > 1:
            groups: dict[str, list[int]] = {}
            for r, h in sorted(self.hashes.items()):
                groups.setdefault(h[:12], []).append(r)
            out.append(f"ranks ended with different weights: {groups}")
        for r, rr in sorted(self.ranks.items()):
            for e in rr.errors:
                out.append(f"rank {r} error {e.get('kind')}: {e.get('message')}")
        if self.launch is not None and self.launch.returncode != 0:
            how = "timed out and was killed" if self.launch.timed_out else "failed"
            out.append(f"launcher {how} (exit code {self.launch.returncode})")
        return out

    def summary(self) -> str:
        if self.ok:
            losses = ", ".join(
                f"r{r}@{rr.host}: {rr.first_loss:.3g}->{rr.last_loss:.3g}"
                for r, rr in sorted(self.ranks.items())
            )
            return f"{self.expected} ranks done, loss fell ({losses}), identical weights"
        return "; ".join(self.problems())


def _fmt_ranks(ranks: Sequence[int], res: SmokeResult) -> str:
    parts = []
    for r in ranks:
        host = res.ranks[r].host if r in res.ranks else res.rank_hosts.get(r)
        parts.append(f"{r}@{host}" if host else str(r))
    return ", ".join(parts)


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
_TAG_RE = re.compile(re.escape(TAG) + r" (?=\{)")
_MAPPING_RE = re.compile(r"global_rank_mapping=defaultdict\(<class 'list'>, (\{.*\})\)")
_MAPPING_ITEM_RE = re.compile(r"'([^']+)': \[([\d, ]*)\]")


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


def _iter_events(text: str) -> list[tuple[str | None, dict[str, Any]]]:
    out: list[tuple[str | None, dict[str, Any]]] = []
    dec = json.JSONDecoder()
    for line in text.splitlines():
        m = _TAG_RE.search(line)
        if not m:
            continue
        prefix = line[: m.start()].strip()
        host: str | None = None
        if prefix.endswith(":"):
            host = prefix[:-1].split()[-1] if prefix[:-1].split() else None
        try:
            obj, _ = dec.raw_decode(line, m.end())
        except ValueError:
            continue
        if isinstance(obj, dict) and "event" in obj:
            out.append((host, obj))
    return out


def _rank_hosts(text: str) -> dict[int, str]:
    mapping: dict[int, str] = {}
    for m in _MAPPING_RE.finditer(text):
        for host, ranks in _MAPPING_ITEM_RE.findall(m.group(1)):
            for r in ranks.split(","):
                if r.strip().isdigit():
                    mapping[int(r)] = host
    return mapping


def parse_output(
    text: str,
    expected_ranks: int | None = None,
    min_drop: float = DEFAULT_MIN_DROP,
) -> SmokeResult:
    """Collect the job's tagged events from a (mixed, possibly pdsh-prefixed) launcher log.

    Verdict (``SmokeResult.ok``): every expected rank (``expected_ranks``, else the world size
    the ranks reported) reported done, with no error event; on each rank the loss fell
    (last < first * (1 - min_drop)); all final-weight hashes are identical.
    """
    ranks: dict[int, RankResult] = {}
    events: list[dict[str, Any]] = []
    world: int | None = None
    for host, ev in _iter_events(text):
        events.append(ev)
        r = ev.get("rank")
        if not isinstance(r, int):
            continue
        rr = ranks.setdefault(r, RankResult(rank=r)) if r >= 0 else None
        kind = ev.get("event")
        if rr is not None and host and not rr.host:
            rr.host = host
        if kind == "start" and rr is not None:
            rr.started = True
            rr.start = ev
            rr.local_rank = ev.get("local_rank")
            if not rr.host:
                rr.host = ev.get("host")
            if isinstance(ev.get("world_size"), int):
                world = max(world or 0, ev["world_size"])
        elif kind == "step" and rr is not None and isinstance(ev.get("loss"), (int, float)):
            rr.losses.append(float(ev["loss"]))
            if rr.first_loss is None:
                rr.first_loss = float(ev["loss"])
            rr.last_loss = float(ev["loss"])
        elif kind == "done" and rr is not None:
            rr.done = True
            rr.first_loss = _as_float(ev.get("first_loss"), rr.first_loss)
            rr.last_loss = _as_float(ev.get("last_loss"), rr.last_loss)
            rr.weights_sha256 = ev.get("weights_sha256")
        elif kind == "error" and rr is not None:
            rr.errors.append(ev)
    return SmokeResult(
        ranks=ranks,
        expected_ranks=expected_ranks,
        world_size=world,
        events=events,
        rank_hosts=_rank_hosts(text),
        min_drop=min_drop,
    )


def _as_float(value: Any, default: float | None) -> float | None:
    return float(value) if isinstance(value, (int, float)) else default


# --------------------------------------------------------------------------- diagnosis


@dataclass
class Diagnosis:
    node: str | None
    cause: str
    evidence: list[str]
    hint: str
    kind: str = "other"

    def __str__(self) -> str:
        where = self.node or "(launcher/unknown node)"
        ev = "\n    ".join(self.evidence)
        return f"[{self.kind}] {where}: {self.cause}\n    {ev}\n  hint: {self.hint}"


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    cause: str
    hint: str
    host_group: str | None = None  # named group in pattern naming the node, if any
    ssh_cause: Cause | None = None  # where this rule sits in judge/sshfail.py's vocabulary


def _r(p: str) -> re.Pattern[str]:
    return re.compile(p, re.IGNORECASE)


# Order matters only for the order of the resulting diagnoses; every rule is tried on every line.
_RULES: list[_Rule] = [
    _Rule(
        "ssh-publickey",
        _r(r"Permission denied \((publickey|gssapi|password|keyboard)"),
        "ssh key login refused (publickey): the launcher's key is not accepted there",
        "append the launcher user's ~/.ssh/id_*.pub to that node's ~/.ssh/authorized_keys; "
        "check modes: chmod 700 ~/.ssh; chmod 600 ~/.ssh/authorized_keys (sshd StrictModes), "
        "and PubkeyAuthentication/PermitRootLogin in sshd_config",
        ssh_cause=Cause.AUTH,
    ),
    _Rule(
        "ssh-hostkey",
        _r(r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED"),
        "ssh host key unknown or changed (strict host key checking)",
        "on the launching node: ssh-keyscan -H <node> >> ~/.ssh/known_hosts "
        "(or ssh-keygen -R <node> first if the key changed), then ssh <node> true",
        ssh_cause=Cause.HOSTKEY_UNKNOWN,
    ),
    _Rule(
        "ssh-resolve",
        _r(r"Could not resolve hostname (?P<h>[^:\s]+)"),
        "hostname does not resolve on the launching node",
        "add the node to /etc/hosts (same line on every node) or DNS, or use its IP in the "
        "hostfile",
        "h",
        ssh_cause=Cause.DNS,
    ),
    _Rule(
        "ssh-refused",
        _r(r"connect to host (?P<h>\S+) port \d+: Connection refused"),
        "ssh port refused: sshd not running or another port",
        "start sshd on the node (systemctl start ssh) or give the port (--ssh_port / "
        "~/.ssh/config Port)",
        "h",
        ssh_cause=Cause.REFUSED,
    ),
    _Rule(
        "ssh-timeout",
        _r(
            r"connect to host (?P<h>\S+) port \d+: (Connection timed out|No route to host|"
            r"Network is unreachable)|ssh: connect to host (?P<h2>\S+).*timed out"
        ),
        "ssh connection timed out / no route: node down or firewall drops port 22",
        "check the node is up and reachable (ping), and the firewall allows tcp/22 from the "
        "launching node",
        "h",
        ssh_cause=Cause.TIMEOUT,
    ),
    _Rule(
        "ssh-exit",
        _r(r"ssh exited with exit code (?P<code>\d+)"),
        "pdsh's ssh leg to this node failed, so its ranks never started and the other ranks "
        "wait in rendezvous",
        "fix the ssh error shown for that node (ssh -o BatchMode=yes <node> true from the "
        "rank-0 node), then rerun",
        ssh_cause=Cause.FAILED,
    ),
    _Rule(
        "no-deepspeed",
        _r(r"No module named '?deepspeed'?"),
        "deepspeed is not importable by the python the launcher runs there",
        "install the same deepspeed (and torch) on that node into the interpreter at the "
        "same path as on the launching node (the launcher runs its own sys.executable there, "
        "with its own PYTHONPATH)",
    ),
    _Rule(
        "no-torch",
        _r(r"No module named '?torch'?"),
        "torch is not importable by the python the launcher runs there",
        "install the same torch into that interpreter on that node",
    ),
    _Rule(
        "no-module",
        _r(r"ModuleNotFoundError: No module named '(?!deepspeed'|torch')(?P<m>[^']+)'"),
        "a Python module is missing there",
        "install the missing module into that node's interpreter",
    ),
    _Rule(
        "command-not-found",
        _r(r"(?P<cmd>\S+): command not found|(?P<path>/\S*python\S*): No such file or directory"),
        "a command or the interpreter path does not exist there (non-interactive shell PATH)",
        "install it on that node at the same path, or fix PATH for non-interactive shells "
        "(exports above the early return in ~/.bashrc, or .deepspeed_env)",
    ),
    _Rule(
        "cd-failed",
        _r(r"cd: (?P<dir>\S+): No such file or directory"),
        "the launch directory does not exist there (deepspeed runs `cd <cwd>` on every node)",
        "create the same working directory on every node (or launch from a shared path)",
    ),
    _Rule(
        "port-in-use",
        _r(r"EADDRINUSE|address already in use"),
        "the master port is already in use on the rank-0 node",
        "pick a free --master_port or stop the process that holds it (ss -ltnp)",
    ),
    _Rule(
        "master-unreachable",
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
        "rendezvous-timeout",
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
        "dist-refused",
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
        "hostfile-missing",
        _r(r"Unable to find hostfile"),
        "the deepspeed launcher found no hostfile and ran on local resources only",
        "pass --hostfile with the path to the cluster's hostfile",
    ),
    _Rule(
        "hostfile-bad",
        _r(r"Hostfile contains|Hostfile is empty or not formatted correctly|Bad hostfile text"),
        "the deepspeed launcher rejected the hostfile",
        "fix the hostfile: one `<host> slots=<n>` per line, no duplicate hosts",
    ),
    _Rule(
        "resource-pool",
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
    _Rule(
        "launcher-ssh-check",
        _r(r"host=(?P<h>\S+) was not reachable via ssh"),
        "the deepspeed launcher's ssh check of the first hostfile host failed",
        "make `ssh -o PasswordAuthentication=no <first host> hostname` work from this node",
        "h",
    ),
    _Rule(
        "pdsh-missing",
        _r(r"launcher 'pdsh' not installed|pdsh: command not found"),
        "pdsh is not installed on the launching node",
        "apt-get install pdsh (and export PDSH_RCMD_TYPE=ssh)",
    ),
    _Rule(
        "master-addr",
        _r(r"Unable to detect suitable master address"),
        "the launcher could not find the master address (hostname -I on the first host)",
        "pass --master_addr <rank-0 node address>",
    ),
    _Rule(
        "launch-timeout",
        _r(re.escape(LAUNCH_TIMEOUT_MARK)),
        "the whole launch exceeded its deadline and was killed",
        "see the other diagnoses for the node that held it up; raise the deadline only if "
        "the job was merely slow",
    ),
]

_MAX_EVIDENCE = 4

#: Diagnoses that are usually the consequence of a root cause found elsewhere in the same log
#: (ranks waiting for a node whose launch failed, a rank's own error after a peer died...).
CONSEQUENCE_KINDS = frozenset(
    {
        "rank-not-started",
        "rank-not-done",
        "rendezvous-timeout",
        "dist-refused",
        "deadline",
        "launch-timeout",
        "job-error",
        "ssh-exit",
        "hostfile-missing",
    }
)


def root_causes(diags: Sequence[Diagnosis]) -> tuple[list[Diagnosis], list[Diagnosis]]:
    """Split diagnoses into (root causes, consequences).

    With no root cause, everything is returned as root (then the rank's own errors are the
    best there is). ``ssh-exit`` with code 255 (ssh itself failed) counts as a root cause when
    nothing else names an ssh failure on that node.
    """
    ssh_nodes = {d.node for d in diags if d.kind.startswith("ssh-") and d.kind != "ssh-exit"}
    roots: list[Diagnosis] = []
    rest: list[Diagnosis] = []
    for d in diags:
        is_root = d.kind not in CONSEQUENCE_KINDS or (
            d.kind == "ssh-exit" and "exit code 255" in d.cause and d.node not in ssh_nodes
        )
        (roots if is_root else rest).append(d)
    if not roots:
        return list(diags), []
    return roots, rest


def diagnose(
    text: str,
    expected_ranks: int | None = None,
    hosts: Sequence[str] | None = None,
) -> list[Diagnosis]:
    """Turn a launcher log into causes that name the node where possible.

    ``hosts`` (the hostfile's hosts) lets a pdsh prefix or a host named inside a message be
    matched to a node; lines without one get ``node=None`` (the launching node, or unknown).
    """
    known = set(hosts or ())
    found: dict[tuple[str, str | None], Diagnosis] = {}
    order: list[tuple[str, str | None]] = []

    def add(kind: str, node: str | None, cause: str, hint: str, line: str) -> None:
        key = (kind, node)
        d = found.get(key)
        if d is None:
            d = Diagnosis(node=node, cause=cause, evidence=[], hint=hint, kind=kind)
            found[key] = d
            order.append(key)
        if line not in d.evidence and len(d.evidence) < _MAX_EVIDENCE:
            d.evidence.append(line)

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
            if node is None and rule.kind != "master-unreachable":
                # (that line names the master, not the node that failed to reach it)
                node = _host_in_line(line, known)
            if rule.kind == "hostfile-missing" and len(known) < 2:
                continue  # single-node runs pass a missing hostfile on purpose
            cause, hint = rule.cause, rule.hint
            if rule.kind == "ssh-exit":
                code = m.group("code")
                if code == "255":
                    cause = f"{cause} (exit code 255)"
                else:
                    cause = (
                        f"the launch on this node exited with code {code} (its ranks failed: "
                        "see their errors)"
                    )
            elif rule.kind == "master-unreachable":
                master = m.group("m") or m.group("m2")
                port = m.group("p") or m.group("p2")
                cause = f"{cause} {master}:{port} (timed out or refused)"
                hint = _master_hint(master, port, node)
            add(rule.kind, node, cause, hint, line.strip())

    # Events of the job itself.
    res = parse_output(text, expected_ranks=expected_ranks)
    for r, rr in sorted(res.ranks.items()):
        for e in rr.errors:
            node = rr.host or e.get("host")
            if e.get("kind") == "deadline":
                add(
                    "deadline",
                    node,
                    f"the job's deadline was exceeded there (rank {r} in phase {e.get('phase')})",
                    "a rank that stops in dist-init waits for ranks that never joined (see "
                    "other diagnoses); otherwise raise the deadline (the job's --deadline, the "
                    "suite's --training-deadline) if the node is just slow",
                    _event_line(e),
                )
            else:
                add(
                    "job-error",
                    node,
                    f"the job raised {e.get('kind')} there: {e.get('message')}",
                    "see the traceback in the log for that rank",
                    _event_line(e),
                )
    if res.expected:
        started_not_done = [r for r in res.missing_ranks if r in res.ranks and res.ranks[r].started]
        for r in started_not_done:
            rr = res.ranks[r]
            if rr.errors:
                continue
            add(
                "rank-not-done",
                rr.host or res.rank_hosts.get(r),
                f"rank {r} started but never reported done (killed, crashed or hung)",
                "look at that node's lines above; a hang in training means a peer died or the "
                "network between nodes drops traffic",
                f"rank {r} started, no done event",
            )
        never = [r for r in res.not_started_ranks if r not in res.ranks or not res.ranks[r].errors]
        if never:
            by_node: dict[str | None, list[int]] = {}
            for r in never:
                by_node.setdefault(res.rank_hosts.get(r), []).append(r)
            for node, rs in by_node.items():
                add(
                    "rank-not-started",
                    node,
                    f"ranks {rs} never started (never passed torch.distributed init)",
                    "that node's launch failed or it cannot reach the master: see its lines",
                    f"no start event from ranks {rs}",
                )
    return [found[k] for k in order]


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


def _event_line(e: Mapping[str, Any]) -> str:
    short = {k: v for k, v in e.items() if k != "traceback"}
    return f"{TAG} {json.dumps(short, sort_keys=True)}"


# --------------------------------------------------------------------------- local run


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kill_group(proc: subprocess.Popen[bytes], grace: float = 3.0) -> None:
    """SIGTERM the process group, then SIGKILL it; reap the leader."""
    pgid = proc.pid
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        end = time.monotonic() + wait
        while time.monotonic() < end:
            if proc.poll() is not None and not _group_alive(pgid):
                break
            time.sleep(0.05)
        if not _group_alive(pgid):
            break
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _group_alive(pgid: int) -> bool:
    """True while any non-zombie process is in the group (Linux /proc; else killpg probe)."""
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for d in proc_dir.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def run_local_single_node(
    slots: int,
    steps: int,
    deadline: float,
    env: Mapping[str, str] | None = None,
    *,
    deepspeed: str | None = None,
    script: str | os.PathLike[str] = SCRIPT_PATH,
    master_port: int | None = None,
    extra: Sequence[str] = (),
    launch_grace: float = 30.0,
    min_drop: float = DEFAULT_MIN_DROP,
) -> tuple[SmokeResult, str]:
    """Run the job on this machine on ``slots`` local ranks through the real deepspeed launcher.

    The job gets ``--deadline deadline`` (its own watchdog); the launch as a whole is killed
    (its whole process group: launcher, launch.py and ranks) after ``deadline + launch_grace``
    seconds, on KeyboardInterrupt and on any other exception. ``env`` is laid over
    ``os.environ``; with no accelerator, pass ``DS_ACCELERATOR=cpu``. The log (stdout+stderr)
    is returned with the parsed result; ``result.launch`` has argv, return code and pgid.
    """
    ds = deepspeed or find_deepspeed()
    port = master_port or free_port()
    job_args = ["--steps", str(steps), "--deadline", f"{deadline:g}", *extra]
    argv = single_node_argv(ds, script, slots, port, job_args)
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    t0 = time.monotonic()
    timed_out = False
    with tempfile.TemporaryFile() as out, tempfile.TemporaryDirectory(prefix="ct-train-") as cwd:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=cwd,  # the runner prepends its cwd to PYTHONPATH: keep it neutral
            start_new_session=True,
        )
        try:
            try:
                proc.wait(timeout=deadline + launch_grace)
            except subprocess.TimeoutExpired:
                timed_out = True
        finally:
            # On every path (done, timeout, KeyboardInterrupt, error) no process is left.
            _kill_group(proc)
        out.seek(0)
        text = out.read().decode("utf-8", errors="replace")
    elapsed = time.monotonic() - t0
    if timed_out:
        text += (
            f"\n{LAUNCH_TIMEOUT_MARK} launch exceeded {deadline + launch_grace:g} s; "
            f"killed process group {proc.pid}\n"
        )
    result = parse_output(text, expected_ranks=slots, min_drop=min_drop)
    result.launch = LaunchInfo(
        argv=argv,
        returncode=proc.returncode,
        pgid=proc.pid,
        elapsed_s=elapsed,
        timed_out=timed_out,
    )
    return result, text
