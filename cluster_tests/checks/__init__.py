"""The checks, one module per checklist section; here what their modules share: blocking a check
whose ssh leg fails on the red that holds the leg's cause (measure/sshroot.py gathers the facts,
judge/ssh/legroot.py names the reds, core.outcome blocks on the first that runs), and H3's
verdict on the master address, which F2 reads too."""

from __future__ import annotations

from collections.abc import Iterable

from cluster_tests.core import outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster
from cluster_tests.judge.hostfile import masteraddr as ma
from cluster_tests.judge.problem import Problem, Root
from cluster_tests.judge.ssh import legroot, sshfail
from cluster_tests.measure import masterroute, sshroot


def master_addr_verdict(cluster: Cluster) -> Problem | None:
    """H3's verdict on the launch's master address: the value against the rank-0 node's
    addresses and every peer's route (H3 reports it; F2's legs that fail where it is bad are its
    consequences, blocked by H3). None where it is usable, or where rank 0 cannot be probed
    (its own red says why)."""
    owners = masterroute.rank0_addresses(cluster)
    if owners is None:
        return None
    return ma.judge(masterroute.derived(cluster), owners, masterroute.routes(cluster))


def block_on(roots: Iterable[Root]) -> None:
    """Block the calling check on the first of `roots` (a judge's, in its order) that runs in
    this session; return when none does (the check then fails with its own red)."""
    for root in roots:
        outcome.block(root.check, root.why)


def block_by_ssh_root(cluster: Cluster, a: str, b: str, cause: sshfail.Cause) -> None:
    """Block the calling check when `ssh b` on a fails (for `cause`) because of another red's
    cause (judge/ssh/legroot.py); return otherwise."""
    firewall = any(outcome.selected(ids.FIREWALL_RULES.of(n)) for n in (a, b))
    block_on(legroot.roots(sshroot.leg_facts(cluster, a, b, cause, firewall=firewall)))


def block_by_trust(cluster: Cluster, a: str, b: str) -> None:
    """Block the calling check when S4 found `ssh b` on a failing (pdsh's leg a -> b, the
    rehearsal's, DeepSpeed's own `ssh <first host>`): by the red that holds S4's cause, else by
    S4's own red; return when S4 passed or did not measure the pair."""
    leg = sshroot.trust_result(cluster, a, b)
    if leg is None or leg.cause is None:
        return
    block_by_ssh_root(cluster, a, b, leg.cause)
    block_on([legroot.trust_root(a, b, leg.cause)])
