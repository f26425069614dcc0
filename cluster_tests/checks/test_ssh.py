"""S. SSH (CHECKLIST S1-S6): the launcher reaches every node, and every node every node."""

from __future__ import annotations

import warnings

import pytest

from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, NodeProbe, ProbeError
from cluster_tests.core.plugin import LAUNCHER
from cluster_tests.core.settings import Settings
from cluster_tests.judge import fixcmd
from cluster_tests.judge import launch as launchenv
from cluster_tests.judge import ssh as sshcheck
from cluster_tests.measure import sshpairs
from cluster_tests.report import fixes as fx

pytestmark = pytest.mark.ssh


def node_probes(settings: Settings) -> list[NodeProbe]:
    """The probes this section's tests ask of every node they touch (`Cluster.prefetch`)."""
    return [("probe.py", "sshd", {})]


class SshWarning(UserWarning):
    """Works, but departs from the field guide."""


def test_login(cluster: Cluster, node: str) -> None:
    """S1: launcher -> node: port 22 answers and key login works with no prompt."""
    err = cluster.login_error(node)
    if err is not None:
        pytest.fail(err.describe(), pytrace=False)


def test_ssh_modes(cluster: Cluster, node: str) -> None:
    """S2: ~/.ssh, authorized_keys and home as sshd's StrictModes wants them (and key modes)."""
    facts = cluster.base(node)
    sshd = _sshd_config(cluster, node)
    strict = sshd.get("strictmodes", "yes") != "no"
    verdict = sshcheck.strict_modes(facts["ssh"], facts["uid"], facts["user"], strict=strict)
    for w in verdict.warnings:
        warnings.warn(SshWarning(f"{node}: {w}"), stacklevel=1)
    if verdict.errors:
        fx.offer(_modes_fix(node, verdict))
        pytest.fail(
            f"{node}: " + f"\n{node}: ".join(verdict.errors)
            + f"\n  fix, on {node}: " + "; ".join(dict.fromkeys(verdict.fixes)),
            pytrace=False,
        )


def _modes_fix(node: str, verdict: sshcheck.ModeVerdict) -> fx.Fix:
    """S2's fix for fixes.sh (S4 offers the same one for the pairs it breaks: one block)."""
    return fx.Fix(node, "file modes that sshd (StrictModes) or ssh refuse",
                  tuple(dict.fromkeys(verdict.commands)), "S2")


def _node_modes(cluster: Cluster, node: str) -> sshcheck.ModeVerdict:
    facts = cluster.base(node)
    strict = _sshd_config(cluster, node).get("strictmodes", "yes") != "no"
    return sshcheck.strict_modes(facts["ssh"], facts["uid"], facts["user"], strict=strict)


def _sshd_config(cluster: Cluster, node: str) -> dict[str, str]:
    """Effective sshd settings (`sshd -T`, needs root); {} when they cannot be read."""
    try:
        res = cluster.probe(node, "sshd")
    except ProbeError:
        return {}
    return sshcheck.parse_sshd_T(res["out"]) if res.get("rc") == 0 else {}


def test_sshd_config(cluster: Cluster, node: str, record_property) -> None:
    """S3: sshd takes public keys (and root's, when we are root); password login reported."""
    facts = cluster.base(node)
    res = cluster.probe(node, "sshd")
    if res.get("rc") != 0:
        pytest.skip(f"{node}: cannot read sshd's effective settings (`sshd -T`, exit {res.get('rc')}): "
                    f"{(res.get('err') or '').strip()[:200]}")
    cfg = sshcheck.parse_sshd_T(res["out"])
    record_property("passwordauthentication", cfg.get("passwordauthentication", "?"))
    problems = []
    if cfg.get("pubkeyauthentication", "yes") != "yes":
        problems.append("PubkeyAuthentication is 'no': sshd refuses every key, so pdsh cannot log in\n"
                        f"  fix, on {node}: set 'PubkeyAuthentication yes' in /etc/ssh/sshd_config; systemctl reload ssh")
    if facts["uid"] == 0 and cfg.get("permitrootlogin", "prohibit-password") not in (
        "yes", "prohibit-password", "without-password"
    ):
        problems.append(f"PermitRootLogin is '{cfg.get('permitrootlogin')}': root cannot log in with a key\n"
                        f"  fix, on {node}: set 'PermitRootLogin prohibit-password'; systemctl reload ssh")
    if problems:
        pytest.fail(f"{node}: " + f"\n{node}: ".join(problems), pytrace=False)


