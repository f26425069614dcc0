"""What tells whether an ssh leg fails because of another red's cause (judge/ssh/legroot.py
judges it), and what S4's fix of a failing leg needs: facts only, gathered from what the run
has measured (the logins, the port matrix, the nodes' base facts and `sshd -T`)."""

from __future__ import annotations

from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, ProbeError
from cluster_tests.core.memokey import base_key
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.common.facts import SshLeg
from cluster_tests.judge.ssh import legroot, sshfail, sshmodes
from cluster_tests.measure import ports, sshpairs


def sshd_config(cluster: Cluster, node: str) -> sshmodes.SshdFacts:
    """Effective sshd settings (`sshd -T`, needs root); none when they cannot be read."""
    try:
        return cluster.probe(node, sshmodes.SSHD)
    except ProbeError:
        return sshmodes.SshdFacts(-1, {})


def _keys(cluster: Cluster, node: str) -> tuple[BaseFacts, sshmodes.SshdFacts] | None:
    """A node's base facts and sshd settings (None: it cannot be logged in to or probed)."""
    if cluster.base_or_none(node) is None:
        return None
    return cluster.base(node), sshd_config(cluster, node)


def leg_facts(cluster: Cluster, a: str, b: str, cause: sshfail.Cause, *, firewall: bool
              ) -> legroot.LegFacts:
    """What the run knows of `ssh b` on a failing for `cause`: the launcher's login to b; where
    `firewall` (F4 runs for a or b) and a node's own firewall may explain it, the port matrix
    (measured here if it is not yet) and a's and b's rules; a's and b's base facts as the run
    has them; where a key was refused, a's and b's base facts and sshd settings."""
    err = cluster.login_error(b)
    login = err.cause if err is not None else None
    matrix: ports.PortMatrix | None = None
    rules: dict[str, list[str] | None] = {}
    if firewall and legroot.firewall_may_explain(cause, login):
        ports.port_matrix(cluster)
        matrix, rules = ports.firewall_facts(cluster, a, b)
    names_a, names_b = cluster.cached(base_key(a)), cluster.cached(base_key(b))
    keys_a = keys_b = None
    if legroot.keys_may_explain(cause):
        keys_a = _keys(cluster, a)
        keys_b = _keys(cluster, b)
    return legroot.LegFacts(a, b, cause, login, matrix, rules, names_a, names_b, keys_a, keys_b)


def trust_result(cluster: Cluster, a: str, b: str) -> SshLeg | None:
    """S4's `ssh b` on a, where this run measures that pair (None otherwise)."""
    if a not in pairs_mod.collected_sources(cluster, ids.SSH_TRUST.name):
        return None
    try:
        return sshpairs.pairs_from(cluster, a).get(b)
    except ProbeError:
        return None


def trust_facts(cluster: Cluster, a: str, b: str) -> sshmodes.TrustFacts:
    """What S4's fix of a -> b needs to know, from the facts the run has."""
    fa, fb = cluster.base_or_none(a), cluster.base_or_none(b)
    key = cluster.host_key(b) if fb is not None else None
    return sshmodes.TrustFacts(
        pubkeys=dict(fa.ssh.pubkeys) if fa is not None else {},
        authorized_keys=fb.ssh.chain[0].path if fb is not None and fb.ssh.chain else None,
        authorized_keys_text=fb.ssh.authorized_keys_text if fb is not None else None,
        known_hosts=f"{(fa.home if fa is not None else '') or '~'}/.ssh/known_hosts",
        host_key=key,
        address=cluster.address(b),
    )
