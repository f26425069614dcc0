"""Training smoke over SSH (checklist T1, T2): ship the job, start it as a user would, watch it,
and leave nothing behind. How: docs/training-launch.md (scratch directory, the T1 and T2 command
lines, deadlines, cleanup, environment). The failure messages of a launch are
``judge/training/trainexplain.py``.
"""

from __future__ import annotations

import datetime
import os
import re
import shlex
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cluster_tests.core.cluster import Cluster, remote_script
from cluster_tests.core.memokey import MemoKey
from cluster_tests.core.settings import Settings
from cluster_tests.core.transport import ConnectError
from cluster_tests.judge.env import jit as jj
from cluster_tests.judge.env.envvars import unquote_export
from cluster_tests.judge.hostfile import resourcefilter as rf
from cluster_tests.judge.training import trainargv as targv
from cluster_tests.judge.training import traindiag as tdiag
from cluster_tests.judge.training import trainresult as tres
from cluster_tests.judge.training.trainexplain import LAUNCH_MARK, Launch, accelerator_problems
from cluster_tests.measure import rehearsal

T1_RUN: MemoKey[Launch] = MemoKey("training", "T1")  # (node)
T2_RUN: MemoKey[Launch] = MemoKey("training", "T2")

SCRATCH = "/tmp"
RUN_PREFIX = "ct-train-"
SCRIPT_NAME = "train_smoke.py"
#: Variables of the pytest process passed on to the ranks (see the module docstring).
FORWARD_ENV = ("DS_ACCELERATOR",)
#: (shell, `$d` the run directory or a glob of them) a JIT build lock that a killed rank held,
#: as train_smoke.py records it, removed if it is still that very file (same inode): else every
#: later launch that loads the op would wait on it
RELEASE_KILLED_LOCKS = (
    'for f in $d/.ct_jit_lock.*; do [ -f "$f" ] || continue; { read ino; read l; } < "$f"; '
    '[ "$(stat -c %i -- "$l" 2>/dev/null)" = "$ino" ] && rm -f -- "$l"; done; ')
#: ...and the /dev/shm segments of DeepSpeed's CPU all-reduce that a killed job could not unlink
#: (node/train_smoke.py records each one's name first)
REMOVE_KILLED_SEGMENTS = (
    'for f in $d/.ct_shm.*; do [ -f "$f" ] || continue; read n < "$f"; '
    'case "$n" in ""|*/*) ;; *) rm -f -- "/dev/shm/$n";; esac; done; ')
#: what the launch's .deepspeed_env may set for DeepSpeed's JIT builds, passed on to the job
JIT_ENV = ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "TRITON_HOME", "CXX")
#: Diagnoses that do not stop a launch that is still running (they are normal mid-run, or
#: warnings that precede the real error).
_NOT_FATAL = frozenset({tdiag.TrainCause.RANK_NOT_STARTED, tdiag.TrainCause.RANK_NOT_DONE,
                        tdiag.TrainCause.HOSTFILE_MISSING, tdiag.TrainCause.RENDEZVOUS_TIMEOUT})
#: Launcher arguments the suite sets itself.
_OWN_LAUNCHER_ARGS = frozenset(
    {"-H", "--hostfile", "-i", "--include", "-e", "--exclude", "--master_addr", "--master_port",
     "--num_gpus", "--num_accelerators", "--num_nodes", "--no_ssh", "--no_python", "--module"}
)
_MAX_LOG = 16 * 1024 * 1024


class ConfigError(ValueError):
    """An option of the training checks has a value they cannot use."""


class SetupError(RuntimeError):
    """The job could not be put in place on a node (before any launch)."""


