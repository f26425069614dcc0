"""The launcher's logins to the nodes, over the remote layer (core/transport.py): each node's
once for the session (kept in the memo, a failed one too), every node's at once in the
background when the session will need them all, a dead node's checks blocked by its login's
red, and the commands run on a node once logged in."""

from __future__ import annotations

import threading

from cluster_tests.core import outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.memo import Memo
from cluster_tests.core.memokey import MemoKey, login_key
from cluster_tests.core.settings import Settings
from cluster_tests.core.testids import Scope
from cluster_tests.core.transport import CommandResult, ConnectError, Transport, ssh_g
from cluster_tests.judge.problem import Problem
from cluster_tests.judge.ssh import sshfail

#: the launcher's `ssh -G` of a name (Logins.launcher_ssh_view)
LAUNCHER_SSH: MemoKey[dict[str, str]] = MemoKey("launcher", "ssh_g")


class Logins:
    """`pool`: the remote layer (`Pool`, SSH; or any other `Transport`: bench/fake_transport.py);
    `stats`: the run's counters, where the logins are counted (`ssh_logins`)."""

    def __init__(self, settings: Settings, pool: Transport, memo: Memo,
                 stats: dict[str, int]) -> None:
        self.settings = settings
        self.pool = pool
        self.memo = memo
        self.stats = stats
        #: the nodes this process logged in to (or tried)
        self.logged_in: set[str] = set()
        #: the failed logins, read without raising them again
        self._errors: dict[str, ConnectError] = {}
        self._lock = threading.Lock()

    def login(self, node: str) -> float:
        """Log in (once); returns the login time in seconds or raises ConnectError."""
        done = self.memo.value(login_key(node))  # logged in: asked ~N times a node, no lock
        if done is not None:
            return done
        conn = self.pool.connection(node)

        def do() -> float:
            with self._lock:
                self.stats["ssh_logins"] += 1
                self.logged_in.add(node)
            conn.connect()
            return conn.login_seconds or 0.0

        return self.memo.memo(login_key(node), do)

    def login_error(self, node: str) -> ConnectError | None:
        err = self._errors.get(node)
        if err is not None:  # asked per pair of a dead node's peers: not raised each time
            return err
        try:
            self.login(node)
        except ConnectError as exc:
            self._errors[node] = exc  # the memo keeps a failed login too
            return exc
        return None

    def login_all_background(self, names: list[str]) -> None:
        """Start every node's login now, in the background (the pool holds --fanout handshakes
        at a time): whoever needs a node later waits for its login in flight, or finds it
        done."""
        def run() -> None:
            self.pool.map(self.login_error, names)

        threading.Thread(target=run, name="cluster-logins", daemon=True).start()

    def require(self, node: str) -> None:
        """Block the calling test when its node cannot be logged in to: one red for a dead node
        (`test_login[node]`), every check that needs the node skipped naming it (or, when that
        red is not selected in this run, a brief red of its own, naming the login's red)."""
        err = self.login_error(node)
        if err is not None:
            outcome.block(ids.LOGIN.of(node), sshfail.node_state(node, err.cause))
            outcome.fail(Problem((node,), err.cause, f"{node} unreachable ({err.cause.value}): "
                                 f"see {ids.LOGIN.of(node)}", scope=Scope.NODE))

    def run(self, node: str, argv: list[str] | str, *, timeout: float | None = None,
            stdin: bytes | None = None) -> CommandResult:
        self.login(node)
        return self.pool.run(node, argv, timeout=timeout or self.settings.timeout_command,
                             stdin=stdin)

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
        return self.memo.memo(LAUNCHER_SSH(name), lambda: ssh_g(name, self.settings.ssh_config))
