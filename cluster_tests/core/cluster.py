"""The cluster as the checks see it: nodes from the hostfile, connections, and a fact cache.

Facts are probed once per node and shared by every test that needs them.  The cache is filled
lazily (so `-k node3` probes only node3) and in parallel: when the session knows which tests
will run, `prefetch` starts the logins of every node they touch at once, bounded by `--fanout`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast, overload

import pytest

from cluster_tests import node
from cluster_tests.core import memokey, nodetable, outcome
from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core import srun as srun_mod
from cluster_tests.core import testids as ids
from cluster_tests.core.memokey import LOGIN, MemoKey, base_key, login_key, probe_key
from cluster_tests.core.nodetable import NodeTable
from cluster_tests.core.settings import Settings
from cluster_tests.core.sharedresults import SharedResults
from cluster_tests.core.transport import (
    CommandResult,
    ConnectError,
    Pool,
    SSHTarget,
    Targets,
    Transport,
    resolve_target,
    ssh_g,
    wait_result,
)
from cluster_tests.judge.common.basefacts import BASE, BaseFacts
from cluster_tests.judge.common.netfacts import is_ip
from cluster_tests.judge.common.probes import FactsError, Probe
from cluster_tests.judge.env.envvars import is_secret
from cluster_tests.judge.hostfile.hostmodel import Host
from cluster_tests.judge.problem import Problem, SectionCause
from cluster_tests.judge.ssh import sshfail

PROBE_MARK = "CT_PROBE_JSON:"
#: the launcher's `ssh -G` of a name (Cluster.launcher_ssh_view)
LAUNCHER_SSH: MemoKey[dict[str, str]] = MemoKey("launcher", "ssh_g")
#: a line of node/bundle.py: one section's facts, as [index, data]
BUNDLE_MARK = "CT_BUNDLE_JSON:"
# Runs the script that arrives on standard input as __main__, with the JSON parameters as argv[1]
# (or, when they are long, as standard input's first line: `probe_command`).
BOOTSTRAP = ("import sys; sys.argv[1:] = sys.argv[1:] or [sys.stdin.readline()]; "
             "exec(compile(sys.stdin.read(), '<cluster_tests>', 'exec'))")
#: Parameters longer than this travel on standard input, not in the command line: Linux refuses
#: a single argument over 128 KiB (MAX_ARG_STRLEN), and sshd hands the whole command to the
#: user's shell as one (`sh -c COMMAND`).  The port matrix's `connect` names every peer's name
#: and ports (90 bytes or more a peer): over that limit from about 1400 nodes, fewer with FQDNs.
ARGS_INLINE_MAX = 32 * 1024


def probe_command(python: str, args: str, source: bytes,
                  site: bool = True) -> tuple[list[str], bytes]:
    """The command line and standard input that run `source` with JSON parameters `args`;
    `site`: with the interpreter's site-packages (else `-S`, see node.SITE_SECTIONS)."""
    head = [python] if site else [python, "-S"]
    if len(args) <= ARGS_INLINE_MAX:
        return [*head, "-c", BOOTSTRAP, args], source
    return [*head, "-c", BOOTSTRAP], args.encode() + b"\n" + source


def needs_site(probes: Iterable[NodeProbe]) -> bool:
    """Whether any of these probes imports installed packages (node.SITE_SECTIONS), or runs in
    an interpreter named for it (E3's: the launch's, whose imports are the point)."""
    return any((script, section) in node.SITE_SECTIONS or "python" in params
               for script, section, params in probes)


#: One probe of a node as a command runs it: (script, section, parameters).
NodeProbe = tuple[str, str, dict[str, object]]
#: A probe a check module asks of every node it touches (core.checkhooks): the
#: section, typed, with the parameters its tests pass
Declared = tuple[Probe[Any], dict[str, object]]
BASE_ONLY: tuple[Declared, ...] = ((BASE, {}),)


