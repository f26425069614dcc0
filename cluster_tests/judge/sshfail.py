"""One vocabulary of SSH failures: the cause, the words a message uses for it, the fix.

Used by the launcher's own sessions (core/transport.py, paramiko), by S4/S5 (OpenSSH stderr on a
node, judge/ssh.py) and by T2's launcher diagnosis (pdsh/ssh legs, judge/training.py).
"""

from __future__ import annotations

import enum
import re


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
    Cause.HOSTKEY_CHANGED: ("REMOTE HOST IDENTIFICATION HAS CHANGED", "Host key for ... has changed"),
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
    Cause.TIMEOUT: "check the node is up and no firewall drops the ssh port: ping <node>; nc -vz -w 3 <node> 22",
    Cause.UNREACHABLE: "check the node is up and routed: ping <node>",
    Cause.HOSTKEY_UNKNOWN: "ssh-keyscan -H <node> >> ~/.ssh/known_hosts (then compare the fingerprint)",
    Cause.HOSTKEY_CHANGED: "if the node was reinstalled: ssh-keygen -R <node>; ssh-keyscan -H <node> >> ~/.ssh/known_hosts",
    Cause.AUTH: "ssh-copy-id <node>; then chmod go-w ~; chmod 700 ~/.ssh; chmod 600 ~/.ssh/authorized_keys",
    Cause.KEYS_NOT_ACCEPTED: "set PubkeyAuthentication yes in the node's sshd_config and restart sshd",
    Cause.PROTOCOL: "ssh -v <node> true, and read where it stops",
    Cause.NOT_INSTALLED: "apt-get install openssh-client",
    Cause.FAILED: "ssh -v -o BatchMode=yes <node> true, and read the error",
}


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
