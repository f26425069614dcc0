"""F. Network and firewall (CHECKLIST F1-F6): every node reaches every node on the ports the
launch opens, with real listeners and short deadlines (a dropped port is red in seconds, not a
launch hanging for 20 minutes), and the interfaces the libraries are told to use exist.
Verdicts: judge/network/ (portjudge.py F1-F4, ifjudge.py F5-F6, ownaddr.py F7; the facts:
portfacts.py); the port matrix: measure/ports.py; the interfaces: measure/ifaces.py."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable

import pytest

from cluster_tests.core import nodetable, outcome
from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, Declared, ProbeError
from cluster_tests.core.memokey import MemoKey, base_key
from cluster_tests.core.nodetable import NodeColumn
from cluster_tests.core.settings import Settings
from cluster_tests.core.testids import LAUNCHER
from cluster_tests.judge.common import netfacts
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.hostfile import masteraddr as ma
from cluster_tests.judge.names import ownname
from cluster_tests.judge.network import ifjudge, ownaddr
from cluster_tests.judge.network import portjudge as nc
from cluster_tests.judge.network.portfacts import (
    FIREWALL,
    MasterListen,
    OwnAddress,
    PortStatus,
    PortTry,
    Reach,
)
from cluster_tests.judge.problem import ROW_MARKS, Problem
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
    wrong = None if a == LAUNCHER or _dialed(m, b) else netfacts.misresolved(
        cluster.cached(base_key(a)), cluster.cached(base_key(b)), b)
    if wrong is not None:
        outcome.block(ids.RESOLVES.of(a, b), f"{a} resolves {b} to {', '.join(wrong[0])}, "
                                             f"another machine")
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


def _dialed(m: nc.PortMatrix, b: str) -> bool:
    """Whether the sources dialed b at its own address (not at its name as they resolve it)."""
    return bool(m.dial.get(b))


def _block_by_own_address(cluster: Cluster, m: nc.PortMatrix, a: str, b: str) -> None:
    """a -> b failed at b's own address (the one b's ranks advertise) and worked where b's name
    leads: where F7 finds that address unusable, F7's red on b holds the cause."""
    reach = m.reach(a, b)
    if _dialed(m, b) and reach is not None and reach.elsewhere_ok \
            and _own_verdict(cluster, b)[0] is not None:
        outcome.block(ids.OWN_ADDRESS.of(b), f"{a} -> {b}: {b}'s ranks advertise "
                                             f"{m.dial[b]}, which its peers cannot use")


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
    bit = F1_CLEAN if item_id is ids.REACHABLE else F3_CLEAN
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
        line = bytes(flags.get(pair[0]) or bytes(len(names))).translate(CLEAN_BYTE[bit])
    else:
        col = _name_index(cluster)[pair[1]]
        line = bytes((r[col] if r is not None else 0) for r in _rows(cluster, flags)
                     ).translate(CLEAN_BYTE[bit])
    tried: list[outcome.Tried] = []
    marks = bytearray(line.translate(CLEAN_MARK))  # the reports' matrix: one mark per peer
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


#: flag byte -> 1 where the bit (F1_CLEAN or F3_CLEAN) is set, else 0
CLEAN_BYTE = {bit: bytes(1 if v & bit else 0 for v in range(256)) for bit in (1, 2)}
#: clean byte -> the passed mark (the others are written over, pair by pair)
CLEAN_MARK = bytes(ord(ROW_MARKS["passed"]) if v == 1 else ord("?") for v in range(256))
NAME_INDEX: MemoKey[dict[str, int]] = MemoKey("netcheck", "name_index")
FLAG_ROWS: MemoKey[list[bytearray | None]] = MemoKey("netcheck", "flag_rows")


def _name_index(cluster: Cluster) -> dict[str, int]:
    return cluster.memo(NAME_INDEX, lambda: {n: i for i, n in enumerate(cluster.names)})


def _rows(cluster: Cluster, flags: dict[str, bytearray]) -> list[bytearray | None]:
    """The flag rows in name order (None: that source did not answer)."""
    return cluster.memo(FLAG_ROWS, lambda: [flags.get(x) for x in cluster.names])


F3_CLEAN, F1_CLEAN = 1, 2
CLEAN_FLAGS: MemoKey[dict[str, bytearray]] = MemoKey("netcheck", "clean_flags")


