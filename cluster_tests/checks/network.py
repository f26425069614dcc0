"""F. Network and firewall (CHECKLIST F1-F6): every node reaches every node on the ports the
launch opens, with real listeners and short deadlines (a dropped port is red in seconds, not a
launch hanging for 20 minutes), and the interfaces the libraries are told to use exist.
Verdicts: judge/network/ (portjudge.py F1-F4, pairjudge.py F1/F3 pair by pair, ifjudge.py
F5-F6, ownaddr.py F7; the facts: portfacts.py); the port matrix: measure/ports.py; the
interfaces: measure/ifaces.py."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import pytest

from cluster_tests.checks import block_on, master_addr_verdict
from cluster_tests.core import nodetable, outcome
from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, Declared, ProbeError
from cluster_tests.core.memokey import MemoKey, base_key
from cluster_tests.core.nodetable import NodeColumn
from cluster_tests.core.settings import Settings
from cluster_tests.judge.hostfile import masteraddr as ma
from cluster_tests.judge.names import ownname
from cluster_tests.judge.network import ifjudge, ownaddr, pairjudge
from cluster_tests.judge.network import portjudge as nc
from cluster_tests.judge.network.portfacts import (
    FIREWALL,
    MasterListen,
    PortStatus,
    Reach,
)
from cluster_tests.judge.problem import Problem
from cluster_tests.judge.ssh import sshnames
from cluster_tests.measure import ifaces, masterroute, ports, rehearsal

pytestmark = pytest.mark.network


#: the tests of this section that read the rehearsal (F5: the launch's exports)
REHEARSAL_READERS = frozenset({ids.SOCKET_IFNAME.name})
#: the tests that read the port matrix
MATRIX_READERS = frozenset(t.name for t in (ids.REACHABLE, ids.MASTER_PORT, ids.HIGH_PORTS,
                                             ids.FIREWALL_RULES, ids.OWN_ADDRESS))


def session_start(cluster: Cluster, selected: frozenset[str]) -> None:
    """After collection: F5 reads the launch's exports (the rehearsal's rank-0 part, not its
    pdsh legs); start that in the background (see env.session_start); and the port matrix, so
    that its rounds (listen, connect, stop: round trips, little work) overlap the S checks'
    waits instead of following them."""
    if selected & REHEARSAL_READERS:
        rehearsal.start_background(cluster, legs=False)
    if selected & MATRIX_READERS:
        ports.start_background(cluster)


def node_probes(settings: Settings) -> list[Declared]:
    """The probes this section's tests ask of every node they touch (`Cluster.prefetch`)."""
    return [(FIREWALL, {})]


def _interface_column(cluster: Cluster, node: str) -> str | None:
    mtus = cluster.cached(ifaces.MTUS) or {}
    if node not in mtus:
        return None
    dev, mtu = mtus[node]
    return f"{dev} (mtu {mtu})"


nodetable.declare(NodeColumn("interface", _interface_column, rank=5))


class NetworkWarning(UserWarning):
    """Works, but worth a look (slow pair, firewall rules that do not bite today)."""


def _slice(cluster: Cluster, a: str, b: str, check: ids.TestId) -> Reach:
    """What a reached of b in the port matrix; fails briefly when a or b could not take part."""
    cluster.require(a)
    cluster.require(b)
    m = ports.port_matrix(cluster)
    # a dials b's own address where b's ranks advertise a usable one; else b's name as a
    # resolves it, which may lead elsewhere (N1's red)
    block_on(pairjudge.misresolved_roots(m, a, b, cluster.cached(base_key(a)),
                                         cluster.cached(base_key(b))))
    for node, errors, what in ((b, m.listen_errors, "open listeners"),
                               (a, m.connect_errors, "run connections")):
        if node in errors:
            outcome.fail(nc.matrix_gap(a, b, node, what, errors[node], check.item))
    reach = m.reach(a, b)
    if reach is None:
        outcome.fail(nc.no_result(a, b, check.item))
    if reach.addr is None:
        outcome.fail(nc.unresolved(a, b, reach.resolve_error, check.item))
    return reach


def _block_by_others(cluster: Cluster, a: str, b: str) -> None:
    """a -> b failed: blocked by the red that holds the cause, where another holds it (a node's
    own firewall: F4; the address b's ranks advertise: F7)."""
    m = ports.port_matrix(cluster)
    block_on(pairjudge.firewall_roots(*ports.firewall_facts(cluster, a, b), a, b))
    block_on(pairjudge.own_address_roots(m, a, b, _own_verdict(cluster, b)[0] is not None))


