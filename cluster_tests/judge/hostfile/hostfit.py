"""H2 and H4's verdicts (pure): the hostfile describes this cluster. Its name for a node leads to
that node (an address line is an address of the node; a name line is its hostname, or resolves
on the node to its own addresses, or is placed there by the rank-0 node's ssh config), and its
`slots` are at most the accelerators the node has.

How every other node resolves a name is N1's (judge/names/resolving.py); the measurements are
the node's base facts (judge/common/basefacts.py) and its accelerator count (A1's inventory,
measure/accel.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster_tests.core import testids as ids
from cluster_tests.judge.common import fixcmd
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.common.netfacts import all_ips, is_ip, is_loopback, parse_interfaces
from cluster_tests.judge.hostfile.hostmodel import HostfileCause
from cluster_tests.judge.problem import Problem
from cluster_tests.judge.ssh import sshnames


def node_ips(facts: BaseFacts) -> set[str]:
    """Every address of the node's interfaces (loopback included)."""
    return all_ips(parse_interfaces(facts.ip_link, facts.ip_addr))


def routable(ips: set[str]) -> list[str]:
    """The node's addresses that are not loopback, sorted."""
    return sorted(a for a in ips if not is_loopback(a))


@dataclass(frozen=True)
class NameVerdict:
    """H2 on the node itself: how the hostfile's name is the node's (``name_is``: "hostname",
    "fqdn", "alias"; "" where it is not), a trap the launch survives (``warning``), the red
    (``problem``), or ``unresolved``: the node cannot resolve its own hostfile name, and the
    rank-0 node's ssh decides (:func:`judge_ssh_name`)."""

    name_is: str = ""
    warning: str = ""
    problem: Problem | None = None
    unresolved: bool = False


def judge_name(node: str, facts: BaseFacts, lineno: int, fixable: bool = True) -> NameVerdict:
    """H2: the hostfile's `node` (its line `lineno`) as the node itself sees it (`facts`).
    `fixable`: the launcher logs in there, so the fix can be run there (else it is words only)."""
    ips = node_ips(facts)
    if is_ip(node):
        if node in ips:
            return NameVerdict()
        return NameVerdict(problem=Problem(
            (node,), HostfileCause.ADDRESS_NOT_THE_NODES,
            f"{node}: the hostfile names address {node}, but the node that answers there has "
            f"{', '.join(sorted(ips)) or 'no addresses'} (hostname {facts.hostname}).",
            fix=f"write one of its addresses in the hostfile line {lineno}",
            item=ids.HOSTNAME_MATCHES.item))
    actual = facts.hostname
    if actual == node:
        return NameVerdict("hostname")
    addrs = list(facts.resolved(node).addrs)
    if addrs and all(a in ips for a in addrs):
        if actual == node.split(".", 1)[0]:
            return NameVerdict("fqdn")
        return NameVerdict("alias", warning=(
            f"{node}: `hostname` there prints '{actual}'; the name resolves to the node itself "
            f"({', '.join(addrs)}), so the launch works, but the field guide asks for the "
            f"hostname (line {lineno})"))
    if not addrs:
        return NameVerdict(unresolved=True)
    own = routable(ips)
    return NameVerdict(problem=Problem(
        (node,), HostfileCause.NAME_LEADS_ELSEWHERE,
        f"{node}: the hostfile says '{node}', `hostname` on that node prints '{actual}', and "
        f"'{node}' resolves there to {', '.join(addrs)}, not one of its own addresses "
        f"({', '.join(sorted(ips)) or 'none'}): the name leads elsewhere.",
        fix=f"on {node}: hostnamectl set-hostname {node} and add "
            f"'{own[0] if own else '<its address>'} {node}' to /etc/hosts (or write '{actual}' in "
            f"the hostfile, line {lineno})",
        fixes=tuple(fixcmd.hostname_fix(node, facts) if fixable else ()),
        item=ids.HOSTNAME_MATCHES.item))


def judge_ssh_name(node: str, rank0: str, placed: sshnames.Placement, ips: set[str],
                   target: str, alias: bool) -> Problem | None:
    """H2 for a hostfile name that the node itself cannot resolve: a name only ssh configs know
    (`Host gpu-a` / `HostName 10.1.2.3`) is as good as any for the launch (pdsh and DeepSpeed's
    own ssh run on the rank-0 node; the names are keys otherwise), so it leads to the node where
    the rank-0 node's ssh takes it there (`placed`: None); where it takes it nowhere or elsewhere,
    the fix is an ssh config block or a hosts line, never the node's hostname. `target`: where
    the launcher's ssh reaches it; `alias`: the cluster knows the name by its ssh configs."""
    if placed.placed and set(placed.addrs) <= ips:
        return None
    own = routable(ips)
    address = own[0] if own else None
    return Problem(
        (node,),
        HostfileCause.NAME_LEADS_ELSEWHERE if placed.placed else HostfileCause.NAME_LEADS_NOWHERE,
        f"{node}: the hostfile says '{node}', which {node} itself cannot resolve; on {rank0} "
        f"(rank 0, where pdsh and DeepSpeed's ssh run) it is {placed.describe()}; the launcher "
        f"reaches it through "
        + (f"its ssh config (HostName {target})" if target != node else "its resolver"),
        fix=(sshnames.alias_fix(rank0, node, address) if placed.placed else
             sshnames.place_fix(rank0, node, address, alias=alias)),
        item=ids.HOSTNAME_MATCHES.item)


def judge_slots(node: str, slots: int, count: int, has: str, lineno: int) -> Problem | None:
    """H4: `slots` is at most `count`, the accelerators visible on the node (`has`: them in
    words, "8 GPUs")."""
    if slots <= count:
        return None
    return Problem(
        (node,), HostfileCause.TOO_MANY_SLOTS,
        f"{node}: the hostfile gives slots={slots} but the node has {has}; DeepSpeed would "
        f"start {slots} ranks there.",
        fix=f"write '{node} slots={count}' (hostfile line {lineno})",
        item=ids.SLOTS_FIT_ACCELERATORS.item,
        facts={"slots": slots, "accelerators": count})
