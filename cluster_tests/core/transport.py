"""The remote layer: SSH sessions to the nodes, with deadlines, strict host keys and fan-out.

Every check reaches a node through this module and nothing else.  One `Connection` per node
is opened lazily (paramiko), reused by every test, and closed at the end of the session.
Commands are given as argument vectors and quoted here, in one place (`quote_argv`).  Every
remote command is wrapped in coreutils ``timeout`` so that it also dies *on the node* when its
deadline passes, not only on our side of the channel.

Connect failures are classified (`ConnectError.cause`) so that a test can say *why* a node
cannot be reached, and what fixes it, instead of printing a paramiko traceback.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import logging
import os
import shlex
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import paramiko

from cluster_tests.judge.ssh import sshfail
from cluster_tests.judge.ssh.sshfail import Cause  # noqa: F401  (one vocabulary)

#: the loggers paramiko makes on first use, made here, at import, before any thread of ours
#: logs in: pytest's logging plugin walks logging's table of loggers without its lock when
#: collection starts (_pytest/logging.py, catching_logs), and a logger that a login thread
#: created meanwhile ended a run with "INTERNALERROR> RuntimeError: dictionary changed size
#: during iteration" (seen once in a make test run)
PARAMIKO_LOGGERS = ("paramiko", "paramiko.transport", "paramiko.hostkeys",
                    "paramiko.auth_strategy", "paramiko.sftp", "paramiko.agent")
for _name in PARAMIKO_LOGGERS:
    logging.getLogger(_name)

T = TypeVar("T")
R = TypeVar("R")

# Exit status that coreutils `timeout` uses when it had to kill the command.
TIMEOUT_EXIT = 124


@dataclass(frozen=True)
class SSHTarget:
    """Where and how to log in to one node, as OpenSSH on the launcher would (`ssh -G`)."""

    alias: str
    hostname: str
    port: int = 22
    user: str | None = None
    identity_files: tuple[str, ...] = ()
    known_hosts_files: tuple[str, ...] = ()
    #: read too, never written (/etc/ssh/ssh_known_hosts)
    global_known_hosts: tuple[str, ...] = ()
    strict_host_keys: str = "yes"  # yes | accept-new (never "no": changed keys are always refused)
    connect_timeout: float = 10.0
    #: IdentitiesOnly: only the identity files, no agent's keys
    identities_only: bool = False
    #: ProxyCommand (ProxyJump made one), tokens expanded; None: a direct connection
    proxy_command: str | None = None
    #: what ssh said when it refused its configuration for this name (the login fails so)
    config_error: str | None = None

    @property
    def destination(self) -> str:
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port != 22 else ""
        return f"{user}{self.hostname}{port}"


def _expand(value: str, alias: str, hostname: str, user: str, port: int | str = 22) -> str:
    tokens = {"%h": hostname, "%n": alias, "%r": user, "%p": str(port), "%u": _local_user(),
              "%d": str(Path.home()), "%%": "%"}
    for token, repl in tokens.items():
        value = value.replace(token, repl)
    return os.path.expanduser(value)


class SshConfigError(Exception):
    """OpenSSH on the launcher refuses its own configuration for a name (`ssh -G` fails): the
    launch's ssh would fail the same way, for every node."""


#: the options of `ssh -G` that may hold several values (each line adds one)
_MULTI = frozenset({"identityfile", "userknownhostsfile", "globalknownhostsfile"})