NAME_INDEX: MemoKey[dict[str, int]] = MemoKey("netcheck", "name_index")
FLAG_ROWS: MemoKey[list[bytearray | None]] = MemoKey("netcheck", "flag_rows")
CLEAN_FLAGS: MemoKey[dict[str, bytearray]] = MemoKey("netcheck", "clean_flags")


def _clean_flags(cluster: Cluster, m: nc.PortMatrix) -> dict[str, bytearray]:
    """The matrix's clean flags (judge/network/pairjudge.py), worked out once for the whole
    matrix, after every node's base facts are in."""
    return cluster.memo(CLEAN_FLAGS, lambda: pairjudge.clean_flags(
        m, cluster.names, *ports.peers(cluster), ports.rtt_typical(cluster)))


def _per_node(cluster: Cluster, pair: tuple[str, str], check: Callable[[str, str], object],
              item_id: ids.TestId, record: Callable[[str, str], None]) -> None:
    """A per-node item of F1/F3 under --pairs matrix (`node3->*`, `*->node3`): `check` on each
    of its ordered pairs, a failing pair red on the item of the node at fault (the source when
    its own side is, else the target) and blocked, naming that red, on the other."""
    anchor = pair[0] if pair[1] == pairs_mod.ANY else pair[1]
    cluster.require(anchor)
    m = ports.port_matrix(cluster)
    record("matrix_seconds", f"{m.seconds:.2f}")

    def owner(t: outcome.Tried) -> str | None:
        there = ports.pair_item(cluster, item_id, *t.pair)
        return None if there == item_id.of(*pair) else there

    flags = _clean_flags(cluster, m)
    bit = pairjudge.F1_CLEAN if item_id is ids.REACHABLE else pairjudge.F3_CLEAN
    names = cluster.names

    def one(p: tuple[str, str]) -> outcome.Tried:
        peer = p[1] if pair[1] == pairs_mod.ANY else p[0]
        if cluster.login_error(peer) is not None:
            # a peer that cannot be logged in is left out (its own red says why), so that a
            # dead node blocks its own two items, not every node's
            return outcome.Tried(p, why=f"{peer} unreachable: see {ids.LOGIN.of(peer)}",
                                 skipped=True)
        return outcome.attempt(p, check)

    # the clean pairs (nearly all of a million) are read from the flags, with no object each:
    # one byte per peer, 1 where clean, 0 where the pair's check runs
    if pair[1] == pairs_mod.ANY:
        line = pairjudge.row_line(flags.get(pair[0]), len(names), bit)
    else:
        index = cluster.memo(NAME_INDEX, lambda: {n: i for i, n in enumerate(cluster.names)})
        rows = cluster.memo(FLAG_ROWS, lambda: [flags.get(x) for x in cluster.names])
        line = pairjudge.column_line(rows, index[pair[1]], bit)
    tried: list[outcome.Tried] = []
    marks = bytearray(line.translate(pairjudge.CLEAN_MARK))  # the reports' matrix: one mark a peer
    i = line.find(0)
    while i >= 0:
        t = one((pair[0], names[i]) if pair[1] == pairs_mod.ANY else (names[i], pair[1]))
        tried.append(t)
        marks[i] = ord(outcome.row([t]))
        i = line.find(0, i + 1)
    record("row", marks.decode())
    # a pair's warnings once: on its source's item
    outcome.conclude(pair, tried, owner, warn=pair[1] == pairs_mod.ANY,
                     passed=len(names) - len(tried))


@pairs_mod.per_node
def test_reachable(cluster: Cluster, pair: tuple[str, str], record_property) -> None:
    """F1: a reaches b; TCP handshake round-trip time and jitter measured; outliers flagged."""
    if pairs_mod.ANY in pair:
        try:
            _per_node(cluster, pair, lambda a, b: _reachable(cluster, a, b), ids.REACHABLE,
                      record_property)
        finally:
            if pair[1] == pairs_mod.ANY:  # the source's row of the latency matrix
                m = cluster.cached(ports.PORT_MATRIX)
                text = ports.rtt_row(cluster, m, pair[0]) if m is not None else None
                if text is not None:
                    record_property("rtt_row", text)
        return
    _reachable(cluster, *pair, record=record_property)


