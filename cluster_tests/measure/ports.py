"""F1-F4 over the whole cluster: the port matrix, measured once per session in O(N) SSH sessions
(three per node):

1. per node, `netprobe.py listen` binds K ephemeral high ports (plus the master port on the
   rank-0 node) and leaves a detached child holding them for a bounded time;
2. per node, `netprobe.py connect` connects to every node's ports in parallel, each attempt with
   a short deadline, and times a few handshakes (RTT);
3. per node, `netprobe.py stop` ends the listener (by pid, checked against a session token),
   always, whatever happened in 1 and 2.

Each F-test then asserts on its slice (judged by judge/network/portjudge.py); F1's RTT baseline (the
median RTT of every measured pair) is computed from it once.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import time
from collections.abc import Sequence
from typing import TypedDict

from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core.cluster import Cluster, ProbeError
from cluster_tests.core.memokey import Encoded, MemoKey
from cluster_tests.core.testids import TestId
from cluster_tests.judge.common import netfacts
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.network import ownaddr
from cluster_tests.judge.network import portjudge as nc
from cluster_tests.judge.network.portfacts import (
    CONNECT,
    FIREWALL,
    LISTEN,
    STOP,
    Listening,
    Reach,
    Stopped,
)
from cluster_tests.judge.network.portjudge import PortMatrix
from cluster_tests.judge.ssh import sshnames
from cluster_tests.measure import masterroute, sort_outcomes

PORT_MATRIX: MemoKey[PortMatrix] = MemoKey("netcheck", "port_matrix")
RTT_TYPICAL: MemoKey[float | None] = MemoKey("netcheck", "rtt_typical")
RTT_TEXT: MemoKey[dict[float, str]] = MemoKey("netcheck", "rtt_text")
ENTRIES_INTO: MemoKey[dict[str, list[tuple[str, Reach]]]] = MemoKey("netcheck", "entries_into")


def port_timeout(cluster: Cluster) -> float:
    return cluster.settings.network.port_timeout


def port_matrix(cluster: Cluster) -> PortMatrix:
    """The whole matrix, measured once for the session."""
    return cluster.memo(PORT_MATRIX, lambda: measure(cluster))


def start_background(cluster: Cluster) -> None:
    """Measure the matrix in a thread of its own (its readers wait for the same memo entry; an
    error is re-raised to each of them); the session waits for it before it ends, so that its
    listeners are stopped."""
    cluster.in_background("ct-port-matrix", lambda: port_matrix(cluster))


class Target(TypedDict, total=False):
    """One target of netprobe.py's `connect` (a parameter, as the node script reads it)."""

    name: str
    ports: list[int]
    master_port: int | None
    master_host: str | None  # the launch's --master_addr (rank 0 only)
    own: dict[str, object] | None  # its own gloo address: {"addr", "port"}
    dial: str | None  # the address its ranks advertise, where usable (ownaddr.dial_address)
    host: str | None  # the address the launcher's ssh reaches it at (an alias's HostName)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one measurement asks of the nodes: who takes part, the deadlines, the ports."""

    names: list[str]
    up: list[str]  # the nodes logged in to
    timeout: float  # each connection's
    fanout: int
    count: int  # high ports per node
    every: bool  # --pairs matrix: every peer of every node, the healthy ones come back compact
    connect_budget: float
    hold: float  # the listeners die by themselves after this, whatever happens
    rank0: str
    master_port: int
    #: F2 connects to the launch's own --master_addr (derived as DeepSpeed derives it), not to
    #: the hostfile's name for rank 0
    master_host: str | None


def plan(cluster: Cluster) -> Plan:
    names = cluster.names
    up = [n for n in names if cluster.login_error(n) is None]
    timeout, fanout = port_timeout(cluster), cluster.settings.fanout
    count = cluster.settings.network.probe_ports
    widest = max([len(pairs_mod.targets_of(cluster, n, per_node=True)) + 1 for n in up] or [1])
    sel = pairs_mod.selection(cluster)
    rounds = math.ceil(min(len(names), widest) * (count + 1) / fanout) + 1
    budget = rounds * timeout * 2 + 10
    rank0 = cluster.rank0.name
    return Plan(names, up, timeout, fanout, count, bool(sel is not None and sel.per_node), budget,
                budget + 30, rank0, cluster.settings.master_port,
                masterroute.derived(cluster).value if rank0 in up else None)


