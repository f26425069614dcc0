"""Logic behind the S checks: sshd's StrictModes, `sshd -T`, and why `ssh a b` failed.

Pure functions over the facts that the probe gathers (node/probe.py's `sshd` and `ssh_pairs`,
read here into :class:`SshdFacts` and :class:`~cluster_tests.judge.common.facts.SshLeg`), so
that each rule is unit-tested. A failed connection's cause is judge/ssh/sshfail.py's
:class:`~cluster_tests.judge.ssh.sshfail.Cause`; the rest of the section's are
:class:`SshCause`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from cluster_tests.core import testids as ids
from cluster_tests.core.testids import Scope
from cluster_tests.judge.common import fixcmd
from cluster_tests.judge.common.basefacts import BaseFacts, PathStat, SshFiles
from cluster_tests.judge.common.facts import Command, SshLeg
from cluster_tests.judge.common.probes import Probe, integer, obj, opt_text, text
from cluster_tests.judge.problem import Fix, Problem, SectionCause
from cluster_tests.judge.ssh import sshfail


class SshCause(SectionCause):
    """What S2, S3, S5 and S6 find wrong beside a failed connection (sshfail.Cause)."""

    FILE_MODES = "ssh file modes refused"
    KEY_MODES = "private key readable by others"
    ROOT_LOGIN = "root login refused"
    NO_PDSH = "pdsh not installed"
    PDSH_TIMEOUT = "pdsh timed out"
    SLOW_LOGIN = "slow login"


@dataclass(frozen=True)
class SshdFacts:
    """sshd's effective settings on a node (node/probe.py `sshd`: `sshd -T`, needs root):
    `rc` its exit status, `settings` its lower-case keys (empty where it failed), `error` what
    it said on stderr."""

    rc: int
    settings: Mapping[str, str]
    error: str = ""
    connection_spec: str | None = None

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.settings.get(key, default)

    @classmethod
    def read(cls, raw: object) -> SshdFacts:
        d = obj(raw, "sshd -T")
        rc = integer(d.get("rc"), -1)
        return cls(rc, parse_sshd_T(text(d.get("out"))) if rc == 0 else {},
                   text(d.get("err")), opt_text(d.get("connection_spec")))


def read_legs(raw: object) -> Mapping[str, SshLeg]:
    """The `ssh_pairs` section's answer ({target: command}) as legs, per target."""
    return {str(target): SshLeg(str(target), Command.read(res, f"the ssh leg to {target}"))
            for target, res in obj(raw, "ssh legs").items()}


SCRIPT = "probe.py"
SSHD: Probe[SshdFacts] = Probe(SCRIPT, "sshd", SshdFacts.read)
SSH_PAIRS: Probe[Mapping[str, SshLeg]] = Probe(SCRIPT, "ssh_pairs", read_legs)


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

    `ssh_facts.chain` is [authorized_keys, ~/.ssh, home, parents of home..., /]. sshd judges
    the first three only: its auth_secure_path walks up from authorized_keys and stops at the
    home directory, so a world-writable sticky scratch area above a home (1777) refuses nothing.
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
        for entry in chain[:3]:  # authorized_keys, ~/.ssh, home: where sshd stops
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
    verdict = ModeVerdict(errors, warnings, fixes, commands)
    _private_keys(ssh_facts, verdict)
    return verdict


def node_modes(facts: BaseFacts, sshd: SshdFacts) -> ModeVerdict:
    """S2's verdict on a node's ssh files (its base facts), StrictModes as its sshd has it
    (`sshd -T`; unread: on, sshd's default)."""
    return strict_modes(facts.ssh, facts.uid, facts.user,
                        strict=sshd.get("strictmodes") != "no")


def _private_keys(ssh_facts: SshFiles, verdict: ModeVerdict) -> None:
    """ssh ignores a private key that others can read: add each such key to `verdict`."""
    for _name, entry in sorted(ssh_facts.private_keys.items()):
        if entry.exists and entry.mode & 0o077:
            verdict.errors.append(
                f"private key {entry.path} has mode {entry.mode:04o}: ssh ignores a key that "
                f"others can read ('UNPROTECTED PRIVATE KEY FILE'), "
                f"so this node cannot log in anywhere with it"
            )
            verdict.fixes.append(f"chmod 600 {shlex.quote(entry.path)}")
            verdict.commands.append(fixcmd.chmod_cmd(entry.path, 0o600))


