"""A node's facts, probed on the node itself: a section of a node-side script
(`cluster_tests/node/`, probe.py's protocol) run once per node, section and parameters for the
whole session (the memo), and read into the section's typed facts (`Probe`).  A node's probes
run together as one command where they share an interpreter (node/bundle.py: one channel, shell
and Python start-up per node), every node at once when the session knows which tests will run
(:meth:`Probes.prefetch`); under pytest-xdist one worker runs a probe and the others read it
(core/sharedresults.py); with --transport srun, as Slurm job steps (core/srun.py).
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar, overload

from cluster_tests import node
from cluster_tests.core import memokey, outcome
from cluster_tests.core import srun as srun_mod
from cluster_tests.core.logins import Logins
from cluster_tests.core.memo import Memo
from cluster_tests.core.memokey import MemoKey, base_key, probe_key
from cluster_tests.core.settings import Settings
from cluster_tests.core.sharedresults import SharedResults
from cluster_tests.core.transport import CommandResult
from cluster_tests.judge.common.basefacts import BASE, BaseFacts
from cluster_tests.judge.common.probes import FactsError, Probe
from cluster_tests.judge.problem import Problem, SectionCause

PROBE_MARK = "CT_PROBE_JSON:"
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

    def problem(self, item: str = "") -> Problem:
        """The red of the check (checklist `item`, where the caller knows it) that needed these
        facts."""
        return Problem((self.node,), self.cause, self.message, fix=self.fix, item=item)


T = TypeVar("T")


class Probes:
    """A session's probes of its nodes: `logins` reach them, `memo` keeps their facts, `stats`
    counts them (`probes_run`, `probes_shared`, `srun_steps`); `progress` is where the prefetch
    reports, `base_params(node)` what a node's base probe is asked beyond its facts."""

    def __init__(self, settings: Settings, logins: Logins, memo: Memo, stats: dict[str, int], *,
                 progress: Callable[[str, int, int], None],
                 base_params: Callable[[str], dict[str, object]],
                 srun: srun_mod.Srun | None = None) -> None:
        self.settings = settings
        self.logins = logins
        self.memo = memo
        self.stats = stats
        self.progress = progress
        self.base_params = base_params
        #: --transport srun: the job steps that carry srun_mod.SRUN_PROBES (None: all on SSH)
        self.srun = srun
        #: set under pytest-xdist (core.workers): probe results shared by the worker processes
        self.shared: SharedResults | None = None
        #: (script, section) -> the reader of its answer (Probe.read), for the answers that
        #: arrive in a bundle of a node's probes
        self.readers: dict[tuple[str, str], Callable[[object], object]] = {}
        self._lock = threading.Lock()

    def count(self, what: str, n: int = 1) -> None:
        """`n` more of `what` in the run's counters."""
        with self._lock:
            self.stats[what] = self.stats.get(what, 0) + n

    def prefetch(self, nodes: Iterable[str], declared: Sequence[Declared] = BASE_ONLY) -> None:
        """Start logins and probes of `nodes` in the background, in parallel: after its login,
        all of a node's probes (core.checkhooks.node_probes) at once, so that a node whose
        every command is slow (a .bashrc waiting on a hung NFS home) costs that delay about
        once, not once per section; and one probe that hangs (nvidia-smi on a wedged GPU)
        holds up no other."""
        wanted = [n for n in dict.fromkeys(nodes) if n in self.logins.pool.targets]
        for typed, _ in declared:
            self.readers.setdefault((typed.script, typed.section), typed.read)
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
                self.logins.login(node)
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
            self.logins.pool.map(warm, wanted)

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
        self.readers.setdefault((script, section), reader)
        key = probe_key(node, section, params, script)
        if self.shared is None:
            return self.memo.memo(key, lambda: _read(node, section, reader, self._counted_probe(
                node, section, params, script)))
        return self.memo.memo(key, lambda: _read(node, section, reader, self._shared_probe(
            key, node, section, params, script)))

    def _counted_probe(self, node: str, section: str, params: dict[str, object],
                       script: str) -> object:
        self.count("probes_run")
        return self._probe(node, section, params, script)

    def _shared_probe(self, key: tuple[str, ...], node: str, section: str,
                      params: dict[str, object], script: str) -> object:
        """Under pytest-xdist: one worker process runs the probe, the others read its result
        (core.sharedresults); logins stay per process."""
        assert self.shared is not None
        data, error, read = self.shared.get(
            key, lambda: self._counted_probe(node, section, params, script), ProbeError)
        if read:
            self.count("probes_shared")
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
        result = self.logins.run(node, argv, stdin=stdin, timeout=timeout)
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
            self.logins.login(node)
            argv, stdin = self._bundle_command(probes, node)
            done = self.logins.pool.stream(node, argv, stdin=stdin, on_chunk=on_chunk,
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

        self.count("srun_steps")
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

        self.count("srun_steps")
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

    def _bundle_timeout(self, probes: Sequence[NodeProbe]) -> float:
        return max(_timeout(p, self.settings.timeout_command) for _, _, p in probes)

    def base(self, node: str) -> BaseFacts:
        """The cheap facts of a node; fails the calling test briefly if the node is unreachable,
        or with the probe's Problem where it gave no facts."""
        self.logins.require(node)
        try:
            return self.probe(node, BASE)
        except ProbeError as exc:
            problem = exc.problem()  # (whichever check asked: its id names it)
        outcome.fail(problem)  # (not inside the except: the red is its text, not a chain)

    def base_or_none(self, node: str) -> BaseFacts | None:
        """A node's cheap facts, or None when it cannot be logged in to or probed: for checks
        that look at other nodes too (their failures are those nodes' own tests' to report)."""
        if self.logins.login_error(node) is not None:
            return None
        done = self.memo.value(base_key(node))  # asked per pair: no key made
        if done is not None:
            return done
        try:
            return self.probe(node, BASE)
        except ProbeError:
            return None


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

    def __init__(self, probes: Probes, node: str, asked: Sequence[NodeProbe]) -> None:
        self.memo, self.node = probes.memo, node
        self.open: dict[int, tuple[MemoKey[Any], Future[Any], str,
                                   Callable[[object], Any]]] = {}
        for index, (script, section, params) in enumerate(asked):
            key = probe_key(node, section, params, script)
            fut = self.memo.claim(key)
            if fut is not None:
                self.open[index] = (key, fut, section,
                                    probes.readers.get((script, section), _as_is))
        probes.count("probes_run", len(self.open))

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
            self.memo.computed(key, fut, value)

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

