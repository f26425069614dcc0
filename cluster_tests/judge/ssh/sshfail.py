"""One vocabulary of SSH failures: the cause, the words a message uses for it, the fix.

Used by the launcher's own sessions (core/transport.py, paramiko: :data:`LAUNCHER_FIX`), by S4/S5
(OpenSSH stderr on a node, judge/ssh/sshmodes.py: :func:`classify`), by the launch rehearsal (E5,
judge/env/launchlegs.py: :data:`PDSH_LEG_FAILED`) and by T2's launcher diagnosis (pdsh's ssh legs in
the log of `deepspeed --hostfile`, judge/training/traindiag.py: :data:`PDSH_LEG`).  Each context
words its fix for what it knows (the launcher's own target and key, or the node and the rank-0
node), so a cause has one fix per context here, written once.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Cause(str, enum.Enum):
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
    FAILED = "ssh failed"


# What OpenSSH's messages say for each cause (checked in this order), and the generic fix.
WORDS: dict[Cause, tuple[str, ...]] = {
    Cause.DNS: ("Could not resolve hostname", "Name or service not known"),
    Cause.HOSTKEY_CHANGED: ("REMOTE HOST IDENTIFICATION HAS CHANGED",
                            "Host key for ... has changed"),
    Cause.HOSTKEY_UNKNOWN: ("Host key verification failed", "host key is known"),
    Cause.KEYS_NOT_ACCEPTED: ("Permission denied (<methods without publickey>)",),
    Cause.AUTH: ("Permission denied (publickey...)", "Too many authentication failures"),
    Cause.REFUSED: ("Connection refused",),
    Cause.TIMEOUT: ("timed out",),
    Cause.UNREACHABLE: ("No route to host", "Network is unreachable"),
    Cause.NOT_INSTALLED: ("command not found",),
}

FIX: dict[Cause, str] = {
    Cause.DNS: "add the node to /etc/hosts (same line on every node) or DNS, or use its IP",
    Cause.REFUSED: "start sshd on the node: systemctl start ssh (or give the right port)",
    Cause.TIMEOUT: ("check the node is up and no firewall drops the ssh port: "
                    "ping <node>; nc -vz -w 3 <node> 22"),
    Cause.UNREACHABLE: "check the node is up and routed: ping <node>",
    Cause.HOSTKEY_UNKNOWN: ("ssh-keyscan -H <node> >> ~/.ssh/known_hosts "
                            "(then compare the fingerprint)"),
    Cause.HOSTKEY_CHANGED: ("if the node was reinstalled: ssh-keygen -R <node>; "
                            "ssh-keyscan -H <node> >> ~/.ssh/known_hosts"),
    Cause.AUTH: ("ssh-copy-id <node>; then chmod go-w ~; chmod 700 ~/.ssh; "
                 "chmod 600 ~/.ssh/authorized_keys"),
    Cause.KEYS_NOT_ACCEPTED: ("set PubkeyAuthentication yes in the node's sshd_config "
                              "and restart sshd"),
    Cause.PROTOCOL: "ssh -v <node> true, and read where it stops",
    Cause.NOT_INSTALLED: "apt-get install openssh-client",
    Cause.FAILED: "ssh -v -o BatchMode=yes <node> true, and read the error",
}


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


# -- the launcher's own sessions (core/transport.py) -------------------------------------------

#: The fix of a failed login from the launcher, per cause: ``str.format`` templates over the
#: ssh target (``dest`` its alias, ``hostname``, ``port``, ``known_hosts`` its first
#: known_hosts file, ``key`` its first identity file, ``f`` `` -F <ssh config>`` or "").
LAUNCHER_FIX: dict[Cause, str] = {
    Cause.DNS: ("add '<address> {hostname}' to /etc/hosts on the launcher and on every node (or "
                "a DNS record), or a 'Host {dest}' block with its 'HostName <address>' to the ssh "
                "config{f} and to ~/.ssh/config on the nodes"),
    Cause.REFUSED: "start sshd on {dest}: systemctl start ssh (port {port} refused the connection)",
    Cause.TIMEOUT: (
        "check that {dest} is up and that no firewall drops port {port}: "
        "ping {hostname}; nc -vz -w 3 {hostname} {port}"
    ),
    Cause.HOSTKEY_UNKNOWN: ("ssh-keyscan -p {port} {hostname} >> {known_hosts} "
                            "(then compare the fingerprint)"),
    Cause.HOSTKEY_CHANGED: (
        "if {dest} was reinstalled: ssh-keygen -R {hostname} -f {known_hosts}; "
        "ssh-keyscan {hostname} >> {known_hosts}; otherwise investigate"
    ),
    Cause.AUTH: (
        "ssh-copy-id{f} -i {key}.pub {dest} "
        "(or append {key}.pub to ~/.ssh/authorized_keys on {dest}); "
        "if the key is there already, sshd refuses it because of file modes (StrictModes): "
        "on {dest}: "
        "chmod go-w ~; chmod 700 ~/.ssh; chmod 600 ~/.ssh/authorized_keys"
    ),
}
LAUNCHER_FIX[Cause.UNREACHABLE] = LAUNCHER_FIX[Cause.TIMEOUT]
#: The fix where the hostfile's name is an ssh alias (the ssh config's ``Host {dest}`` block
#: sends it to ``HostName {hostname}``): nothing there, or no such name, is first of all that
#: block's to correct (the launcher's config and the rank-0 node's ~/.ssh/config, whose pdsh
#: and DeepSpeed's own ssh read it), never the node's hostname.
LAUNCHER_FIX_ALIAS: dict[Cause, str] = {
    Cause.DNS: ("the ssh config{f} sends {dest} to HostName {hostname}, which the launcher cannot "
                "resolve: write the node's address as HostName in its 'Host {dest}' block (there "
                "and in ~/.ssh/config on the rank-0 node), or add '<address> {hostname}' to "
                "/etc/hosts"),
    Cause.TIMEOUT: ("the ssh config{f} sends {dest} to HostName {hostname}, where nothing answers "
                    "on port {port}: if that is not {dest}'s address, correct the HostName of "
                    "its 'Host {dest}' block (there and in ~/.ssh/config on the rank-0 node, "
                    "which pdsh reads); else check that {hostname} is up: ping {hostname}; "
                    "nc -vz -w 3 {hostname} {port}"),
}
LAUNCHER_FIX_ALIAS[Cause.UNREACHABLE] = LAUNCHER_FIX_ALIAS[Cause.TIMEOUT]
#: Any other cause: let ssh itself say where it stops.
LAUNCHER_FIX_OTHER = "run: ssh{f} -v {dest} true"
#: The key the AUTH fix names when the target has no identity file of its own.
DEFAULT_KEY = "~/.ssh/id_ed25519"


# -- pdsh's ssh legs (E5's rehearsal, T2's launch) ---------------------------------------------

#: A line of a pdsh leg that comes from ssh itself (not from the remote command), as the
#: launch rehearsal reads a leg that ended with ssh's exit code 255.
PDSH_LEG_FAILED = re.compile(
    r"ssh: |Permission denied|Host key verification failed|REMOTE HOST IDENTIFICATION|"
    r"Connection (refused|timed out|closed)|Could not resolve hostname|No route to host")


@dataclass(frozen=True)
class LegWords:
    """How one cause shows in the log of a pdsh launch (T2), and what T2 says of it."""

    cause: Cause
    kind: str  # the diagnosis kind (T2's log and messages show it)
    pattern: str  # a regular expression (case-insensitive) for a line of the log
    says: str  # what the diagnosis says
    fix: str  # the fix, launcher-side
    host_group: str | None = None  # the pattern's group naming the node (or that + "2")
    #: the fix when the leg ran from the rank-0 node to ``node`` (``str.format``: src, node)
    from_rank0: str | None = None


#: Order matters only for the order of T2's diagnoses (every rule is tried on every line).
PDSH_LEG: tuple[LegWords, ...] = (
    LegWords(
        Cause.AUTH,
        "ssh-publickey",
        r"Permission denied \((publickey|gssapi|password|keyboard)",
        "ssh key login refused (publickey): the launcher's key is not accepted there",
        "append the launcher user's ~/.ssh/id_*.pub to that node's ~/.ssh/authorized_keys; "
        "check modes: chmod 700 ~/.ssh; chmod 600 ~/.ssh/authorized_keys (sshd StrictModes), "
        "and PubkeyAuthentication/PermitRootLogin in sshd_config",
        from_rank0=(
            "on {node}: append {src}'s public key ({src}:~/.ssh/id_*.pub) to "
            "~/.ssh/authorized_keys (ssh-copy-id {node}, run on {src}); modes: chmod 700 "
            "~/.ssh; chmod 600 ~/.ssh/authorized_keys"
        ),
    ),
    LegWords(
        Cause.HOSTKEY_UNKNOWN,
        "ssh-hostkey",
        r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED",
        "ssh host key unknown or changed (strict host key checking)",
        "on the launching node: ssh-keyscan -H <node> >> ~/.ssh/known_hosts "
        "(or ssh-keygen -R <node> first if the key changed), then ssh <node> true",
        from_rank0="on {src}: ssh-keyscan -H {node} >> ~/.ssh/known_hosts "
                   "(compare the fingerprint)",
    ),
    LegWords(
        Cause.DNS,
        "ssh-resolve",
        r"Could not resolve hostname (?P<h>[^:\s]+)",
        "hostname does not resolve on the launching node",
        "add the node to /etc/hosts (same line on every node) or DNS, or give it a Host block "
        "with its HostName in ~/.ssh/config, or use its IP in the hostfile",
        "h",
    ),
    LegWords(
        Cause.REFUSED,
        "ssh-refused",
        r"connect to host (?P<h>\S+) port \d+: Connection refused",
        "ssh port refused: sshd not running or another port",
        "start sshd on the node (systemctl start ssh) or give the port (--ssh_port / "
        "~/.ssh/config Port)",
        "h",
    ),
    LegWords(
        Cause.TIMEOUT,
        "ssh-timeout",
        r"connect to host (?P<h>\S+) port \d+: (Connection timed out|No route to host|"
        r"Network is unreachable)|ssh: connect to host (?P<h2>\S+).*timed out",
        "ssh connection timed out / no route: node down or firewall drops port 22",
        "check the node is up and reachable (ping), and the firewall allows tcp/22 from the "
        "launching node",
        "h",
    ),
    LegWords(
        Cause.FAILED,
        "ssh-exit",
        r"ssh exited with exit code (?P<code>\d+)",
        "pdsh's ssh leg to this node failed, so its ranks never started and the other ranks "
        "wait in rendezvous",
        "fix the ssh error shown for that node (ssh -o BatchMode=yes <node> true from the "
        "rank-0 node), then rerun",
    ),
)
#: DeepSpeed's runner checks ssh to the first hostfile host itself, before pdsh.
RUNNER_CHECK = LegWords(
    Cause.FAILED,
    "launcher-ssh-check",
    r"host=(?P<h>\S+) was not reachable via ssh",
    "the deepspeed launcher's ssh check of the first hostfile host failed",
    "make `ssh -o PasswordAuthentication=no <first host> hostname` work from this node",
    "h",
)


def leg_words(kind: str) -> LegWords | None:
    """The vocabulary entry of a T2 diagnosis kind (None: not an ssh failure)."""
    return next((w for w in (*PDSH_LEG, RUNNER_CHECK) if w.kind == kind), None)