def _clean_flags(cluster: Cluster, m: nc.PortMatrix) -> dict[str, bytearray]:
    """Per source that answered, one byte per node in name order: F3_CLEAN when a -> b surely
    passes F3 without a word (`_clean`), F1_CLEAN when F1 too. Worked out once for the whole
    matrix, after every node's base facts are in: a pair is in four per-node items (F1 and
    F3, at each end), and 1024 nodes make a million pairs."""
    def compute() -> dict[str, bytearray]:
        names = cluster.names
        where = {n: i for i, n in enumerate(names)}
        bases = {n: cluster.base_or_none(n) for n in names}
        down = {n for n in names if cluster.login_error(n) is not None}
        typical = ports.rtt_typical(cluster)
        out: dict[str, bytearray] = {}
        for a in m.results:
            if a in down:
                out[a] = bytearray(len(names))
                continue
            row = m.compact.get(a)
            if row is not None and (row.names is names or row.names == names):
                out[a] = _row_flags(m, a, row, where, bases, down, typical)
                continue
            flags = out[a] = bytearray(len(names))
            for i, b in enumerate(names):
                if b not in down:
                    flags[i] = _clean(m, a, b, bases[a], bases[b], typical)
        return out
    return cluster.memo(CLEAN_FLAGS, compute)


def _row_flags(m: nc.PortMatrix, a: str, row: nc.CompactRow, where: dict[str, int],
               bases: dict[str, BaseFacts | None], down: set[str],
               typical: float | None) -> bytearray:
    """`_clean` for every target of a compact row asked in name order, in bulk: the compact
    entries from the row's arrays at once (a 4096-node matrix has 16.7 M), then what differs
    from that, each where it can be: the pairs with an entry of their own, the targets `a`
    resolved (the only ones it can misresolve), `a` itself, the nodes that are down."""
    both = F3_CLEAN | F1_CLEAN
    # not an outlier (nc.is_outlier): at most max(5 x, x + 2 ms) the typical RTT; NaN (no
    # sample) compares false, so such an entry is F3-clean only, as in _clean
    limit = math.inf if typical is None else max(typical * 5.0, typical + 2.0)
    flags = bytearray(both if (x and r <= limit) else (F3_CLEAN if x else 0)
                      for x, r in zip(row.addr, row.rtt, strict=True))
    me = where[a]
    if row.addr[me] and row.rtt[me] == row.rtt[me]:
        flags[me] = both  # a node to itself: F1 judges no outlier
    base_a = bases[a]
    for b in (base_a.resolve if base_a is not None else ()):
        i = where.get(b)
        if i is not None and flags[i] and not m.dial.get(b) \
                and netfacts.misresolved(base_a, bases[b], b) is not None:
            flags[i] = 0
    for b in m.results.get(a) or {}:  # the pairs that did not come back compact
        i = where.get(b)
        if i is not None:
            flags[i] = _clean(m, a, b, base_a, bases[b], typical)
    for b in down:
        flags[where[b]] = 0
    return flags


def _clean(m: nc.PortMatrix, a: str, b: str, base_a: BaseFacts | None,
           base_b: BaseFacts | None, typical: float | None) -> int:
    """F3_CLEAN | F1_CLEAN where a -> b surely passes F3 (and F1) without a word, so that a
    per-node item need not run the pair's check (1024 peers a node): every port answered, a
    resolved b to b's own address, and for F1 an RTT that is no outlier. Anything else (0)
    runs the check. Both ends logged in: the caller's to know."""
    compact = m.compact_of(a, b)
    addr: str | None
    if compact is not None:  # netprobe's compact entry (every port answered): a million of them
        addr, median = compact
        rtt: float | None = None if math.isnan(median) else median
    else:
        reach = m.reach(a, b)
        if reach is None or reach.retried or reach.failed or not reach.ports:
            return 0  # (retried: answered on the second try; the pair's check says so)
        addr = reach.addr
        stats = nc.rtt_stats(reach.rtt_ms)
        rtt = stats.median_ms if stats is not None else None
    if addr is None or (not m.dial.get(b) and netfacts.misresolved(base_a, base_b, b)
                        is not None):
        return 0
    if rtt is not None and (a == b or not nc.is_outlier(rtt, typical)):
        return F3_CLEAN | F1_CLEAN
    return F3_CLEAN


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
                text = _rtt_row(cluster, m, pair[0]) if m is not None else None
                if text is not None:
                    record_property("rtt_row", text)
        return
    _reachable(cluster, *pair, record=record_property)


RTT_TEXT: MemoKey[dict[float, str]] = MemoKey("netcheck", "rtt_text")
ENTRIES_INTO: MemoKey[dict[str, list[tuple[str, Reach]]]] = MemoKey("netcheck", "entries_into")