def _reachable(cluster: Cluster, a: str, b: str,
               record: Callable[[str, str], None] | None = None) -> None:
    reach = _slice(cluster, a, b, ids.REACHABLE)
    stats = nc.rtt_stats(reach.rtt_ms)
    if stats is None:
        if reach.ssh is not None and reach.ssh.ok:
            warnings.warn(NetworkWarning(
                f"{a} -> {b}: reaches {b}:22 but none of its high ports: RTT not measured "
                f"(see {ports.pair_item(cluster, ids.HIGH_PORTS, a, b)})"), stacklevel=1)
            return
        m = ports.port_matrix(cluster)
        _block_by_others(cluster, a, b)
        if nc.source_at_fault(m, a, b):
            outcome.fail(nc.source_fault_problem(a, b, str(reach.addr),
                                                 f"{b}'s high ports nor from its sshd",
                                                 ports.drop_rules(cluster, a),
                                                 ids.REACHABLE.item))
        outcome.fail(nc.unreachable_problem(a, reach))
    if record is not None:
        record("rtt_ms", f"{stats.median_ms:.3f}")
        record("jitter_ms", f"{stats.jitter_ms:.3f}")
    slow = pairjudge.slow_pair(a, b, stats, ports.rtt_typical(cluster))
    if slow is not None:
        warnings.warn(NetworkWarning(slow), stacklevel=1)


@pairs_mod.per_node
def test_high_ports(cluster: Cluster, pair: tuple[str, str], record_property) -> None:
    """F3: arbitrary high ports of b accept connections from a (each direction on its own)."""
    if pairs_mod.ANY in pair:
        _per_node(cluster, pair, lambda a, b: _high_ports(cluster, a, b), ids.HIGH_PORTS,
                  record_property)
    else:
        _high_ports(cluster, *pair, record=record_property)


def _high_ports(cluster: Cluster, a: str, b: str,
                record: Callable[[str, str], None] | None = None) -> None:
    reach = _slice(cluster, a, b, ids.HIGH_PORTS)
    m = ports.port_matrix(cluster)
    if record is not None:
        record("matrix_seconds", f"{m.seconds:.2f}")
    if not reach.failed:
        if reach.retried:
            warnings.warn(NetworkWarning(
                f"{a} -> {b}: a connection to {b}'s high ports timed out, and answered when tried "
                f"again at once: a busy node or a lossy link (NCCL and gloo retry too)"),
                stacklevel=1)
        return
    _block_by_others(cluster, a, b)
    at_a = nc.source_at_fault(m, a, b)
    outcome.fail(nc.high_ports_problem(
        reach, a, timeout=m.port_timeout, into_b=nc.failing_into(m, b), source_fault=at_a,
        rules=ports.drop_rules(cluster, a if at_a else b),
        source_addr=ports.source_address(cluster, a, b)))


def test_master_port(cluster: Cluster, rendezvous_leg: tuple[str, str]) -> None:
    """F2: the rendezvous port is free on the rank-0 node, and `node` can connect to it there
    (the id names both ends: node->rank0)."""
    node, rank0 = rendezvous_leg
    port = cluster.settings.master_port
    cluster.require(rank0)
    m = ports.port_matrix(cluster)
    if rank0 in m.listen_errors:
        outcome.fail(nc.listeners_failed((node, rank0), rank0, m.listen_errors[rank0],
                                         ids.MASTER_PORT.item))
    master = m.master(rank0)
    if master is None or not master.free:
        if node != rank0:
            outcome.block(ids.MASTER_PORT.of(rank0, rank0), f"port {port} is taken on {rank0}")
            pytest.skip(f"port {port} is taken on {rank0}: see {ids.MASTER_PORT.of(rank0, rank0)}")
        outcome.fail(nc.master_port_taken(node, rank0, port, master or MasterListen(port, False)))
    d = masterroute.derived(cluster)
    if d.value is None:  # H3 is red on rank 0: DeepSpeed cannot derive one
        why = ma.judge(d, {}, {})
        outcome.block(ids.MASTER_ADDR.of(rank0), "the launch has no --master_addr to connect to"
                      + (f": {why.headline}" if why else ""))
        # H3 is not in this run (-m network): the cause is this red's, never hidden
        outcome.fail(nc.no_master_addr(node, rank0, port, why, d.command))
    reach = _slice(cluster, node, rank0, ids.MASTER_PORT)
    if reach.master is None or not reach.master.ok:
        _master_leg(cluster, m, reach, node, d.value)


