"""S. SSH (CHECKLIST S1-S6): the launcher reaches every node, and every node every node."""

from __future__ import annotations

import warnings

import pytest

from cluster_tests.checks import block_by_ssh_root, block_by_trust, block_on
from cluster_tests.core import outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, Declared, ProbeError
from cluster_tests.core.memokey import MemoKey
from cluster_tests.core.settings import Settings
from cluster_tests.core.testids import LAUNCHER
from cluster_tests.judge.env import launchlegs
from cluster_tests.judge.ssh import legroot, sshmodes
from cluster_tests.measure import rehearsal, sshpairs, sshroot

#: per launch site: its pdsh run's output split by host, once (not once per target's item)
PDSH_LEGS: MemoKey[dict[str, launchlegs.HostOutput]] = MemoKey("pdsh", "legs")

pytestmark = pytest.mark.ssh


def node_probes(settings: Settings) -> list[Declared]:
    """The probes this section's tests ask of every node they touch (`Cluster.prefetch`)."""
    return [(sshmodes.SSHD, {})]


class SshWarning(UserWarning):
    """Works, but departs from the field guide."""


def test_login(cluster: Cluster, node: str) -> None:
    """S1: launcher -> node: port 22 answers and key login works with no prompt."""
    err = cluster.login_error(node)
    if err is not None:
        outcome.fail(sshmodes.login_problem(
            node, f"{err.target.alias} ({err.target.destination})", err.cause, err.detail,
            err.hint))


def test_ssh_modes(cluster: Cluster, node: str) -> None:
    """S2: ~/.ssh, authorized_keys and home as sshd's StrictModes wants them (and key modes)."""
    facts = cluster.base(node)
    verdict = sshmodes.node_modes(facts, sshroot.sshd_config(cluster, node))
    for w in verdict.warnings:
        warnings.warn(SshWarning(f"{node}: {w}"), stacklevel=1)
    if verdict.errors:
        outcome.fail(sshmodes.modes_problem(node, verdict))


def test_sshd_config(cluster: Cluster, node: str, record_property) -> None:
    """S3: sshd takes public keys (and root's, when we are root); password login reported."""
    facts = cluster.base(node)
    sshd = cluster.probe(node, sshmodes.SSHD)
    if not sshd.ok:
        who = f" (it reads the host keys: root only; uid {facts.uid})" if facts.uid > 0 else ""
        pytest.skip(f"{node}: cannot read sshd's effective settings "
                    f"(`sshd -T`, exit {sshd.rc}{who}): {sshd.error.strip()[:200]}")
    record_property("passwordauthentication", sshd.get("passwordauthentication", "?"))
    problem = sshmodes.sshd_config_problem(node, sshd, root=facts.uid == 0)
    if problem is not None:
        outcome.fail(problem)


def test_ssh_trust(cluster: Cluster, pair: tuple[str, str]) -> None:
    """S4: a -> b passwordless with strict host keys, for every ordered pair (a -> a too)."""
    a, b = pair
    cluster.require(a)
    try:
        results = sshpairs.pairs_from(cluster, a)
    except ProbeError as exc:
        outcome.fail(exc.problem(ids.SSH_TRUST.item))
    leg = results[b]
    if leg.cause is None:
        return
    block_by_ssh_root(cluster, a, b, leg.cause)
    outcome.fail(sshmodes.trust_problem(a, b, leg.cause, leg.evidence,
                                        sshroot.trust_facts(cluster, a, b),
                                        rank0=cluster.rank0.name))


def _from_rehearsal(cluster: Cluster, site: str) -> bool:
    """S5's legs from the rank-0 node are read from the launch rehearsal's pdsh run (E5: the
    launch's own pdsh, from that node, to the launch's hosts) when this session runs it anyway:
    one login per node fewer than a pdsh run of S5's own."""
    return site in cluster.names[:1] and rehearsal.scheduled(cluster)


def _own_runs(cluster: Cluster) -> list[str]:
    """The launch sites whose S5 legs come from a pdsh run of S5's own (started together)."""
    return [s for s in (LAUNCHER, *cluster.names[:1]) if not _from_rehearsal(cluster, s)]