def test_ssh_trust(cluster: Cluster, pair: tuple[str, str]) -> None:
    """S4: a -> b passwordless with strict host keys, for every ordered pair (a -> a too)."""
    a, b = pair
    cluster.require(a)
    try:
        results = sshpairs.pairs_from(cluster, a)
    except ProbeError as exc:
        pytest.fail(str(exc), pytrace=False)
    res = results[b]
    if res["rc"] == 0:
        return
    cause = sshcheck.classify_ssh_failure(res["err"], res["rc"])
    evidence = (res["err"].strip() or f"exit {res['rc']}")[-800:]
    fix = _pair_fix(cluster, a, b, cause)
    pytest.fail(
        f"{a} -> {b}: {cause}\n  `ssh -o BatchMode=yes {b} true` on {a} said:\n    "
        + evidence.replace("\n", "\n    ")
        + f"\n  fix: {fix}",
        pytrace=False,
    )


def _pair_fix(cluster: Cluster, a: str, b: str, cause: str) -> str:
    wrong = fx.misresolved(cluster, a, b) if cause != "name not resolved" else None
    if wrong is not None:  # a reaches another machine under b's name
        fx.offer(fx.hosts_fix(cluster, a, b, wrong[1], wrong[0]))
        return (f"{a} resolves {b} to {', '.join(wrong[0])}, which is not one of {b}'s addresses: "
                f"on {a}: make the /etc/hosts line read '{wrong[1]} {b}' (see "
                f"{ids.NAME_CONSISTENT.of(b)})")
    if cause == "public key refused":
        if cluster.login_error(b) is not None:
            return f"{b} refuses logins from the launcher too: see {ids.LOGIN.of(b)}"
        fa, fb = cluster.base(a), cluster.base(b)
        own = _node_modes(cluster, a)
        if any(e.startswith("private key") for e in own.errors):
            fx.offer(_modes_fix(a, own))
            return f"{a} cannot use its own key (file modes): on {a}: " + "; ".join(own.fixes)
        sshd = _sshd_config(cluster, b)
        if sshd.get("pubkeyauthentication") == "no":
            return f"sshd on {b} has PubkeyAuthentication no: see {ids.SSHD_CONFIG.of(b)}"
        verdict = sshcheck.strict_modes(fb["ssh"], fb["uid"], fb["user"], sshd.get("strictmodes", "yes") != "no")
        if any("authorized_keys" in e or ".ssh" in e or "home" in e or "owned" in e for e in verdict.errors):
            fx.offer(_modes_fix(b, verdict))
            return f"sshd on {b} refuses all keys because of file modes: on {b}: " + "; ".join(verdict.fixes)
        keys = sshcheck.public_keys(fa["ssh"]["pubkeys"])
        pub = next(iter(sorted(fa["ssh"]["pubkeys"])), "id_ed25519.pub")
        ak = fb["ssh"]["chain"][0]["path"]
        known = sshcheck.key_authorized(keys, fb["ssh"]["authorized_keys_text"])
        if not keys:
            return f"{a} has no key pair: on {a}: ssh-keygen -t ed25519 -N '' -f ~/.ssh/id_ed25519; then add it to {ak} on {b}"
        text = next((t for _, t in sorted(fa["ssh"]["pubkeys"].items()) if t and len(t.split()) >= 2), None)
        if known is False and text:
            fx.offer(fx.Fix(b, f"authorize {a}'s key ({pub}) in {ak}",
                            (fixcmd.authorize_key_cmd(ak, text.strip().splitlines()[0]),), "S4"))
        prefix = f"{a}'s key (~/.ssh/{pub}) is not in {ak} on {b}: " if known is False else ""
        return (
            f"{prefix}append {a}'s public key to {b}'s authorized_keys: "
            f"ssh {a} cat ~/.ssh/{pub} | ssh {b} 'cat >> {ak}'"
        )
    if cause == "public keys not accepted":
        return (f"sshd on {b} accepts no public keys (PubkeyAuthentication no): on {b}: set "
                f"'PubkeyAuthentication yes' in /etc/ssh/sshd_config; systemctl reload ssh")
    if cause == "host key unknown":
        return f"on {a}: ssh-keyscan -H {b} >> ~/.ssh/known_hosts   (then verify the fingerprint)"
    if cause == "host key changed":
        return (f"if {b} was reinstalled, on {a}: ssh-keygen -R {b}; ssh-keyscan -H {b} >> ~/.ssh/known_hosts; "
                f"otherwise find out who answers as {b}")
    if cause == "name not resolved":
        addr = cluster.pool.targets[b].hostname
        return f"on {a}: add '{addr} {b}' to /etc/hosts (or fix DNS): see {ids.RESOLVES.of(a, b)}"
    if cause == "connection refused":
        return f"sshd is not listening on {b}: on {b}: systemctl start ssh"
    if cause in ("connection timed out", "network unreachable"):
        return f"packets from {a} to {b}:22 are dropped: check the firewall on {b} (iptables -S INPUT) and routing on {a}"
    return f"on {a}: ssh -v {b} true"


