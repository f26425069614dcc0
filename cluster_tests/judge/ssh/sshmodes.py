"""Logic behind the S checks: sshd's StrictModes, `sshd -T`, and why `ssh a b` failed.

Pure functions over the facts that the probe gathers, so that each rule is unit-tested.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from cluster_tests.judge.common import fixcmd
from cluster_tests.judge.common.basefacts import PathStat, SshFiles
from cluster_tests.judge.problem import Fix, Problem
from cluster_tests.judge.ssh import sshfail


@dataclass
class ModeVerdict:
    errors: list[str]  # sshd will refuse the keys (or ssh will ignore a key)
    warnings: list[str]  # departs from the guide's 700/600 but works
    fixes: list[str]  # commands, in order
    commands: list[str] = field(default_factory=list)  # the same, idempotent (for fixes.sh)


def _writable_by_others(entry: PathStat, user_uid: int) -> str | None:
    """sshd's secure_permissions() (auth.c, with Debian's user-private-group allowance)."""
    mode = entry.mode
    if entry.uid not in (0, user_uid):
        return f"owned by {entry.owner}, not by the login user or root"
    if mode & 0o002:
        return f"world-writable (mode {mode:04o})"
    if mode & 0o020 and not entry.group_private:
        return (f"group-writable by group {entry.group}, which is not the user's private group "
                f"(mode {mode:04o})")
    return None


def strict_modes(ssh_facts: SshFiles, uid: int, user: str, strict: bool = True) -> ModeVerdict:
    """What sshd (StrictModes) and ssh (key file modes) will make of this user's files.

    `ssh_facts.chain` is [authorized_keys, ~/.ssh, home, parents of home..., /].
    """
    errors: list[str] = []
    warnings: list[str] = []
    fixes: list[str] = []
    commands: list[str] = []
    chain = ssh_facts.chain
    ak, ssh_dir = chain[0], chain[1]
    if not ssh_dir.exists:
        errors.append(f"{ssh_dir.path} does not exist, so there is no authorized_keys")
        fixes.append(f"mkdir -m 700 {shlex.quote(ssh_dir.path)}")
        commands += [fixcmd.mkdir_cmd(ssh_dir.path), fixcmd.touch_cmd(ak.path)]
    elif not ak.exists:
        errors.append(f"{ak.path} does not exist: no key can log in")
        fixes.append(f"install -m 600 /dev/null {shlex.quote(ak.path)}  "
                     f"# then add the public keys")
        commands.append(fixcmd.touch_cmd(ak.path))
    if strict:
        for entry in chain:
            if not entry.exists:
                continue
            if entry is not ak and not entry.is_dir:
                continue
            why = _writable_by_others(entry, uid)
            if why is None:
                continue
            errors.append(
                f"{entry.path} is {why}: sshd (StrictModes) refuses every key of {user} "
                f"('Authentication refused: bad ownership or modes')"
            )
            path = shlex.quote(entry.path)
            if "owned by" in why:
                fixes.append(f"chown {user} {path}")
                commands.append(fixcmd.chown_cmd(entry.path, user))
            elif entry is ak:
                fixes.append(f"chmod 600 {path}")
                commands.append(fixcmd.chmod_cmd(entry.path, 0o600))
            elif entry is ssh_dir:
                fixes.append(f"chmod 700 {path}")
                commands.append(fixcmd.chmod_cmd(entry.path, 0o700))
            else:
                fixes.append(f"chmod go-w {path}")
                commands.append(fixcmd.chmod_go_w_cmd(entry.path))
    for entry, wanted in ((ak, 0o600), (ssh_dir, 0o700)):
        if (entry.exists and entry.mode & ~wanted & 0o777
                and not any(entry.path in e for e in errors)):
            warnings.append(
                f"{entry.path} has mode {entry.mode:04o}; the guide asks for {wanted:04o} "
                f"(sshd accepts it, but tighten it: chmod {wanted:o} {shlex.quote(entry.path)})"
            )
    for _name, entry in sorted(ssh_facts.private_keys.items()):
        if entry.exists and entry.mode & 0o077:
            errors.append(
                f"private key {entry.path} has mode {entry.mode:04o}: ssh ignores a key that "
                f"others can read ('UNPROTECTED PRIVATE KEY FILE'), "
                f"so this node cannot log in anywhere with it"
            )
            fixes.append(f"chmod 600 {shlex.quote(entry.path)}")
            commands.append(fixcmd.chmod_cmd(entry.path, 0o600))
    return ModeVerdict(errors, warnings, fixes, commands)


def parse_sshd_T(text: str) -> dict[str, str]:
    """`sshd -T` prints one lower-case 'key value' per line (the effective configuration)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key and key not in out:
            out[key.lower()] = value.strip()
    return out