@dataclass(frozen=True)
class TrainingConfig:
    steps: int
    deadline: float
    zero_stage: int
    launcher_args: tuple[str, ...]
    include: str
    exclude: str
    master_port: int
    master_addr: str | None
    python: str
    forward_env: tuple[tuple[str, str], ...]
    min_drop: float = tres.DEFAULT_MIN_DROP
    #: the user's own --launch-args other than the resolved ones (T2 passes them on)
    launch_passthrough: tuple[str, ...] = ()

    @property
    def grace(self) -> float:
        """Time on top of the ranks' deadline for the launcher, pdsh, ssh and the imports."""
        return max(20.0, 0.25 * self.deadline)

    @property
    def limit(self) -> int:
        """Seconds after which the launcher is killed."""
        return int(self.deadline + self.grace + 0.999)

    @property
    def dist_timeout(self) -> float:
        """torch.distributed timeout: within the deadline, so that a rendezvous that cannot
        complete ends with torch's own error (which names what it waited for)."""
        return max(10.0, min(60.0, self.deadline / 2))

    def job_args(self, run_id: str) -> list[str]:
        return [
            "--steps", str(self.steps), "--deadline", f"{self.deadline:g}",
            "--zero-stage", str(self.zero_stage), "--dist-timeout", f"{self.dist_timeout:g}",
            "--run-id", run_id,
        ]

    def describe(self) -> str:
        return f"{self.steps} steps, ZeRO stage {self.zero_stage}, deadline {self.deadline:g} s"


def config_from_settings(settings: Settings,
                         environ: dict[str, str] | None = None) -> TrainingConfig:
    """The training options, checked (ConfigError names the option and what is wrong)."""
    environ = dict(os.environ if environ is None else environ)
    t = settings.training
    try:
        zero = int(t.zero_stage)
    except (TypeError, ValueError):
        zero = -1
    if zero not in (0, 1, 2, 3):
        raise ConfigError(f"--zero-stage must be 0, 1, 2 or 3, got {t.zero_stage!r}")
    raw_args = t.deepspeed_args
    try:
        launcher_args = tuple(shlex.split(raw_args))
    except ValueError as exc:
        raise ConfigError(f"--deepspeed-args {raw_args!r}: {exc}") from None
    own = [a for a in launcher_args if a.split("=", 1)[0] in _OWN_LAUNCHER_ARGS]
    if own:
        raise ConfigError(
            f"--deepspeed-args must not set {', '.join(own)}: the suite sets it (use "
            f"--launch-include/--launch-exclude, --master-addr, --master-port)"
        )
    return TrainingConfig(
        steps=t.steps,
        deadline=t.deadline,
        zero_stage=zero,
        launcher_args=launcher_args,
        include=settings.include,
        exclude=settings.exclude,
        master_port=settings.master_port,
        master_addr=settings.master_addr,
        python=settings.remote_python,
        forward_env=tuple((k, environ[k]) for k in FORWARD_ENV if environ.get(k)),
        launch_passthrough=settings.launch_passthrough,
    )


# --------------------------------------------------------------------------- one launch


@dataclass
class _Streamed:
    text: str
    exit_status: int | None
    seconds: float
    timed_out: bool
    stopped: str | None