def _master_leg(cluster: Cluster, m: nc.PortMatrix, reach: Reach, node: str,
                value: str | None) -> None:
    """F2's red on node -> rank 0, whose master port did not answer; blocked where H3's red or
    a node's own firewall (F4) holds the cause."""
    rank0, res, port = reach.target, reach.master, cluster.settings.master_port
    h3 = master_addr_verdict(cluster)
    if res is not None and res.status is PortStatus.UNRESOLVED:
        # a master address that is no address of rank 0 (a banner's word, a name): H3's cause
        if h3 is not None:
            outcome.block(ids.MASTER_ADDR.of(rank0), h3.headline)
        outcome.fail(nc.master_addr_unresolved(node, rank0, port, value, res))
    block_on(pairjudge.firewall_roots(*ports.firewall_facts(cluster, node, rank0), node, rank0))
    if h3 is not None:
        # the leg fails where H3 finds the address DeepSpeed derives unusable (no route from
        # this node, an address rank 0 does not own...): a consequence of H3's red, not a cause
        outcome.block(ids.MASTER_ADDR.of(rank0), h3.headline)
    outcome.fail(nc.master_leg_problem(
        node, reach, port, value, m.port_timeout, source_fault=nc.source_at_fault(m, node, rank0),
        rules={n: ports.drop_rules(cluster, n) for n in (node, rank0)}))


def test_firewall_rules(cluster: Cluster, node: str, record_property) -> None:
    """F4: DROP/REJECT rules in INPUT are reported; red only when the port matrix shows they
    drop what the launch needs (a high port or the master port from another node)."""
    cluster.require(node)
    try:
        fw = cluster.probe(node, FIREWALL)
    except ProbeError as exc:
        outcome.fail(exc.problem(ids.FIREWALL_RULES.item))
    rules = ports.drop_rules(cluster, node)
    if rules is None:
        errs = "; ".join(f"{tool}: {c.err.strip()[:150]}" for tool, c in fw.tools)
        pytest.skip(f"{node}: cannot read the firewall rules (needs root; uid {fw.uid}): {errs}")
    if not fw.tools:
        pytest.skip(f"{node}: neither iptables nor nft is installed: no local firewall to report")
    record_property("drop_rules", str(len(rules)))
    if not rules:
        return
    m = ports.port_matrix(cluster)
    hurt = nc.firewall_hurt(m, node)
    if hurt:
        broken = nc.firewall_pairs(m, ports.all_drop_rules(cluster), node)
        outcome.fail(nc.firewall_problem(node, hurt, broken, broken or nc.hurt_into(m, node),
                                         rules))
    listing = "\n    ".join(rules[:20])
    warnings.warn(NetworkWarning(
        f"{node}: DROP/REJECT rules in INPUT, which do not hit the ports tested today "
        f"(a launch on other ports might):\n    {listing}"), stacklevel=1)


# -- F5 / F6: the interfaces the libraries are told to use -------------------------------------

#: why F5 does not apply to a node (its own check, and each of its routes)
NO_IFNAME = ("no NCCL/GLOO/HCCL_SOCKET_IFNAME set in pdsh's shell (the libraries pick the "
             "interface themselves): nothing to check")

def test_socket_ifname(cluster: Cluster, node: str, record_property) -> None:
    """F5: NCCL/GLOO/HCCL_SOCKET_IFNAME, as the ranks get them (pdsh's shell, under what the
    launch exports from the rank-0 node), match a usable interface."""
    specs, launch = ifaces.ifname_vars(cluster, node)
    if not specs:
        record_property("socket_ifname", "unset")
        pytest.skip(f"{node}: {NO_IFNAME}")
    here = ifaces.ifaces(cluster, node)
    rank0 = cluster.rank0.name
    misses = []
    for var, value in specs.items():
        spec = ifjudge.parse_ifspec(value, var)
        good = ifjudge.selected(spec, here)
        record_property(var, f"{value} -> {','.join(i.name for i in good) or 'nothing'}")
        if good:
            continue
        # the same value reaches every rank where the launch exports it: where it fits no
        # node, the cause is rank 0's
        fits = ifjudge.fits(spec, ifaces.others(cluster, node)) if var in launch else None
        root = ifjudge.exported_root(var, value, fits, node, rank0)
        if root is not None:
            outcome.block(root.check, root.why)
            pytest.skip(f"{root.why}: see {root.check}")
        misses.append(ifjudge.Miss(var, value, spec, fits))
    problem = ifjudge.judge_socket_ifname(node, rank0, misses, here)
    if problem is not None:
        outcome.fail(problem)


