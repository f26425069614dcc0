"""H. The hostfile (CHECKLIST H1-H5): DeepSpeed will take it, and it describes this cluster."""

from __future__ import annotations

import warnings

import pytest

from cluster_tests.core import nodetable, outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, Declared
from cluster_tests.core.memokey import base_key
from cluster_tests.core.nodetable import NodeColumn
from cluster_tests.core.settings import Settings
from cluster_tests.judge.accelerator.inventory import ACCELERATORS
from cluster_tests.judge.common import fixcmd
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.common.netfacts import all_ips, is_ip, is_loopback, parse_interfaces
from cluster_tests.judge.hostfile import hostparse as hf
from cluster_tests.judge.hostfile import masteraddr as ma
from cluster_tests.judge.hostfile import resourcefilter as rf
from cluster_tests.judge.problem import Problem
from cluster_tests.judge.ssh import sshfail, sshnames
from cluster_tests.measure import accel, masterroute, sshroot

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
    problems = [str(f) for f in hostfile.errors]
    if not hostfile.deepspeed_accepts and hostfile.deepspeed_error:
        problems.insert(0, f"{hostfile.path}: deepspeed --hostfile would stop with: "
                           f"{hostfile.deepspeed_error}")
    if problems:
        pytest.fail("the hostfile will not launch as it is:\n" + "\n".join(problems), pytrace=False)


def test_hostname_matches(cluster: Cluster, node: str, record_property) -> None:
    """H2: the hostfile's name for a node leads to that node: an IP line is an address of the
    node; a name line is its hostname, or (FQDNs, Kubernetes' `<pod>.<service>` names, aliases)
    resolves on the node to one of its own addresses.  How every other node resolves it is N1's
    check (test_resolves[a->node]), which names the node whose lookup is wrong."""
    facts = cluster.base(node)
    ips = all_ips(parse_interfaces(facts.ip_link, facts.ip_addr))
    if is_ip(node):
        if node not in ips:
            pytest.fail(
                f"{node}: the hostfile names address {node}, but the node that answers there has "
                f"{', '.join(sorted(ips)) or 'no addresses'} (hostname {facts.hostname}).\n"
                f"  fix: write one of its addresses in the hostfile line "
                f"{cluster.node(node).lineno}",
                pytrace=False,
            )
        return
    actual = facts.hostname
    if actual == node:
        record_property("name_is", "hostname")
        return
    addrs = list(facts.resolved(node).addrs)
    mine = [a for a in addrs if a in ips]
    if addrs and len(mine) == len(addrs):
        first_label = node.split(".", 1)[0]
        record_property("name_is", "fqdn" if actual == first_label else "alias")
        if actual != first_label:
            warnings.warn(HostfileWarning(
                f"{node}: `hostname` there prints '{actual}'; the name resolves to the node itself "
                f"({', '.join(addrs)}), so the launch works, but the field guide asks for the "
                f"hostname (line {cluster.node(node).lineno})"), stacklevel=1)
        return
    own = sorted(a for a in ips if not is_loopback(a))
    if not addrs:
        _name_for_ssh(cluster, node, facts, ips, own, record_property)
        return
    where = (f"resolves there to {', '.join(addrs)}, not one of its own addresses "
             f"({', '.join(sorted(ips)) or 'none'})")
    outcome.fail(Problem(
        (node,), "the name leads elsewhere",
        f"{node}: the hostfile says '{node}', `hostname` on that node prints '{actual}', and "
        f"'{node}' {where}: the name leads elsewhere.",
        fix=f"on {node}: hostnamectl set-hostname {node} and add "
            f"'{own[0] if own else '<its address>'} {node}' to /etc/hosts (or write '{actual}' in "
            f"the hostfile, line {cluster.node(node).lineno})",
        fixes=tuple(fixcmd.hostname_fix(node, cluster.cached(base_key(node)))
                    if cluster.login_error(node) is None else ()), item="H2"))


