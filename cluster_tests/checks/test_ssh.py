"""S. SSH (CHECKLIST S1-S6): the launcher reaches every node, and every node every node."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import threading
import warnings
from typing import Any

import pytest

from cluster_tests.core import pairs
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, NodeProbe, ProbeError
from cluster_tests.core.memokey import MemoKey
from cluster_tests.core.plugin import LAUNCHER
from cluster_tests.core.settings import Settings
from cluster_tests.judge import launch as launchenv
from cluster_tests.judge import ssh as sshcheck
from cluster_tests.report import fixes as fx

PAIRS_ALL: MemoKey[Any] = MemoKey("ssh", "pairs_all")
PDSH: MemoKey[Any] = MemoKey("pdsh")

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


def _pairs_from(cluster: Cluster, source: str) -> dict:
    """ssh from `source` to its targets in the selected pairs (--pairs), fanned out on `source`
    in one round trip (cached).  The first call starts every source the session's S4 tests
    need at once (bounded by --fanout), so the sources overlap instead of taking turns."""
    sources = pairs.collected_sources(cluster, ids.SSH_TRUST.name)
    if source in sources and len(sources) > 1:
        cluster.memo(PAIRS_ALL, lambda: cluster.pool.map(
            lambda s: cluster.login_error(s) is None and _probe_pairs(cluster, s), sources))
    return _probe_pairs(cluster, source)


# sshd's default MaxStartups is "10:30:100": past 10 connections that have not yet logged in, it
# drops 30% of new ones ("Connection closed by ... [preauth]"), which would read as a broken pair.
# With every source probing at once, each source starts at its own successor (a rotation) and
# has at most this many logins in flight, so no node sees more than about this many at once.
SSHD_SAFE_FANOUT = 8


def _probe_pairs(cluster: Cluster, source: str) -> dict:
    timeout = cluster.settings.timeout_connect
    targets = pairs.targets_of(cluster, source)
    names = cluster.names
    start = names.index(source) + 1 if source in names else 0
    order = {n: (i - start) % len(names) for i, n in enumerate(names)}
    targets = sorted(targets, key=lambda t: order.get(t, 0))
    fanout = min(cluster.settings.fanout, SSHD_SAFE_FANOUT)
    return cluster.probe(
        source, "ssh_pairs", targets=targets, connect_timeout=timeout,
        fanout=fanout, timeout=timeout * (1 + len(targets) // fanout) + 30,
    )


def test_ssh_trust(cluster: Cluster, pair: tuple[str, str]) -> None:
    """S4: a -> b passwordless with strict host keys, for every ordered pair (a -> a too)."""
    a, b = pair
    cluster.require(a)
    try:
        results = _pairs_from(cluster, a)
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
                            (fx.authorize_key_cmd(ak, text.strip().splitlines()[0]),), "S4"))
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


PDSH_OK = "CT_PDSH_OK"


def _pdsh(cluster: Cluster, site: str) -> tuple[int, str, str | None] | str:
    """Run `pdsh -S -w <all hosts> echo OK` from `site` as deepspeed would: (exit, output, the
    site's PDSH_RCMD_TYPE); a string where pdsh is not installed there (the failure to report)."""
    hosts = ",".join(cluster.names)
    timeout = cluster.settings.timeout_connect
    ssh_args = f"-o BatchMode=yes -o ConnectTimeout={int(timeout)}"
    # pdsh's own connect timer (-t, 10 s by default) would outlast ssh's on a black-holed node.
    pdsh = ["pdsh", "-S", "-t", str(max(1, int(timeout))), "-w", hosts, "echo", PDSH_OK]
    if site == LAUNCHER:
        if shutil.which("pdsh") is None:
            return ("pdsh is not installed on the launcher (deepspeed --hostfile needs it).\n"
                    "  fix: apt-get install pdsh   (or yum install pdsh pdsh-rcmd-ssh)")
        if cluster.settings.ssh_config:
            ssh_args += f" -F {shlex.quote(cluster.settings.ssh_config)}"
        env = dict(os.environ, PDSH_RCMD_TYPE="ssh", PDSH_SSH_ARGS_APPEND=ssh_args)
        try:
            proc = subprocess.run(pdsh, env=env, capture_output=True, text=True, errors="replace",
                                  timeout=timeout * 2 + 30, check=False)
            return proc.returncode, proc.stdout + proc.stderr, os.environ.get("PDSH_RCMD_TYPE")
        except subprocess.TimeoutExpired:
            return 124, "pdsh timed out", os.environ.get("PDSH_RCMD_TYPE")
    facts = cluster.base(site)
    if not facts["which"].get("pdsh"):
        return (f"{site} (rank 0, where `deepspeed --hostfile` starts) has no pdsh on the PATH "
                f"of a non-interactive shell.\n  fix, on {site}: apt-get install pdsh")
    res = cluster.run(site, ["env", "PDSH_RCMD_TYPE=ssh", f"PDSH_SSH_ARGS_APPEND={ssh_args}", *pdsh],
                      timeout=timeout * 2 + 30)
    return res.exit_status, res.stdout + res.stderr, facts["env"].get("PDSH_RCMD_TYPE")


def _pdsh_run(cluster: Cluster, site: str) -> tuple[int, str, str | None] | str:
    """`site`'s pdsh run, once; both launch sites' runs start together (on a dead node each
    waits out a connect timeout)."""
    for other in (LAUNCHER, cluster.names[0]):
        if other != site and cluster.cached(("pdsh", other)) is None:
            threading.Thread(target=_quiet_pdsh, args=(cluster, other), daemon=True).start()
    return cluster.memo(PDSH(site), lambda: _pdsh(cluster, site))


def _quiet_pdsh(cluster: Cluster, site: str) -> None:
    """Start `site`'s pdsh run in the memo; its own tests report the outcome."""
    try:
        cluster.memo(PDSH(site), lambda: _pdsh(cluster, site))
    except BaseException:  # noqa: BLE001 - stored in the memo, re-raised to that site's tests
        pass


def test_pdsh_installed(cluster: Cluster, launch_site: str) -> None:
    """S5: pdsh is installed where the launch starts (the launcher, the rank-0 node), and
    PDSH_RCMD_TYPE=ssh is set there."""
    if launch_site != LAUNCHER:
        cluster.require(launch_site)
    got = _pdsh_run(cluster, launch_site)
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
    got = _pdsh_run(cluster, site)
    if isinstance(got, str):
        pytest.skip(f"no pdsh on {site}: see {ids.PDSH_INSTALLED.of(site)}")
    rc, out, _ = got
    if rc == 124 and out == "pdsh timed out":
        pytest.fail(f"{site}: pdsh did not finish within its deadline", pytrace=False)
    legs = launchenv.split_pdsh_output(out, cluster.names)
    leg = legs[target]
    if PDSH_OK in leg.lines:
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
