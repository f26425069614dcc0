"""One vocabulary of SSH failures: the cause, the words that name it, its fix.

Used by the launcher's own sessions (core/transport.py, paramiko: :func:`launcher_fix`), by
S4/S5 (OpenSSH stderr on a node: :func:`classify`, :func:`pair_fix`), by the launch rehearsal
(E5, judge/env/launchlegs.py: :data:`PDSH_LEG_FAILED`) and by T2's launcher diagnosis (pdsh's
ssh legs in the log of `deepspeed --hostfile`, judge/training/traindiag.py: :data:`PDSH_LEG`).
A cause's fix is one entry of :data:`FIX`, worded for each place the connection starts (the
launcher with its own target and key, a node to a node, a launch's unnamed leg), written once.
No fix trusts a host key on first use: where no verified key is at hand, the fix compares the
fingerprint out of band before anything is written to known_hosts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster_tests.judge.problem import SectionCause


class Cause(SectionCause):
    """Why an SSH connection failed, as a person would name it (the value is the name shown)."""

    DNS = "name not resolved"
    REFUSED = "connection refused"
    TIMEOUT = "connection timed out"
    UNREACHABLE = "network unreachable"
    HOSTKEY_UNKNOWN = "host key unknown"
    HOSTKEY_CHANGED = "host key changed"
    AUTH = "public key refused"
    KEYS_NOT_ACCEPTED = "public keys not accepted"
    PROTOCOL = "ssh protocol error"
    NOT_INSTALLED = "ssh not installed"
    CONFIG = "ssh config refused"
    FAILED = "ssh failed"


#: How a node that cannot be logged in to reads in the "blocked by test_login[node]" of the
#: checks that needed it ("node3 refuses connections").
NODE_STATE: dict[Cause, str] = {
    Cause.DNS: "has a name the launcher cannot resolve",
    Cause.REFUSED: "refuses connections (sshd not running)",
    Cause.TIMEOUT: "does not answer (connection timed out)",
    Cause.UNREACHABLE: "cannot be reached (no route)",
    Cause.HOSTKEY_UNKNOWN: "has a host key the launcher does not know",
    Cause.HOSTKEY_CHANGED: "answers with a changed host key",
    Cause.AUTH: "refuses the launcher's key",
    Cause.KEYS_NOT_ACCEPTED: "accepts no public keys",
}
#: Causes that are the node's alone (it is down, or its sshd refuses every key): a connection
#: to it from anywhere fails for the same reason, so one red (test_login[node]) answers all.
NODE_DOWN = frozenset({Cause.REFUSED, Cause.TIMEOUT, Cause.UNREACHABLE})
NODE_REFUSES_KEYS = frozenset({Cause.AUTH, Cause.KEYS_NOT_ACCEPTED})


def node_state(node: str, cause: Cause) -> str:
    return f"{node} {NODE_STATE.get(cause, f'cannot be logged in to ({cause.value})')}"


def same_node_cause(login: Cause, leg: Cause) -> bool:
    """Whether a connection to a node that failed with `leg` fails for the reason the
    launcher's login to it failed with `login` (the node is down; it refuses keys; its host key
    changed, for everyone): then the leg is blocked by the login's red, not a red of its own."""
    return (login in NODE_DOWN and leg in NODE_DOWN) or (
        login in NODE_REFUSES_KEYS and leg in NODE_REFUSES_KEYS) or (
        login == leg == Cause.HOSTKEY_CHANGED) or (
        login == leg == Cause.DNS)  # a name neither the launcher nor the node can place


def classify(stderr: str, rc: int) -> Cause:
    """The cause an OpenSSH client's stderr (and exit code) names."""
    s = stderr
    if ("Can't open user config file" in s or "Bad configuration option" in s
            or "terminating, " in s and "bad configuration options" in s):
        return Cause.CONFIG
    if "Could not resolve hostname" in s or "Name or service not known" in s:
        return Cause.DNS
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in s or "Host key for" in s and "has changed" in s:
        return Cause.HOSTKEY_CHANGED
    if "Host key verification failed" in s or "host key is known" in s:
        return Cause.HOSTKEY_UNKNOWN
    denied = re.search(r"Permission denied \(([^)]*)\)", s)
    if denied and "publickey" not in denied.group(1).split(","):
        return Cause.KEYS_NOT_ACCEPTED
    if denied or "Too many authentication failures" in s:
        return Cause.AUTH
    if "Connection refused" in s:
        return Cause.REFUSED
    if "timed out" in s or rc == 124:
        return Cause.TIMEOUT
    if "No route to host" in s or "Network is unreachable" in s:
        return Cause.UNREACHABLE
    if "command not found" in s and rc == 127:
        return Cause.NOT_INSTALLED
    return Cause.FAILED




