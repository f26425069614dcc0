"""N. Name resolution (CHECKLIST N1-N4): every node finds every node, the same way, quickly.
Verdicts: judge/names/ (resolving: N1, N2, N4; ownname: N3), on the nodes' base facts."""

from __future__ import annotations

import socket
from typing import NoReturn

import pytest

from cluster_tests.core import outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster
from cluster_tests.core.memokey import MemoKey, base_key
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.common.netfacts import all_ips, is_ip, is_loopback, parse_interfaces
from cluster_tests.judge.names import ownname, resolving
from cluster_tests.judge.ssh import sshfail, sshnames

pytestmark = pytest.mark.names

#: target -> the viewers whose N1 pair this session runs, once (not once per node's N2 item)
CHECKED_SOURCES: MemoKey[dict[str, set[str]]] = MemoKey("names", "checked_sources")
#: name -> {viewer: the addresses it resolved that name to}, viewers in hostfile order
RESOLVED_BY: MemoKey[dict[str, dict[str, tuple[str, ...]]]] = MemoKey("names", "resolved_by")


def _resolved_by(cluster: Cluster) -> dict[str, dict[str, tuple[str, ...]]]:
    """Every node's placement of every name it looked up (its ssh config's HostName, else its
    resolver: judge/sshnames), by name: one pass over the base facts, so that N2 reads the
    viewers of a node instead of asking every node's facts (N² at 4096 nodes)."""
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for viewer in cluster.names:
        facts = cluster.base_or_none(viewer)
        for name in (facts.resolve if facts is not None else ()):
            out.setdefault(name, {})[viewer] = sshnames.placement(facts, name).addrs
    return out


def _addresses_of(facts: BaseFacts) -> set[str]:
    """Every address of a node's interfaces (loopback included)."""
    return all_ips(parse_interfaces(facts.ip_link, facts.ip_addr))


def _given_master(cluster: Cluster) -> str | None:
    """The launch's --master_addr where it is given as a name (every rank resolves it)."""
    given = cluster.settings.master_addr
    return given if given and not is_ip(given) else None


def test_resolves(cluster: Cluster, pair: tuple[str, str], record_property) -> None:
    """N1: node a places b's hostfile name on b, the way the launch's ssh does (its ssh config's
    HostName, else its resolver: `ssh -G`), and, where b is rank 0 and the launch's
    --master_addr is a name, resolves that name to b (every rank does, with the resolver)."""
    a, b = pair
    facts_a = cluster.base(a)
    master = _given_master(cluster) if b == cluster.rank0.name else None
    p = sshnames.placement(facts_a, b)
    if p.by == sshnames.BY_ADDRESS and master is None:
        pytest.skip(f"{b} is an IP address: nothing to resolve")
    record_property("placed", p.describe())
    if not p.placed:
        _not_placed(cluster, a, b, p, facts_a)
    facts_b = cluster.base_or_none(b)
    if facts_b is None:
        cluster.require(b)
        pytest.skip(f"{a} places {b} at {', '.join(p.addrs)}; whether that is {b}'s address "
                    f"is not known: {b} cannot be probed")
    own = _addresses_of(facts_b)
    problem = resolving.placed_elsewhere(a, b, p, facts_a, own)
    if problem is None and master is not None:
        problem = resolving.master_name(a, b, master, facts_a, own)
    if problem is not None:
        outcome.fail(problem)


def _not_placed(cluster: Cluster, a: str, b: str, p: sshnames.Placement,
                facts_a: BaseFacts) -> NoReturn:
    """N1's red where a places b nowhere: blocked where the launcher cannot place b either
    (one red, the node's: its fix is the same)."""
    err = cluster.login_error(b)
    if err is not None and err.cause is sshfail.Cause.DNS:
        outcome.block(ids.LOGIN.of(b), sshfail.node_state(b, err.cause))
    facts_b = cluster.base_or_none(b)
    right = sorted(x for x in _addresses_of(facts_b) if not is_loopback(x)) if facts_b else []
    target = cluster.address(b)
    address = right[0] if right else target if is_ip(target) else None
    outcome.fail(resolving.not_placed(a, b, p, facts_a, address, target,
                                      alias=_known_by_ssh(cluster, a, b)))


