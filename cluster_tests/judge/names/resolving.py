"""N1, N2 and N4's verdicts (pure): every node places every hostfile name on that node, the way
the launch's ssh does (its ssh config's HostName, else its resolver: judge/ssh/sshnames.py), the
launch's --master_addr where it is a name (every rank resolves it, with the resolver), the same
way everywhere, and quickly. N3 (a node's own hostname on loopback) is ownname.py's.

:class:`NamesCause` is section N's vocabulary (Problem.cause). The facts are the nodes' base
facts (judge/common/basefacts.py); the /etc/hosts fixes are judge/common/fixcmd.py's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cluster_tests.core import testids as ids
from cluster_tests.judge.common import fixcmd
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.common.netfacts import is_loopback
from cluster_tests.judge.problem import Fix, Problem, SectionCause
from cluster_tests.judge.ssh import sshnames


class NamesCause(SectionCause, items=("N",)):
    """What can be wrong with how the nodes find each other by name (Problem.cause)."""

    NOT_RESOLVED = "name not resolved"  # N1
    SSH_ELSEWHERE = "ssh config leads to another machine"  # N1
    ELSEWHERE = "resolves to another machine"  # N1
    MASTER_NOT_RESOLVED = "master address not resolved"  # N1, a -> rank 0
    MASTER_ELSEWHERE = "master address resolves to another machine"  # N1, a -> rank 0
    INCONSISTENT = "resolves differently across the cluster"  # N2
    LOOPBACK = "hostname resolves to a loopback address"  # N3 (ownname.py)
    SLOW = "name resolution slow"  # N4


def not_placed(a: str, b: str, p: sshnames.Placement, facts_a: BaseFacts | None,
               address: str | None, target: str, alias: bool) -> Problem:
    """N1: `a` places `b` nowhere (`p`). `address`: b's right address where one is known;
    `target`: where the launcher's ssh reaches b; `alias`: the cluster knows b by its ssh
    configs (the fix is then an ssh config block first, and no hosts line is written)."""
    return Problem(
        (a, b), NamesCause.NOT_RESOLVED,
        f"{a} cannot resolve {b}: {p.error}" + (
            f" (its ssh config has no 'Host {b}' block either: `ssh {b}` there fails; the "
            f"launcher's ssh config sends it to {target})" if alias else ""),
        fix=sshnames.place_fix(a, b, address, alias=alias),
        fixes=((fixcmd.hosts_fix(a, facts_a, b, address),) if address and not alias else ()),
        item=ids.RESOLVES.item)


def placed_elsewhere(a: str, b: str, p: sshnames.Placement, facts_a: BaseFacts | None,
                     own: set[str]) -> Problem | None:
    """N1: `a` places `b` (`p`) on an address that is not one of b's own (`own`: all of them).
    A node reaching itself by a loopback address is N3's question, not N1's."""
    right = sorted(x for x in own if not is_loopback(x))
    wrong = [x for x in p.addrs if x not in own and not (a == b and is_loopback(x))
             or a != b and is_loopback(x)]
    if not wrong:
        return None
    has = ", ".join(right) or "no other address"
    if p.by == sshnames.BY_SSH:
        return Problem(
            (a, b), NamesCause.SSH_ELSEWHERE,
            f"{a}'s ssh config sends {b} to HostName {p.hostname}"
            + (f" ({', '.join(p.addrs)})" if p.addrs != (p.hostname,) else "")
            + f"; {', '.join(wrong)} is not an address of {b} (which has {has}): {a}'s ssh "
            f"would go elsewhere",
            fix=sshnames.alias_fix(a, b, right[0] if right else None), item=ids.RESOLVES.item)
    return _hosts_line_wrong(
        (a, b), NamesCause.ELSEWHERE,
        f"{a} resolves {b} to {', '.join(p.addrs)}; {', '.join(wrong)} is not an address of {b} "
        f"(which has {has}): {a}'s ranks and ssh would go elsewhere", facts_a, b, right, p.addrs)


def _hosts_line_wrong(pair: tuple[str, str], cause: NamesCause, message: str,
                      facts_a: BaseFacts | None, name: str, right: Sequence[str],
                      said: Sequence[str]) -> Problem:
    """N1: the first node of `pair` places `name` on `said`, where its /etc/hosts line (or the
    DNS record) should read its first `right` address."""
    a = pair[0]
    return Problem(
        pair, cause, message,
        fix=f"on {a}: make the /etc/hosts line read '{right[0] if right else '<its address>'} "
            f"{name}' (or fix the DNS record)",
        fixes=((fixcmd.hosts_fix(a, facts_a, name, right[0], said),) if right else ()),
        item=ids.RESOLVES.item)


def master_name(a: str, rank0: str, master: str, facts_a: BaseFacts,
                own: set[str]) -> Problem | None:
    """N1 a -> rank 0: `a` resolves the launch's --master_addr (a name) to rank 0 (`own`: its
    addresses), as its ranks will (torch's TCPStore asks the resolver; an ssh config plays no
    part)."""
    right = sorted(x for x in own if not is_loopback(x))
    m = sshnames.resolved(facts_a, master)
    if not m.placed:
        there = right[0] if right else f"<address of {rank0}>"
        return Problem(
            (a, rank0), NamesCause.MASTER_NOT_RESOLVED,
            f"{a} cannot resolve the launch's --master_addr '{master}' ({m.error}): every rank "
            f"resolves it to reach rank 0's rendezvous store (its resolver, not ssh), so {a}'s "
            f"ranks would not start",
            fix=f"on {a}: add '{there} {master}' to /etc/hosts (or a DNS record), or pass "
                f"--master_addr {there}",
            fixes=((fixcmd.hosts_fix(a, facts_a, master, right[0]),) if right else ()),
            item=ids.RESOLVES.item)
    if set(m.addrs) & own:
        return None
    return _hosts_line_wrong(
        (a, rank0), NamesCause.MASTER_ELSEWHERE,
        f"{a} resolves the launch's --master_addr '{master}' to {', '.join(m.addrs)}, not an "
        f"address of {rank0} (rank 0: {', '.join(right) or 'unknown'}): {a}'s ranks would wait "
        f"for a rendezvous elsewhere", facts_a, master, right, m.addrs)


def wrong_views(views: Mapping[str, tuple[str, ...]], own: set[str]) -> list[str]:
    """The viewers (nodes, "launcher") that resolve a name to none of its node's `own`
    (routable) addresses, in order."""
    return [v for v, addrs in views.items() if addrs and not set(addrs) & own]


def inconsistent(node: str, own: set[str], views: Mapping[str, tuple[str, ...]],
                 facts: Mapping[str, BaseFacts | None]) -> Problem | None:
    """N2: every viewer of `node` (`views`: viewer -> the addresses it resolved node to; the
    launcher's too) resolves it to the same address, one of node's `own` (routable) addresses.
    `facts`: the wrong viewers' base facts, for their /etc/hosts fix."""
    wrong = sorted(wrong_views(views, own))
    distinct = {addrs for addrs in views.values() if addrs}
    if not wrong and len(distinct) <= 1:
        return None
    table = "\n".join(f"    {v:>12} -> {', '.join(addrs) or '(unresolved)'}"
                      for v, addrs in views.items())
    right = sorted(own)[0] if own else "<its address>"
    fixes: tuple[Fix, ...] = ()
    if own:
        fixes = tuple(fixcmd.hosts_fix(v, facts.get(v), node, right, views[v])
                      for v in wrong if v != "launcher")
    return Problem(
        (node,), NamesCause.INCONSISTENT,
        f"{node} resolves differently across the cluster; its own addresses are "
        f"{', '.join(sorted(own)) or 'unknown'}:\n{table}",
        fix=f"on {', '.join(wrong) or 'some nodes'}: make the /etc/hosts line read "
            f"'{right} {node}' (or fix the DNS record)",
        fixes=fixes, item=ids.NAME_CONSISTENT.item)


def slow(a: str, b: str, p: sshnames.Placement, limit: float) -> Problem | None:
    """N4: the lookup `a` makes of `b` (the name's, or its ssh config's HostName's: `p`) takes
    at most `limit` seconds (--slow-resolve)."""
    seconds = float(p.seconds or 0.0)
    if seconds <= limit:
        return None
    return Problem(
        (a, b), NamesCause.SLOW,
        f"{a}: resolving {p.hostname or b} took {seconds:.2f} s (limit {limit:g} s, "
        f"--slow-resolve): DNS is slow or failing over.",
        fix=f"on {a}: put '{b}' in /etc/hosts, or fix the resolver in /etc/resolv.conf",
        item=ids.RESOLVE_FAST.item, facts={"seconds": round(seconds, 4)})