# -- the fix of each cause, one table for every place an ssh connection starts ---------------

#: Where a host key comes from when the launcher holds none it verified: its fingerprint, read
#: out of band on the node itself, before anything is written to a known_hosts file (never
#: `ssh-keyscan`, which trusts whoever answers).
FINGERPRINT = "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub"


@dataclass(frozen=True)
class SshFix:
    """The fix of one cause, worded for each place an ssh connection starts.

    ``launcher``: the launcher's own login (core/transport.py), a ``str.format`` template over
    the ssh target: ``dest`` its alias, ``hostname``, ``port``, ``known_hosts`` its first
    known_hosts file, ``key`` its first identity file, ``f`` `` -F <ssh config>`` or "".
    ``alias``: the same where the hostfile's name is an ssh alias (the ssh config's
    ``Host {dest}`` block sends it to ``HostName {hostname}``), when that block is the suspect.
    ``pair``: ssh from node ``src`` to node ``node`` (S4, S5's and T2's pdsh legs from the rank-0
    node; ``address``: the node's address where known).
    ``leg``: a pdsh leg from a launching node that the log does not name (T2's diagnosis of
    a launch's log); None: ``pair``'s words for "the launching node" and "<node>"."""

    launcher: str
    pair: str
    alias: str | None = None
    leg: str | None = None

    def generic(self) -> str:
        """The fix of a pdsh leg from an unnamed launching node to an unnamed node."""
        if self.leg is not None:
            return self.leg
        return self.pair.format(src="the launching node", node="<node>", address="<its address>")


_HOSTKEY_CHECK = ("read {node}'s fingerprint out of band (on {node}'s console: "
                  f"{FINGERPRINT}); then on {{src}}: ssh {{node}} true, and answer yes only if "
                  "the fingerprint it shows is that one (ssh then writes the key to "
                  "~/.ssh/known_hosts); never ssh-keyscan, which trusts whoever answers")
_LAUNCHER_HOSTKEY_CHECK = (
    "read {dest}'s fingerprint out of band (on {dest}'s console: "
    f"{FINGERPRINT}); then on the launcher: ssh{{f}} -o StrictHostKeyChecking=ask "
    "-p {port} {hostname} true, and answer yes only if the fingerprint it shows is that one "
    "(ssh then writes the key to {known_hosts}); never ssh-keyscan, which trusts whoever answers")
_LAUNCHER_TIMEOUT = ("check that {dest} is up and that no firewall drops port {port}: "
                     "ping {hostname}; nc -vz -w 3 {hostname} {port}")
_ALIAS_TIMEOUT = ("the ssh config{f} sends {dest} to HostName {hostname}, where nothing answers "
                  "on port {port}: if that is not {dest}'s address, correct the HostName of "
                  "its 'Host {dest}' block (there and in ~/.ssh/config on the rank-0 node, "
                  "which pdsh reads); else check that {hostname} is up: ping {hostname}; "
                  "nc -vz -w 3 {hostname} {port}")
_PAIR_TIMEOUT = ("packets from {src} to {node}:22 are dropped: check the firewall on {node} "
                 "(iptables -S INPUT) and routing on {src}")
_LEG_TIMEOUT = ("check the node is up and reachable (ping), and the firewall allows tcp/22 from "
                "the launching node")
#: let ssh itself say where it stops
_LAUNCHER_VERBOSE = "run: ssh{f} -v {dest} true"
_PAIR_VERBOSE = "on {src}: ssh -v {node} true"