def remote_script(name: str) -> bytes:
    return node.source(name)


def _secret_values(env: Mapping[str, str]) -> set[str]:
    return {v for k, v in env.items() if is_secret(k) and v and len(v) >= 3}


class ProbeCause(SectionCause):
    """Why a probe delivered no facts (the Problem of a check that needs them)."""

    FAILED = "probe failed"
    NO_PYTHON = "remote python not found"
    NO_RESULT = "probe gave no result"
    UNREADABLE = "probe answer unreadable"


class ProbeError(Exception):
    """A probe ran but could not deliver its facts (no Python on the node, a crash...)."""

    def __init__(self, node: str, message: str, result: CommandResult | None = None, *,
                 fix: str = "", cause: ProbeCause = ProbeCause.FAILED) -> None:
        self.node = node
        self.result = result
        self.message = message
        self.fix = fix
        self.cause = cause
        super().__init__(message + (f"\n  fix: {fix}" if fix else ""))

    def problem(self, item: str) -> Problem:
        """The red of the check (checklist `item`) that needed these facts."""
        return Problem((self.node,), self.cause, self.message, fix=self.fix, item=item)


T = TypeVar("T")
_MISSING = object()  # no value in the memo (None is a value)


#: a node of the run: a usable hostfile entry (name, slots, line), whatever the node list was
Node = Host


