"""F5/F6 over the whole cluster: the interfaces the libraries are told to use (the
*_SOCKET_IFNAME values the ranks get), the routes between the nodes, and the MTU table of the
interface the launch's traffic uses on every node (measured once for the session)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core.cluster import Cluster, ProbeError
from cluster_tests.core.memokey import MemoKey
from cluster_tests.judge.common.facts import Command
from cluster_tests.judge.common.netfacts import Interface, parse_interfaces, route_device
from cluster_tests.judge.env import envvars
from cluster_tests.judge.network import ifjudge
from cluster_tests.judge.network.portfacts import ROUTES
from cluster_tests.judge.ssh import sshnames
from cluster_tests.measure import rehearsal

#: node -> (the interface the launch uses there, its MTU), for the nodes where one was found
MTUS: MemoKey[dict[str, tuple[str, int | None]]] = MemoKey("netcheck", "mtus")


def ifaces(cluster: Cluster, node: str) -> dict[str, Interface]:
    """The node's interfaces (`ip link`, `ip addr` of its base facts)."""
    facts = cluster.base(node)
    return parse_interfaces(facts.ip_link, facts.ip_addr)


def others(cluster: Cluster, node: str) -> dict[str, dict[str, Interface]]:
    """The interfaces of every other node that has base facts (F5: where else a value the
    launch exports would fit)."""
    return {n: ifaces(cluster, n) for n in cluster.names if n != node and cluster.base_or_none(n)}


def launch_ifname_vars(cluster: Cluster) -> dict[str, str]:
    """*_SOCKET_IFNAME values that the launch itself exports to every rank from the rank-0 node
    (its environment by DeepSpeed's prefixes, and its `.deepspeed_env`; the rehearsal's)."""
    exports = rehearsal.exports(cluster)
    return {k: envvars.unquote_export(v) for k, v in exports.items()
            if k in ifjudge.SOCKET_IFNAME_VARS and v.strip()}


def ifname_vars(cluster: Cluster, node: str) -> tuple[dict[str, str], dict[str, str]]:
    """(what the ranks on `node` get, the part of it the launch exports from rank 0)."""
    launch = launch_ifname_vars(cluster)
    return {**ifjudge.socket_ifname_vars(cluster.base(node).env), **launch}, launch


def usable_matches(cluster: Cluster, node: str) -> dict[str, list[str]]:
    """var -> the usable interfaces (up, with an address, not lo) its value selects on node."""
    found = ifaces(cluster, node)
    out = {}
    for var, value in ifname_vars(cluster, node)[0].items():
        out[var] = [i.name for i in ifjudge.selected(ifjudge.parse_ifspec(value, var), found)]
    return out


def ifname_picks(cluster: Cluster, var: str) -> dict[str, ifjudge.Pick]:
    """`var` (a *_SOCKET_IFNAME) on every node with base facts: its value as the ranks get it
    there, whether it selects a usable interface, whether the launch exports it from rank 0."""
    out = {}
    for node in cluster.names:
        if cluster.base_or_none(node) is None:
            continue
        got, launch = ifname_vars(cluster, node)
        value = got.get(var)
        out[node] = ifjudge.Pick(value, value is not None and bool(
            usable_matches(cluster, node).get(var)), var in launch)
    return out


def comm_interface(cluster: Cluster, node: str) -> str | None:
    """The interface the launch's traffic uses on node: the first one the variables select,
    else the one the route to another node leaves by."""
    for names in usable_matches(cluster, node).values():
        if names:
            return names[0]
    for res in routes(cluster, node).values():
        if res.ok:
            dev = route_device(res.out)
            if dev and dev != "lo":
                return dev
    return None


def _warm_routes(cluster: Cluster, node: str) -> None:
    """Fill the routes cache of node; whatever goes wrong is reported by the tests that need it."""
    try:
        if cluster.login_error(node) is None:
            routes(cluster, node)
    except (Exception, pytest.fail.Exception):  # noqa: BLE001 - a failed base probe too
        pass


def mtus(cluster: Cluster) -> dict[str, tuple[str, int | None]]:
    """F6's table: every reachable node's launch interface and its MTU (once per session)."""
    def compute() -> dict[str, tuple[str, int | None]]:
        out = {}
        # the route probes of all nodes at once (one round trip each), not one node after another
        cluster.pool.map(lambda n: _warm_routes(cluster, n), cluster.names)
        for n in cluster.names:
            if cluster.base_or_none(n) is None:  # its own tests report why
                continue
            dev = comm_interface(cluster, n)
            if dev is not None:
                found = ifaces(cluster, n)
                out[n] = (dev, found[dev].mtu if dev in found else None)
        return out
    return cluster.memo(MTUS, compute)


def routes(cluster: Cluster, node: str) -> Mapping[str, Command]:
    """`ip -o route get` from node to the address it resolves each of its targets to (the
    selected pairs, --pairs; cached)."""
    facts = cluster.base(node)
    placed = [sshnames.placement(facts, b).addrs for b in pairs_mod.targets_of(cluster, node)
              if b != node]
    addrs = sorted({got[0] for got in placed if got})
    try:
        return cluster.probe(node, ROUTES, route_to=addrs)
    except ProbeError:
        return {}
