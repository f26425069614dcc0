"""H. The hostfile (CHECKLIST H1-H5): DeepSpeed will take it, and it describes this cluster."""

from __future__ import annotations

import warnings

import pytest

from cluster_tests import accel
from cluster_tests import hostfile as hf
from cluster_tests.cluster import Cluster
from cluster_tests.netfacts import all_ips, is_ip, is_loopback, parse_interfaces

pytestmark = pytest.mark.hostfile


class HostfileWarning(UserWarning):
    """A hostfile line that DeepSpeed tolerates but the field guide calls a trap."""


def test_hostfile_syntax(hostfile: hf.HostfileParse) -> None:
    """H1: every line parses as DeepSpeed 0.19 parses it; tolerated traps are warnings."""
    for finding in hostfile.warnings:
        warnings.warn(HostfileWarning(str(finding)), stacklevel=1)
    problems = [str(f) for f in hostfile.errors]
    if not hostfile.deepspeed_accepts and hostfile.deepspeed_error:
        problems.insert(0, f"{hostfile.path}: deepspeed --hostfile would stop with: {hostfile.deepspeed_error}")
    if problems:
        pytest.fail("the hostfile will not launch as it is:\n" + "\n".join(problems), pytrace=False)


def test_hostname_matches(cluster: Cluster, node: str) -> None:
    """H2: a hostname line is what `hostname` prints there; an IP line is an address of the node."""
    facts = cluster.base(node)
    if is_ip(node):
        ips = all_ips(parse_interfaces(facts["ip_link"], facts["ip_addr"]))
        if node not in ips:
            pytest.fail(
                f"{node}: the hostfile names address {node}, but the node that answers there has "
                f"{', '.join(sorted(ips)) or 'no addresses'} (hostname {facts['hostname']}).\n"
                f"  fix: write one of its addresses in the hostfile line {cluster.node(node).lineno}",
                pytrace=False,
            )
        return
    actual = facts["hostname"]
    if actual != node:
        pytest.fail(
            f"{node}: the hostfile says '{node}' but `hostname` on that node prints '{actual}' "
            f"(the field guide: it must match `ssh {node} hostname` exactly).\n"
            f"  fix: on {node}: hostnamectl set-hostname {node}   (or write '{actual}' in the "
            f"hostfile, line {cluster.node(node).lineno})",
            pytrace=False,
        )


VIRTUAL_PREFIXES = ("docker", "virbr", "br-", "cni", "flannel", "cali", "veth", "tun", "lo")


def test_master_addr(cluster: Cluster) -> None:
    """H3: the rank-0 node (first line) is where the launch will rendezvous."""
    rank0 = cluster.rank0.name
    facts = cluster.base(rank0)
    ifaces = parse_interfaces(facts["ip_link"], facts["ip_addr"])
    given = cluster.settings.master_addr
    if given:
        if given != rank0 and given not in all_ips(ifaces):
            pytest.fail(
                f"--master-addr {given} is not the first host of the hostfile ({rank0}, addresses "
                f"{', '.join(sorted(all_ips(ifaces)))}); rank 0 runs on {rank0}, so the other ranks "
                f"would wait for a rendezvous that never comes.\n"
                f"  fix: --master_addr {rank0}, or move the host of {given} to the first line",
                pytrace=False,
            )
        return
    # DeepSpeed takes the first word of `ssh <first host> hostname -I` (PITFALLS 7).
    words = facts["hostname_I"]
    if not words:
        pytest.fail(f"{rank0}: `hostname -I` prints nothing, so DeepSpeed cannot infer --master_addr."
                    f"\n  fix: pass --master_addr {rank0}", pytrace=False)
    first = words[0]
    owner = next((i.name for i in ifaces.values() if first in i.ips), "?")
    if is_loopback(first) or owner.startswith(VIRTUAL_PREFIXES):
        pytest.fail(
            f"{rank0}: DeepSpeed will use {first} as --master_addr (first word of `hostname -I`), "
            f"an address of {owner}, which the other nodes cannot reach.\n"
            f"  fix: pass --master_addr {rank0} to deepspeed (and to this suite)",
            pytrace=False,
        )


def test_slots_fit_accelerators(cluster: Cluster, node: str) -> None:
    """H4: `slots` is at most the number of accelerators visible on the node."""
    cluster.require(node)
    inventory = accel.inventory(cluster, node)
    slots = cluster.node(node).slots
    if slots > inventory.count:
        pytest.fail(
            f"{node}: the hostfile gives slots={slots} but the node has {inventory.describe()}; "
            f"DeepSpeed would start {slots} ranks there.\n"
            f"  fix: write '{node} slots={inventory.count}' (hostfile line {cluster.node(node).lineno})",
            pytrace=False,
        )


def test_include_exclude(cluster: Cluster, hostfile: hf.HostfileParse) -> None:
    """H5: a given --include/--exclude names only hostfile hosts and slot indices that exist."""
    s = cluster.settings
    if not s.include and not s.exclude:
        pytest.skip("no --launch-include / --launch-exclude given")
    try:
        active = hf.parse_resource_filter(hostfile.resources, include=s.include, exclude=s.exclude)
    except hf.ResourceFilterError as exc:
        pytest.fail(f"the launch's resource filter will be refused by DeepSpeed: {exc}", pytrace=False)
    if not active:
        pytest.fail("the include/exclude filters leave no slot to launch on", pytrace=False)