def _stream(
    cluster: Cluster,
    node: str,
    command: str,
    *,
    limit: float,
    should_stop: Callable[[str], str | None],
    cancelled: Callable[[], bool] = lambda: False,
    stop_grace: float = 3.0,
) -> _Streamed:
    """Run ``command`` (a shell line) on ``node`` and read stdout+stderr as they arrive.

    ``should_stop(text so far)`` returning a reason ends the reading ``stop_grace`` seconds
    later (to catch the other nodes' lines); so do ``cancelled()`` and ``limit`` (+10 s). The
    command is left running then: the caller's cleanup kills it. It also dies on the node at
    ``limit`` + 5 s (``timeout -k``), whatever happens to this side.
    """
    cluster.login(node)
    buf = bytearray()
    stopped: str | None = None
    stop_at: float | None = None
    checked, last_check, pause = 0, 0.0, 0.25

    def keep(chunk: bytes, is_stderr: bool) -> None:
        if len(buf) < _MAX_LOG:
            buf.extend(chunk)

    def stop_now() -> bool:
        nonlocal stopped, stop_at, checked, last_check, pause
        now = time.monotonic()
        if stop_at is None and len(buf) != checked and now - last_check >= pause:
            checked = len(buf)
            stopped = should_stop(buf.decode("utf-8", "replace"))
            # the whole text is judged each time: wait 10x what that took before the next, so
            # that a long, chatty job costs at most a tenth of a core per stream (three T1
            # streams judged megabytes 4 times a second each)
            last_check = time.monotonic()
            pause = max(0.25, 10 * (last_check - now))
            if stopped is None and cancelled():
                stopped = "cancelled"
            if stopped is not None:
                stop_at = now + (0.0 if stopped == "cancelled" else stop_grace)
        if stop_at is None and cancelled():
            stopped, stop_at = "cancelled", now
        return stop_at is not None and now >= stop_at

    try:
        s = cluster.pool.stream(node, command, on_chunk=keep, should_stop=stop_now,
                                timeout=int(limit) + 5, wait=limit + 10, combine_stderr=True)
    except ConnectError:
        raise SetupError(f"{node}: the ssh session closed") from None
    status, seconds, timed_out = s.exit_status, s.seconds, s.timed_out
    # 137: `timeout -s KILL` fired; -1: the channel reported a signal instead of a status.
    if status in (124, 137, -1) and seconds >= limit - 1:
        timed_out = True
    if stopped is not None and status is not None and stop_at is not None:
        # It ended on its own within the grace: keep the reason only if it failed.
        stopped = stopped if status != 0 else None
    return _Streamed(buf.decode("utf-8", "replace"), status, seconds, timed_out, stopped)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _ere(text: str) -> str:
    """``text`` as a POSIX extended regex (for pkill -f) matching itself literally."""
    return re.sub(r"[^A-Za-z0-9_/-]", lambda m: "\\" + m.group(), text)


# --------------------------------------------------------------------------- the session


