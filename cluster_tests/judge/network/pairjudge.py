"""F1/F3 pair by pair, from the port matrix (pure): which pairs surely pass without a word (the
clean flags, read in bulk under --pairs matrix), and which other red holds a failing pair's
cause (a name resolved elsewhere: N1; a node's own firewall: F4; the address a node's ranks
advertise: F7).

Under --pairs matrix a pair is in four per-node items (F1 and F3, at each end), and 1024 nodes
make a million pairs: the flags say, one byte per pair, F3_CLEAN where the pair surely passes F3
without a word, F1_CLEAN where F1 too; only the other pairs run the pair's check.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from cluster_tests.core import testids as ids
from cluster_tests.core.testids import LAUNCHER
from cluster_tests.judge.common import netfacts
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.network import portjudge as nc
from cluster_tests.judge.network.portjudge import CompactRow, PortMatrix
from cluster_tests.judge.problem import ROW_MARKS, Root

F3_CLEAN, F1_CLEAN = 1, 2
#: flag byte -> 1 where the bit (F1_CLEAN or F3_CLEAN) is set, else 0
CLEAN_BYTE = {bit: bytes(1 if v & bit else 0 for v in range(256)) for bit in (1, 2)}
#: clean byte -> the passed mark (the others are written over, pair by pair)
CLEAN_MARK = bytes(ord(ROW_MARKS["passed"]) if v == 1 else ord("?") for v in range(256))


def dialed(m: PortMatrix, b: str) -> bool:
    """Whether the sources dialed b at its own address (not at its name as they resolve it)."""
    return bool(m.dial.get(b))


def clean(m: PortMatrix, a: str, b: str, base_a: BaseFacts | None, base_b: BaseFacts | None,
          typical: float | None) -> int:
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
    if addr is None or (not dialed(m, b) and netfacts.misresolved(base_a, base_b, b)
                        is not None):
        return 0
    if rtt is not None and (a == b or not nc.is_outlier(rtt, typical)):
        return F3_CLEAN | F1_CLEAN
    return F3_CLEAN


def row_flags(m: PortMatrix, a: str, row: CompactRow, where: Mapping[str, int],
              bases: Mapping[str, BaseFacts | None], down: set[str],
              typical: float | None) -> bytearray:
    """:func:`clean` for every target of a compact row asked in name order, in bulk: the
    compact entries from the row's arrays at once (a 4096-node matrix has 16.7 M), then what
    differs from that, each where it can be: the pairs with an entry of their own, the targets
    `a` resolved (the only ones it can misresolve), `a` itself, the nodes that are down."""
    both = F3_CLEAN | F1_CLEAN
    # no outlier: at most F1's limit (nc.is_outlier); NaN (no sample) compares false, so such
    # an entry is F3-clean only, as in clean()
    limit = nc.outlier_limit(typical)
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
            flags[i] = clean(m, a, b, base_a, bases[b], typical)
    for b in down:
        flags[where[b]] = 0
    return flags


def clean_flags(m: PortMatrix, names: Sequence[str], bases: Mapping[str, BaseFacts | None],
                down: set[str], typical: float | None) -> dict[str, bytearray]:
    """Per source that answered, one byte per node in name order (`names`): :func:`clean` of
    each pair, a compact row read in bulk (:func:`row_flags`); 0 for a pair with an end that
    is `down`."""
    where = {n: i for i, n in enumerate(names)}
    out: dict[str, bytearray] = {}
    for a in m.results:
        if a in down:
            out[a] = bytearray(len(names))
            continue
        row = m.compact.get(a)
        if row is not None and (row.names is names or row.names == names):
            out[a] = row_flags(m, a, row, where, bases, down, typical)
            continue
        flags = out[a] = bytearray(len(names))
        for i, b in enumerate(names):
            if b not in down:
                flags[i] = clean(m, a, b, bases[a], bases[b], typical)
    return out


def row_line(row: bytearray | None, size: int, bit: int) -> bytes:
    """A source's pairs (the per-node item `a->*`) in name order: 1 where clean for the check
    of `bit` (F1_CLEAN, F3_CLEAN), else 0 (`row`: the source's flags; None: it did not
    answer)."""
    return bytes(row or bytes(size)).translate(CLEAN_BYTE[bit])


def column_line(rows: Sequence[bytearray | None], col: int, bit: int) -> bytes:
    """A target's pairs (the per-node item `*->b`, b the `col`-th node) in name order, from
    every source's flags in name order (`rows`; None: that source did not answer)."""
    return bytes((r[col] if r is not None else 0) for r in rows).translate(CLEAN_BYTE[bit])


# -- the red that holds a failing pair's cause --------------------------------------------------


def misresolved_roots(m: PortMatrix, a: str, b: str, base_a: BaseFacts | None,
                      base_b: BaseFacts | None) -> list[Root]:
    """N1's red on a -> b, where a dialed b's name (b's ranks advertise no usable address) and
    a resolves it to another machine."""
    wrong = None if a == LAUNCHER or dialed(m, b) else netfacts.misresolved(base_a, base_b, b)
    if wrong is None:
        return []
    return [Root(ids.RESOLVES.of(a, b), f"{a} resolves {b} to {', '.join(wrong[0])}, another "
                                        f"machine")]


def firewall_roots(m: PortMatrix | None, rules: Mapping[str, list[str] | None], a: str,
                   b: str) -> list[Root]:
    """F4's red on the node whose own firewall rules explain a -> b failing (test_firewall_rules
    [node] names the rules and every pair they break), from the port matrix `m` (None: not
    measured) and the rules of a and b."""
    node = nc.firewall_at_fault(m, rules, a, b) if m is not None else None
    if node is None:
        return []
    return [Root(ids.FIREWALL_RULES.of(node), f"{node}'s own firewall (INPUT) drops {a} -> {b}")]


def own_address_roots(m: PortMatrix, a: str, b: str, own_red: bool) -> list[Root]:
    """F7's red on b, where a -> b failed at b's own address (the one b's ranks advertise),
    worked where b's name leads, and F7 finds that address unusable (`own_red`)."""
    reach = m.reach(a, b)
    if not (dialed(m, b) and reach is not None and reach.elsewhere_ok and own_red):
        return []
    return [Root(ids.OWN_ADDRESS.of(b), f"{a} -> {b}: {b}'s ranks advertise {m.dial[b]}, which "
                                        f"its peers cannot use")]


def slow_pair(a: str, b: str, stats: nc.Rtt, typical: float | None) -> str | None:
    """F1's warning for a pair whose handshake RTT is an outlier against the typical pair's
    (nc.is_outlier); None otherwise (a node to itself is never one)."""
    if a == b or typical is None or not nc.is_outlier(stats.median_ms, typical):
        return None
    return (f"{a} -> {b}: TCP handshake {stats.median_ms:.2f} ms (jitter {stats.jitter_ms:.2f} "
            f"ms) against a typical {typical:.2f} ms between the other pairs: a slow link or a "
            f"busy node")