def _rehearsal_output(cluster: Cluster, site: str, target: str) -> launchlegs.HostOutput | None:
    """The rehearsal's pdsh output for `target`, where it tells whether the leg reached it;
    None where S5 needs its own run (the rehearsal did not run pdsh to `target`, or the leg
    ended before the host said anything)."""
    if not _from_rehearsal(cluster, site):
        return None
    try:
        r = rehearsal.rehearse(cluster)
    except Exception:  # noqa: BLE001 - E5 reports it; S5 runs its own pdsh
        return None
    out = r.outputs.get(target) if r.site == site else None
    return out if out is not None and launchlegs.leg_reached(out) is not None else None


def test_pdsh_installed(cluster: Cluster, launch_site: str) -> None:
    """S5: pdsh is installed where the launch starts (the launcher, the rank-0 node), and
    PDSH_RCMD_TYPE=ssh is set there."""
    if launch_site != LAUNCHER:
        cluster.require(launch_site)
    installed, rcmd = sshpairs.pdsh_here(cluster, launch_site)
    if not installed:
        outcome.fail(sshmodes.pdsh_missing(launch_site, launcher=launch_site == LAUNCHER))
    if rcmd != "ssh":
        warnings.warn(SshWarning(
            f"{launch_site}: PDSH_RCMD_TYPE is {'unset' if rcmd is None else repr(rcmd)}; "
            f"deepspeed sets it itself, but pdsh commands run by hand (the field guide's checks) "
            f"fall back to rsh.\n"
            f"  fix: echo 'export PDSH_RCMD_TYPE=ssh' >> ~/.bashrc"), stacklevel=1)


def test_pdsh(cluster: Cluster, pdsh_leg: tuple[str, str]) -> None:
    """S5: `pdsh -w <all hosts>` from the launch site reaches this target: the verdict is read
    from the target's own lines of pdsh's output (from the rank-0 node, of the launch
    rehearsal's pdsh run where this session has one)."""
    site, target = pdsh_leg
    if site != LAUNCHER:
        cluster.require(site)
    leg = _rehearsal_output(cluster, site, target)
    if leg is not None:
        if launchlegs.leg_reached(leg):
            return
    else:
        got = sshpairs.pdsh_run(cluster, site, together=_own_runs(cluster))
        if isinstance(got, str):
            outcome.block(ids.PDSH_INSTALLED.of(site), f"no pdsh on {site}")
            pytest.skip(f"no pdsh on {site}: see {ids.PDSH_INSTALLED.of(site)}")
        rc, out, _ = got
        if rc == 124 and out == sshpairs.PDSH_TIMED_OUT:
            outcome.fail(sshmodes.pdsh_timed_out(site, target))
        legs = cluster.memo(PDSH_LEGS(site),
                            lambda: launchlegs.split_pdsh_output(out, cluster.names))
        leg = legs[target]
        if sshpairs.PDSH_OK in leg.lines:
            return
    _pdsh_leg_failed(cluster, site, target, leg)


def _pdsh_leg_failed(cluster: Cluster, site: str, target: str,
                     leg: launchlegs.HostOutput) -> None:
    """S5's red for a leg that did not reach `target`, or the red that holds its cause."""
    cause = sshmodes.pdsh_leg_cause(leg.lines, leg.pdsh_errors, leg.exit_code)
    err = cluster.login_error(target)
    block_on(legroot.login_roots(target, cause, err.cause if err is not None else None))
    if site != LAUNCHER:
        block_by_trust(cluster, site, target)
    see = ids.LOGIN.of(target) if site == LAUNCHER else ids.SSH_TRUST.of(site, target)
    outcome.fail(sshmodes.pdsh_leg_problem(site, target, leg.lines, leg.pdsh_errors,
                                           leg.exit_code, launcher=site == LAUNCHER, see=see))


def test_login_time(cluster: Cluster, node: str, record_property) -> None:
    """S6: SSH login is quick (slow logins are reverse DNS or GSSAPI waiting for a timeout)."""
    cluster.require(node)
    seconds = cluster.login_seconds(node) or 0.0
    record_property("login_seconds", round(seconds, 3))
    problem = sshmodes.slow_login(node, seconds, cluster.settings.ssh.slow_login)
    if problem is not None:
        outcome.fail(problem)