def _entries_into(cluster: Cluster, m: nc.PortMatrix) -> dict[str, list[tuple[str, Reach]]]:
    """target -> [(source, what it reached)] of the matrix's entries kept whole (under --pairs
    matrix the ones that did not come back compact), by target: gathered once, not once per
    target."""
    def compute() -> dict[str, list[tuple[str, Reach]]]:
        out: dict[str, list[tuple[str, Reach]]] = {}
        for a, row in m.results.items():
            for b, r in row.items():
                out.setdefault(b, []).append((a, r))
        return out
    return cluster.memo(ENTRIES_INTO, compute)


def _rtt_row(cluster: Cluster, m: nc.PortMatrix, a: str) -> str | None:
    """a's median RTT to every node in name order, in ms with three decimals ("-": not
    measured), for the reports' latency map; None when none was.  A compact row is read from
    its arrays, each distinct value formatted once (RTTs have few: 16.7 M of them at 4096
    nodes)."""
    names = cluster.names
    row = m.compact.get(a)
    text = cluster.memo(RTT_TEXT, dict)
    words: list[str] = []
    if row is not None and (row.names is names or row.names == names):
        for b, x, r in zip(names, row.addr, row.rtt, strict=True):
            if not x:  # not compact: the pair's own entry
                v = _median_rtt(m, a, b)
                words.append("-" if v is None else f"{v:.3f}")
            elif r != r:  # NaN: no sample
                words.append("-")
            else:
                w = text.get(r)
                words.append(w if w is not None else text.setdefault(r, f"{r:.3f}"))
    else:
        words = [("-" if (v := _median_rtt(m, a, b)) is None else f"{v:.3f}") for b in names]
    return None if all(w == "-" for w in words) else " ".join(words)


def _median_rtt(m: nc.PortMatrix, a: str, b: str) -> float | None:
    """a -> b's median handshake RTT in ms (None: not measured)."""
    compact = m.compact_of(a, b)
    if compact is not None:
        return None if math.isnan(compact[1]) else compact[1]
    reach = m.reach(a, b)
    stats = nc.rtt_stats(reach.rtt_ms) if reach is not None else None
    return stats.median_ms if stats is not None else None


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
        _block_by_firewall(cluster, a, b)
        _block_by_own_address(cluster, m, a, b)
        if nc.source_at_fault(m, a, b):
            outcome.fail(nc.source_fault_problem(a, b, str(reach.addr),
                                                 f"{b}'s high ports nor from its sshd",
                                                 _drop_rules(cluster, a),
                                                 ids.REACHABLE.item))
        outcome.fail(nc.unreachable_problem(a, reach))
    if record is not None:
        record("rtt_ms", f"{stats.median_ms:.3f}")
        record("jitter_ms", f"{stats.jitter_ms:.3f}")
    typical = ports.rtt_typical(cluster)
    if a != b and typical is not None and nc.is_outlier(stats.median_ms, typical):
        warnings.warn(NetworkWarning(
            f"{a} -> {b}: TCP handshake {stats.median_ms:.2f} ms (jitter {stats.jitter_ms:.2f} ms) "
            f"against a typical {typical:.2f} ms between the other "
            f"pairs: a slow link or a busy node"), stacklevel=1)


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
    _block_by_firewall(cluster, a, b)
    _block_by_own_address(cluster, m, a, b)
    at_a = nc.source_at_fault(m, a, b)
    outcome.fail(nc.high_ports_problem(
        reach, a, timeout=m.port_timeout, into_b=nc.failing_into(m, b), source_fault=at_a,
        rules=_drop_rules(cluster, a if at_a else b), source_addr=_source_addr(cluster, a, b)))


def _source_addr(cluster: Cluster, a: str, b: str) -> str:
    """a's address as b sees it: the one a's ranks advertise, else where b's ssh sends a's
    name."""
    m = cluster.cached(ports.PORT_MATRIX)
    if m is not None and m.dial.get(a):
        return str(m.dial[a])
    got = sshnames.placement(cluster.base(b), a).addrs
    return got[0] if got else a


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
    h3 = masterroute.verdict(cluster)
    if res is not None and res.status is PortStatus.UNRESOLVED:
        # a master address that is no address of rank 0 (a banner's word, a name): H3's cause
        if h3 is not None:
            outcome.block(ids.MASTER_ADDR.of(rank0), h3.headline)
        outcome.fail(nc.master_addr_unresolved(node, rank0, port, value, res))
    _block_by_firewall(cluster, node, rank0)
    if h3 is not None:
        # the leg fails where H3 finds the address DeepSpeed derives unusable (no route from
        # this node, an address rank 0 does not own...): a consequence of H3's red, not a cause
        outcome.block(ids.MASTER_ADDR.of(rank0), h3.headline)
    outcome.fail(nc.master_leg_problem(
        node, reach, port, value, m.port_timeout, source_fault=nc.source_at_fault(m, node, rank0),
        rules={n: _drop_rules(cluster, n) for n in (node, rank0)}))