@dataclass(repr=False)
class Cluster:
    settings: Settings
    nodes: list[Node]
    #: the remote layer: `Pool` (SSH), or any other `Transport` (bench/fake_transport.py)
    pool: Transport
    _memo: dict[tuple[str, ...], Future[Any]] = field(default_factory=dict)
    #: the memo's computed values (not its failures), read without the lock
    _values: dict[tuple[str, ...], object] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: the memo's failed logins, read without raising them again
    _login_errors: dict[str, ConnectError] = field(default_factory=dict)
    _background: list[threading.Thread] = field(default_factory=list)
    #: (script, section) -> the reader of its answer (Probe.read), for the answers that arrive
    #: in a bundle of a node's probes
    _readers: dict[tuple[str, str], Callable[[object], object]] = field(default_factory=dict)
    #: what this process did remotely: logins, probes run, probes read from the shared cache
    stats: dict[str, int] = field(default_factory=lambda: {"ssh_logins": 0, "probes_run": 0,
                                                           "probes_shared": 0})
    logged_in: set[str] = field(default_factory=set)
    #: set by the plugin: where `progress()` reports go (None: nowhere)
    progress_sink: Callable[[str, int, int], None] | None = None
    #: set under pytest-xdist (core.workers): probe results shared by the worker processes
    shared: SharedResults | None = None
    #: --transport srun: the job steps that carry srun_mod.SRUN_PROBES (None: all on SSH)
    srun: srun_mod.Srun | None = None

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

    def address(self, node: str) -> str:
        """Where the launcher's ssh goes for `node` (its ssh config's HostName, else the name)."""
        return self.pool.targets[node].hostname

    def login_seconds(self, node: str) -> float | None:
        """How long the launcher's login to `node` took (None: not logged in)."""
        return self.pool.connection(node).login_seconds

    def host_key(self, node: str) -> tuple[str, str] | None:
        """`node`'s host key (type, base64) as the launcher's login verified it."""
        key = getattr(self.pool.connection(node), "host_key", None)
        return (str(key[0]), str(key[1])) if key else None

    # -- the memo ---------------------------------------------------------------------------
    def memo(self, key: MemoKey[T], compute: Callable[[], T]) -> T:
        """Compute `key` once for the whole session, even when many threads ask at once."""
        done = self._values.get(key, _MISSING)  # computed: no lock (asked ~1000 times per node)
        if done is not _MISSING:
            return cast(T, done)
        with self._lock:
            done = self._values.get(key, _MISSING)
            if done is not _MISSING:
                return cast(T, done)
            fut = self._memo.get(key)
            owner = fut is None
            if owner:
                fut = self._memo[key] = Future()
        assert fut is not None
        if owner:
            try:
                value = compute()
            except BaseException as exc:  # noqa: BLE001 - stored, re-raised to every asker
                fut.set_exception(exc)
            else:
                self._computed(key, fut, value)
        return wait_result(fut)

    def _computed(self, key: MemoKey[T], fut: Future[T], value: T) -> None:
        """A value is kept in `_values` alone; its Future (a lock and a condition each, 20,000
        per 1024 nodes) only hands it to whoever waits now.  A failure keeps its Future."""
        with self._lock:
            self._values[key] = value
            self._memo.pop(key, None)
        fut.set_result(value)

    def cached(self, key: MemoKey[T]) -> T | None:
        """A memo entry that is already computed (None otherwise); never computes or waits."""
        done = self._values.get(key, _MISSING)
        if done is not _MISSING:
            return cast(T, done)
        with self._lock:
            fut = self._memo.get(key)
        if fut is None or not fut.done() or fut.exception() is not None:
            return None
        return fut.result()

    def _failed(self, key: MemoKey[T]) -> bool:
        """Whether a memo entry is computed and failed (never computes or waits)."""
        with self._lock:
            fut = self._memo.get(key)
        return fut is not None and fut.done() and fut.exception() is not None

    def node_table(self) -> NodeTable:
        """What the run learnt about each node it logged in to, for the reports (from the memo
        only): the login and the base probe here, the sections' columns (`core/nodetable.py`)."""
        rows: dict[str, dict[str, str]] = {}
        for name in self.names:
            seconds = self._values.get(LOGIN(name))
            err: BaseException | None = None
            if seconds is None:
                with self._lock:
                    login = self._memo.get(LOGIN(name))
                if login is None or not login.done():
                    continue
                err = login.exception()
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

    # -- logins -----------------------------------------------------------------------------
    def login(self, node: str) -> float:
        """Log in (once); returns the login time in seconds or raises ConnectError."""
        done = self._values.get(login_key(node), _MISSING)  # logged in: asked ~N times a node
        if done is not _MISSING:
            return cast(float, done)
        conn = self.pool.connection(node)

        def do() -> float:
            with self._lock:
                self.stats["ssh_logins"] += 1
                self.logged_in.add(node)
            conn.connect()
            return conn.login_seconds or 0.0

        return self.memo(login_key(node), do)

    def login_all_background(self) -> None:
        """Start every node's login now, in the background (the pool holds --fanout handshakes
        at a time): whoever needs a node later waits for its login in flight, or finds it
        done."""
        def run() -> None:
            self.pool.map(self.login_error, self.names)

        threading.Thread(target=run, name="cluster-logins", daemon=True).start()

    def in_background(self, name: str, fn: Callable[[], object], *, wait: bool = True) -> None:
        """Run a phase of the session in a thread of its own (its readers wait for its memo
        entries, an error re-raised to each).  `wait`: the session waits for it before it ends
        (`finish_background`), for what it leaves on the nodes (listeners) is its own to stop;
        else what it has in flight is ended with the run's other commands (`close`)."""
        def run() -> None:
            with contextlib.suppress(Exception):
                fn()

        thread = threading.Thread(target=run, name=name, daemon=True)
        if wait:
            with self._lock:
                self._background.append(thread)
        thread.start()

    def finish_background(self) -> None:
        """Wait for the background phases (a session that ended before reading them: -x, a
        deselection by a plugin) so that they end what they started on the nodes."""
        with self._lock:
            threads = list(self._background)
        for thread in threads:
            thread.join()

    def launcher_ssh_view(self, name: str) -> dict[str, str]:
        """What OpenSSH on the launcher makes of a hostfile name (`ssh -G`, with the run's ssh
        config: hostname, port, user; or "error"), asked once per name, where a check needs
        it (a name that is not the node's own)."""
        if name in self.pool.targets:  # a node: the `ssh -G` its login was resolved with
            t = self.pool.targets[name]
            if t.config_error is not None:
                return {"error": t.config_error}
            return {"hostname": t.hostname, "port": str(t.port),
                    **({"user": t.user} if t.user else {})}
        return self.memo(LAUNCHER_SSH(name), lambda: ssh_g(name, self.settings.ssh_config))

    def login_error(self, node: str) -> ConnectError | None:
        err = self._login_errors.get(node)
        if err is not None:  # asked per pair of a dead node's peers: not raised each time
            return err
        try:
            self.login(node)
        except ConnectError as exc:
            self._login_errors[node] = exc  # the memo keeps a failed login too
            return exc
        return None

    def require(self, node: str) -> None:
        """Block the calling test when its node cannot be logged in to: one red for a dead node
        (`test_login[node]`), every check that needs the node skipped naming it (or, when that
        red is not selected in this run, a brief red of its own)."""
        err = self.login_error(node)
        if err is not None:
            outcome.block(ids.LOGIN.of(node), sshfail.node_state(node, err.cause))
            pytest.fail(
                f"{node} unreachable ({err.cause.value}): see {ids.LOGIN.of(node)}", pytrace=False
            )

    def prefetch(self, nodes: Iterable[str], declared: Sequence[Declared] = BASE_ONLY) -> None:
        """Start logins and probes of `nodes` in the background, in parallel: after its login,
        all of a node's probes (core.checkhooks.node_probes) at once, so that a node whose
        every command is slow (a .bashrc waiting on a hung NFS home) costs that delay about
        once, not once per section; and one probe that hangs (nvidia-smi on a wedged GPU)
        holds up no other."""
        wanted = [n for n in dict.fromkeys(nodes) if n in self.pool.targets]
        for typed, _ in declared:
            self._readers.setdefault((typed.script, typed.section), typed.read)
        probes = tuple((typed.script, typed.section, params) for typed, params in declared)
        by_key = {(typed.script, typed.section, memokey.dumps(params)): typed
                  for typed, params in declared}

        def one(node: str, probe: NodeProbe) -> None:
            script, section, params = probe
            with contextlib.suppress(Exception):  # each test re-raises what concerns it
                self.probe(node, by_key[(script, section, memokey.dumps(params))], **params)

        done = [0]
        self.progress("probing nodes", 0, len(wanted))
        by_srun, together, alone = self._split_probes(probes)

        def warm(node: str) -> None:
            try:
                self.login(node)
                threads = [threading.Thread(target=one, args=(node, p), daemon=True)
                           for p in alone]
                for t in threads:
                    t.start()
                if together:
                    with contextlib.suppress(Exception):  # each test re-raises its own
                        self.probe_together(node, together)
                for t in threads:
                    t.join()
            except Exception:  # noqa: BLE001 - each test re-raises what concerns it
                pass
            finally:
                with self._lock:
                    done[0] += 1
                    n = done[0]
                self.progress("probing nodes", n, len(wanted))

        def steps() -> None:
            with contextlib.suppress(Exception):  # each test re-raises what concerns it
                self.probe_by_srun(wanted, by_srun)

        def run() -> None:
            if by_srun:
                threading.Thread(target=steps, name="cluster-srun", daemon=True).start()
            self.pool.map(warm, wanted)

        threading.Thread(target=run, name="cluster-prefetch", daemon=True).start()

    def _split_probes(self, probes: tuple[NodeProbe, ...]
                      ) -> tuple[list[NodeProbe], list[NodeProbe], list[NodeProbe]]:
        """(by srun, together, alone): one command for the probes that share the default
        interpreter (node/bundle.py): one channel, shell and Python start-up per node instead of
        one per section.  Under xdist each probe stays a command of its own, for SharedResults'
        per-key hand-off.  --transport srun: the probes it carries run as one job step on every
        node at once."""
        by_srun = [p for p in probes if self.srun is not None and self.shared is None
                   and srun_mod.via_srun(p[0], p[1]) and "python" not in p[2]]
        by_ssh = [p for p in probes if p not in by_srun]
        together = [p for p in by_ssh if "python" not in p[2]] if self.shared is None else []
        alone = [p for p in by_ssh if p not in together] if len(together) > 1 else by_ssh
        return by_srun, together if len(together) > 1 else [], alone

    def progress(self, phase: str, done: int, total: int) -> None:
        """Report progress of a long phase ("probing nodes", "bandwidth rounds", "training"...):
        `done` of `total` steps.  Shown in the terminal when pytest runs verbosely or on a tty
        (never with -q, never from xdist workers); cheap to call often, safe from any thread."""
        sink = self.progress_sink
        if sink is not None:
            with contextlib.suppress(Exception):  # progress must never break a check
                sink(phase, done, total)

    # -- probes -----------------------------------------------------------------------------
    def run(self, node: str, argv: list[str] | str, *, timeout: float | None = None,
            stdin: bytes | None = None) -> CommandResult:
        self.login(node)
        return self.pool.run(node, argv, timeout=timeout or self.settings.timeout_command,
                             stdin=stdin)

    @overload
    def probe(self, node: str, probe: Probe[T], **params: Any) -> T: ...

    @overload
    def probe(self, node: str, probe: str, *, script: str = "probe.py", **params: Any) -> Any: ...

    def probe(self, node: str, probe: Probe[Any] | str, *, script: str = "probe.py",
              **params: Any) -> Any:
        """Run one section of a node-side probe script (cached per node, section and parameters)
        and read its answer into the section's typed facts, once (`Probe`; a section still named
        by a string gives its JSON as it came).

        The script is a file in `cluster_tests/node/` that follows probe.py's protocol: argv[1]
        is JSON {"sections": [...], **params}; it prints `CT_PROBE_JSON:{section: data}`.
        """
        if isinstance(probe, Probe):
            script, section, reader = probe.script, probe.section, probe.read
        else:
            section, reader = probe, _as_is
        self._readers.setdefault((script, section), reader)
        key = probe_key(node, section, params, script)
        if self.shared is None:
            return self.memo(key, lambda: _read(node, section, reader, self._counted_probe(
                node, section, params, script)))
        return self.memo(key, lambda: _read(node, section, reader, self._shared_probe(
            key, node, section, params, script)))

    def _counted_probe(self, node: str, section: str, params: dict[str, object],
                       script: str) -> object:
        with self._lock:
            self.stats["probes_run"] += 1
        return self._probe(node, section, params, script)

    def _shared_probe(self, key: tuple[str, ...], node: str, section: str,
                      params: dict[str, object], script: str) -> object:
        """Under pytest-xdist: one worker process runs the probe, the others read its result
        (core.sharedresults); logins stay per process."""
        assert self.shared is not None
        data, error, read = self.shared.get(
            key, lambda: self._counted_probe(node, section, params, script), ProbeError)
        if read:
            with self._lock:
                self.stats["probes_shared"] += 1
        if error is not None:
            raise ProbeError(node, error)
        return data

    def _probe(self, node: str, section: str, params: dict[str, object], script: str) -> object:
        if self.srun is not None and srun_mod.via_srun(script, section) and "python" not in params:
            return self._probe_srun(node, section, params, script)
        if section == "base":
            params = {**self.base_params(node), **params}
        python = str(params.get("python") or self.settings.remote_python)  # the launch's, for E3
        timeout = _timeout(params, self.settings.timeout_command)
        argv, stdin = probe_command(python, memokey.dumps({"sections": [section], **params}),
                                    remote_script(script), needs_site([(script, section, params)]))
        result = self.run(node, argv, stdin=stdin, timeout=timeout)
        for line in reversed(result.stdout.splitlines()):
            if line.startswith(PROBE_MARK):
                return _facts(node, section, json.loads(line[len(PROBE_MARK):])[section], result)
        raise _no_result(node, section, python, result)

    def probe_together(self, node: str, probes: Sequence[NodeProbe]) -> None:
        """Run several probes of `node` (same interpreter) as one command (node/bundle.py) and
        fill their memo entries, each as soon as its line arrives, so that a reader of a quick
        section never waits for a slow one.  Probes already in the memo are left out; every
        entry taken here is filled (a fact, or the error that concerns it) before returning."""
        claims = _Claims(self, node, probes)
        if not claims.open:
            return
        python = self.settings.remote_python
        out: dict[bool, list[bytes]] = {False: [], True: []}
        pending = bytearray()

        def on_chunk(data: bytes, is_stderr: bool) -> None:
            out[is_stderr].append(data)
            if is_stderr:
                return
            pending.extend(data)
            *lines, rest = bytes(pending).split(b"\n")
            pending[:] = rest
            for raw in lines:
                claims.line(raw.decode("utf-8", "replace"))

        try:
            self.login(node)
            argv, stdin = self._bundle_command(probes, node)
            done = self.pool.stream(node, argv, stdin=stdin, on_chunk=on_chunk,
                                    timeout=self._bundle_timeout(probes) + 5)
            text = {k: b"".join(v).decode("utf-8", "replace") for k, v in out.items()}
            result = CommandResult(node, f"{python} -c <{len(probes)} probes>",
                                   -1 if done.exit_status is None else done.exit_status,
                                   text[False], text[True], done.seconds, done.timed_out)
            claims.finish(lambda section: _no_result(node, section, python, result))
        except BaseException as exc:  # noqa: BLE001 - every entry taken gets it, then raised
            claims.finish(lambda section, exc=exc: exc)  # type: ignore[misc]
            raise

    def probe_by_srun(self, nodes: Sequence[str], probes: Sequence[NodeProbe]) -> None:
        """--transport srun: the same probes on every node of `nodes` as one Slurm job step
        (core/srun.py), filling each node's memo entries as its lines arrive."""
        assert self.srun is not None
        claims = {n: _Claims(self, n, probes) for n in nodes}
        busy = [n for n in nodes if claims[n].open]
        if not busy:
            return
        tasks: dict[int, _Claims] = {}

        def on_line(task: int, raw: bytes) -> None:
            line = raw.decode("utf-8", "replace")
            if line.startswith(srun_mod.NODE_MARK):
                got = claims.get(line[len(srun_mod.NODE_MARK):].strip())
                if got is not None:
                    tasks[task] = got
            elif task in tasks:
                tasks[task].line(line)

        with self._lock:
            self.stats["srun_steps"] = self.stats.get("srun_steps", 0) + 1
        try:
            step = self.srun.step(busy, *self._bundle_command(probes), on_line,
                                  self._bundle_timeout(probes) + 10)
        except BaseException as exc:  # noqa: BLE001 - every entry taken gets it, then raised
            for c in claims.values():
                c.finish(lambda section, exc=exc: exc)  # type: ignore[misc]
            raise
        how = "timed out" if step.timed_out else f"exit {step.exit_status}"
        tail = step.stderr.strip()[-1500:]
        for n in busy:
            claims[n].finish(functools.partial(_srun_error, n, how, len(busy), step.seconds, tail))

    def _probe_srun(self, node: str, section: str, params: dict[str, object],
                    script: str) -> object:
        """One probe of one node as a job step (--transport srun), outside a prefetch."""
        assert self.srun is not None
        probe: list[NodeProbe] = [(script, section, params)]
        got: dict[int, object] = {}

        def on_line(task: int, raw: bytes) -> None:
            answer = _bundle_answer(raw.decode("utf-8", "replace"))
            if answer is not None:
                got[answer[0]] = answer[1]

        with self._lock:
            self.stats["srun_steps"] = self.stats.get("srun_steps", 0) + 1
        step = self.srun.step([node], *self._bundle_command(probe), on_line,
                              self._bundle_timeout(probe) + 10)
        if 0 in got:
            return _facts(node, section, got[0], None)
        how = "timed out" if step.timed_out else f"exit {step.exit_status}"
        raise _srun_error(node, how, 1, step.seconds, step.stderr.strip()[-1500:], section)

    def _bundle_command(self, probes: Sequence[NodeProbe],
                        node: str | None = None) -> tuple[list[str], bytes]:
        """The command line and standard input of a bundle; `node`: the one it runs on, where a
        probe is `base` (srun steps never carry it)."""
        wanted = [[script, section, {**self.base_params(node or ""), **params}
                   if section == "base" else params]
                  for script, section, params in probes]
        args = memokey.dumps({"bundle": wanted, "timeout": self.settings.timeout_command})
        return probe_command(self.settings.remote_python, args, _bundle_source(probes),
                             needs_site(probes))

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

    def _bundle_timeout(self, probes: Sequence[NodeProbe]) -> float:
        return max(_timeout(p, self.settings.timeout_command) for _, _, p in probes)

    def base(self, node: str) -> BaseFacts:
        """The cheap facts of a node; fails the calling test briefly if the node is unreachable."""
        self.require(node)
        try:
            return self.probe(node, BASE)
        except ProbeError as exc:
            pytest.fail(str(exc), pytrace=False)

    def base_or_none(self, node: str) -> BaseFacts | None:
        """A node's cheap facts, or None when it cannot be logged in to or probed: for checks
        that look at other nodes too (their failures are those nodes' own tests' to report)."""
        if self.login_error(node) is not None:
            return None
        done = self._values.get(base_key(node), _MISSING)  # asked per pair: no key made
        if done is not _MISSING:
            return cast(BaseFacts, done)
        try:
            return self.probe(node, BASE)
        except ProbeError:
            return None

    def secrets(self) -> set[str]:
        """Values of secret-looking variables (KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL) seen in
        the launcher's and the nodes' environments, to be masked in every report."""
        # Called for every report (3 per test): remember each source's values once its facts
        # are in, so that a report costs O(1), not a scan of every node's environment (which
        # made 64 nodes take 17 s of pure pytest time, and 1024 nodes hours).
        cache = self.__dict__.setdefault("_secret_values", {})
        if len(cache) <= len(self.names):
            if "\0launcher" not in cache:
                cache["\0launcher"] = _secret_values(os.environ)
            for name in self.names:
                if name not in cache:
                    base = self.cached(base_key(name))
                    if base:
                        cache[name] = _secret_values(base.env)
                    elif self._failed(LOGIN(name)) or self._failed(base_key(name)):
                        # a dead node has no facts, ever: settled, or every report would scan
                        # all nodes again (10 % dead nodes made a run 1.6x slower)
                        cache[name] = set()
            self.__dict__["_secret_union"] = set().union(*cache.values())
        return set(self.__dict__["_secret_union"])

    def close(self) -> None:
        """End whatever this run left on the nodes, then log out."""
        try:
            if self.srun is not None:
                self.srun.end_all()
            self.pool.end_leftovers()
        finally:
            self.pool.close()


