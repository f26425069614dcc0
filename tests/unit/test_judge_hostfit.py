"""H2 and H4 (cluster_tests.judge.hostfile.hostfit): the hostfile's name for a node leads to that
node, and its slots fit the node's accelerators, judged on the facts node/probe.py gives on a node
of the tests' own (tests/probenode.py: namespaces with that hostname, address, /etc/hosts and ssh
config)."""

from __future__ import annotations

import functools

import probenode

from cluster_tests.judge.accelerator import inventory
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.hostfile import hostfit
from cluster_tests.judge.hostfile.hostmodel import HostfileCause
from cluster_tests.judge.ssh import sshnames

#: node3 (10.77.0.3) whose hosts file knows its FQDN, an alias of its own, and node4 elsewhere
HOSTS = "10.77.0.3 node3.cluster gpu-a\n10.77.0.9 node4"
#: the rank-0 node's ssh config: one alias to node3, one to a machine that is not node3
SSH_CONFIG = "Host gpu-b\n  HostName 10.77.0.3\nHost gpu-c\n  HostName 10.77.0.9\n"


@functools.cache
def node3() -> BaseFacts:
    return probenode.base_facts("node3", hosts=HOSTS, ssh_config=SSH_CONFIG, ssh_all=True,
                                names=["node3.cluster", "gpu-a", "node4", "node5", "gpu-b",
                                       "gpu-c"])


def test_the_hostname_its_fqdn_and_its_address_are_the_node() -> None:
    assert hostfit.judge_name("node3", node3(), 1) == hostfit.NameVerdict("hostname")
    assert hostfit.judge_name("node3.cluster", node3(), 1) == hostfit.NameVerdict("fqdn")
    assert hostfit.judge_name("10.77.0.3", node3(), 1) == hostfit.NameVerdict()


def test_an_alias_that_resolves_to_the_node_is_green_with_a_warning() -> None:
    v = hostfit.judge_name("gpu-a", node3(), 4)
    assert v.name_is == "alias" and v.problem is None and not v.unresolved
    assert v.warning == ("gpu-a: `hostname` there prints 'node3'; the name resolves to the node "
                         "itself (10.77.0.3), so the launch works, but the field guide asks for "
                         "the hostname (line 4)")


def test_an_address_of_another_machine_is_red() -> None:
    p = hostfit.judge_name("10.77.0.9", node3(), 2).problem
    assert p is not None and p.cause is HostfileCause.ADDRESS_NOT_THE_NODES
    assert p.nodes == ("10.77.0.9",) and p.item == "H2"
    assert p.message.startswith("10.77.0.9: the hostfile names address 10.77.0.9, but the node "
                                "that answers there has 10.77.0.3, ")
    assert p.message.endswith("(hostname node3).")
    assert p.fix == "write one of its addresses in the hostfile line 2" and p.fixes == ()


def test_a_name_that_resolves_elsewhere_on_the_node_is_red_with_its_fix() -> None:
    p = hostfit.judge_name("node4", node3(), 3).problem
    assert p is not None and p.cause is HostfileCause.NAME_LEADS_ELSEWHERE
    assert p.message == ("node4: the hostfile says 'node4', `hostname` on that node prints "
                         "'node3', and 'node4' resolves there to 10.77.0.9, not one of its own "
                         "addresses (10.77.0.3, 127.0.0.1, ::1): the name leads elsewhere.")
    assert p.fix == ("on node4: hostnamectl set-hostname node4 and add '10.77.0.3 node4' to "
                     "/etc/hosts (or write 'node3' in the hostfile, line 3)")
    [fix] = p.fixes
    assert fix.where == "node4" and len(fix.commands) == 2, fix
    # where the launcher cannot log in there, the fix is words only
    p = hostfit.judge_name("node4", node3(), 3, fixable=False).problem
    assert p is not None and p.fixes == ()


def test_a_name_the_node_cannot_resolve_is_for_the_rank0_ssh_to_place() -> None:
    assert hostfit.judge_name("node5", node3(), 5) == hostfit.NameVerdict(unresolved=True)


def test_an_ssh_alias_that_leads_to_the_node_is_green() -> None:
    facts = node3()
    p = sshnames.placement(facts, "gpu-b")
    assert p.by == sshnames.BY_SSH and p.addrs == ("10.77.0.3",)
    assert hostfit.judge_ssh_name("gpu-b", "node1", p, hostfit.node_ips(facts), "gpu-b",
                                  alias=True) is None


def test_an_ssh_alias_elsewhere_or_a_name_placed_nowhere_is_red() -> None:
    facts = node3()
    ips = hostfit.node_ips(facts)
    p = hostfit.judge_ssh_name("gpu-c", "node1", sshnames.placement(facts, "gpu-c"), ips,
                               "gpu-c", alias=True)
    assert p is not None and p.cause is HostfileCause.NAME_LEADS_ELSEWHERE
    assert p.message == ("gpu-c: the hostfile says 'gpu-c', which gpu-c itself cannot resolve; "
                         "on node1 (rank 0, where pdsh and DeepSpeed's ssh run) it is ssh "
                         "config: Host gpu-c -> HostName 10.77.0.9; the launcher reaches it "
                         "through its resolver")
    assert p.fix == sshnames.alias_fix("node1", "gpu-c", "10.77.0.3")
    nowhere = sshnames.placement(facts, "node5")
    assert not nowhere.placed
    p = hostfit.judge_ssh_name("node5", "node1", nowhere, ips, "10.77.0.3", alias=True)
    assert p is not None and p.cause is HostfileCause.NAME_LEADS_NOWHERE
    assert p.message.endswith("the launcher reaches it through its ssh config (HostName "
                              "10.77.0.3)")
    assert p.fix == ("on node1: add a 'Host node5' block with 'HostName 10.77.0.3' to "
                     "~/.ssh/config (as the launcher's ssh config has it), or '10.77.0.3 node5' "
                     "to /etc/hosts")


def test_slots_beyond_the_accelerators_are_red() -> None:
    raw = probenode.probe("accelerators")
    assert isinstance(raw, dict)
    inv = inventory.Inventory.read(raw)  # this machine: CPUs only
    assert inv.kind == "cpu" and inv.count >= 1
    assert hostfit.judge_slots("node3", inv.count, inv.count, inv.describe(), 3) is None
    p = hostfit.judge_slots("node3", inv.count + 7, inv.count, inv.describe(), 3)
    assert p is not None and p.cause is HostfileCause.TOO_MANY_SLOTS and p.item == "H4"
    assert p.message == (f"node3: the hostfile gives slots={inv.count + 7} but the node has "
                         f"no accelerator (CPU only, {inv.count} CPUs); DeepSpeed would start "
                         f"{inv.count + 7} ranks there.")
    assert p.fix == f"write 'node3 slots={inv.count}' (hostfile line 3)"
    assert p.facts == {"slots": inv.count + 7, "accelerators": inv.count}