def parse_sshd_T(text: str) -> dict[str, str]:
    """`sshd -T` prints one lower-case 'key value' per line (the effective configuration)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key and key not in out:
            out[key.lower()] = value.strip()
    return out


def sshd_config_problems(node: str, cfg: SshdFacts, root: bool) -> list[Problem]:
    """S3: what in sshd's effective settings (`sshd -T`) stops pdsh logging in to `node` with a
    key (`root`: the suite logs in as root), one Problem each."""
    problems = []
    if cfg.get("pubkeyauthentication", "yes") != "yes":
        problems.append(Problem(
            (node,), sshfail.Cause.KEYS_NOT_ACCEPTED,
            f"{node}: PubkeyAuthentication is 'no': sshd refuses every key, so pdsh cannot "
            f"log in",
            fix=f"on {node}: set 'PubkeyAuthentication yes' in /etc/ssh/sshd_config; "
                f"systemctl reload ssh", item=ids.SSHD_CONFIG.item))
    if root and cfg.get("permitrootlogin", "prohibit-password") not in (
        "yes", "prohibit-password", "without-password"
    ):
        problems.append(Problem(
            (node,), SshCause.ROOT_LOGIN,
            f"{node}: PermitRootLogin is '{cfg.get('permitrootlogin')}': root cannot log in "
            f"with a key",
            fix=f"on {node}: set 'PermitRootLogin prohibit-password'; systemctl reload ssh",
            item=ids.SSHD_CONFIG.item))
    return problems


def sshd_config_problem(node: str, cfg: SshdFacts, root: bool) -> Problem | None:
    """S3's red: :func:`sshd_config_problems` as one Problem (the first one's cause)."""
    problems = sshd_config_problems(node, cfg, root)
    if len(problems) <= 1:
        return problems[0] if problems else None
    return replace(problems[0], message="\n".join(p.message for p in problems),
                   fix="; ".join(p.fix for p in problems))


# -- why did `ssh a b true` fail? ----------------------------------------------------------


def public_keys(pubkey_texts: dict[str, str | None]) -> list[str]:
    """The 'type base64' part of each public key file's text."""
    keys = []
    for words in pubkey_texts.values():
        if not words:
            continue
        parts = words.split()
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

#: the launcher's own ssh failing whatever the node (its configuration, no client): no set of
#: nodes avoids them
LAUNCHER_CAUSES = frozenset({sshfail.Cause.CONFIG, sshfail.Cause.NOT_INSTALLED})


def login_problem(node: str, where: str, cause: sshfail.Cause, detail: str, hint: str
                  ) -> Problem:
    """S1: the launcher cannot log in to `node` (`where`: its ssh target, "node3
    (root@10.0.0.3:22)"), for `cause`; `detail` what the connection said, `hint` its fix
    (sshfail.launcher_fix).
    Nobody can run a command there for us, so the fix is a person's (said, not scripted)."""
    # the launcher's ssh refusing its own configuration fails every login: no node avoids it
    return Problem((node,), cause, f"{where}: {cause}: {detail}", fix=hint,
                   item=ids.LOGIN.item, scope=Scope.LAUNCHER if cause in LAUNCHER_CAUSES else None)


def refuses_all_keys(error: str) -> bool:
    """Whether a strict_modes error makes sshd refuse every key of the user (not a key file of
    the node's own, which only stops the node logging in elsewhere)."""
    return not error.startswith("private key")