class TrainingRuns:
    """The T1 and T2 runs of one pytest session (each at most once), and their cleanup."""

    def __init__(self, cluster: Cluster, config: TrainingConfig, log_dir: Path | None,
                 run_tag: str | None = None) -> None:
        self.cluster = cluster
        self.config = config
        self.log_dir = log_dir
        #: the run's tag (`Cluster.run_tag`), carried in every job's --run-id
        self.run_tag = run_tag
        self.session_id = uuid.uuid4().hex[:10]
        self._lock = threading.Lock()
        self._touched: set[str] = set()
        self._prefetched = False
        self._closing = threading.Event()

    # -- what runs where ----------------------------------------------------------------
    def active(self) -> OrderedDict[str, list[int]]:
        """Hosts and slots the launch uses, after --launch-include/--launch-exclude, in hostfile
        order (DeepSpeed's resource filter; raises rf.ResourceFilterError)."""
        hosts = {n.name: n.slots for n in self.cluster.nodes}
        return rf.parse_resource_filter(hosts, self.config.include, self.config.exclude)

    def slots(self, node: str) -> int:
        """The ranks T1 starts on ``node``: its slots left by the filter (hostfile slots when the
        filter itself is bad: T2 reports that)."""
        try:
            return len(self.active().get(node, []))
        except rf.ResourceFilterError:
            return self.cluster.node(node).slots

    def local_include(self, node: str) -> str | None:
        """``localhost:<ids>`` when the launch's filter leaves ``node`` other slot ids than
        0..K-1 (else None: ``--num_gpus K`` is the same devices)."""
        try:
            ids = list(self.active().get(node, []))
        except rf.ResourceFilterError:
            return None
        if not ids or ids == list(range(len(ids))):
            return None
        return "localhost:" + ",".join(map(str, ids))

    def run_id(self, label: str) -> str:
        """The job's --run-id: the run's label and the run tag (`run_tag`). Every process of
        the job carries it in its command line, on every node and whatever started it there
        (pdsh's legs of T2, the launch.py and ranks they start): the end of the run finds and
        ends them by the tag (`Pool.end_leftovers`) even where the run's own session never
        reached (the other nodes of T2)."""
        return f"{self.session_id}-{label}" + (f".{self.run_tag}" if self.run_tag else "")

    def run_dir(self, label: str) -> str:
        return f"{SCRATCH}/{RUN_PREFIX}{self.session_id}-{label}"

    def _pattern(self, label: str | None) -> tuple[str, str]:
        """(pkill -f regex, rm glob) of one run, or of every run of this session."""
        if label is None:
            base = f"{RUN_PREFIX}{self.session_id}-"
            return _ere(base), f"{SCRATCH}/{base}*"
        d = self.run_dir(label)
        return _ere(d.rsplit("/", 1)[1] + "/"), d

    # -- T1 -------------------------------------------------------------------------------
    def prefetch_single_nodes(self, nodes: Iterable[str]) -> None:
        """Start T1 on all ``nodes`` at once, in the background (once per session)."""
        nodes = [n for n in dict.fromkeys(nodes) if self.slots(n) > 0]
        with self._lock:
            if self._prefetched or not nodes:
                return
            self._prefetched = True

        def run() -> None:
            self.cluster.pool.map(self.single_node, nodes)

        threading.Thread(target=run, name="ct-training-T1", daemon=True).start()

    def single_node(self, node: str) -> Launch:
        """T1 on ``node`` (run once per session; every caller gets the same Launch)."""
        return self.cluster.memo(T1_RUN(node), lambda: self._single_node(node))

    def _single_node(self, node: str) -> Launch:
        cfg = self.config
        label = f"t1-{_safe(node)}"
        d = self.run_dir(label)
        slots = self.slots(node)
        argv = targv.single_node_argv(
            cfg.python, f"{d}/{SCRIPT_NAME}", slots, cfg.master_port,
            cfg.job_args(self.run_id(label)), cfg.launcher_args,
            include=self.local_include(node),
        )
        launch = Launch(f"T1-{node}", node, [node], slots, self._command(d, argv))
        blocked = self._jit_wait([node])
        if blocked:
            launch.setup_error = blocked
            self._finish(launch, hosts=[node])
            return launch
        try:
            self._stage(node, d, {SCRIPT_NAME: remote_script(SCRIPT_NAME)})
            self._launch(launch, hosts=[node])
        except Exception as exc:  # noqa: BLE001 - ssh/setup failures become the result
            launch.setup_error = str(exc) or type(exc).__name__
        finally:
            launch.leftovers = self._cleanup([node], label)
            self._finish(launch, hosts=[node])
        return launch

    # -- T2 -------------------------------------------------------------------------------
    def multi_node(self) -> Launch:
        """T2 from the rank-0 node through ``deepspeed --hostfile`` (once per session)."""
        return self.cluster.memo(T2_RUN, self._multi_node)

    def _multi_node(self) -> Launch:
        cfg = self.config
        active = self.active()
        nodes = list(active)
        rank0 = nodes[0]
        label = "t2"
        d = self.run_dir(label)
        argv = targv.multi_node_argv(
            cfg.python, f"{d}/hostfile", cfg.master_addr, cfg.master_port,
            f"{d}/{SCRIPT_NAME}", include=cfg.include or None, exclude=cfg.exclude or None,
            extra=cfg.job_args(self.run_id(label)),
            launcher_args=(*cfg.launch_passthrough, *cfg.launcher_args),
        )
        expected = sum(len(s) for s in active.values())
        launch = Launch("T2", rank0, nodes, expected, self._command(d, argv),
                        line=shlex.join(argv))
        involved = list(dict.fromkeys([rank0, *nodes]))
        try:
            script = remote_script(SCRIPT_NAME)
            errors = [
                e for e in self.cluster.pool.map(
                    lambda n: self._stage(n, d, {SCRIPT_NAME: script}), involved
                ) if isinstance(e, BaseException)
            ]
            if errors:
                raise SetupError("; ".join(str(e) for e in errors))
            files = {"hostfile": Path(str(self.cluster.settings.hostfile)).read_bytes()}
            env = self._env_pairs()
            if env:
                files[".deepspeed_env"] = "".join(f"{k}={v}\n" for k, v in env).encode()
            self._stage(rank0, d, files)
            self._launch(launch, hosts=self.cluster.names)
        except Exception as exc:  # noqa: BLE001 - ssh/setup failures become the result
            launch.setup_error = str(exc) or type(exc).__name__
        finally:
            launch.leftovers = self._cleanup(involved, label)
            self._finish(launch, hosts=self.cluster.names)
        return launch

    # -- mechanics ------------------------------------------------------------------------
    def _env_pairs(self) -> list[tuple[str, str]]:
        """What the job gets besides the node's own environment: FORWARD_ENV, and where this
        run's rehearsal saw the launch export them (a .deepspeed_env in the launch directory,
        which the job, started in its own directory, would not read), the directories and
        compiler of DeepSpeed's JIT builds: the job builds and loads its ops where the user's
        job does."""
        pairs = dict(self.config.forward_env)
        # (no cluster: a command built alone, as tests/e2e/test_e2e_training.py does)
        r = self.cluster.cached(rehearsal.MEMO_KEY) if self.cluster is not None else None
        for key in JIT_ENV:
            if r is not None and key in r.exports and key not in pairs:
                pairs[key] = unquote_export(r.exports[key])
        return list(pairs.items())

    def jit_owner(self, node: str) -> tuple[str, str] | None:
        """(the node whose E7 red holds a stale JIT build lock a job on `node` would wait on,
        why), from this run's rehearsal; None when there is none (or no rehearsal ran)."""
        r = self.cluster.cached(rehearsal.MEMO_KEY)
        if r is None:
            return None
        facts = r.jit_facts(self.cluster.names)
        return jj.stale_lock_owner(facts, self.cluster.names, node)

    def _jit_wait(self, nodes: Sequence[str]) -> str | None:
        """Where this run's rehearsal (E7) already saw a stale JIT build lock that DeepSpeed's
        init would wait on: the job would hang until its deadline, so it is not started."""
        r = self.cluster.cached(rehearsal.MEMO_KEY)
        if r is None:
            return None
        facts = r.jit_facts(self.cluster.names)
        for node in nodes:
            why = jj.smoke_waits_on(facts, self.cluster.names, node)
            if why:
                return why
        return None

    def _command(self, run_dir: str, argv: Sequence[str]) -> str:
        q = shlex.quote
        env = [f"{k}={v}" for k, v in self._env_pairs()]
        return (
            f"cd {q(run_dir)} && echo {LAUNCH_MARK} node=$(hostname) "
            f"python=$(command -v {q(self.config.python)} || echo not-found) && "
            f"exec timeout -s KILL {self.config.limit} "
            + (shlex.join(["env", *env]) + " " if env else "")
            + shlex.join(argv)
        )

    def _stage(self, node: str, run_dir: str, files: dict[str, bytes]) -> None:
        if self._closing.is_set():
            raise SetupError("the test session is ending")
        with self._lock:
            self._touched.add(node)
        for name, data in files.items():
            path = f"{run_dir}/{name}"
            tmp = f"{run_dir}/.{name}.part"
            res = self.cluster.run(
                node,
                f"umask 022 && mkdir -p {shlex.quote(run_dir)} && cat > {shlex.quote(tmp)}.$$ "
                f"&& mv -f {shlex.quote(tmp)}.$$ {shlex.quote(path)}",
                stdin=data,
                timeout=self.cluster.settings.timeout_connect + 30,
            )
            if not res.ok:
                raise SetupError(f"{node}: cannot write {path}:\n{res.evidence(800)}")

    def _launch(self, launch: Launch, hosts: Sequence[str]) -> None:
        if self._closing.is_set():
            raise SetupError("the test session is ending")
        known = list(hosts)

        def should_stop(text: str) -> str | None:
            for d in tdiag.diagnose(text, hosts=known):
                if d.kind not in _NOT_FATAL:
                    return d.kind
            return None

        s = _stream(
            self.cluster, launch.node, launch.command, limit=self.config.limit,
            should_stop=should_stop, cancelled=self._closing.is_set,
        )
        launch.text, launch.exit_status, launch.seconds = s.text, s.exit_status, s.seconds
        launch.timed_out, launch.stopped = s.timed_out, s.stopped

    def _cleanup(self, nodes: Sequence[str], label: str | None) -> dict[str, str]:
        """Kill the run's processes and remove its directory on every node; returns what is
        still running afterwards, per node (normally nothing)."""
        pattern, glob = self._pattern(label)
        # The pattern arrives on stdin, so that no command line of the cleanup itself matches.
        script = (
            'read p; read d; pkill -KILL -f -- "$p"; i=0; '
            'while pgrep -f -- "$p" >/dev/null && [ $i -lt 25 ]; do sleep 0.2; i=$((i+1)); done; '
            + RELEASE_KILLED_LOCKS + REMOVE_KILLED_SEGMENTS +
            'rm -rf -- $d; pgrep -af -- "$p"; true'
        )

        def one(node: str) -> str:
            if self.cluster.login_error(node) is not None:
                return ""
            res = self.cluster.run(node, script, stdin=f"{pattern}\n{glob}\n".encode(), timeout=30)
            return res.stdout.strip() if res.ok else f"(cleanup failed: {res.evidence(300)})"

        left = self.cluster.pool.map(one, nodes)
        return {
            n: (str(r) if isinstance(r, BaseException) else r)
            for n, r in zip(nodes, left, strict=False)
            if (isinstance(r, BaseException) or r)
        }

    def _finish(self, launch: Launch, hosts: Sequence[str]) -> None:
        text = launch.text
        if launch.timed_out:
            text += (
                f"\n{tdiag.LAUNCH_TIMEOUT_MARK} the launch exceeded {self.config.limit} s "
                f"(deadline {self.config.deadline:g} s + grace) and was killed\n"
            )
        launch.result = tres.parse_output(text, launch.expected_ranks, self.config.min_drop)
        launch.result.launch = tres.LaunchInfo(
            argv=[launch.command], returncode=launch.exit_status, pgid=0,
            elapsed_s=launch.seconds, timed_out=launch.timed_out,
        )
        launch.diagnoses = tdiag.diagnose(text, expected_ranks=launch.expected_ranks, hosts=hosts)
        launch.accel_problems = accelerator_problems(
            launch.result, self._inventories(launch.nodes), dict(self.config.forward_env)
        )
        if self.log_dir is not None:
            launch.log_path = self._write_log(launch)

    def _write_log(self, launch: Launch) -> Path | None:
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
            path = self.log_dir / f"{_safe(launch.name)}.log"  # type: ignore[operator]
            stamp = datetime.datetime.now().isoformat(timespec="seconds")
            nodes = ", ".join(launch.nodes)
            lines = [
                f"# {launch.name}: started on {launch.node} ({stamp}); nodes {nodes}; "
                + f"{launch.expected_ranks} ranks; {self.config.describe()}",
                f"# command on {launch.node}: {launch.command}",
                f"# exit status {launch.exit_status}, {launch.seconds:.1f} s, timed out: "
                + f"{launch.timed_out}, stopped early: {launch.stopped or 'no'}",
            ]
            if launch.setup_error:
                lines.append(f"# setup error: {launch.setup_error}")
            lines += ["# ---- output ----", launch.text.rstrip("\n"), "# ---- verdict ----"]
            lines.append("ok" if launch.ok else (launch.result.summary() if launch.result else "-"))
            lines += [str(d) for d in launch.diagnoses]
            lines.append("# ---- cleanup ----")
            lines += ([f"{n}: still running: {v}" for n, v in launch.leftovers.items()]
                      or ["nothing left"])
            path.write_text("\n".join(lines) + "\n")
            return path
        except OSError:
            return None

    def _inventories(self, nodes: Sequence[str]) -> dict[str, tuple[str, str]]:
        """A1's view of ``nodes`` (kind, description); nodes A1 cannot look at are left out."""
        from cluster_tests.measure import accel

        out: dict[str, tuple[str, str]] = {}
        for node in nodes:
            try:
                inv = accel.inventory(self.cluster, node)
            except Exception:  # noqa: BLE001, S112 - A1 reports why
                continue
            out[node] = (inv.kind, inv.describe())
        return out

    def close(self) -> None:
        """End of session: stop what still runs and clean every node this session touched."""
        self._closing.set()
        with self._lock:
            touched = sorted(self._touched)
        if touched:
            self._cleanup(touched, None)