FIX: dict[Cause, SshFix] = {
    Cause.DNS: SshFix(
        "add '<address> {hostname}' to /etc/hosts on the launcher and on every node (or a DNS "
        "record), or a 'Host {dest}' block with its 'HostName <address>' to the ssh config{f} "
        "and to ~/.ssh/config on the nodes",
        "on {src}: add '{address} {node}' to /etc/hosts (or fix DNS)",
        leg="add the node to /etc/hosts (same line on every node) or DNS, or give it a Host "
            "block with its HostName in ~/.ssh/config, or use its IP in the hostfile",
        alias="the ssh config{f} sends {dest} to HostName {hostname}, which the launcher cannot "
              "resolve: write the node's address as HostName in its 'Host {dest}' block (there "
              "and in ~/.ssh/config on the rank-0 node), or add '<address> {hostname}' to "
              "/etc/hosts"),
    Cause.REFUSED: SshFix(
        "start sshd on {dest}: systemctl start ssh (port {port} refused the connection)",
        "sshd on {node} refuses {src}: if it is not running, on {node}: systemctl start ssh; "
        "else a firewall REJECT rule or sshd's ListenAddress: on {node}: iptables -S INPUT",
        leg="start sshd on the node (systemctl start ssh) or give the port (--ssh_port / "
            "~/.ssh/config Port)"),
    Cause.TIMEOUT: SshFix(_LAUNCHER_TIMEOUT, _PAIR_TIMEOUT, alias=_ALIAS_TIMEOUT, leg=_LEG_TIMEOUT),
    Cause.UNREACHABLE: SshFix(_LAUNCHER_TIMEOUT, _PAIR_TIMEOUT, alias=_ALIAS_TIMEOUT,
                              leg=_LEG_TIMEOUT),
    Cause.HOSTKEY_UNKNOWN: SshFix(
        "the launcher does not know {dest}'s host key: " + _LAUNCHER_HOSTKEY_CHECK,
        "{src} does not know {node}'s host key: " + _HOSTKEY_CHECK),
    Cause.HOSTKEY_CHANGED: SshFix(
        "{dest} answers with another host key than {known_hosts} holds: if {dest} was not "
        "reinstalled, investigate (someone may answer in its place); if it was: "
        "ssh-keygen -R {hostname} -f {known_hosts}, then " + _LAUNCHER_HOSTKEY_CHECK,
        "{node} answers {src} with another host key than {src}'s known_hosts holds: if {node} "
        "was not reinstalled, investigate (someone may answer in its place); if it was: on "
        "{src}: ssh-keygen -R {node}, then " + _HOSTKEY_CHECK),
    Cause.AUTH: SshFix(
        "ssh-copy-id{f} -i {key}.pub {dest} (or append {key}.pub to ~/.ssh/authorized_keys on "
        "{dest}); if the key is there already, sshd refuses it because of file modes "
        "(StrictModes): on {dest}: chmod go-w ~; chmod 700 ~/.ssh; chmod 600 "
        "~/.ssh/authorized_keys",
        "on {node}: append {src}'s public key ({src}:~/.ssh/id_*.pub) to ~/.ssh/authorized_keys "
        "(ssh-copy-id {node}, run on {src}); modes: chmod 700 ~/.ssh; chmod 600 "
        "~/.ssh/authorized_keys",
        leg="append the launcher user's ~/.ssh/id_*.pub to that node's ~/.ssh/authorized_keys; "
            "check modes: chmod 700 ~/.ssh; chmod 600 ~/.ssh/authorized_keys (sshd StrictModes), "
            "and PubkeyAuthentication/PermitRootLogin in sshd_config"),
    Cause.KEYS_NOT_ACCEPTED: SshFix(
        _LAUNCHER_VERBOSE,
        "sshd on {node} accepts no public keys (PubkeyAuthentication no): on {node}: set "
        "'PubkeyAuthentication yes' in /etc/ssh/sshd_config; systemctl reload ssh"),
    Cause.PROTOCOL: SshFix(_LAUNCHER_VERBOSE, _PAIR_VERBOSE),
    Cause.NOT_INSTALLED: SshFix(_LAUNCHER_VERBOSE, "on {src}: apt-get install openssh-client"),
    Cause.CONFIG: SshFix(
        "correct the line of the launcher's ssh config that ssh names (ssh{f} -G {dest} shows "
        "the error): the launch's ssh reads the same file",
        "on {src}: correct the line of ~/.ssh/config or /etc/ssh/ssh_config that ssh names "
        "(ssh -G {node} shows the error)"),
    Cause.FAILED: SshFix(
        _LAUNCHER_VERBOSE, _PAIR_VERBOSE,
        leg="fix the ssh error shown for that node (ssh -o BatchMode=yes <node> true from the "
            "rank-0 node), then rerun"),
}
#: The key the AUTH fix names when the target has no identity file of its own.
DEFAULT_KEY = "~/.ssh/id_ed25519"