def _name_for_ssh(cluster: Cluster, node: str, facts: BaseFacts, ips: set[str], own: list[str],
                  record_property) -> None:
    """H2 for a hostfile name that the node itself cannot resolve: a name only ssh configs know
    (`Host gpu-a` / `HostName 10.1.2.3`) is as good as any for the launch (pdsh and DeepSpeed's
    own ssh run on the rank-0 node; the names are keys otherwise), so it leads to the node where
    the rank-0 node's ssh takes it there (green, the mapping shown in the node table); where it
    takes it nowhere or elsewhere, N1's red on that pair holds the cause, and the fix is an ssh
    config block or a hosts line, never the node's hostname."""
    rank0 = cluster.rank0.name
    view = facts if node == rank0 else cluster.base_or_none(rank0) or facts
    p = sshnames.placement(view, node)
    if p.placed and set(p.addrs) <= ips:
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
    target = cluster.address(node)
    outcome.fail(Problem(
        (node,), "the name leads nowhere" if not p.placed else "the name leads elsewhere",
        f"{node}: the hostfile says '{node}', which {node} itself cannot resolve; on {rank0} "
        f"(rank 0, where pdsh and DeepSpeed's ssh run) it is {p.describe()}; the launcher "
        f"reaches it through "
        + (f"its ssh config (HostName {target})" if target != node else "its resolver"),
        fix=(sshnames.alias_fix(rank0, node, own[0] if own else None) if p.placed else
             sshnames.place_fix(rank0, node, own[0] if own else None, alias=sshnames.known_by_ssh(
                 [cluster.cached(base_key(v)) for v in cluster.names[:9] if v != rank0], node,
                 target))),
        item="H2"))


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
    rank0 = rank0_node
    check = masterroute.ssh_check(cluster)
    stop = ma.ssh_check_problem(check, str(cluster.settings.hostfile)) if check else None
    if check is not None and stop is not None:
        record_property("ssh_check", check.command)
        if check.exit_status == 255:
            cause = sshfail.classify(check.said, 255)
            sshroot.block_by_root(cluster, check.site, check.first_host, cause)
            sshroot.block_by_trust(cluster, check.site, check.first_host)
        pytest.fail(f"{rank0}: {stop}", pytrace=False)
    cluster.base(rank0)
    d = masterroute.derived(cluster)
    record_property("master_addr", d.value or "")
    record_property("master_addr_from", d.how if d.how == "given" else d.command)
    found = masterroute.verdict(cluster)
    if found and d.how == "derived" and d.value is None and d.exit_status == 255:
        # DeepSpeed's own `ssh <first host>` failed: the same leg as S4 rank 0 -> first host
        cause = sshfail.classify(d.stderr, 255)
        sshroot.block_by_root(cluster, d.site, d.first_host, cause)
        sshroot.block_by_trust(cluster, d.site, d.first_host)
    if found:
        pytest.fail(f"{rank0}: " + "\n".join(found), pytrace=False)


def test_slots_fit_accelerators(cluster: Cluster, node: str) -> None:
    """H4: `slots` is at most the number of accelerators visible on the node."""
    cluster.require(node)
    inventory = accel.inventory(cluster, node)
    slots = cluster.node(node).slots
    if slots > inventory.count:
        pytest.fail(
            f"{node}: the hostfile gives slots={slots} but the node has {inventory.describe()}; "
            f"DeepSpeed would start {slots} ranks there.\n"
            f"  fix: write '{node} slots={inventory.count}' "
            f"(hostfile line {cluster.node(node).lineno})",
            pytrace=False,
        )


def test_include_exclude(cluster: Cluster, hostfile: hf.HostfileParse) -> None:
    """H5: a given --include/--exclude names only hostfile hosts and slot indices that exist."""
    s = cluster.settings
    if not s.include and not s.exclude:
        pytest.skip("no --launch-include / --launch-exclude given")
    try:
        active = rf.parse_resource_filter(hostfile.resources, include=s.include, exclude=s.exclude)
    except rf.ResourceFilterError as exc:
        pytest.fail(f"the launch's resource filter will be refused by DeepSpeed: {exc}",
                    pytrace=False)
    if not active:
        pytest.fail("the include/exclude filters leave no slot to launch on", pytrace=False)
