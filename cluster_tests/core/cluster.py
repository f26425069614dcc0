"""The cluster as the checks see it: the nodes of the hostfile, and what the session learns of
them, composed of one part per responsibility:

- the memo (core/memo.py): every fact, login and measurement computed once for the session,
  and the background phases that fill it;
- the logins (core/logins.py): the launcher's connection to each node, once, a dead node's
  checks blocked by its login's red, and the commands run over them;
- the probes (core/probing.py): a node's facts, probed once per node and shared by every test
  that needs them, lazily (so `-k node3` probes only node3) and in parallel: when the session
  knows which tests will run, `prefetch` starts the logins and probes of every node they touch
  at once, bounded by `--fanout`.

Cluster itself holds the nodes, composes the parts (the checks call their methods on it, as
`cluster.probe(node, BASE)`), and keeps what concerns the whole: the node table of the
reports, the progress of long phases, the secrets every report masks, the end of the run.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, overload

import pytest

from cluster_tests.core import nodetable
from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core import srun as srun_mod
from cluster_tests.core.logins import LAUNCHER_SSH, Logins
from cluster_tests.core.memo import Memo
from cluster_tests.core.memokey import LOGIN, MemoKey, base_key
from cluster_tests.core.nodetable import NodeTable
from cluster_tests.core.probing import (
    ARGS_INLINE_MAX,
    BASE_ONLY,
    BOOTSTRAP,
    BUNDLE_MARK,
    PROBE_MARK,
    Declared,
    NodeProbe,
    ProbeCause,
    ProbeError,
    Probes,
    needs_site,
    probe_command,
    remote_script,
)
from cluster_tests.core.settings import Settings
from cluster_tests.core.sharedresults import SharedResults
from cluster_tests.core.transport import (
    CommandResult,
    ConnectError,
    Pool,
    SSHTarget,
    Sweep,
    Targets,
    Transport,
    leftovers_script,
    resolve_target,
)
from cluster_tests.judge.common.basefacts import BASE, BaseFacts
from cluster_tests.judge.common.netfacts import is_ip
from cluster_tests.judge.common.probes import Probe
from cluster_tests.judge.env.envvars import is_secret
from cluster_tests.judge.hostfile.hostmodel import Host

# what the checks, the measurements and the tests name with the cluster (core/probing.py's)
__all__ = ["ARGS_INLINE_MAX", "BASE", "BASE_ONLY", "BOOTSTRAP", "BUNDLE_MARK", "CLUSTER_KEY",
           "LAUNCHER_SSH", "PROBE_MARK", "Cluster", "Declared", "Node", "NodeProbe",
           "ProbeCause", "ProbeError", "needs_site", "probe_command", "remote_script"]

T = TypeVar("T")

#: a node of the run: a usable hostfile entry (name, slots, line), whatever the node list was
Node = Host


def _secret_values(env: Mapping[str, str]) -> set[str]:
    return {v for k, v in env.items() if is_secret(k) and v and len(v) >= 3}


class Cluster:
    """The run's nodes (`nodes`, in hostfile order) over the remote layer `pool` (`Pool`, SSH;
    or any other `Transport`: bench/fake_transport.py), with its parts: `cache` (the memo),
    `logins`, `probes`."""

    def __init__(self, settings: Settings, nodes: list[Node], pool: Transport, *,
                 srun: srun_mod.Srun | None = None) -> None:
        self.settings = settings
        self.nodes = nodes
        #: what this process did remotely: logins, probes run, probes read from the shared cache
        self.stats: dict[str, int] = {"ssh_logins": 0, "probes_run": 0, "probes_shared": 0}
        #: set by the plugin: where `progress()` reports go (None: nowhere)
        self.progress_sink: Callable[[str, int, int], None] | None = None
        self.cache = Memo()
        self.logins = Logins(settings, pool, self.cache, self.stats)
        self.probes = Probes(settings, self.logins, self.cache, self.stats,
                             progress=self.progress, base_params=self.base_params, srun=srun)

    def __repr__(self) -> str:
        """Short: pytest shows every argument of every frame of a red's traceback, and of a
        Ctrl-C's (the memo with every node's facts took seconds to write out, and then lost)."""
        rank0 = f", rank 0: {self.nodes[0].name}" if self.nodes else ""
        return f"<Cluster of {len(self.nodes)} nodes{rank0}>"

    @classmethod
    def create(cls, settings: Settings, nodes: list[Node]) -> Cluster:
        def resolve(name: str) -> SSHTarget:
            return resolve_target(name, settings.ssh_config, user=settings.ssh_user,
                                  connect_timeout=settings.timeout_connect,
                                  accept_new_host_keys=settings.accept_new_host_keys)

        targets = Targets([n.name for n in nodes], resolve)
        steps = srun_mod.Srun(settings.srun_path) if settings.transport == "srun" else None
        return cls(settings, nodes, Pool(targets, settings.ssh_config, settings.fanout),
                   srun=steps)

    # -- the nodes ----------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """The node names in hostfile order: one list, built once (items ask for it thousands
        of times on a big cluster); not to be changed by callers."""
        got = self.__dict__.get("_names")
        if got is None or len(got) != len(self.nodes):
            got = self.__dict__["_names"] = [n.name for n in self.nodes]
        return got

    @property
    def rank0(self) -> Node:
        return self.nodes[0]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    # -- the parts' state, as callers set and read it ----------------------------------------
    @property
    def pool(self) -> Transport:
        """The remote layer (the logins' and, through them, the probes')."""
        return self.logins.pool

    @pool.setter
    def pool(self, transport: Transport) -> None:
        self.logins.pool = transport

    @property
    def run_tag(self) -> str:
        """The run's tag, in every command the remote layer runs (and in T1/T2's --run-id): the
        end of the run finds and ends what carries it on every node."""
        return self.pool.tag

    @property
    def shared(self) -> SharedResults | None:
        """Under pytest-xdist (core.workers sets it): probe results shared by the workers."""
        return self.probes.shared

    @shared.setter
    def shared(self, results: SharedResults | None) -> None:
        self.probes.shared = results

    @property
    def srun(self) -> srun_mod.Srun | None:
        return self.probes.srun

    @property
    def logged_in(self) -> set[str]:
        return self.logins.logged_in

    # -- the memo (core/memo.py) ---------------------------------------------------------------
    def memo(self, key: MemoKey[T], compute: Callable[[], T]) -> T:
        """Compute `key` once for the whole session, even when many threads ask at once."""
        return self.cache.memo(key, compute)

    def cached(self, key: MemoKey[T]) -> T | None:
        """A memo entry that is already computed (None otherwise); never computes or waits."""
        return self.cache.cached(key)

    def in_background(self, name: str, fn: Callable[[], object], *, wait: bool = True) -> None:
        """A phase of the session in a thread of its own (Memo.in_background)."""
        self.cache.in_background(name, fn, wait=wait)

    def finish_background(self) -> None:
        self.cache.finish_background()

    # -- the logins (core/logins.py) -----------------------------------------------------------
    def login(self, node: str) -> float:
        """Log in (once); returns the login time in seconds or raises ConnectError."""
        return self.logins.login(node)

    def login_error(self, node: str) -> ConnectError | None:
        return self.logins.login_error(node)

    def login_all_background(self) -> None:
        self.logins.login_all_background(self.names)

    def require(self, node: str) -> None:
        """Block (or fail) the calling test when its node cannot be logged in to."""
        self.logins.require(node)

    def run(self, node: str, argv: list[str] | str, *, timeout: float | None = None,
            stdin: bytes | None = None) -> CommandResult:
        return self.logins.run(node, argv, timeout=timeout, stdin=stdin)

    def address(self, node: str) -> str:
        return self.logins.address(node)

    def login_seconds(self, node: str) -> float | None:
        return self.logins.login_seconds(node)

    def host_key(self, node: str) -> tuple[str, str] | None:
        return self.logins.host_key(node)

    def launcher_ssh_view(self, name: str) -> dict[str, str]:
        return self.logins.launcher_ssh_view(name)

    # -- the probes (core/probing.py) ----------------------------------------------------------
    @overload
    def probe(self, node: str, probe: Probe[T], **params: Any) -> T: ...

    @overload
    def probe(self, node: str, probe: str, *, script: str = "probe.py", **params: Any) -> Any: ...

    def probe(self, node: str, probe: Probe[Any] | str, *, script: str = "probe.py",
              **params: Any) -> Any:
        """One section of a node-side probe script, cached per node, section and parameters
        (Probes.probe)."""
        return self.probes.probe(node, probe, script=script, **params)

    def prefetch(self, nodes: Iterable[str], declared: Sequence[Declared] = BASE_ONLY) -> None:
        self.probes.prefetch(nodes, declared)

    def probe_together(self, node: str, probes: Sequence[NodeProbe]) -> None:
        self.probes.probe_together(node, probes)

    def base(self, node: str) -> BaseFacts:
        """The cheap facts of a node; fails the calling test briefly if the node is unreachable."""
        return self.probes.base(node)

    def base_or_none(self, node: str) -> BaseFacts | None:
        return self.probes.base_or_none(node)

    def base_params(self, node: str) -> dict[str, object]:
        """What a node's base probe is asked beyond its facts: the names it resolves (the
        hostfile's its checks need, pairs.names_to_resolve, and a --master_addr given as a name:
        every rank resolves it), and whether it reads every name through `ssh -G` (the rank-0
        node, where the launch's ssh runs; the others only the names they cannot resolve)."""
        names = pairs_mod.names_to_resolve(self, node)
        given = self.settings.master_addr
        if given and not is_ip(given) and given not in names:
            names = [*names, given]
        return {"names": names, "ssh_all": bool(self.nodes) and node == self.nodes[0].name}

    # -- what concerns the whole run ----------------------------------------------------------
    def node_table(self) -> NodeTable:
        """What the run learnt about each node it logged in to, for the reports (from the memo
        only): the login and the base probe here, the sections' columns (`core/nodetable.py`)."""
        rows: dict[str, dict[str, str]] = {}
        for name in self.names:
            seconds = self.cache.value(LOGIN(name))
            err: BaseException | None = None
            if seconds is None:
                if not self.cache.settled(LOGIN(name)):
                    continue
                err = self.cache.error(LOGIN(name))
            cause = getattr(err, "cause", None)
            row = {"reachable": "yes" if err is None else f"NO: {getattr(cause, 'value', err)}"}
            if seconds is not None:
                row["login"] = f"{seconds:.2f}s"
            row["slots"] = str(self.node(name).slots)
            base = self.cached(base_key(name))
            if base:
                row["hostname"] = base.hostname
                row["python"] = base.python_version
            rows[name] = row
        return nodetable.build(self, rows)

    def progress(self, phase: str, done: int, total: int) -> None:
        """Report progress of a long phase ("probing nodes", "bandwidth rounds", "training"...):
        `done` of `total` steps.  Shown in the terminal when pytest runs verbosely or on a tty
        (never with -q, never from xdist workers); cheap to call often, safe from any thread."""
        sink = self.progress_sink
        if sink is not None:
            with contextlib.suppress(Exception):  # progress must never break a check
                sink(phase, done, total)

    def secrets(self) -> set[str]:
        """Values of secret-looking variables (KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL) seen in
        the launcher's and the nodes' environments, to be masked in every report."""
        # Called for every report (3 per test): remember each source's values once its facts
        # are in, so that a report costs O(1), not a scan of every node's environment (which
        # made 64 nodes take 17 s of pure pytest time, and 1024 nodes hours).
        seen = self.__dict__.setdefault("_secret_values", {})
        if len(seen) <= len(self.names):
            if "\0launcher" not in seen:
                seen["\0launcher"] = _secret_values(os.environ)
            for name in self.names:
                if name not in seen:
                    base = self.cached(base_key(name))
                    if base:
                        seen[name] = _secret_values(base.env)
                    elif self.cache.failed(LOGIN(name)) or self.cache.failed(base_key(name)):
                        # a dead node has no facts, ever: settled, or every report would scan
                        # all nodes again (10 % dead nodes made a run 1.6x slower)
                        seen[name] = set()
            self.__dict__["_secret_union"] = set().union(*seen.values())
        return set(self.__dict__["_secret_union"])

    def close(self) -> list[Sweep]:
        """End whatever this run left on the nodes (`Pool.end_leftovers`), then log out.
        Returns the nodes where something of the run is still alive, or that could not be
        swept (normally none): `leftover_report` says what and how to end it."""
        left: list[Sweep] = []
        try:
            if self.srun is not None:
                self.srun.end_all()
            left = self.pool.end_leftovers()
        finally:
            self.pool.close()
        return left

    def leftover_report(self, left: Sequence[Sweep]) -> str:
        """What `close` could not end, each process (node, pid, command line), and the one
        command that ends them from the launcher."""
        lines = ["[cluster] still running on the nodes after the cleanup:"]
        kills = []
        for s in left:
            for pid, cmd in s.left:
                lines.append(f"  {s.node} pid {pid}: {cmd}")
            if s.error:
                lines.append(f"  {s.node}: not swept ({s.error}); its processes carry "
                             f"{self.pool.tag} in their command line or environment")
        ssh = ["ssh"] + (["-F", str(self.settings.ssh_config)]
                         if self.settings.ssh_config else [])
        for s in left:
            if s.left:
                kills.append(shlex.join([*ssh, s.node, "kill", "-KILL",
                                         *(str(p) for p, _ in s.left)]))
            elif s.error:
                kills.append(shlex.join([*ssh, s.node, "sh", "-c",
                                         leftovers_script(self.pool.tag)]))
        lines.append("[cluster] end them with: " + "; ".join(kills))
        return "\n".join(lines) + "\n"


#: the run's cluster, on the pytest config (`config.stash.get(CLUSTER_KEY, None)`): set by the
#: plugin when a node list was given
CLUSTER_KEY = pytest.StashKey[Cluster]()