def _known_by_ssh(cluster: Cluster, a: str, b: str) -> bool:
    """Whether the cluster knows `b` by its ssh configs rather than its resolvers (a few other
    nodes' facts at hand, else the launcher's ssh config)."""
    views = [cluster.cached(base_key(v)) for v in cluster.names[:9] if v != a]
    return sshnames.known_by_ssh(views, b, cluster.address(b))


def test_name_consistent(cluster: Cluster, node: str) -> None:
    """N2: every node (and the launcher) resolves `node` to the same address, one of node's own.
    A node whose view is wrong is named by N1 (test_resolves[viewer->node]) where that pair is
    checked; here only the disagreement that no pair test reports.  Beyond --pairs all, the
    viewers are those that resolve `node` (pairs.names_to_resolve: rank 0, its pairs' ends)."""
    if is_ip(node):
        pytest.skip(f"{node} is an IP address: nothing to resolve")
    own = {a for a in _addresses_of(cluster.base(node)) if not is_loopback(a)}
    # the viewers that resolved node (one down is left out: its own tests say why; beyond
    # --pairs all, a node resolves only what its pairs need)
    views = {v: addrs for v, addrs in
             cluster.memo(RESOLVED_BY, lambda: _resolved_by(cluster)).get(node, {}).items()
             if v != node}
    views["launcher"] = _launcher_view(cluster.address(node))
    wrong = resolving.wrong_views(views, own)
    checked = cluster.memo(CHECKED_SOURCES, lambda: _checked_sources(cluster))
    elsewhere = sorted(v for v in wrong if v in checked.get(node, ()))
    if wrong and len(elsewhere) == len(wrong):
        outcome.block(ids.RESOLVES.of(elsewhere[0], node),
                      f"{', '.join(elsewhere)} resolve(s) {node} elsewhere"
                      + (f" (also {', '.join(ids.RESOLVES.of(v, node) for v in elsewhere[1:])})"
                         if len(elsewhere) > 1 else ""))
        pytest.skip(f"{', '.join(elsewhere)} resolve(s) {node} elsewhere: see "
                    + ", ".join(ids.RESOLVES.of(v, node) for v in elsewhere))
    problem = resolving.inconsistent(node, own, views,
                                     {v: cluster.cached(base_key(v)) for v in wrong
                                      if v != "launcher"})
    if problem is not None:
        outcome.fail(problem)


def _launcher_view(target: str) -> tuple[str, ...]:
    """What the launcher's resolver makes of `target` (IPv4, in its order; none: unresolved)."""
    try:
        return tuple(dict.fromkeys(
            str(i[4][0]) for i in socket.getaddrinfo(target, None, socket.AF_INET)))
    except socket.gaierror:
        return ()


def _checked_sources(cluster: Cluster) -> dict[str, set[str]]:
    """target -> the viewers whose N1 pair (viewer->target) this session runs."""
    from cluster_tests.core import pairs as pairs_mod

    out: dict[str, set[str]] = {}
    for a in pairs_mod.collected_sources(cluster, ids.RESOLVES.name):
        for b in pairs_mod.targets_of(cluster, a):
            out.setdefault(b, set()).add(a)
    return out


def test_hostname_not_loopback(cluster: Cluster, node: str) -> None:
    """N3: a node's own hostname does not resolve to 127.x there (the 127.0.1.1 trap)."""
    problem = ownname.judge(node, cluster.base(node))
    if problem is not None:
        outcome.fail(problem)


def test_resolve_fast(cluster: Cluster, pair: tuple[str, str], record_property) -> None:
    """N4: resolving b on a is fast (slow DNS shows up as jittery, degraded communication)."""
    a, b = pair
    # the lookup the launch makes: the name's, or the HostName's its ssh config gives
    p = sshnames.placement(cluster.base(a), b)
    record_property("resolve_seconds", round(float(p.seconds or 0.0), 4))
    problem = resolving.slow(a, b, p, cluster.settings.names.slow_resolve)
    if problem is not None:
        outcome.fail(problem)