def measure(cluster: Cluster) -> PortMatrix:
    start = time.monotonic()
    p = plan(cluster)
    matrix = PortMatrix(token=secrets.token_hex(8), port_timeout=p.timeout)
    _listen(cluster, matrix, p)
    try:
        targets = _targets(cluster, matrix, p)
        _connect(cluster, matrix, p, targets)
        _confirm_timeouts(cluster, matrix, p, targets)
    finally:
        _stop(cluster, matrix)
    matrix.seconds = time.monotonic() - start
    return matrix


def _listen(cluster: Cluster, matrix: PortMatrix, p: Plan) -> None:
    """Every node's listeners (its high ports, the master port on rank 0, and one on the node's
    own address as its gloo ranks take it: F7)."""
    def listen(node: str) -> Listening:
        facts = cluster.base_or_none(node)
        env = facts.env if facts is not None else {}
        return cluster.probe(node, LISTEN, token=matrix.token, ports=p.count, hold=p.hold,
                             master_port=p.master_port if node == p.rank0 else None,
                             own_address=True, gloo_ifname=env.get("GLOO_SOCKET_IFNAME"),
                             timeout=30)

    sort_outcomes(zip(p.up, cluster.pool.map(listen, p.up), strict=False), matrix.listeners,
                  matrix.listen_errors)


def _targets(cluster: Cluster, matrix: PortMatrix, p: Plan) -> list[Target]:
    """What the sources are asked to connect to, and where (`matrix.dial` filled in): the
    address the ranks dial (F1/F3), the node's own address as its ranks advertise it, never the
    hostfile's name (an ssh alias may be the only name it has); where that address is unusable
    (F7's red), the address ssh reaches it at, else its name."""
    targets: list[Target] = []
    for node, lst in matrix.listeners.items():
        master, own = lst.master, lst.own
        matrix.dial[node] = ownaddr.dial_address(own)
        targets.append({"name": node, "ports": list(lst.ports),
                        "master_port": master.port if master is not None and master.free
                        else None,
                        "master_host": p.master_host if node == p.rank0 else None,
                        "own": {"addr": own.addr, "port": own.port} if own is not None else None,
                        "dial": matrix.dial[node], "host": _ssh_address(cluster, node)})
    for node in p.names:
        if node not in matrix.listeners:
            targets.append({"name": node, "ports": [], "master_port": None})
    return targets


def _connect(cluster: Cluster, matrix: PortMatrix, p: Plan, targets: list[Target]) -> None:
    """Every source's connections to its targets (those of its selected pairs: every node under
    --pairs matrix; and rank 0, F2's master port)."""
    orders: dict[tuple[str, ...], tuple[list[str], dict[str, int]]] = {}
    # a target list asked of many nodes (--pairs matrix: the same for every node) is encoded
    # once, not once per node: 600 KB of JSON at 4096 nodes
    encoded: dict[tuple[str, ...], Encoded] = {}

    def connect(node: str) -> dict[str, Reach]:
        mine = set(pairs_mod.targets_of(cluster, node, per_node=True)) | {p.rank0}
        asked = [t for t in targets if t["name"] in mine]
        key = tuple(t["name"] for t in asked)
        listed: list[Target] | Encoded = asked
        if p.every:
            listed = encoded.get(key) or encoded.setdefault(key, Encoded(asked))
        got = cluster.probe(node, CONNECT, token=matrix.token, targets=listed,
                            port_timeout=p.timeout, fanout=p.fanout,
                            samples=cluster.settings.network.rtt_samples, compact=p.every,
                            timeout=p.connect_budget + 10)
        if got.compact is not None:  # --pairs matrix: flat arrays, one order per target list
            order = orders.get(key)
            if order is None:
                order = orders.setdefault(key, (list(key), {n: i for i, n in enumerate(key)}))
            try:
                matrix.add_compact(node, *order, got.compact)
            except ValueError as exc:
                raise ProbeError(node, f"netprobe's compact answer: {exc}") from None
        return dict(got.reached)

    sort_outcomes(zip(p.up, cluster.pool.map(connect, p.up), strict=False), matrix.results,
                  matrix.connect_errors)


