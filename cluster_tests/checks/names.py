"""N. Name resolution (CHECKLIST N1-N4): every node finds every node, the same way, quickly."""

from __future__ import annotations

import socket

import pytest

from cluster_tests.core import outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster
from cluster_tests.core.memokey import MemoKey, base_key
from cluster_tests.judge import fixcmd, ownname
from cluster_tests.judge.netfacts import all_ips, is_ip, is_loopback, parse_interfaces
from cluster_tests.judge.problem import Problem

pytestmark = pytest.mark.names

#: target -> the viewers whose N1 pair this session runs, once (not once per node's N2 item)
CHECKED_SOURCES: MemoKey[dict[str, set[str]]] = MemoKey("names", "checked_sources")
#: name -> {viewer: the addresses it resolved that name to}, viewers in hostfile order
RESOLVED_BY: MemoKey[dict[str, dict[str, tuple[str, ...]]]] = MemoKey("names", "resolved_by")


def _resolved_by(cluster: Cluster) -> dict[str, dict[str, tuple[str, ...]]]:
    """Every node's name lookups, by name looked up: one pass over the base facts, so that N2
    reads the viewers of a node instead of asking every node's facts (N² at 4096 nodes)."""
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for viewer in cluster.names:
        facts = cluster.base_or_none(viewer)
        for name, got in ((facts or {}).get("resolve") or {}).items():
            out.setdefault(name, {})[viewer] = tuple(got["addrs"])
    return out


def _addresses_of(cluster: Cluster, node: str) -> set[str]:
    facts = cluster.base(node)
    return all_ips(parse_interfaces(facts["ip_link"], facts["ip_addr"]))


def test_resolves(cluster: Cluster, pair: tuple[str, str]) -> None:
    """N1: node a resolves b's hostfile name."""
    a, b = pair
    if is_ip(b):
        pytest.skip(f"{b} is an IP address: nothing to resolve")
    res = cluster.base(a)["resolve"][b]
    addr = cluster.pool.targets[b].hostname
    if not res["addrs"]:
        hint = f"'{addr} {b}'" if is_ip(addr) else f"'<address of {b}> {b}'"
        outcome.fail(Problem(
            (a, b), "name not resolved", f"{a} cannot resolve {b}: {res['error']}",
            fix=f"on {a}: add {hint} to /etc/hosts (or a DNS record)",
            fixes=((fixcmd.hosts_fix(a, cluster.cached(base_key(a)), b, addr),)
                   if is_ip(addr) else ()),
            item="N1"))
    facts_b = cluster.base_or_none(b)
    if facts_b is None:
        cluster.require(b)
        pytest.skip(f"{a} resolves {b} to {', '.join(res['addrs'])}; whether that is {b}'s address "
                    f"is not known: {b} cannot be probed")
    own = all_ips(parse_interfaces(facts_b["ip_link"], facts_b["ip_addr"]))
    # a node reaching itself by a loopback address is N3's question, not N1's
    wrong = [x for x in res["addrs"] if x not in own and not (a == b and is_loopback(x))
             or a != b and is_loopback(x)]
    if wrong:
        right = sorted(x for x in own if not is_loopback(x))
        outcome.fail(Problem(
            (a, b), "resolves to another machine",
            f"{a} resolves {b} to {', '.join(res['addrs'])}; {', '.join(wrong)} is not an address "
            f"of {b} (which has {', '.join(right) or 'no other address'}): {a}'s ranks and ssh "
            f"would go elsewhere",
            fix=f"on {a}: make the /etc/hosts line read '{right[0] if right else '<its address>'} "
                f"{b}' (or fix the DNS record)",
            fixes=((fixcmd.hosts_fix(a, cluster.cached(base_key(a)), b, right[0], res["addrs"]),)
                   if right else ()),
            item="N1"))


def test_name_consistent(cluster: Cluster, node: str) -> None:
    """N2: every node (and the launcher) resolves `node` to the same address, one of node's own.
    A node whose view is wrong is named by N1 (test_resolves[viewer->node]) where that pair is
    checked; here only the disagreement that no pair test reports.  Beyond --pairs all, the
    viewers are those that resolve `node` (pairs.names_to_resolve: rank 0, its pairs' ends)."""
    if is_ip(node):
        pytest.skip(f"{node} is an IP address: nothing to resolve")
    own = {a for a in _addresses_of(cluster, node) if not is_loopback(a)}
    # the viewers that resolved node (one down is left out: its own tests say why; beyond
    # --pairs all, a node resolves only what its pairs need)
    views = {v: addrs for v, addrs in
             cluster.memo(RESOLVED_BY, lambda: _resolved_by(cluster)).get(node, {}).items()
             if v != node}
    target = cluster.pool.targets[node].hostname
    try:
        launcher_view = tuple(dict.fromkeys(
            str(i[4][0]) for i in socket.getaddrinfo(target, None, socket.AF_INET)))
    except socket.gaierror:
        launcher_view = ()
    views["launcher"] = launcher_view
    wrong = {v: addrs for v, addrs in views.items() if addrs and not set(addrs) & own}
    distinct = {addrs for addrs in views.values() if addrs}
    checked = cluster.memo(CHECKED_SOURCES, lambda: _checked_sources(cluster))
    elsewhere = sorted(v for v in wrong if v in checked.get(node, ()))
    if wrong and len(elsewhere) == len(wrong):
        outcome.block(ids.RESOLVES.of(elsewhere[0], node),
                      f"{', '.join(elsewhere)} resolve(s) {node} elsewhere"
                      + (f" (also {', '.join(ids.RESOLVES.of(v, node) for v in elsewhere[1:])})"
                         if len(elsewhere) > 1 else ""))
        pytest.skip(f"{', '.join(elsewhere)} resolve(s) {node} elsewhere: see "
                    + ", ".join(ids.RESOLVES.of(v, node) for v in elsewhere))
    if wrong or len(distinct) > 1:
        table = "\n".join(f"    {v:>12} -> {', '.join(addrs) or '(unresolved)'}"
                          for v, addrs in views.items())
        right = sorted(own)[0] if own else "<its address>"
        bad = ", ".join(sorted(wrong)) or "some nodes"
        if own:
            outcome.offer(*[fixcmd.hosts_fix(v, cluster.cached(base_key(v)), node, right, views[v])
                            for v in sorted(wrong) if v != "launcher"])
        pytest.fail(
            f"{node} resolves differently across the cluster; its own addresses are "
            f"{', '.join(sorted(own)) or 'unknown'}:\n{table}\n"
            f"  fix, on {bad}: make the /etc/hosts line read '{right} {node}' "
            f"(or fix the DNS record)",
            pytrace=False,
        )


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
    res = cluster.base(a)["resolve"][b]
    record_property("resolve_seconds", round(res["seconds"], 4))
    limit = cluster.settings.names.slow_resolve
    if res["seconds"] > limit:
        pytest.fail(f"{a}: resolving {b} took {res['seconds']:.2f} s "
                    f"(limit {limit:g} s, --slow-resolve): DNS is slow or failing over.\n"
                    f"  fix, on {a}: put '{b}' in /etc/hosts, or fix the resolver "
                    f"in /etc/resolv.conf", pytrace=False)