def test_pdsh_installed(cluster: Cluster, launch_site: str) -> None:
    """S5: pdsh is installed where the launch starts (the launcher, the rank-0 node), and
    PDSH_RCMD_TYPE=ssh is set there."""
    if launch_site != LAUNCHER:
        cluster.require(launch_site)
    got = sshpairs.pdsh_run(cluster, launch_site)
    if isinstance(got, str):
        pytest.fail(got, pytrace=False)
    rcmd = got[2]
    if rcmd != "ssh":
        warnings.warn(SshWarning(
            f"{launch_site}: PDSH_RCMD_TYPE is {'unset' if rcmd is None else repr(rcmd)}; deepspeed sets it "
            f"itself, but pdsh commands run by hand (the field guide's checks) fall back to rsh.\n"
            f"  fix: echo 'export PDSH_RCMD_TYPE=ssh' >> ~/.bashrc"), stacklevel=1)


def test_pdsh(cluster: Cluster, pdsh_leg: tuple[str, str]) -> None:
    """S5: `pdsh -w <all hosts>` from the launch site reaches this target: the verdict is read
    from the target's own lines of pdsh's output."""
    site, target = pdsh_leg
    if site != LAUNCHER:
        cluster.require(site)
    got = sshpairs.pdsh_run(cluster, site)
    if isinstance(got, str):
        pytest.skip(f"no pdsh on {site}: see {ids.PDSH_INSTALLED.of(site)}")
    rc, out, _ = got
    if rc == 124 and out == "pdsh timed out":
        pytest.fail(f"{site}: pdsh did not finish within its deadline", pytrace=False)
    legs = launchenv.split_pdsh_output(out, cluster.names)
    leg = legs[target]
    if sshpairs.PDSH_OK in leg.lines:
        return
    said = "\n    ".join([*leg.lines, *(f"(pdsh: {e})" for e in leg.pdsh_errors)]
                          + ([f"(ssh exited with exit code {leg.exit_code})"]
                             if leg.exit_code is not None else [])) or "(nothing)"
    cause = sshcheck.classify_ssh_failure("\n".join(leg.lines + leg.pdsh_errors),
                                          leg.exit_code if leg.exit_code is not None else 255)
    see = ids.LOGIN.of(target) if site == LAUNCHER else ids.SSH_TRUST.of(site, target)
    pytest.fail(f"{site} -> {target}: pdsh's ssh leg failed ({cause}); this is how deepspeed "
                f"starts the ranks on {target}:\n    {said}\n  fix: see {see}", pytrace=False)


def test_login_time(cluster: Cluster, node: str, record_property) -> None:
    """S6: SSH login is quick (slow logins are reverse DNS or GSSAPI waiting for a timeout)."""
    cluster.require(node)
    seconds = cluster.pool.connection(node).login_seconds or 0.0
    record_property("login_seconds", round(seconds, 3))
    limit = cluster.settings.ssh.slow_login
    if seconds > limit:
        pytest.fail(
            f"{node}: SSH login took {seconds:.1f} s (limit {limit:g} s, --slow-login). The usual causes: "
            f"sshd does a reverse DNS lookup of the client that times out, or GSSAPI is tried first.\n"
            f"  fix, on {node}: 'UseDNS no' in /etc/ssh/sshd_config; on the launcher: 'GSSAPIAuthentication no' "
            f"in the ssh config",
            pytrace=False,
        )