def ssh_g_options(alias: str, ssh_config: str | os.PathLike[str] | None,
                  timeout: float = 10.0) -> dict[str, list[str]] | None:
    """Every option OpenSSH on this machine applies to `alias`, as `ssh -G [-F CONFIG] ALIAS`
    prints them (its own reading of ~/.ssh/config and /etc/ssh/ssh_config, Include and Match
    blocks applied, or of CONFIG alone with -F): keys lower-case, values in order (the keys in
    `_MULTI` split on spaces). None where no `ssh` is installed here; SshConfigError with ssh's
    own words where it refuses the configuration."""
    import shutil
    import subprocess

    ssh = shutil.which("ssh")
    if ssh is None:
        return None
    argv = [ssh, "-G"]
    if ssh_config is not None:
        argv += ["-F", str(Path(ssh_config).expanduser())]
    try:
        proc = subprocess.run([*argv, alias], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SshConfigError(f"{shlex.join([*argv, alias])}: {exc}") from None
    if proc.returncode != 0:
        said = [ln for ln in (proc.stderr.strip() or proc.stdout.strip()).splitlines()
                if "Pseudo-terminal" not in ln]
        raise SshConfigError(said[-1] if said else f"{shlex.join([*argv, alias])}: exit "
                             f"{proc.returncode}")
    out: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.strip().partition(" ")
        if not key:
            continue
        values = value.split() if key in _MULTI else [value.strip()]
        out.setdefault(key.lower(), []).extend(values)
    return out


def _first(options: Mapping[str, Sequence[str]], key: str, default: str = "") -> str:
    got = options.get(key)
    return str(got[0]) if got else default


def resolve_target(
    alias: str,
    ssh_config: str | os.PathLike[str] | None,
    *,
    user: str | None = None,
    connect_timeout: float = 10.0,
    accept_new_host_keys: bool = False,
) -> SSHTarget:
    """Where and how OpenSSH on this machine logs in to `alias`: what `ssh -G` says (the
    launch's pdsh and DeepSpeed's own ssh ask the same ssh; ssh_g_options), else, with no ssh
    installed here, paramiko's reading of the config file. Where ssh refuses its configuration,
    a target whose `config_error` says so (its login fails with ssh's words)."""
    try:
        options = ssh_g_options(alias, ssh_config)
    except SshConfigError as exc:
        return SSHTarget(alias=alias, hostname=alias, user=user, config_error=str(exc))
    if options is None:
        options = _paramiko_options(alias, ssh_config)
    hostname = _first(options, "hostname", alias)
    port = int(_first(options, "port", "22") or 22)
    login = user or _first(options, "user") or None
    login_for_tokens = login or _local_user()

    def expand(value: str) -> str:
        return _expand(value, alias, hostname, login_for_tokens, port)

    identity = tuple(expand(p) for p in options.get("identityfile", []) if p != "none")
    known = [expand(p) for p in options.get("userknownhostsfile", []) if p != "none"]
    if not known:
        known = [os.path.expanduser("~/.ssh/known_hosts")]
    known_global = tuple(expand(p) for p in options.get("globalknownhostsfile", [])
                         if p != "none")
    strict = _first(options, "stricthostkeychecking", "yes").lower()
    if accept_new_host_keys or strict == "accept-new":
        strict = "accept-new"
    else:
        # "no", "ask", "off" and "yes" all end up strict: we never accept an unverified key
        # silently, and nobody is there to answer a prompt.
        strict = "yes"
    timeout = connect_timeout
    with contextlib.suppress(ValueError):
        timeout = min(connect_timeout, float(_first(options, "connecttimeout", "none")))
    proxy = _first(options, "proxycommand", "none")
    jump = _first(options, "proxyjump", "none")
    if jump != "none" and proxy == "none":
        proxy = _jump_command(jump, hostname, port, ssh_config)
    return SSHTarget(
        alias=alias,
        hostname=hostname,
        port=port,
        user=login,
        identity_files=identity,
        known_hosts_files=tuple(known),
        global_known_hosts=known_global,
        strict_host_keys=strict,
        connect_timeout=timeout,
        identities_only=_first(options, "identitiesonly", "no").lower() == "yes",
        proxy_command=None if proxy == "none" else expand(proxy),
    )


def _jump_command(jump: str, hostname: str, port: int,
                  ssh_config: str | os.PathLike[str] | None) -> str:
    """ProxyJump as the ProxyCommand OpenSSH makes of it: `ssh -W host:port` through the last
    jump host, the hops before it with -J."""
    hops = jump.split(",")
    argv = ["ssh"]
    if ssh_config is not None:
        argv += ["-F", str(Path(ssh_config).expanduser())]
    if len(hops) > 1:
        argv += ["-J", ",".join(hops[:-1])]
    return shlex.join([*argv, "-W", f"[{hostname}]:{port}", hops[-1]])


def _paramiko_options(alias: str, ssh_config: str | os.PathLike[str] | None
                      ) -> dict[str, list[str]]:
    """Without ssh installed: paramiko's reading of the given config file, else the user's."""
    path = Path(ssh_config if ssh_config is not None else "~/.ssh/config").expanduser()
    if not path.is_file():
        return {}
    got = paramiko.SSHConfig.from_path(str(path)).lookup(alias)
    out: dict[str, list[str]] = {}
    for key, value in got.items():
        values = value if isinstance(value, list) else str(value).split() \
            if key in _MULTI else [str(value)]
        out[key] = [str(v) for v in values]
    return out


def ssh_g(alias: str, ssh_config: str | os.PathLike[str] | None,
          timeout: float = 10.0) -> dict[str, str]:
    """What OpenSSH on the launcher makes of `alias` (its hostname, port, user), or
    {"error": ...} where it cannot say."""
    try:
        options = ssh_g_options(alias, ssh_config, timeout)
    except SshConfigError as exc:
        return {"error": str(exc)}
    if options is None:
        return {"error": "ssh is not installed on the launcher"}
    return {key: _first(options, key) for key in ("hostname", "port", "user") if key in options}


def _local_user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):  # pragma: no cover - non-POSIX
        return os.environ.get("USER", "root")


class ConnectError(Exception):
    """A node could not be logged in to; `cause` says why, `hint` what to do."""

    def __init__(self, target: SSHTarget, cause: Cause, detail: str, hint: str) -> None:
        self.target = target
        self.cause = cause
        self.detail = detail
        self.hint = hint
        super().__init__(f"{target.alias}: {cause.value}: {detail}")

    def describe(self) -> str:
        return (f"{self.target.alias} ({self.target.destination}): {self.cause.value}: "
                f"{self.detail}\n  fix: {self.hint}")