#: the run's cluster, on the pytest config (`config.stash.get(CLUSTER_KEY, None)`): set by the
#: plugin when a node list was given
CLUSTER_KEY = pytest.StashKey[Cluster]()


def _timeout(params: dict[str, object], default: float) -> float:
    """A probe's deadline: its `timeout` parameter, else the run's --timeout-command."""
    given = params.get("timeout", default)
    return float(given) if isinstance(given, (int, float, str)) else default


def _as_is(data: object) -> Any:
    """The reader of a section not typed yet: its JSON, as it came."""
    return data


def _read(node: str, section: str, reader: Callable[[object], T], data: object) -> T:
    """A section's answer read into its facts (probes.Probe), or the ProbeError that says the
    node's script answered what this version cannot read."""
    try:
        return reader(data)
    except (FactsError, TypeError, ValueError, KeyError) as exc:
        raise ProbeError(node, f"{node}: probe '{section}' answered what cluster_tests cannot "
                               f"read ({type(exc).__name__}: {exc}): is the node's copy of the "
                               "suite's scripts another version?",
                         cause=ProbeCause.UNREADABLE) from None


def _facts(node: str, section: str, data: object, result: CommandResult | None) -> object:
    """A probe section's facts, or the ProbeError that the section reported instead."""
    if isinstance(data, dict) and set(data) == {"error"}:
        raise ProbeError(node, f"{node}: probe '{section}' failed: {data['error']}", result)
    return data