def _stop(cluster: Cluster, matrix: PortMatrix) -> None:
    """End every listener (by pid, checked against the session's token), whatever happened."""
    stoppable = [n for n, lst in matrix.listeners.items() if lst.pid]

    def stop(node: str) -> Stopped:
        return cluster.probe(node, STOP, token=matrix.token, pid=matrix.listeners[node].pid,
                             timeout=20)

    for node, res in zip(stoppable, cluster.pool.map(stop, stoppable), strict=False):
        matrix.stops[node] = str(res) if isinstance(res, BaseException) else res


def _ssh_address(cluster: Cluster, node: str) -> str | None:
    """The address the launcher's ssh reached `node` at, where its config names one (an alias's
    HostName): the connections' fallback for a node whose own address is unusable."""
    host = cluster.pool.targets[node].hostname if node in cluster.pool.targets else node
    return host if host != node and netfacts.is_ip(host) else None


def _confirm_timeouts(cluster: Cluster, matrix: PortMatrix, p: Plan,
                      targets: Sequence[Target]) -> None:
    """Confirm before blaming: every pair with a connection that timed out is tried once more,
    at once, with the listeners still up (one `connect` per source, its suspects only), and
    keeps the second answer, marked `retried`. A DROP rule drops the second SYN as it did the
    first, and stays red; a SYN lost once (a busy node, a burst of thousands of connects at
    once) does not name a healthy node. NCCL and gloo retry a connect that times out, too."""
    suspects = {a: {b for b, r in row.items() if r.timed_out} for a, row in matrix.results.items()}
    suspects = {a: bs for a, bs in suspects.items() if bs}
    if not suspects:
        return

    def again(node: str) -> dict[str, Reach]:
        return dict(cluster.probe(node, CONNECT, token=matrix.token,
                                  targets=[t for t in targets if t["name"] in suspects[node]],
                                  port_timeout=p.timeout, fanout=p.fanout,
                                  samples=cluster.settings.network.rtt_samples, attempt=2,
                                  timeout=p.connect_budget + 10).reached)

    nodes = sorted(suspects)
    for node, res in zip(nodes, cluster.pool.map(again, nodes), strict=True):
        if isinstance(res, BaseException):
            continue  # the first answer stands
        for b, reach in res.items():
            if b in suspects[node]:
                matrix.results[node][b] = dataclasses.replace(reach, retried=True)


def pair_item(cluster: Cluster, check: TestId, a: str, b: str) -> str:
    """The test id of the red F1/F3 (`check`) give a -> b: the pair's own item, or under
    --pairs matrix the per-node item of the node at fault (a->* when a's own side is, else
    *->b)."""
    sel = pairs_mod.selection(cluster)
    if sel is None or not sel.per_node:
        return check.of(a, b)
    m = cluster.cached(PORT_MATRIX)
    if m is not None and nc.source_at_fault(m, a, b):
        return check.of(a, pairs_mod.ANY)
    return check.of(pairs_mod.ANY, b)


def rtt_typical(cluster: Cluster) -> float | None:
    """The typical pair's RTT (median of every measured pair's median, not self), computed
    once: F1 compares every pair with it.  Neither the pairs' RTTs nor a list of them is kept
    (a 4096-node matrix has 16.7 M)."""
    def compute() -> float | None:
        m = port_matrix(cluster)
        counts = m.compact_rtt_counts()
        counts.update(s.median_ms for x, row in m.results.items() for y, r in row.items()
                      if x != y and (s := nc.rtt_stats(r.rtt_ms)) is not None)
        return nc.typical_rtt(counts)
    return cluster.memo(RTT_TYPICAL, compute)


