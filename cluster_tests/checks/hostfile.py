"""H. The hostfile (CHECKLIST H1-H5): DeepSpeed will take it, and it describes this cluster.
Verdicts: judge/hostfile/ (hostparse: H1, hostfit: H2 and H4, masteraddr: H3, resourcefilter:
H5); the master address as the launch derives it: measure/masterroute.py."""

from __future__ import annotations

import warnings

import pytest

from cluster_tests.checks import block_by_ssh_root, block_by_trust, master_addr_verdict
from cluster_tests.core import nodetable, outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, Declared
from cluster_tests.core.memokey import base_key
from cluster_tests.core.nodetable import NodeColumn
from cluster_tests.core.settings import Settings
from cluster_tests.judge.accelerator.inventory import ACCELERATORS
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.hostfile import hostfit
from cluster_tests.judge.hostfile import hostparse as hf
from cluster_tests.judge.hostfile import masteraddr as ma
from cluster_tests.judge.hostfile import resourcefilter as rf
from cluster_tests.judge.ssh import sshfail, sshnames
from cluster_tests.measure import accel, masterroute

pytestmark = pytest.mark.hostfile


def node_probes(settings: Settings) -> list[Declared]:
    """The probes this section's tests ask of every node they touch (`Cluster.prefetch`)."""
    return [(ACCELERATORS, {})]


class HostfileWarning(UserWarning):
    """A hostfile line that DeepSpeed tolerates but the field guide calls a trap."""


def test_hostfile_syntax(hostfile: hf.HostfileParse) -> None:
    """H1: every line parses as DeepSpeed 0.19 parses it; tolerated traps are warnings."""
    for finding in hostfile.warnings:
        warnings.warn(HostfileWarning(str(finding)), stacklevel=1)
    problem = hf.judge_syntax(hostfile)
    if problem is not None:
        outcome.fail(problem)


def test_hostname_matches(cluster: Cluster, node: str, record_property) -> None:
    """H2: the hostfile's name for a node leads to that node: an IP line is an address of the
    node; a name line is its hostname, or (FQDNs, Kubernetes' `<pod>.<service>` names, aliases)
    resolves on the node to one of its own addresses.  How every other node resolves it is N1's
    check (test_resolves[a->node]), which names the node whose lookup is wrong."""
    facts = cluster.base(node)
    verdict = hostfit.judge_name(node, facts, cluster.node(node).lineno,
                                 fixable=cluster.login_error(node) is None)
    if verdict.name_is:
        record_property("name_is", verdict.name_is)
    if verdict.warning:
        warnings.warn(HostfileWarning(verdict.warning), stacklevel=1)
    if verdict.problem is not None:
        outcome.fail(verdict.problem)
    if verdict.unresolved:
        _name_for_ssh(cluster, node, facts, record_property)


def _name_for_ssh(cluster: Cluster, node: str, facts: BaseFacts, record_property) -> None:
    """H2 for a hostfile name that the node itself cannot resolve: it leads to the node where
    the rank-0 node's ssh takes it there (green, the mapping shown in the node table); where it
    takes it nowhere or elsewhere, N1's red on that pair holds the cause (hostfit.judge_ssh_name
    says why and the fix)."""
    rank0 = cluster.rank0.name
    view = facts if node == rank0 else cluster.base_or_none(rank0) or facts
    p = sshnames.placement(view, node)
    target = cluster.address(node)
    problem = hostfit.judge_ssh_name(
        node, rank0, p, hostfit.node_ips(facts), target,
        alias=sshnames.known_by_ssh([cluster.cached(base_key(v)) for v in cluster.names[:9]
                                     if v != rank0], node, target))
    if problem is None:
        record_property("name_is", "ssh alias" if p.by == sshnames.BY_SSH else "alias")
        if p.by == sshnames.BY_SSH:
            launcher = cluster.launcher_ssh_view(node)
            record_property("ssh_alias", f"{node} -> HostName {p.hostname} (ssh config on {rank0}"
                                         + (f"; the launcher's: HostName {launcher['hostname']}"
                                            if launcher.get("hostname") else "") + ")")
        return
    outcome.block(ids.RESOLVES.of(rank0, node),
                  f"{rank0} (rank 0, whose pdsh reaches every host) "
                  + (f"sends {node} to {', '.join(p.addrs)}, not {node}" if p.placed
                     else f"cannot place {node}"))
    outcome.fail(problem)


def _alias_column(cluster: Cluster, node: str) -> str | None:
    """The node table's "ssh alias" column: the HostName the rank-0 node's ssh config gives a
    hostfile name (from the facts in the memo; nothing where the name is not an alias)."""
    if not cluster.nodes:
        return None
    p = sshnames.placement(cluster.cached(base_key(cluster.rank0.name)), node)
    return f"HostName {p.hostname}" if p.by == sshnames.BY_SSH else None


nodetable.declare(NodeColumn("ssh alias", _alias_column, rank=2))


def test_master_addr(cluster: Cluster, rank0_node: str, record_property) -> None:
    """H3: the --master_addr of the launch, as DeepSpeed derives it (the first word of `ssh
    <first host> hostname -I`, run on the rank-0 node through the user's ssh there) or as given,
    is an address of the rank-0 node that every peer routes to (the id names rank 0: `-k node1`
    reruns it)."""
    check = masterroute.ssh_check(cluster)
    stop = ma.ssh_check_problem(check, str(cluster.settings.hostfile)) if check else None
    if check is not None and stop is not None:
        record_property("ssh_check", check.command)
        if check.exit_status == 255:
            _block_by_ssh(cluster, check.site, check.first_host, check.said)
        outcome.fail(stop)
    cluster.base(rank0_node)
    d = masterroute.derived(cluster)
    record_property("master_addr", d.value or "")
    record_property("master_addr_from", d.how if d.how == "given" else d.command)
    problem = master_addr_verdict(cluster)
    if problem is None:
        return
    if d.how == "derived" and d.value is None and d.exit_status == 255:
        # DeepSpeed's own `ssh <first host>` failed: the same leg as S4 rank 0 -> first host
        _block_by_ssh(cluster, d.site, d.first_host, d.stderr)
    outcome.fail(problem)


def _block_by_ssh(cluster: Cluster, site: str, first_host: str, said: str) -> None:
    """Blocked where DeepSpeed's ssh from `site` to `first_host` fails (exit 255) for a cause
    S's reds already hold (the node's sshd, the trust of that leg)."""
    cause = sshfail.classify(said, 255)
    block_by_ssh_root(cluster, site, first_host, cause)
    block_by_trust(cluster, site, first_host)


def test_slots_fit_accelerators(cluster: Cluster, node: str) -> None:
    """H4: `slots` is at most the number of accelerators visible on the node."""
    cluster.require(node)
    inventory = accel.inventory(cluster, node)
    entry = cluster.node(node)
    problem = hostfit.judge_slots(node, entry.slots, inventory.count, inventory.describe(),
                                  entry.lineno)
    if problem is not None:
        outcome.fail(problem)


def test_include_exclude(cluster: Cluster, hostfile: hf.HostfileParse) -> None:
    """H5: a given --include/--exclude names only hostfile hosts and slot indices that exist."""
    s = cluster.settings
    if not s.include and not s.exclude:
        pytest.skip("no --launch-include / --launch-exclude given")
    problem = rf.judge_filter(hostfile.resources, include=s.include, exclude=s.exclude)
    if problem is not None:
        outcome.fail(problem)
