"""N1, N2 and N4 (cluster_tests.judge.names.resolving): every node places every hostfile name on
that node, the launch's --master_addr on rank 0, the same way everywhere, quickly; judged on the
facts node/probe.py gives on nodes of the tests' own (tests/probenode.py: namespaces with that
hostname, address, /etc/hosts and ssh config)."""

from __future__ import annotations

import functools

import probenode

from cluster_tests.judge.common import fixcmd
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.common.netfacts import all_ips, parse_interfaces
from cluster_tests.judge.names.resolving import (
    NamesCause,
    inconsistent,
    master_name,
    not_placed,
    placed_elsewhere,
    slow,
    wrong_views,
)
from cluster_tests.judge.ssh import sshnames

NAMES = ["node1", "node2", "node3", "node4", "gpu-x", "master-a", "master-b"]
#: node3 is 10.77.0.3; node1's hosts file sends it to 10.77.0.9, and its ssh config sends gpu-x
#: to 10.77.0.9 as well; node4 and master-b it cannot resolve
NODE1_HOSTS = ("127.0.1.1 node1\n10.77.0.2 node2\n10.77.0.9 node3\n10.77.0.1 master-a")
NODE1_SSH = "Host gpu-x\n  HostName 10.77.0.9\n"


@functools.cache
def node1() -> BaseFacts:
    return probenode.base_facts("node1", ("10.77.0.1/24",), hosts=NODE1_HOSTS,
                                ssh_config=NODE1_SSH, names=NAMES, ssh_all=True)


@functools.cache
def own3() -> set[str]:
    """node3's own addresses, as the check reads them from its base facts (loopback too)."""
    facts = probenode.base_facts("node3", ("10.77.0.3/24",))
    return all_ips(parse_interfaces(facts.ip_link, facts.ip_addr))


@functools.cache
def node2() -> BaseFacts:
    return probenode.base_facts("node2", ("10.77.0.2/24",), hosts="10.77.0.3 node3",
                                names=NAMES)


def test_a_name_placed_nowhere_is_red_with_a_hosts_line_or_an_ssh_block() -> None:
    p = sshnames.placement(node1(), "node4")
    assert not p.placed
    red = not_placed("node1", "node4", p, node1(), "10.77.0.4", "node4", alias=False)
    assert red.cause is NamesCause.NOT_RESOLVED and red.nodes == ("node1", "node4")
    assert red.item == "N1" and red.message.startswith("node1 cannot resolve node4: ")
    assert red.fix == ("on node1: add '10.77.0.4 node4' to /etc/hosts (or a DNS record, or a "
                       "'Host node4' block with 'HostName 10.77.0.4' to ~/.ssh/config)")
    assert red.fixes == (fixcmd.hosts_fix("node1", node1(), "node4", "10.77.0.4"),)
    # the cluster knows node4 by its ssh configs: the block first, no hosts line written
    red = not_placed("node1", "node4", p, node1(), "10.77.0.4", "10.77.0.4", alias=True)
    assert red.message.endswith(" (its ssh config has no 'Host node4' block either: `ssh node4` "
                                "there fails; the launcher's ssh config sends it to 10.77.0.4)")
    assert red.fixes == () and red.fix.startswith("on node1: add a 'Host node4' block")


def test_a_name_placed_on_the_node_is_green_and_elsewhere_red() -> None:
    assert placed_elsewhere("node1", "node2", sshnames.placement(node1(), "node2"), node1(),
                            {"10.77.0.2", "127.0.0.1"}) is None
    # the node itself on loopback: N3's question, not N1's
    assert placed_elsewhere("node1", "node1", sshnames.placement(node1(), "node1"), node1(),
                            {"10.77.0.1", "127.0.0.1"}) is None
    p = sshnames.placement(node1(), "node3")
    red = placed_elsewhere("node1", "node3", p, node1(), own3())
    assert red is not None and red.cause is NamesCause.ELSEWHERE
    assert red.message == ("node1 resolves node3 to 10.77.0.9; 10.77.0.9 is not an address of "
                           "node3 (which has 10.77.0.3): node1's ranks and ssh would go "
                           "elsewhere")
    assert red.fix == ("on node1: make the /etc/hosts line read '10.77.0.3 node3' (or fix the "
                       "DNS record)")
    assert red.fixes == (fixcmd.hosts_fix("node1", node1(), "node3", "10.77.0.3",
                                          ("10.77.0.9",)),)