def drop_rules(cluster: Cluster, node: str) -> list[str] | None:
    """DROP/REJECT rules in node's INPUT (iptables and nft); None when they cannot be read."""
    try:
        fw = cluster.probe(node, FIREWALL)
    except ProbeError:
        return None
    found: list[str] = []
    parse = {"iptables": nc.iptables_input_drops, "nft": nc.nft_input_drops}
    readable = [(tool, c) for tool, c in fw.tools if c.ok]
    for tool, c in readable:
        found += [f"{tool}: {r}" for r in parse[tool](c.out)]
    if not readable and fw.tools:
        return None
    return found


def firewall_facts(cluster: Cluster, a: str, b: str
                   ) -> tuple[PortMatrix | None, dict[str, list[str] | None]]:
    """What tells whether a node's own firewall explains a -> b failing (F4's red on it): this
    session's port matrix and the DROP/REJECT rules of a and b (those logged in to); (None, {})
    where the matrix is not measured or a took no part in it."""
    m = cluster.cached(PORT_MATRIX)
    if m is None or a not in m.results:
        return None, {}
    return m, {n: drop_rules(cluster, n) for n in (a, b) if cluster.login_error(n) is None}


def all_drop_rules(cluster: Cluster) -> dict[str, list[str] | None]:
    """The DROP/REJECT rules of every node logged in to (F4's red on a node names every pair
    its rules break)."""
    return {n: drop_rules(cluster, n) for n in cluster.names if cluster.login_error(n) is None}


def peers(cluster: Cluster) -> tuple[dict[str, BaseFacts | None], set[str]]:
    """Every node's base facts (None: not to be had) and the nodes that cannot be logged in to:
    what the clean flags of the matrix (judge/network/pairjudge.py) read beside it."""
    names = cluster.names
    bases = {n: cluster.base_or_none(n) for n in names}
    return bases, {n for n in names if cluster.login_error(n) is not None}


def entries_into(cluster: Cluster) -> dict[str, list[tuple[str, Reach]]]:
    """target -> [(source, what it reached)] of the matrix's entries kept whole (under --pairs
    matrix the ones that did not come back compact), by target: gathered once, not once per
    target."""
    def compute() -> dict[str, list[tuple[str, Reach]]]:
        out: dict[str, list[tuple[str, Reach]]] = {}
        for a, row in port_matrix(cluster).results.items():
            for b, r in row.items():
                out.setdefault(b, []).append((a, r))
        return out
    return cluster.memo(ENTRIES_INTO, compute)


def median_rtt(m: PortMatrix, a: str, b: str) -> float | None:
    """a -> b's median handshake RTT in ms (None: not measured)."""
    compact = m.compact_of(a, b)
    if compact is not None:
        return None if math.isnan(compact[1]) else compact[1]
    reach = m.reach(a, b)
    stats = nc.rtt_stats(reach.rtt_ms) if reach is not None else None
    return stats.median_ms if stats is not None else None


def rtt_row(cluster: Cluster, m: PortMatrix, a: str) -> str | None:
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
                v = median_rtt(m, a, b)
                words.append("-" if v is None else f"{v:.3f}")
            elif r != r:  # NaN: no sample
                words.append("-")
            else:
                w = text.get(r)
                words.append(w if w is not None else text.setdefault(r, f"{r:.3f}"))
    else:
        words = [("-" if (v := median_rtt(m, a, b)) is None else f"{v:.3f}") for b in names]
    return None if all(w == "-" for w in words) else " ".join(words)


def source_address(cluster: Cluster, a: str, b: str) -> str:
    """a's address as b sees it: the one a's ranks advertise, else where b's ssh sends a's
    name."""
    m = cluster.cached(PORT_MATRIX)
    if m is not None and m.dial.get(a):
        return str(m.dial[a])
    got = sshnames.placement(cluster.base(b), a).addrs
    return got[0] if got else a