@dataclass
class CommandResult:
    """What one remote command did.  Output is decoded leniently (never raises on bytes)."""

    node: str
    command: str
    exit_status: int
    stdout: str
    stderr: str
    duration: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and not self.timed_out

    def evidence(self, limit: int = 2000) -> str:
        """The command and its output, trimmed, for a failure message."""
        text = (f"$ {self.command}\n(exit "
                f"{self.exit_status}{', timed out' if self.timed_out else ''})")
        for name, body in (("stdout", self.stdout), ("stderr", self.stderr)):
            body = body.strip()
            if body:
                if len(body) > limit:
                    body = body[: limit // 2] + "\n[...]\n" + body[-limit // 2 :]
                text += f"\n{name}:\n{body}"
        return text


@dataclass
class Streamed:
    """How a streamed command ended (its output went to `on_chunk`).  `exit_status` is None
    when reading ended before the command did (`stopped` or `timed_out`)."""

    command: str
    exit_status: int | None
    seconds: float
    timed_out: bool = False  # the local deadline passed first
    stopped: bool = False  # should_stop() said so first


class Feed:
    """Standard input for `stream` that stays open until `close()` (the command then reads
    end of file): for a remote process that must stop when we say so, or when we die."""

    def __init__(self, data: bytes = b"") -> None:
        self.data = data
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._more: list[bytes] = []

    def send(self, data: bytes) -> None:
        """More bytes for the command's stdin (written by `stream` while the feed is open)."""
        with self._lock:
            self._more.append(data)

    def take(self) -> bytes:
        with self._lock:
            data, self._more = b"".join(self._more), []
        return data

    def close(self) -> None:
        self._closed.set()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()


def _never() -> bool:
    return False


def _discard(data: bytes, is_stderr: bool) -> None:
    return None


def sha256_fingerprint(key: paramiko.PKey) -> str:
    """The fingerprint as OpenSSH prints it (`ssh-keygen -lf`): SHA256:<base64, no padding>."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def quote_argv(argv: Sequence[str] | str) -> str:
    """The one place where arguments become a shell command line."""
    if isinstance(argv, str):
        return argv
    return shlex.join(str(a) for a in argv)


class _StrictPolicy(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client, hostname, key):
        raise paramiko.SSHException(f"host key for {hostname} is not in known_hosts")


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """Accept (and record) a key for a host that has none; a *changed* key is still refused
    (paramiko raises BadHostKeyException before consulting the policy)."""

    def __init__(self, known_hosts_file: str) -> None:
        self.known_hosts_file = known_hosts_file

    def missing_host_key(self, client, hostname, key):
        client.get_host_keys().add(hostname, key.get_name(), key)
        try:
            path = Path(self.known_hosts_file)
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with path.open("a") as fh:
                fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        except OSError:
            pass


def _classify_socket_error(exc: BaseException) -> Cause:
    if isinstance(exc, socket.gaierror):
        return Cause.DNS
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return Cause.TIMEOUT
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        codes = {getattr(e, "errno", None) for e in exc.errors.values()}
        if codes & {errno.ECONNREFUSED}:
            return Cause.REFUSED
        if codes & {errno.ENETUNREACH, errno.EHOSTUNREACH}:
            return Cause.UNREACHABLE
        return Cause.TIMEOUT
    if isinstance(exc, OSError):
        if exc.errno == errno.ECONNREFUSED:
            return Cause.REFUSED
        if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return Cause.UNREACHABLE
        if exc.errno == errno.ETIMEDOUT:
            return Cause.TIMEOUT
    return Cause.PROTOCOL


def _hint(target: SSHTarget, cause: Cause, ssh_config: str | None) -> str:
    """The fix of a failed login to `target`: judge/ssh/sshfail.py's launcher fix for `cause`."""
    return sshfail.launcher_fix(
        cause, dest=target.alias, hostname=target.hostname, port=target.port,
        known_hosts=target.known_hosts_files[0] if target.known_hosts_files else "",
        key=target.identity_files[0] if target.identity_files else "", config=ssh_config)


def wait_result(fut: Future[T]) -> T:
    """`fut.result()`, in short waits: a signal (Ctrl-C) that the kernel hands to another
    thread only runs its Python handler when the main thread wakes up, so never block for
    long at a stretch."""
    while True:
        try:
            return fut.result(timeout=0.2)
        except FutureTimeout:
            continue


#: the environment variable that carries the run tag into every process a command starts
RUN_TAG_VAR = "CT_RUN_TAG"


def leftovers_script(tag: str, grace: float = 0.5) -> str:
    """The shell script that ends, in one round, every process of run `tag` on a node, and
    says which it found (``found PID COMMAND``) and which were still alive after it (``left
    PID COMMAND``):

    - those whose command line carries the tag (every command `stream` starts: its shell's $0;
      T1's and T2's jobs on every node, pdsh's legs among them: their --run-id);
    - those whose environment does (what left the session with setsid: a port listener, pdsh's
      ssh clients);
    - every other child of this login's own sshd: the commands of this run's session, even one
      that sshd has forked but that has not yet become the command (no tag to see yet);
    - and the whole session of each (what a command started, a ~/.bashrc's `sleep`, a worker,
      stays in its sshd session).

    TERM first (`timeout` passes it on to the command's process group), KILL what is left
    after `grace` seconds; DeepSpeed's runner gets KILL at once (its answer to TERM kills every
    DeepSpeed launch on every node). The pattern's brackets keep the script's own command
    lines (pgrep's, grep's, this shell's) from matching; the script's own session and its
    sshd's are never ended."""
    pattern = shlex.quote(f"[{tag[0]}]{tag[1:]}")
    return (
        f"p={pattern}; me=$$; a=$$; c=; "
        # this login's sshd (the first ancestor named sshd*), and our own child of it (a)
        'while [ "${a:-1}" -gt 1 ]; do up=$(ps -o ppid= -p "$a" | tr -d " "); '
        'case "$(cat /proc/${up:-1}/comm 2>/dev/null)" in sshd*) c=$up; break;; esac; '
        "a=$up; done; "
        "mine=$(ps -o sid= -p $me | tr -d ' '); cs=$(ps -o sid= -p ${c:-1} | tr -d ' '); "
        f'ours() {{ pgrep -f "$p"; grep -lsa "{RUN_TAG_VAR}=$p" /proc/[0-9]*/environ '
        '| cut -d/ -f3; [ -n "$c" ] && pgrep -P "$c" | grep -vx "$a"; }; '
        'list() { ours | sort -un | while read q; do [ "$q" = "$me" ] && continue; '
        "[ -r /proc/$q/cmdline ] || continue; "
        "printf '%s %s %s\\n' $1 $q \"$(tr '\\0' ' ' < /proc/$q/cmdline 2>/dev/null)\"; done; }; "
        "end() { for s in $(ours | xargs -r ps -o sid= -p | sort -un); do "
        '[ "$s" = "$mine" ] || [ "$s" = "$cs" ] || [ "$s" -le 1 ] || pkill -$1 -s $s; done; '
        "ours | grep -vx $me | xargs -r kill -$1 2>/dev/null; }; "
        'f=$(list found); [ -z "$f" ] && exit 0; echo "$f"; '
        # DeepSpeed's runner answers TERM with a pkill of every launch.py on every node,
        # other people's too: it gets KILL at once
        'pkill -KILL -f "deepspeed[.]launcher[.]runner .*$p"; '
        f"end TERM; sleep {grace:g}; end KILL; sleep 0.1; list left; exit 0"
    )


@dataclass
class Sweep:
    """What one round of `leftovers_script` did on one node: the processes it found and
    those still alive after it, each (pid, command line); `error` where it could not run."""

    node: str
    found: list[tuple[int, str]] = field(default_factory=list)
    left: list[tuple[int, str]] = field(default_factory=list)
    error: str | None = None

    @classmethod
    def parse(cls, node: str, text: str) -> Sweep:
        out = cls(node)
        for line in text.splitlines():
            word, _, rest = line.partition(" ")
            pid, _, cmd = rest.partition(" ")
            if word in ("found", "left") and pid.isdigit():
                getattr(out, word).append((int(pid), cmd.strip()))
        return out


def off_main_thread(fn: Callable[[], T], name: str,
                    on_interrupt: Callable[[], None] = lambda: None) -> T:
    """`fn()`, run in a thread of its own when called from the main thread, which only waits.

    Ctrl-C raises KeyboardInterrupt in the main thread wherever it is. Inside paramiko, between
    a lock's acquire and its release, it leaves a channel's or the transport's lock held, and
    every later command on that session (the cleanup's own among them) waits for it forever:
    the run then outlives Ctrl-C and leaves the launch running on that node. So the main thread
    never runs paramiko code; on an interrupt, `on_interrupt()` tells `fn` to stop, and the
    interrupt goes on."""
    if threading.current_thread() is not threading.main_thread():
        return fn()
    box: list[T | BaseException] = []

    def run() -> None:
        try:
            box.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting main thread
            box.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        while thread.is_alive():  # short waits: Ctrl-C runs its handler in the main thread
            thread.join(0.2)
    except BaseException:
        on_interrupt()
        raise
    got = box[0]
    if isinstance(got, BaseException):
        raise got
    return got


def new_run_tag() -> str:
    """A tag that every remote command of one run carries on its command line, so that whatever
    the run left on a node (after Ctrl-C, say) can be found and ended: `pkill -f TAG`."""
    return f"ct-run-{uuid.uuid4().hex[:12]}"


def fan_out(fn: Callable[[T], R], items: Iterable[T], fanout: int) -> list[R | BaseException]:
    """Apply `fn` to every item in parallel (at most `fanout` at once); exceptions are returned."""
    items = list(items)
    if not items:
        return []

    def guarded(item: T) -> R | BaseException:
        try:
            return fn(item)
        except Exception as exc:  # noqa: BLE001 - handed back to the caller
            return exc

    # Daemon threads, not a ThreadPoolExecutor: the interpreter joins an executor's threads at
    # exit, so one command stuck in flight after Ctrl-C (end_leftovers() ends them on the nodes)
    # would hold the run open. On Ctrl-C no item that has not started starts.
    results: list[R | BaseException | None] = [None] * len(items)
    pending = iter(enumerate(items))
    lock = threading.Lock()
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            with lock:
                nxt = next(pending, None)
            if nxt is None:
                return
            results[nxt[0]] = guarded(nxt[1])

    threads = [threading.Thread(target=worker, name="ct-fan-out", daemon=True)
               for _ in range(max(1, min(fanout, len(items))))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():  # short waits: Ctrl-C runs its handler in the main thread
                t.join(0.2)
    except BaseException:
        stop.set()
        raise
    return cast(list[R | BaseException], results)


class NodeSession(Protocol):
    """One node's session, as the rest of the code uses it (`Connection`, or a fake)."""

    target: SSHTarget
    tag: str
    login_seconds: float | None

    @property
    def connected(self) -> bool: ...

    def connect(self) -> Any:
        """Log in (once); raises ConnectError.  Returns the client (paramiko's, for testinfra)."""
        ...

    def run(self, argv: Sequence[str] | str, *, timeout: float = ..., stdin: bytes | None = ...,
            max_output: int = ...) -> CommandResult: ...

    def stream(self, argv: Sequence[str] | str, *, stdin: bytes | Feed | None = ...,
               on_chunk: Callable[[bytes, bool], None] = ..., should_stop: Callable[[], bool] = ...,
               timeout: float = ..., kill_after: int = ..., wait: float | None = ...,
               combine_stderr: bool = ...) -> Streamed: ...

    def end_leftovers(self, timeout: float = ...) -> Sweep: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """What the cluster, the checks and the measurements use of the remote layer: `Pool`, or
    the fake in bench/fake_transport.py.  Every command a transport runs carries `tag`."""

    targets: Mapping[str, SSHTarget]
    tag: str

    def connection(self, node: str) -> NodeSession: ...

    def run(self, node: str, argv: Sequence[str] | str, **kw: Any) -> CommandResult: ...

    def stream(self, node: str, argv: Sequence[str] | str, **kw: Any) -> Streamed: ...

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R | BaseException]: ...

    def end_leftovers(self) -> list[Sweep]: ...

    def close(self) -> None: ...


class Connection:
    """One lazily opened SSH session to one node, shared by every test that needs the node."""

    def __init__(self, target: SSHTarget, ssh_config: str | None = None,
                 tag: str | None = None) -> None:
        self.target = target
        self.ssh_config = ssh_config
        self.tag = tag or new_run_tag()
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()
        self._error: ConnectError | None = None
        self.login_seconds: float | None = None
        #: the node's host key (type, base64) as this login verified it
        self.host_key: tuple[str, str] | None = None
        self.closing = threading.Event()  # set: stop waiting for commands (the run is ending)
        #: `_exec`'s gate: `closing` is set under it, and `_starting` counts the commands whose
        #: start is being asked for
        self._gate = threading.Condition()
        self._starting = 0
        #: set by the Pool: at most --fanout handshakes at a time from this launcher, whichever
        #: threads ask (a map's workers, a background phase, tests)
        self.handshakes: threading.Semaphore | None = None

    def __repr__(self) -> str:
        return f"Connection({self.target.alias!r})"

    def connect(self) -> paramiko.SSHClient:
        """Log in once; a failure is remembered, so a dead node costs one connect timeout.
        (Off the main thread: see `off_main_thread`.)"""
        return off_main_thread(self._connect, f"ct-login-{self.target.alias}")

    def _connect(self) -> paramiko.SSHClient:
        with self._lock:
            if self._client is not None:
                return self._client
            if self._error is not None:
                raise self._error
            try:
                if self.handshakes is None:
                    self._client = self._open()
                else:
                    with self.handshakes:  # (the wait is outside _open's login timing)
                        self._client = self._open()
            except ConnectError as exc:
                self._error = exc
                raise
            return self._client

    def _open(self) -> paramiko.SSHClient:
        t = self.target
        client = paramiko.SSHClient()
        if t.config_error is not None:
            raise self._refused(client, Cause.CONFIG, t.config_error)
        for path, load in ((p, client.load_system_host_keys) for p in t.global_known_hosts):
            if Path(path).is_file():
                with contextlib.suppress(OSError, paramiko.SSHException, ValueError):
                    load(path)
        for path in t.known_hosts_files:
            if Path(path).is_file():
                with contextlib.suppress(OSError, paramiko.SSHException, ValueError):
                    client.load_host_keys(path)
        if t.strict_host_keys == "accept-new":
            client.set_missing_host_key_policy(_AcceptNewPolicy(t.known_hosts_files[0]))
        else:
            client.set_missing_host_key_policy(_StrictPolicy())
        key_files = [p for p in t.identity_files if Path(p).is_file()]
        start = time.monotonic()
        try:
            # as OpenSSH: a jump host or proxy command carries the connection where one is set
            sock = paramiko.ProxyCommand(t.proxy_command) if t.proxy_command else None
            client.connect(
                t.hostname,
                port=t.port,
                username=t.user or _local_user(),
                # paramiko takes a list of key files too (SSHClient.connect's docs);
                # its stubs say str
                key_filename=key_files or None,  # type: ignore[arg-type]
                # ssh -G lists the default identity files itself; the agent's keys unless
                # IdentitiesOnly (as OpenSSH offers them)
                look_for_keys=False,
                allow_agent=not t.identities_only,
                sock=sock,
                timeout=t.connect_timeout,
                banner_timeout=t.connect_timeout,
                auth_timeout=t.connect_timeout,
                channel_timeout=t.connect_timeout,
                password=None,
                passphrase=None,
            )
        except paramiko.BadHostKeyException as exc:
            raise self._refused(
                client,
                Cause.HOSTKEY_CHANGED,
                f"the key offered by {t.hostname} ({exc.key.get_name()} "
                f"{sha256_fingerprint(exc.key)}) differs from the one in known_hosts: the host was "
                "reinstalled, or someone is in between",
            ) from None
        except paramiko.BadAuthenticationType as exc:
            if "publickey" not in (exc.allowed_types or []):
                raise self._refused(
                    client,
                    Cause.AUTH,
                    f"sshd on {t.hostname} does not accept public keys at all (it offers only: "
                    f"{', '.join(exc.allowed_types) or 'nothing'}): PubkeyAuthentication is off",
                    f"on {t.alias}: set 'PubkeyAuthentication yes' in /etc/ssh/sshd_config; "
                    "systemctl reload ssh",
                ) from None
            raise self._refused(client, Cause.AUTH, str(exc)) from None
        except paramiko.AuthenticationException as exc:
            raise self._refused(
                client,
                Cause.AUTH,
                f"{t.user or _local_user()}@{t.hostname} refused our key(s) "
                f"{', '.join(key_files) or '(default keys / agent)'}: {exc}",
            ) from None
        except paramiko.SSHException as exc:
            msg = str(exc)
            if "not in known_hosts" in msg:
                raise self._refused(
                    client,
                    Cause.HOSTKEY_UNKNOWN,
                    f"{t.hostname} is not in {', '.join(t.known_hosts_files)} "
                    "(strict host key checking)",
                ) from None
            low = msg.lower()
            cause = Cause.TIMEOUT if "timeout" in low or "banner" in low else Cause.PROTOCOL
            raise self._refused(client, cause, msg) from None
        except OSError as exc:
            cause = _classify_socket_error(exc)
            raise self._refused(client, cause, f"{t.destination}: {exc}") from None
        self.login_seconds = time.monotonic() - start
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(15)
            key = transport.get_remote_server_key()
            # verified against known_hosts (strict): S4's fix may copy it to a node that lacks it
            self.host_key = (key.get_name(), key.get_base64())
        return client

    def _refused(self, client: paramiko.SSHClient, cause: Cause, detail: str,
                 hint: str | None = None) -> ConnectError:
        """Close the half-open client; the error to raise (the hint for `cause` unless given)."""
        client.close()
        return ConnectError(self.target, cause, detail,
                            hint or _hint(self.target, cause, self.ssh_config))

    def run(
        self,
        argv: Sequence[str] | str,
        *,
        timeout: float = 30.0,
        stdin: bytes | None = None,
        max_output: int = 8 * 1024 * 1024,
    ) -> CommandResult:
        """Run a command on the node; it is killed there (``timeout -k``) and here at `timeout`."""
        out, err = bytearray(), bytearray()

        def keep(data: bytes, is_stderr: bool) -> None:
            buf = err if is_stderr else out
            if len(buf) < max_output:
                buf += data

        s = self.stream(argv, stdin=stdin, on_chunk=keep, should_stop=self.closing.is_set,
                        timeout=timeout)
        timed_out = s.timed_out or s.stopped
        status = -1 if timed_out or s.exit_status is None else s.exit_status
        if status == TIMEOUT_EXIT:
            timed_out = True
        return CommandResult(
            node=self.target.alias,
            command=s.command,
            exit_status=status,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            duration=s.seconds,
            timed_out=timed_out,
        )

    def stream(
        self,
        argv: Sequence[str] | str,
        *,
        stdin: bytes | Feed | None = None,
        on_chunk: Callable[[bytes, bool], None] = _discard,
        should_stop: Callable[[], bool] = _never,
        timeout: float = 30.0,
        kill_after: int = 2,
        wait: float | None = None,
        combine_stderr: bool = False,
    ) -> Streamed:
        """Run a command on the node and hand its output to ``on_chunk(data, is_stderr)`` as it
        arrives: the one loop that reads remote output.

        The command runs under ``timeout -k kill_after T`` on the node (T: `timeout` in whole
        seconds, at least 1), so it dies there at its deadline whatever happens here, with the
        run tag as its shell's $0 (`end_leftovers` finds it by that).  Standard input gets
        `stdin` and is closed at once, or, for a `Feed`, when the feed is closed.  Reading ends
        when the command ends, when ``should_stop()`` is true or the run is ending (`closing`,
        set by `Pool.end_leftovers` on Ctrl-C and at the end: `stopped`), or `wait` seconds
        after the start (default `timeout` + 3; `timed_out`); the channel is closed then, and a
        command still running is left to its remote deadline and to the caller's cleanup. Once
        the run is ending no command starts (a background thread would otherwise start one after
        the cleanup, and the interpreter would wait for it at exit).
        """
        if self.closing.is_set():
            raise ConnectError(self.target, Cause.PROTOCOL, "the run is ending", "")
        interrupted = threading.Event()

        def stop_now() -> bool:
            return self.closing.is_set() or interrupted.is_set() or should_stop()

        return off_main_thread(
            lambda: self._stream(argv, stdin, on_chunk, stop_now, timeout, kill_after, wait,
                                 combine_stderr),
            f"ct-stream-{self.target.alias}", on_interrupt=interrupted.set)

    def _stream(self, argv: Sequence[str] | str, stdin: bytes | Feed | None,
                on_chunk: Callable[[bytes, bool], None], stop_now: Callable[[], bool],
                timeout: float, kill_after: int, wait: float | None,
                combine_stderr: bool) -> Streamed:
        client = self._connect()
        command = quote_argv(argv)
        remote_deadline = max(1, int(timeout))
        # `timeout` ends the command (and its process group) at the deadline on the node; the
        # run tag marks it and all it starts as ours for `end_leftovers`: as the shell's $0 (the
        # command line), and in the environment, which what leaves the session inherits too (a
        # port listener, pdsh's ssh clients).
        wrapped = (f"env {RUN_TAG_VAR}={self.tag} timeout -k {kill_after} {remote_deadline} "
                   f"sh -c {shlex.quote(command)} {self.tag}")
        start = time.monotonic()
        deadline = start + (timeout + 3 if wait is None else wait)
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectError(self.target, Cause.PROTOCOL, "session closed",
                               _hint(self.target, Cause.PROTOCOL, self.ssh_config))
        chan = transport.open_session(timeout=self.target.connect_timeout)
        feed = stdin if isinstance(stdin, Feed) else None
        timed_out = stopped = False
        try:
            if combine_stderr:
                chan.set_combine_stderr(True)
            chan.settimeout(0.2)
            self._exec(chan, wrapped)
            data = feed.data if feed is not None else stdin if isinstance(stdin, bytes) else b""
            if data:
                chan.sendall(data)
            if feed is None:
                chan.shutdown_write()
            while True:
                progressed = False
                while chan.recv_ready():
                    on_chunk(chan.recv(65536), False)
                    progressed = True
                while chan.recv_stderr_ready():
                    on_chunk(chan.recv_stderr(65536), True)
                    progressed = True
                if (chan.exit_status_ready() and not chan.recv_ready()
                        and not chan.recv_stderr_ready()):
                    break
                more = feed.take() if feed is not None else b""
                if more:
                    with contextlib.suppress(OSError, EOFError):
                        chan.sendall(more)
                if feed is not None and feed.closed:
                    feed = None
                    with contextlib.suppress(OSError, EOFError):
                        chan.shutdown_write()
                if stop_now():
                    stopped = True
                    break
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                if not progressed:
                    time.sleep(0.01)
            status = chan.recv_exit_status() if chan.exit_status_ready() else None
        finally:
            chan.close()
        return Streamed(command, status, time.monotonic() - start, timed_out, stopped)

    def _exec(self, chan: paramiko.Channel, command: str) -> None:
        """Start `command` on `chan`, unless the run is ending: the gate that no command passes
        once `refuse` has begun (a thread past `stream`'s own check, still logging in or opening
        its channel when the cleanup started, would otherwise start its command after the
        cleanup had looked, and leave it running)."""
        with self._gate:
            if self.closing.is_set():
                raise ConnectError(self.target, Cause.PROTOCOL, "the run is ending", "")
            self._starting += 1
        try:
            chan.exec_command(command)
        finally:
            with self._gate:
                self._starting -= 1
                self._gate.notify_all()

    def refuse(self, wait: float = 5.0) -> None:
        """From now on no command starts on this node (`_exec`); returns once the commands
        whose start was already asked for are started (sshd has forked them: the cleanup that
        follows finds them), or after `wait` seconds."""
        with self._gate:
            self.closing.set()
            self._gate.wait_for(lambda: self._starting == 0, timeout=wait)

    @property
    def connected(self) -> bool:
        return self._client is not None

    def end_leftovers(self, timeout: float = 5.0) -> Sweep:
        """One round of ending every process of this run still alive on the node
        (`leftovers_script`): what it found, and what was still alive after it."""
        if self._client is None:
            return Sweep(self.target.alias)
        script = f"sh -c {shlex.quote(leftovers_script(self.tag))}"
        out = bytearray()
        try:
            transport = self._client.get_transport()
            if transport is None or not transport.is_active():
                return Sweep(self.target.alias, error="the session is closed")
            chan = transport.open_session(timeout=timeout)
            chan.settimeout(timeout)
            chan.exec_command(script)
            # bounded: a node whose shell start-up hangs runs this late, but still runs it
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                if chan.recv_ready():
                    out += chan.recv(65536)
                    continue
                if chan.exit_status_ready():
                    while chan.recv_ready():
                        out += chan.recv(65536)
                    break
                time.sleep(0.02)
            else:
                chan.close()
                return Sweep(self.target.alias, error=f"no answer within {timeout:g} s")
            chan.close()
        except (TimeoutError, OSError, paramiko.SSHException) as exc:
            return Sweep(self.target.alias, error=str(exc) or type(exc).__name__)
        return Sweep.parse(self.target.alias, out.decode("utf-8", "replace"))

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


class Targets(Mapping[str, SSHTarget]):
    """The nodes' ssh targets by name, each resolved (`resolve`: `ssh -G`) on first use and
    kept: in the threads that log in, so that a thousand nodes do not wait for a thousand
    `ssh -G` one after another."""

    def __init__(self, names: Iterable[str], resolve: Callable[[str], SSHTarget]) -> None:
        self._names = list(dict.fromkeys(names))
        self._known = frozenset(self._names)
        self._resolve = resolve
        self._got: dict[str, SSHTarget] = {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> SSHTarget:
        got = self._got.get(name)
        if got is not None:
            return got
        if name not in self._known:
            raise KeyError(name)
        target = self._resolve(name)  # (outside the lock: one slow ssh -G delays no other)
        with self._lock:
            return self._got.setdefault(name, target)

    def __contains__(self, name: object) -> bool:
        return name in self._known

    def __iter__(self):  # noqa: ANN204 - Iterator[str]
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@dataclass(repr=False)
class Pool:
    """All connections of a run, and a bounded thread pool to reach many nodes at once."""

    def __repr__(self) -> str:  # short, as Cluster's
        return f"<Pool of {len(self.targets)} nodes, {self.tag}>"

    targets: Mapping[str, SSHTarget]
    ssh_config: str | None = None
    fanout: int = 32
    tag: str = field(default_factory=new_run_tag)
    _conns: dict[str, Connection] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _handshakes: threading.Semaphore | None = None

    def connection(self, node: str) -> Connection:
        conn = self._conns.get(node)
        if conn is not None:
            return conn
        target = self.targets[node]  # resolved outside the lock (`ssh -G`: Targets)
        with self._lock:
            conn = self._conns.get(node)
            if conn is None:
                if self._handshakes is None:
                    self._handshakes = threading.Semaphore(max(1, self.fanout))
                conn = self._conns[node] = Connection(target, self.ssh_config, self.tag)
                conn.handshakes = self._handshakes
            return conn

    def run(self, node: str, argv: Sequence[str] | str, **kw: Any) -> CommandResult:
        return self.connection(node).run(argv, **kw)

    def stream(self, node: str, argv: Sequence[str] | str, **kw: Any) -> Streamed:
        return self.connection(node).stream(argv, **kw)

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R | BaseException]:
        """Apply `fn` to every item in parallel (at most `fanout` at once); exceptions are
        returned."""
        return fan_out(fn, items, self.fanout)

    def end_leftovers(self, deadline: float = 20.0, settle: float = 0.5) -> list[Sweep]:
        """Stop waiting for commands, start none any more (`Connection.refuse`), and on every
        node logged in to, end whatever this run still has running there: in rounds
        (`Connection.end_leftovers`), until two rounds `settle` seconds apart find nothing on
        any node (a leg that pdsh's ssh had asked a node's sshd to start when its client was
        ended becomes a process of the run a moment later: the next round ends it), or
        `deadline` seconds have passed. Returns the last round's sweeps with what is still
        alive (`Sweep.left`), or that could not be swept (`Sweep.error`): normally none."""
        with self._lock:
            conns = list(self._conns.values())
        for conn in conns:
            conn.closing.set()
        self.map(lambda c: c.refuse(), conns)
        end = time.monotonic() + deadline
        quiet = 0
        last: list[Sweep] = []
        while True:
            got = self.map(lambda c: c.end_leftovers(), [c for c in conns if c.connected])
            last = [g if isinstance(g, Sweep) else Sweep("?", error=str(g)) for g in got]
            if any(s.found for s in last):
                quiet = 0
            else:
                quiet += 1
            if quiet >= 2 or time.monotonic() + settle >= end:
                break
            time.sleep(settle if quiet else 0.05)
        return [s for s in last if s.left or s.error]

    def close(self) -> None:
        with self._lock:
            conns = list(self._conns.values())
        for conn in conns:
            conn.close()