def test_an_ssh_config_that_sends_a_name_elsewhere_is_red() -> None:
    p = sshnames.placement(node1(), "gpu-x")
    assert p.by == sshnames.BY_SSH
    red = placed_elsewhere("node1", "gpu-x", p, node1(), own3())
    assert red is not None and red.cause is NamesCause.SSH_ELSEWHERE and red.fixes == ()
    assert red.message == ("node1's ssh config sends gpu-x to HostName 10.77.0.9; 10.77.0.9 is "
                           "not an address of gpu-x (which has 10.77.0.3): node1's ssh "
                           "would go elsewhere")
    assert red.fix == sshnames.alias_fix("node1", "gpu-x", "10.77.0.3")


def test_the_master_address_name_resolves_to_rank0_or_is_red() -> None:
    rank0 = {"10.77.0.1", "127.0.0.1"}
    assert master_name("node1", "node1", "master-a", node1(), rank0) is None
    red = master_name("node1", "node3", "master-a", node1(), own3())
    assert red is not None and red.cause is NamesCause.MASTER_ELSEWHERE
    assert red.nodes == ("node1", "node3")
    assert red.message == ("node1 resolves the launch's --master_addr 'master-a' to 10.77.0.1, "
                           "not an address of node3 (rank 0: 10.77.0.3): node1's ranks "
                           "would wait for a rendezvous elsewhere")
    red = master_name("node1", "node3", "master-b", node1(), own3())
    assert red is not None and red.cause is NamesCause.MASTER_NOT_RESOLVED
    assert red.message.startswith("node1 cannot resolve the launch's --master_addr 'master-b' (")
    assert red.fix == ("on node1: add '10.77.0.3 master-b' to /etc/hosts (or a DNS record), or "
                       "pass --master_addr 10.77.0.3")
    assert red.fixes == (fixcmd.hosts_fix("node1", node1(), "master-b", "10.77.0.3"),)


def test_a_name_resolved_differently_across_the_cluster_is_red_on_its_node() -> None:
    own = {"10.77.0.3"}
    views = {v: f.resolved("node3").addrs for v, f in (("node1", node1()), ("node2", node2()))}
    assert views == {"node1": ("10.77.0.9",), "node2": ("10.77.0.3",)}
    assert wrong_views(views, own) == ["node1"]
    assert inconsistent("node3", own, {"node2": views["node2"], "launcher": ("10.77.0.3",)},
                        {}) is None
    red = inconsistent("node3", own, {**views, "launcher": ()}, {"node1": node1()})
    assert red is not None and red.cause is NamesCause.INCONSISTENT and red.item == "N2"
    assert red.nodes == ("node3",)
    assert red.message == ("node3 resolves differently across the cluster; its own addresses "
                           "are 10.77.0.3:\n"
                           "           node1 -> 10.77.0.9\n"
                           "           node2 -> 10.77.0.3\n"
                           "        launcher -> (unresolved)")
    assert red.fix == ("on node1: make the /etc/hosts line read '10.77.0.3 node3' (or fix the "
                       "DNS record)")
    assert red.fixes == (fixcmd.hosts_fix("node1", node1(), "node3", "10.77.0.3",
                                          ("10.77.0.9",)),)


def test_a_lookup_slower_than_the_limit_is_red() -> None:
    p = sshnames.placement(node2(), "node3")
    assert p.seconds is not None and 0 < p.seconds < 5
    assert slow("node2", "node3", p, 5.0) is None
    red = slow("node2", "node3", p, 0.0)
    assert red is not None and red.cause is NamesCause.SLOW and red.item == "N4"
    assert red.message.startswith("node2: resolving node3 took ")
    assert red.message.endswith(" s (limit 0 s, --slow-resolve): DNS is slow or failing over.")
    assert red.fix == "on node2: put 'node3' in /etc/hosts, or fix the resolver in /etc/resolv.conf"
