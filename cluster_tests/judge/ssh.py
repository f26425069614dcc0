"""Logic behind the S checks: sshd's StrictModes, `sshd -T`, and why `ssh a b` failed.

Pure functions over the facts that the probe gathers, so that each rule is unit-tested.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from cluster_tests.judge import fixcmd, sshfail


@dataclass
class ModeVerdict:
    errors: list[str]  # sshd will refuse the keys (or ssh will ignore a key)
    warnings: list[str]  # departs from the guide's 700/600 but works
    fixes: list[str]  # commands, in order
    commands: list[str] = field(default_factory=list)  # the same, idempotent (for fixes.sh)


def _writable_by_others(entry: dict, user_uid: int) -> str | None:
    """sshd's secure_permissions() (auth.c, with Debian's user-private-group allowance)."""
    mode = entry["mode"]
    if entry["uid"] not in (0, user_uid):
        return f"owned by {entry['owner']}, not by the login user or root"
    if mode & 0o002:
        return f"world-writable (mode {mode:04o})"
    if mode & 0o020 and not entry.get("group_private"):
        return f"group-writable by group {entry['group']}, which is not the user's private group (mode {mode:04o})"
    return None


def strict_modes(ssh_facts: dict, uid: int, user: str, strict: bool = True) -> ModeVerdict:
    """What sshd (StrictModes) and ssh (key file modes) will make of this user's files.

    `ssh_facts["chain"]` is [authorized_keys, ~/.ssh, home, parents of home..., /].
    """
    errors: list[str] = []
    warnings: list[str] = []
    fixes: list[str] = []
    commands: list[str] = []
    chain = ssh_facts["chain"]
    ak, ssh_dir = chain[0], chain[1]
    if not ssh_dir.get("exists"):
        errors.append(f"{ssh_dir['path']} does not exist, so there is no authorized_keys")
        fixes.append(f"mkdir -m 700 {shlex.quote(ssh_dir['path'])}")
        commands += [fixcmd.mkdir_cmd(ssh_dir["path"]), fixcmd.touch_cmd(ak["path"])]
    elif not ak.get("exists"):
        errors.append(f"{ak['path']} does not exist: no key can log in")
        fixes.append(f"install -m 600 /dev/null {shlex.quote(ak['path'])}  # then add the public keys")
        commands.append(fixcmd.touch_cmd(ak["path"]))
    if strict:
        for entry in chain:
            if not entry.get("exists"):
                continue
            if entry is not ak and not entry.get("is_dir"):
                continue
            why = _writable_by_others(entry, uid)
            if why is None:
                continue
            errors.append(
                f"{entry['path']} is {why}: sshd (StrictModes) refuses every key of {user} "
                f"('Authentication refused: bad ownership or modes')"
            )
            path = shlex.quote(entry["path"])
            if "owned by" in why:
                fixes.append(f"chown {user} {path}")
                commands.append(fixcmd.chown_cmd(entry["path"], user))
            elif entry is ak:
                fixes.append(f"chmod 600 {path}")
                commands.append(fixcmd.chmod_cmd(entry["path"], 0o600))
            elif entry is ssh_dir:
                fixes.append(f"chmod 700 {path}")
                commands.append(fixcmd.chmod_cmd(entry["path"], 0o700))
            else:
                fixes.append(f"chmod go-w {path}")
                commands.append(fixcmd.chmod_go_w_cmd(entry["path"]))
    for entry, wanted in ((ak, 0o600), (ssh_dir, 0o700)):
        if entry.get("exists") and entry["mode"] & ~wanted & 0o777 and not any(entry["path"] in e for e in errors):
            warnings.append(
                f"{entry['path']} has mode {entry['mode']:04o}; the guide asks for {wanted:04o} "
                f"(sshd accepts it, but tighten it: chmod {wanted:o} {shlex.quote(entry['path'])})"
            )
    for _name, entry in sorted(ssh_facts.get("private_keys", {}).items()):
        if entry.get("exists") and entry["mode"] & 0o077:
            errors.append(
                f"private key {entry['path']} has mode {entry['mode']:04o}: ssh ignores a key that "
                f"others can read ('UNPROTECTED PRIVATE KEY FILE'), so this node cannot log in anywhere with it"
            )
            fixes.append(f"chmod 600 {shlex.quote(entry['path'])}")
            commands.append(fixcmd.chmod_cmd(entry["path"], 0o600))
    return ModeVerdict(errors, warnings, fixes, commands)


def parse_sshd_T(text: str) -> dict[str, str]:
    """`sshd -T` prints one lower-case 'key value' per line (the effective configuration)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key and key not in out:
            out[key.lower()] = value.strip()
    return out


# -- why did `ssh a b true` fail? ----------------------------------------------------------


def classify_ssh_failure(stderr: str, rc: int) -> str:
    """The cause's words (judge/sshfail.py's vocabulary) for an OpenSSH client's stderr."""
    return sshfail.classify(stderr, rc).value


def public_keys(pubkey_texts: dict[str, str | None]) -> list[str]:
    """The 'type base64' part of each public key file's text."""
    keys = []
    for text in pubkey_texts.values():
        if not text:
            continue
        parts = text.split()
        if len(parts) >= 2:
            keys.append(f"{parts[0]} {parts[1]}")
    return keys


def key_authorized(pubkeys: list[str], authorized_keys_text: str | None) -> bool | None:
    """Whether any of the keys appears in the authorized_keys text (None: cannot tell)."""
    if not pubkeys or authorized_keys_text is None:
        return None
    blobs = {k.split()[1] for k in pubkeys}
    for line in authorized_keys_text.splitlines():
        for word in line.split():
            if word in blobs:
                return True
    return False