def launcher_fix(cause: Cause, *, dest: str, hostname: str, port: int | str,
                 known_hosts: str = "", key: str = "", config: str | None = None) -> str:
    """The fix of a failed login from the launcher to `dest` (its ssh target: HostName
    `hostname`, `port`, first known_hosts file and identity file; `config`: the ssh config
    given with -F)."""
    fix = FIX[cause]
    template = fix.alias if hostname != dest and fix.alias is not None else fix.launcher
    return template.format(f=f" -F {config}" if config else "", dest=dest, hostname=hostname,
                           port=port, known_hosts=known_hosts or "~/.ssh/known_hosts",
                           key=key or DEFAULT_KEY)


def pair_fix(cause: Cause, src: str, node: str, address: str = "<its address>") -> str:
    """The fix of a failed `ssh node` run on node `src` (`address`: node's, where known)."""
    return FIX[cause].pair.format(src=src, node=node, address=address)


# -- pdsh's ssh legs (E5's rehearsal, T2's launch) ---------------------------------------------

#: A line of a pdsh leg that comes from ssh itself (not from the remote command), as the
#: launch rehearsal reads a leg that ended with ssh's exit code 255.
PDSH_LEG_FAILED = re.compile(
    r"ssh: |Permission denied|Host key verification failed|REMOTE HOST IDENTIFICATION|"
    r"Connection (refused|timed out|closed)|Could not resolve hostname|No route to host")


@dataclass(frozen=True)
class LegWords:
    """How one cause shows in the log of a pdsh launch (T2), and what T2 says of it (its fix is
    the cause's in :data:`FIX`)."""

    cause: Cause
    kind: str  # the diagnosis kind (T2's log and messages show it)
    pattern: str  # a regular expression (case-insensitive) for a line of the log
    says: str  # what the diagnosis says
    host_group: str | None = None  # the pattern's group naming the node (or that + "2")
    #: what to do where the line names no cause of its own (DeepSpeed's own ssh check)
    hint: str | None = None

    @property
    def fix(self) -> str:
        """The fix, launcher-side (the launching node and the node unnamed)."""
        return self.hint if self.hint is not None else FIX[self.cause].generic()


#: Order matters only for the order of T2's diagnoses (every rule is tried on every line).
PDSH_LEG: tuple[LegWords, ...] = (
    LegWords(
        Cause.AUTH,
        "ssh-publickey",
        r"Permission denied \((publickey|gssapi|password|keyboard)",
        "ssh key login refused (publickey): the launcher's key is not accepted there",
    ),
    LegWords(
        Cause.HOSTKEY_UNKNOWN,
        "ssh-hostkey",
        r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED",
        "ssh host key unknown or changed (strict host key checking)",
    ),
    LegWords(
        Cause.DNS,
        "ssh-resolve",
        r"Could not resolve hostname (?P<h>[^:\s]+)",
        "hostname does not resolve on the launching node",
        "h",
    ),
    LegWords(
        Cause.REFUSED,
        "ssh-refused",
        r"connect to host (?P<h>\S+) port \d+: Connection refused",
        "ssh port refused: sshd not running or another port",
        "h",
    ),
    LegWords(
        Cause.TIMEOUT,
        "ssh-timeout",
        r"connect to host (?P<h>\S+) port \d+: (Connection timed out|No route to host|"
        r"Network is unreachable)|ssh: connect to host (?P<h2>\S+).*timed out",
        "ssh connection timed out / no route: node down or firewall drops port 22",
        "h",
    ),
    LegWords(
        Cause.FAILED,
        "ssh-exit",
        r"ssh exited with exit code (?P<code>\d+)",
        "pdsh's ssh leg to this node failed, so its ranks never started and the other ranks "
        "wait in rendezvous",
    ),
)
#: DeepSpeed's runner checks ssh to the first hostfile host itself, before pdsh.
RUNNER_CHECK = LegWords(
    Cause.FAILED,
    "launcher-ssh-check",
    r"host=(?P<h>\S+) was not reachable via ssh",
    "the deepspeed launcher's ssh check of the first hostfile host failed",
    "h",
    hint="make `ssh -o PasswordAuthentication=no <first host> hostname` work from this node",
)


def leg_words(kind: str) -> LegWords | None:
    """The vocabulary entry of a T2 diagnosis kind (None: not an ssh failure)."""
    return next((w for w in (*PDSH_LEG, RUNNER_CHECK) if w.kind == kind), None)