def modes_problem(node: str, verdict: ModeVerdict) -> Problem:
    """S2: sshd (StrictModes) or ssh refuses the user's files on `node`."""
    words = "; ".join(dict.fromkeys(verdict.fixes))
    fix = Fix(node, f"file modes that sshd (StrictModes) or ssh refuse: {words}",
              tuple(dict.fromkeys(verdict.commands)), ids.SSH_MODES.item)
    # a key file of the node's own stops only its own ssh to others: it matters as rank 0
    own_key_only = not any(refuses_all_keys(e) for e in verdict.errors)
    return Problem((node,), SshCause.KEY_MODES if own_key_only else SshCause.FILE_MODES,
                   f"{node}: " + f"\n{node}: ".join(verdict.errors),
                   fix=f"on {node}: {words}", fixes=(fix,) if fix.commands else (),
                   item=ids.SSH_MODES.item,
                   scope=Scope.AS_RANK0 if own_key_only else Scope.NODE)


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
        line = next((t for _, t in sorted(facts.pubkeys.items()) if t and len(t.split()) >= 2),
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
            if known is False and line:
                fixes = (Fix(b, f"authorize {a}'s key ({pub}) in {ak}",
                             (fixcmd.authorize_key_cmd(ak, line.strip().splitlines()[0]),),
                             ids.SSH_TRUST.item),)
    elif cause in (sshfail.Cause.HOSTKEY_UNKNOWN, sshfail.Cause.HOSTKEY_CHANGED):
        verb = "does not know" if cause == sshfail.Cause.HOSTKEY_UNKNOWN else "has another key for"
        if facts.host_key is not None:
            kt, blob = facts.host_key
            fix = (f"{a} {verb} {b}'s host key: copy the key the launcher verified ({kt}) into "
                   f"{a}'s {facts.known_hosts} (never ssh-keyscan: that trusts whoever answers)")
            fixes = (Fix(a, f"record {b}'s host key (as the launcher verified it) in "
                            f"{facts.known_hosts}",
                         (fixcmd.known_host_cmd(facts.known_hosts, b, kt, blob),),
                         ids.SSH_TRUST.item),)
        else:
            fix = sshfail.pair_fix(cause, a, b)
    else:
        fix = sshfail.pair_fix(cause, a, b, facts.address)
    message = (f"{a} -> {b}: {cause}\n  `ssh -o BatchMode=yes {b} true` on {a} said:\n    "
               + evidence.replace("\n", "\n    "))
    return Problem((a, b), cause, message, fix=fix, fixes=fixes, item=ids.SSH_TRUST.item)


# -- S5, S6 ----------------------------------------------------------------------------------


def pdsh_missing(site: str, launcher: bool) -> Problem:
    """S5: no pdsh where `deepspeed --hostfile` starts (the launcher, or the rank-0 node
    `site`, on the PATH of its non-interactive shell)."""
    if launcher:
        return Problem((site,), SshCause.NO_PDSH,
                       "pdsh is not installed on the launcher (deepspeed --hostfile needs it).",
                       fix="apt-get install pdsh   (or yum install pdsh pdsh-rcmd-ssh)",
                       item=ids.PDSH_INSTALLED.item, scope=Scope.LAUNCHER)
    return Problem((site,), SshCause.NO_PDSH,
                   f"{site} (rank 0, where `deepspeed --hostfile` starts) has no pdsh on the PATH "
                   f"of a non-interactive shell.", fix=f"on {site}: apt-get install pdsh",
                   item=ids.PDSH_INSTALLED.item)


def pdsh_timed_out(site: str, target: str) -> Problem:
    """S5: `site`'s pdsh run did not end within its deadline."""
    return Problem((site, target), SshCause.PDSH_TIMEOUT,
                   f"{site}: pdsh did not finish within its deadline", item=ids.PDSH.item)


def pdsh_leg_cause(lines: list[str], pdsh_errors: list[str], exit_code: int | None
                   ) -> sshfail.Cause:
    """Why pdsh's ssh leg to a host failed, from what pdsh printed for it."""
    return sshfail.classify("\n".join(lines + pdsh_errors),
                            exit_code if exit_code is not None else 255)


def pdsh_leg_problem(site: str, target: str, lines: list[str], pdsh_errors: list[str],
                     exit_code: int | None, *, launcher: bool, see: str) -> Problem:
    """S5: pdsh's ssh leg from `site` (the launcher, or the rank-0 node) to `target` failed;
    `see`: the check that tells more of the same connection."""
    cause = pdsh_leg_cause(lines, pdsh_errors, exit_code)
    said = "\n    ".join([*lines, *(f"(pdsh: {e})" for e in pdsh_errors)]
                          + ([f"(ssh exited with exit code {exit_code})"]
                             if exit_code is not None else [])) or "(nothing)"
    fix = sshfail.pair_fix(cause, "the launcher" if launcher else site, target)
    return Problem(
        (site, target), cause,
        f"{site} -> {target}: pdsh's ssh leg failed ({cause}); this is how deepspeed "
        f"starts the ranks on {target}:\n    {said}", fix=f"{fix}; see {see}", item=ids.PDSH.item,
        # from the launcher: the target, unless the launcher's own ssh is what fails
        scope=(Scope.LAUNCHER if launcher and cause in LAUNCHER_CAUSES
               else Scope.NODE if launcher else None))


def slow_login(node: str, seconds: float, limit: float) -> Problem | None:
    """S6: the launcher's login to `node` took `seconds`, more than `limit`."""
    if seconds <= limit:
        return None
    return Problem(
        (node,), SshCause.SLOW_LOGIN,
        f"{node}: SSH login took {seconds:.1f} s (limit {limit:g} s, --slow-login). "
        f"The usual causes: sshd does a reverse DNS lookup of the client that times out, "
        f"or GSSAPI is tried first.",
        fix=f"on {node}: 'UseDNS no' in /etc/ssh/sshd_config; "
            f"on the launcher: 'GSSAPIAuthentication no' in the ssh config",
        item=ids.LOGIN_TIME.item,
        facts={"login_seconds": round(seconds, 3)})
