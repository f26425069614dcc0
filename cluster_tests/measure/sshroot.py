"""Where an ssh leg's failure comes from, when it is a cause another red of the run holds.

`ssh b` from node a (S4, pdsh's legs, DeepSpeed's own `ssh <first host> hostname -I`) fails for
a cause that is b's alone (down, refusing every key, a changed host key: S1's red), a's or b's
own firewall (F4), a resolving b to another machine or not at all (N1), a's unusable key or
b's file modes (S2), b's sshd taking no keys (S3). :func:`block_by_root` blocks the calling
check on that red (``core.outcome.block``) and returns when there is none.
"""

from __future__ import annotations

from cluster_tests.core import outcome
from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, ProbeError
from cluster_tests.core.memokey import base_key
from cluster_tests.judge.common.facts import SshLeg
from cluster_tests.judge.ssh import sshfail, sshmodes, sshnames
from cluster_tests.measure import ports, sshpairs


def sshd_config(cluster: Cluster, node: str) -> sshmodes.SshdFacts:
    """Effective sshd settings (`sshd -T`, needs root); none when they cannot be read."""
    try:
        return cluster.probe(node, sshmodes.SSHD)
    except ProbeError:
        return sshmodes.SshdFacts(-1, {})


def node_modes(cluster: Cluster, node: str) -> sshmodes.ModeVerdict:
    """S2's verdict on the node's ssh files (StrictModes as its sshd has it)."""
    facts = cluster.base(node)
    strict = sshd_config(cluster, node).get("strictmodes") != "no"
    return sshmodes.strict_modes(facts.ssh, facts.uid, facts.user, strict=strict)


def block_by_root(cluster: Cluster, a: str, b: str, cause: sshfail.Cause) -> None:
    """Block the calling check when `ssh b` on a fails (for `cause`) because of another red's
    cause (see the module docstring); return otherwise."""
    err = cluster.login_error(b)
    if err is not None and sshfail.same_node_cause(err.cause, cause):
        outcome.block(ids.LOGIN.of(b), sshfail.node_state(b, err.cause))
    if err is None and cause in sshfail.NODE_DOWN and any(
            outcome.selected(ids.FIREWALL_RULES.of(n)) for n in (a, b)):
        # b answers the launcher but not a: a node's own firewall? (the port matrix says)
        ports.port_matrix(cluster)
        node = ports.firewall_root(cluster, a, b)
        if node is not None:
            outcome.block(ids.FIREWALL_RULES.of(node), f"{node}'s own firewall (INPUT) drops "
                                                       f"{a} -> {b}")
    if cause == sshfail.Cause.DNS:
        outcome.block(ids.RESOLVES.of(a, b), f"{a} cannot resolve {b}")
    else:
        # where a's ssh sends b (its ssh config's HostName, else its resolver): elsewhere?
        wrong = sshnames.misplaced(cluster.cached(base_key(a)), cluster.cached(base_key(b)), b)
        if wrong is not None:
            outcome.block(ids.RESOLVES.of(a, b), f"{a} resolves {b} to {', '.join(wrong[0])}, "
                                                 f"which is not one of {b}'s addresses")
    if cause not in sshfail.NODE_REFUSES_KEYS:
        return
    if cluster.base_or_none(a) is not None and any(
            e.startswith("private key") for e in node_modes(cluster, a).errors):
        outcome.block(ids.SSH_MODES.of(a), f"{a} cannot use its own key (file modes)")
    if cluster.base_or_none(b) is None:
        return
    if sshd_config(cluster, b).get("pubkeyauthentication") == "no":
        outcome.block(ids.SSHD_CONFIG.of(b), f"sshd on {b} has PubkeyAuthentication no")
    if any(sshmodes.refuses_all_keys(e) for e in node_modes(cluster, b).errors):
        outcome.block(ids.SSH_MODES.of(b), f"sshd on {b} refuses every key because of file modes")


def trust_result(cluster: Cluster, a: str, b: str) -> SshLeg | None:
    """S4's `ssh b` on a, where this run measures that pair (None otherwise)."""
    if a not in pairs_mod.collected_sources(cluster, ids.SSH_TRUST.name):
        return None
    try:
        return sshpairs.pairs_from(cluster, a).get(b)
    except ProbeError:
        return None


def block_by_trust(cluster: Cluster, a: str, b: str) -> None:
    """Block the calling check when S4 found `ssh b` on a failing (pdsh's leg a -> b, the
    rehearsal's, DeepSpeed's own `ssh <first host>`): by the red that holds S4's cause, else by
    S4's own red; return when S4 passed or did not measure the pair."""
    leg = trust_result(cluster, a, b)
    if leg is None or leg.cause is None:
        return
    block_by_root(cluster, a, b, leg.cause)
    outcome.block(ids.SSH_TRUST.of(a, b), f"{a} -> {b}: {leg.cause.value}")