def _no_result(node: str, section: str, python: str, result: CommandResult) -> ProbeError:
    """Why a probe command printed no facts for `section`."""
    if result.exit_status == 127 or "not found" in result.stderr:
        return ProbeError(
            node,
            f"{node}: the remote Python '{python}' was not found by a non-interactive ssh "
            "shell (which is what pdsh runs).",
            result,
            fix=f"pass --remote-python /path/to/python, or put its directory on PATH in "
                f"~/.bashrc on {node}, above any early 'return' for non-interactive shells",
            cause=ProbeCause.NO_PYTHON,
        )
    return ProbeError(node, f"{node}: probe '{section}' gave no result\n{result.evidence()}",
                      result, cause=ProbeCause.NO_RESULT)


def _bundle_answer(line: str) -> tuple[int, object] | None:
    """(index, facts) of a node/bundle.py line; None for any other line (a chatty .bashrc)."""
    if not line.startswith(BUNDLE_MARK):
        return None
    index, data = json.loads(line[len(BUNDLE_MARK):])
    return int(index), data


def _bundle_source(probes: Sequence[NodeProbe]) -> bytes:
    return node.bundle_source(tuple(sorted({script for script, _, _ in probes})))


class _Claims:
    """The memo entries of one node that one bundle command (node/bundle.py) fills: taken when
    made (an entry already in the memo is left to whoever took it), each filled as its line
    arrives, the rest by `finish`."""

    def __init__(self, cluster: Cluster, node: str, probes: Sequence[NodeProbe]) -> None:
        self.cluster, self.node = cluster, node
        self.open: dict[int, tuple[MemoKey[Any], Future[Any], str,
                                   Callable[[object], Any]]] = {}
        with cluster._lock:
            for index, (script, section, params) in enumerate(probes):
                key = probe_key(node, section, params, script)
                if key not in cluster._memo and key not in cluster._values:
                    fut: Future[Any] = Future()
                    cluster._memo[key] = fut
                    self.open[index] = (key, fut, section,
                                        cluster._readers.get((script, section), _as_is))
            cluster.stats["probes_run"] += len(self.open)

    def line(self, line: str) -> None:
        answer = _bundle_answer(line)
        if answer is None:
            return
        index, data = answer
        taken = self.open.pop(index, None)
        if taken is None:
            return
        key, fut, section, reader = taken
        try:
            value = _read(self.node, section, reader, _facts(self.node, section, data, None))
        except ProbeError as exc:
            fut.set_exception(exc)
        else:
            self.cluster._computed(key, fut, value)

    def finish(self, error: Callable[[str], BaseException]) -> None:
        """Every entry still open gets `error(section)`."""
        for index in list(self.open):
            _, fut, section, _ = self.open.pop(index)
            fut.set_exception(error(section))


def _srun_error(node: str, how: str, nodes: int, seconds: float, said: str,
                section: str) -> ProbeError:
    return ProbeError(node, f"{node}: probe '{section}' gave no result through srun (the step on "
                            f"{nodes} nodes: {how}, {seconds:.1f}s)"
                            + (f"\n  srun said: {said}" if said else ""))