def _drop_rules(cluster: Cluster, node: str) -> list[str] | None:
    return ports.drop_rules(cluster, node)


def _block_by_firewall(cluster: Cluster, a: str, b: str) -> None:
    """a -> b fails because of a node's own firewall rules: blocked by that node's F4 red
    (test_firewall_rules[node] names the rules and every pair they break)."""
    node = ports.firewall_root(cluster, a, b)
    if node is not None:
        outcome.block(ids.FIREWALL_RULES.of(node), f"{node}'s own firewall (INPUT) drops "
                                                   f"{a} -> {b}")


def test_firewall_rules(cluster: Cluster, node: str, record_property) -> None:
    """F4: DROP/REJECT rules in INPUT are reported; red only when the port matrix shows they
    drop what the launch needs (a high port or the master port from another node)."""
    cluster.require(node)
    try:
        fw = cluster.probe(node, FIREWALL)
    except ProbeError as exc:
        outcome.fail(exc.problem(ids.FIREWALL_RULES.item))
    rules = _drop_rules(cluster, node)
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
        broken = ports.firewall_pairs(cluster, node)
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
        fits = _fits_elsewhere(cluster, node, spec) if var in launch else None
        if fits == () and node != rank0:
            outcome.block(ids.SOCKET_IFNAME.of(rank0), f"{var}={value}, exported by the launch "
                                                       f"from {rank0}, fits no node")
            pytest.skip(f"{var}={value}, exported by the launch from {rank0}, fits no node: "
                        f"see {ids.SOCKET_IFNAME.of(rank0)}")
        misses.append(ifjudge.Miss(var, value, spec, fits))
    problem = ifjudge.judge_socket_ifname(node, rank0, misses, here)
    if problem is not None:
        outcome.fail(problem)


def _fits_elsewhere(cluster: Cluster, node: str, spec: ifjudge.IfSpec) -> tuple[str, ...]:
    """The other nodes (with base facts) where `spec` selects a usable interface."""
    return tuple(n for n in cluster.names if n != node and cluster.base_or_none(n)
                 and ifjudge.selected(spec, ifaces.ifaces(cluster, n)))


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
        got = verdicts[node] = _judge_own(cluster, node)
    return got


def _judge_own(cluster: Cluster, node: str) -> tuple[Problem | None, str | None]:
    m = ports.port_matrix(cluster)
    if node not in m.listeners:
        return None, None
    own = m.listeners[node].own
    # a peer whose connections into node fail on the high ports too is F3's (the firewall of
    # either end, named there): here only what the address itself breaks
    # (the peers that tried node: with --pairs ring two, not all; judge only reads those)
    if own is None or ownaddr.problem(node, own, {}) is None:
        # the address itself is usable: only a peer that failed it makes a problem, and a
        # compact peer (every port answered, the own address too) did not; the peers with an
        # entry of their own are few under --pairs matrix (4096 a node otherwise)
        tried = {a: r.own for a, r in _entries_into(cluster, m).get(node, ())
                 if a != node and (not r.failed or r.elsewhere_ok)}
        if ownaddr.problem(node, own, tried) is None:
            return None, None
    # a compact entry (every port answered, its own address too where tried) is read without
    # making the entry: one answer for every compact peer
    compact_own = m.compact_own(node)
    peers: dict[str, PortTry | None] = {}
    for a, row in m.results.items():
        if a == node:
            continue
        if m.compact_of(a, node) is not None:
            peers[a] = compact_own
        elif (r := row.get(node)) is not None and (not r.failed or r.elsewhere_ok):
            peers[a] = r.own
    return ownaddr.judge(node, own, peers, {a: _own_addr(m, a) for a in peers})


def _own_addr(m: nc.PortMatrix, node: str) -> str | None:
    lst = m.listeners.get(node)
    return lst.own.addr if lst is not None and lst.own is not None else None


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
        if _loopback_from_hostname(own) and (
                n3 := ownname.judge(node, cluster.base_or_none(node))) is not None:
            # the hostname's loopback line in /etc/hosts: N3's red where N3 runs, else this
            # red with N3's fix for fixes.sh
            outcome.block(ids.HOSTNAME_NOT_LOOPBACK.of(node), n3.headline)
            found = dataclasses.replace(found, fixes=(*found.fixes, *n3.fixes))
        outcome.fail(found)


def _loopback_from_hostname(own: OwnAddress | None) -> bool:
    """F7's address is a loopback answer of the hostname's own lookup (not torch's fallback,
    nor GLOO_SOCKET_IFNAME's interface)."""
    return (own is not None and own.addr is not None and own.how == "hostname"
            and netfacts.is_loopback(own.addr))