def sshd_config_problems(node: str, cfg: dict[str, str], root: bool) -> list[str]:
    """S3: what in sshd's effective settings (`sshd -T`) stops pdsh logging in to `node` with a
    key (`root`: the suite logs in as root), each with its fix."""
    problems = []
    if cfg.get("pubkeyauthentication", "yes") != "yes":
        problems.append("PubkeyAuthentication is 'no': sshd refuses every key, "
                        "so pdsh cannot log in\n"
                        f"  fix, on {node}: set 'PubkeyAuthentication yes' in "
                        f"/etc/ssh/sshd_config; systemctl reload ssh")
    if root and cfg.get("permitrootlogin", "prohibit-password") not in (
        "yes", "prohibit-password", "without-password"
    ):
        problems.append(f"PermitRootLogin is '{cfg.get('permitrootlogin')}': "
                        f"root cannot log in with a key\n"
                        f"  fix, on {node}: set 'PermitRootLogin prohibit-password'; "
                        f"systemctl reload ssh")
    return problems


# -- why did `ssh a b true` fail? ----------------------------------------------------------


def classify_ssh_failure(stderr: str, rc: int) -> str:
    """The cause's words (judge/ssh/sshfail.py's vocabulary) for an OpenSSH client's stderr."""
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


# -- S1, S2, S4 as Problems ------------------------------------------------------------------


def login_problem(node: str, cause: sshfail.Cause, described: str, hint: str) -> Problem:
    """S1: the launcher cannot log in to `node`. Nobody can run a command there for us, so the
    fix is a person's (it is said, not scripted)."""
    text = described.split("\n  fix:")[0]
    return Problem((node,), cause.value, text, fix=hint, item="S1", launch="node")


def refuses_all_keys(error: str) -> bool:
    """Whether a strict_modes error makes sshd refuse every key of the user (not a key file of
    the node's own, which only stops the node logging in elsewhere)."""
    return not error.startswith("private key")


def modes_problem(node: str, verdict: ModeVerdict) -> Problem:
    """S2: sshd (StrictModes) or ssh refuses the user's files on `node`."""
    words = "; ".join(dict.fromkeys(verdict.fixes))
    fix = Fix(node, f"file modes that sshd (StrictModes) or ssh refuse: {words}",
              tuple(dict.fromkeys(verdict.commands)), "S2")
    # a key file of the node's own stops only its own ssh to others: it matters as rank 0
    own_key_only = not any(refuses_all_keys(e) for e in verdict.errors)
    return Problem((node,), verdict.errors[0].split(":")[0],
                   f"{node}: " + f"\n{node}: ".join(verdict.errors),
                   fix=f"on {node}: {words}", fixes=(fix,) if fix.commands else (), item="S2",
                   launch="as-rank0" if own_key_only else "node")


@dataclass(frozen=True)
class TrustFacts:
    """What the fix of a failed a -> b needs: a's public keys (file -> text), b's
    authorized_keys (path, text), a's known_hosts, b's host key as the launcher verified it
    (type, base64), b's address."""

    pubkeys: dict[str, str | None]
    authorized_keys: str | None
    authorized_keys_text: str | None
    known_hosts: str
    host_key: tuple[str, str] | None
    address: str