def test_socket_ifname_route(cluster: Cluster, pair: tuple[str, str]) -> None:
    """F5: the route from a to b's address leaves by the interface the variables select on a."""
    a, b = pair
    matches = ifaces.usable_matches(cluster, a)
    if not matches:
        pytest.skip(f"{a}: {NO_IFNAME}")
    if a == b:
        pytest.skip(f"{a} -> {a}: traffic to itself takes the loopback, whatever the variables say")
    if any(not names for names in matches.values()):
        pytest.skip(f"{a}: a *_SOCKET_IFNAME matches no usable interface: see "
                    f"{ids.SOCKET_IFNAME.of(a)}")
    addrs = list(sshnames.placement(cluster.base(a), b).addrs)
    if not addrs:
        pytest.skip(f"{a} cannot resolve {b}: see {ids.RESOLVES.of(a, b)}")
    problem = ifjudge.judge_route(a, b, addrs[0], ifaces.routes(cluster, a).get(addrs[0]),
                                  matches, ifaces.ifname_vars(cluster, a)[0])
    if problem is not None:
        outcome.fail(problem)


def test_mtu(cluster: Cluster, node: str, record_property) -> None:
    """F6: the interface the launch uses has the same MTU on every node."""
    cluster.require(node)
    mtus = ifaces.mtus(cluster)
    if node not in mtus:
        pytest.skip(f"{node}: no interface found for the launch's traffic "
                    f"(see {ids.SOCKET_IFNAME.of(node)})")
    dev, mtu = mtus[node]
    record_property("interface", dev)
    record_property("mtu", str(mtu))
    problem = ifjudge.judge_mtu(node, mtus, cluster.rank0.name)
    if problem is not None:
        outcome.fail(problem)


# -- F7: each rank's own address, as torch.distributed takes it ---------------------------------

OWN_VERDICTS: MemoKey[dict[str, tuple[Problem | None, str | None]]] = MemoKey("netcheck", "own")


def _own_verdict(cluster: Cluster, node: str) -> tuple[Problem | None, str | None]:
    """F7's (red, warning) for `node`'s own address, judged once (F7 reports them; F1/F3 read
    them where they dialed that address and failed)."""
    verdicts = cluster.memo(OWN_VERDICTS, dict)
    got = verdicts.get(node)
    if got is None:
        got = verdicts[node] = ownaddr.node_verdict(
            ports.port_matrix(cluster), node, ports.entries_into(cluster).get(node, ()))
    return got


def test_own_address(cluster: Cluster, node: str, record_property) -> None:
    """F7: the address `node`'s gloo ranks advertise (its own hostname resolved there as torch
    and gloo resolve it, the first result that binds; GLOO_SOCKET_IFNAME's interface where set)
    is one every peer connects to (a listener on exactly that address, a connect from each)."""
    cluster.require(node)
    m = ports.port_matrix(cluster)
    if node in m.listen_errors:
        outcome.fail(nc.listeners_failed((node,), node, m.listen_errors[node],
                                         ids.OWN_ADDRESS.item))
    own = m.listeners[node].own
    if own is not None and own.addr:
        record_property("own_address", f"{own.addr} ({own.how})")
    found, latent = _own_verdict(cluster, node)
    if latent is not None:
        warnings.warn(NetworkWarning(latent), stacklevel=1)
    if found is not None:
        if ownaddr.loopback_from_hostname(own) and (
                n3 := ownname.judge(node, cluster.base_or_none(node))) is not None:
            # the hostname's loopback line in /etc/hosts: N3's red where N3 runs, else this
            # red with N3's fix for fixes.sh
            outcome.block(ids.HOSTNAME_NOT_LOOPBACK.of(node), n3.headline)
            found = dataclasses.replace(found, fixes=(*found.fixes, *n3.fixes))
        outcome.fail(found)