def trust_problem(a: str, b: str, cause: sshfail.Cause, evidence: str, facts: TrustFacts,
                  rank0: str) -> Problem:
    """S4: `ssh b` on `a` fails for `cause` (one not held by another red: see the check's
    blocking). One fix per cause; a command where the fix is mechanical and safe."""
    fixes: tuple[Fix, ...] = ()
    if cause == sshfail.Cause.AUTH:
        keys = public_keys(facts.pubkeys)
        pub = next(iter(sorted(facts.pubkeys)), "id_ed25519.pub")
        ak = facts.authorized_keys or "~/.ssh/authorized_keys"
        text = next((t for _, t in sorted(facts.pubkeys.items()) if t and len(t.split()) >= 2),
                    None)
        known = key_authorized(keys, facts.authorized_keys_text)
        if not keys:
            fix = (f"{a} has no key pair: on {a}: "
                   f"ssh-keygen -t ed25519 -N '' -f ~/.ssh/id_ed25519; "
                   f"then add it to {ak} on {b}")
        else:
            prefix = f"{a}'s key (~/.ssh/{pub}) is not in {ak} on {b}: " if known is False else ""
            fix = (f"{prefix}append {a}'s public key to {b}'s authorized_keys: "
                   f"ssh {a} cat ~/.ssh/{pub} | ssh {b} 'cat >> {ak}'")
            if known is False and text:
                fixes = (Fix(b, f"authorize {a}'s key ({pub}) in {ak}",
                             (fixcmd.authorize_key_cmd(ak, text.strip().splitlines()[0]),), "S4"),)
    elif cause in (sshfail.Cause.HOSTKEY_UNKNOWN, sshfail.Cause.HOSTKEY_CHANGED):
        verb = "does not know" if cause == sshfail.Cause.HOSTKEY_UNKNOWN else "has another key for"
        if facts.host_key is not None:
            kt, blob = facts.host_key
            fix = (f"{a} {verb} {b}'s host key: copy the key the launcher verified ({kt}) into "
                   f"{a}'s {facts.known_hosts} (never ssh-keyscan: that trusts whoever answers)")
            fixes = (Fix(a, f"record {b}'s host key (as the launcher verified it) in "
                            f"{facts.known_hosts}",
                         (fixcmd.known_host_cmd(facts.known_hosts, b, kt, blob),), "S4"),)
        else:
            fix = (f"on {a}: ssh {b} true once and compare the fingerprint with `ssh-keygen -lf "
                   f"/etc/ssh/ssh_host_ed25519_key.pub` on {b}'s console")
    elif cause == sshfail.Cause.KEYS_NOT_ACCEPTED:
        fix = (f"sshd on {b} accepts no public keys (PubkeyAuthentication no): on {b}: set "
               f"'PubkeyAuthentication yes' in /etc/ssh/sshd_config; systemctl reload ssh")
    elif cause == sshfail.Cause.DNS:
        fix = f"on {a}: add '{facts.address} {b}' to /etc/hosts (or fix DNS)"
    elif cause == sshfail.Cause.REFUSED:
        fix = (f"sshd on {b} refuses {a} (a firewall REJECT rule, or sshd's ListenAddress): "
               f"on {b}: iptables -S INPUT")
    elif cause in (sshfail.Cause.TIMEOUT, sshfail.Cause.UNREACHABLE):
        fix = (f"packets from {a} to {b}:22 are dropped: check the firewall on {b} "
               f"(iptables -S INPUT) and routing on {a}")
    else:
        fix = f"on {a}: ssh -v {b} true"
    message = (f"{a} -> {b}: {cause.value}\n  `ssh -o BatchMode=yes {b} true` on {a} said:\n    "
               + evidence.replace("\n", "\n    "))
    return Problem((a, b), cause.value, message, fix=fix, fixes=fixes, item="S4",
                   launch="from-rank0")
