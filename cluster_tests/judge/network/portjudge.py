"""Network checks' logic (CHECKLIST F1-F6): judging the port matrix (measured by
measure/ports.py), firewall rules, interface specs, RTT statistics. Pure: tested on their own
in tests/unit/test_judge_network.py.
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
import threading
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cluster_tests.core import testids as ids
from cluster_tests.judge.common.facts import PortStatus, Reach
from cluster_tests.judge.common.netfacts import Interface
from cluster_tests.judge.problem import Problem, from_text

SOCKET_IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")


# -- the port matrix ---------------------------------------------------------------------------

@dataclass
class CompactRow:
    """One source's targets whose every port answered (netprobe's `*compact`, --pairs matrix),
    held without an object per pair (4096 nodes make 16.7 M pairs): `names` and `index` are
    shared by the rows that were asked the same targets, `addr` holds indices into the
    matrix's address table (0: that target is not compact, its entry is in `results`), `rtt`
    the median handshake RTT in ms (NaN: no sample)."""

    names: list[str]
    index: dict[str, int]
    addr: array
    rtt: array


@dataclass
class PortMatrix:
    token: str
    listeners: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> listen result
    listen_errors: dict[str, str] = field(default_factory=dict)
    #: source -> target -> entry; under --pairs matrix only the targets that are not compact
    #: (every source that answered has a row here, maybe empty)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    connect_errors: dict[str, str] = field(default_factory=dict)
    stops: dict[str, dict[str, Any]] = field(default_factory=dict)
    port_timeout: float = 3.0
    seconds: float = 0.0
    #: source -> target -> what it reached: `results` read once (facts.reach_row, by measure/)
    reached: dict[str, dict[str, Reach]] = field(default_factory=dict)
    #: target -> the address every source dials for its high ports and RTT: its own address as
    #: its ranks advertise it (F7's, where it is a routable IPv4 address), else None (each
    #: source then resolves the target's name, or dials the address ssh reaches it at)
    dial: dict[str, str | None] = field(default_factory=dict)
    #: source -> its compact targets (--pairs matrix)
    compact: dict[str, CompactRow] = field(default_factory=dict)
    addr_table: list[str] = field(default_factory=lambda: ["-"])  # [0]: not compact
    _addr_ids: dict[str, int] = field(default_factory=lambda: {"-": 0})
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add_compact(self, source: str, names: list[str], index: dict[str, int],
                    raw: Mapping[str, str]) -> None:
        """Keep `source`'s `*compact` answer (two strings in the order of `names`)."""
        addrs, rtts = str(raw["addr"]).split(), str(raw["rtt_ms"]).split()
        if len(addrs) != len(names) or len(rtts) != len(names):
            raise ValueError(f"compact answer of {len(addrs)}/{len(rtts)} entries for "
                             f"{len(names)} targets")
        rtt = array("f", [math.nan if w in ("-", "nan") else float(w) for w in rtts])
        ids = self._addr_ids
        if any(w not in ids for w in addrs):  # new addresses: numbered under the lock
            with self._lock:
                for w in addrs:
                    if w not in ids:
                        self.addr_table.append(w)
                        ids[w] = len(self.addr_table) - 1
        self.compact[source] = CompactRow(names, index, array("I", [ids[w] for w in addrs]), rtt)

    def compact_of(self, a: str, b: str) -> tuple[str, float] | None:
        """(the address a reached b at, the median RTT in ms, NaN if none) when a's entry for b
        is compact (every port answered); None otherwise."""
        row = self.compact.get(a)
        if row is None:
            return None
        i = row.index.get(b)
        if i is None or not row.addr[i]:
            return None
        return self.addr_table[row.addr[i]], row.rtt[i]

    def compact_rtt_counts(self) -> Counter[float]:
        """How many compact entries (not a node's own) have each median RTT, NaN (no sample)
        left out: counted row by row in C (`compress`, `Counter.update`), never a Python step
        or a tuple per pair (a 4096-node matrix has 16.7 M)."""
        counts: Counter[float] = Counter()
        for a, row in self.compact.items():
            counts.update(itertools.filterfalse(math.isnan, itertools.compress(row.rtt, row.addr)))
            j = row.index.get(a)
            if j is not None and row.addr[j] and (own := row.rtt[j]) == own:
                counts[own] -= 1
        return +counts

    def entry(self, a: str, b: str) -> dict[str, Any] | None:
        got = self.results.get(a, {}).get(b)
        if got is not None:
            return got
        c = self.compact_of(a, b)
        return None if c is None else self._as_entry(b, *c)

    def _as_entry(self, b: str, addr: str, rtt: float) -> dict[str, Any]:
        """A compact entry as netprobe's JSON (is_compact): what the readers of one pair get."""
        target = self.listeners.get(b) or {}
        ports = sorted(int(p) for p in target.get("ports") or ())
        got: dict[str, Any] = {"addr": addr, "ok": ports,
                               "rtt_ms": [] if math.isnan(rtt) else [rtt]}
        own = self.compact_own(b)
        if own is not None:
            got["own"] = own
        return got

    def compact_own(self, b: str) -> dict[str, Any] | None:
        """A compact entry's connect to b's own gloo address: tried where b's listener has one,
        and then it answered (else the entry is not compact); None where not tried."""
        own = (self.listeners.get(b) or {}).get("own") or {}
        if own.get("addr") and own.get("port"):
            return {"status": "ok", "addr": own["addr"], "port": own["port"]}
        return None

    def reach(self, a: str, b: str) -> Reach | None:
        got = self.reached.get(a, {}).get(b)
        if got is None:  # a compact entry is read when asked, not kept
            c = self.compact_of(a, b)
            if c is not None:
                return Reach.from_json(b, self._as_entry(b, *c))
        return got

    def into(self, b: str) -> dict[str, Reach]:
        """What every source reached of b, by source, in name order."""
        return {a: r for a in sorted(self.results) if (r := self.reach(a, b)) is not None}


def failed_ports(entry: Mapping[str, Any]) -> dict[int, str]:
    """{port: status in the node's words} of the high ports of a `connect` entry (JSON) that did
    not answer with our listener."""
    return {t.port or 0: t.words for t in Reach.from_json("", entry).failed}


def blocked(entry: Mapping[str, Any] | None) -> bool:
    """True when a -> b got through on none of b's tested ports (high ports and master port)."""
    return bool(entry) and Reach.from_json("", entry or {}).blocked


def source_at_fault(m: PortMatrix, a: str, b: str) -> bool:
    """a reaches none of the nodes, while another node reaches b: what is broken is a's side
    (its INPUT drops the replies to its own connections, or its OUTPUT drops)."""
    row = m.results.get(a, {})
    compact = m.compact.get(a)
    if compact is not None and any(compact.addr):
        return False  # some target answered on every port
    if not row or not all(blocked(e) for e in row.values()):
        return False
    return any(x != a and not blocked(r.get(b)) for x, r in m.results.items())


def target_at_fault(m: PortMatrix, a: str, b: str) -> bool:
    """Some other node fails into b as well (or a is the only source that tried)."""
    others = [x for x in m.results if x not in (a, b)]
    # only entries in `results` can fail (a compact one answered on every port)
    return not others or any(failed_ports(m.results[x].get(b) or {}) for x in others)


def failing_into(m: PortMatrix, b: str) -> list[str]:
    """The sources (b aside) whose high ports into b failed, in name order."""
    return sorted(x for x, row in m.results.items()
                  if x != b and (e := row.get(b)) is not None and failed_ports(e))


SOURCE_CAUSE = ("{a} reaches none of the nodes' ports while the others reach {b}: the fault is on "
                "{a}: its firewall drops the replies to its own connections (an INPUT rule on "
                "high ports without `-m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT` "
                "before it) or its OUTPUT chain drops")
SOURCE_FIX = "on {a}: iptables -I INPUT 1 -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT"


CAUSES = {
    PortStatus.TIMED_OUT: "no answer within {t:g} s: packets are dropped (a DROP rule in {b}'s "
                          "INPUT chain, or a security group / firewall in between)",
    PortStatus.REFUSED: "connection refused while our listener was up: a REJECT rule on {b} (or "
                        "its listener died)",
    PortStatus.UNREACHABLE: "host/network unreachable: a REJECT --reject-with "
                            "icmp-host-prohibited rule on {b}, or no route from {a}",
    PortStatus.OTHER_LISTENER: "something answered that is not our listener (a proxy or NAT in "
                               "between)",
}


def describe_status(status: str, a: str, b: str, timeout: float) -> str:
    """What a connection's status (the node's words) means for a -> b."""
    try:
        text = CAUSES.get(PortStatus.of(status))
    except ValueError:  # not the node script's words ("not tried")
        text = None
    return text.format(a=a, b=b, t=timeout) if text else status


def firewall_evidence(node: str, rules: list[str] | None) -> str:
    """The lines of a red that show `node`'s own DROP/REJECT rules (None: they could not be
    read)."""
    if rules is None:
        return f"  (could not read {node}'s firewall rules: see {ids.FIREWALL_RULES.of(node)})"
    if not rules:
        return (f"  {node} shows no DROP/REJECT rule in iptables/nft INPUT (look for a firewall "
                f"in between)")
    return f"  DROP/REJECT rules in {node}'s INPUT:\n    " + "\n    ".join(rules[:12])


def source_fault_message(a: str, b: str, addr: str, what: str, rules_a: list[str] | None
                         ) -> str:
    """The red of a -> b where a's side is at fault (:func:`source_at_fault`): no answer from
    `what`, a's own rules, the fix on a."""
    return (f"{a} -> {b} ({addr}): no answer from {what}; "
            + SOURCE_CAUSE.format(a=a, b=b) + ".\n"
            + firewall_evidence(a, rules_a)
            + "\n  fix, " + SOURCE_FIX.format(a=a))


def high_ports_problem(reach: Reach, a: str, *, timeout: float, into_b: Sequence[str],
                       source_fault: bool, rules: list[str] | None, source_addr: str) -> Problem:
    """F3's red: a's connections to `reach.target`'s high ports failed. `into_b`: every source
    failing into it (:func:`failing_into`); `source_fault`: a's side is at fault
    (:func:`source_at_fault`), then `rules` are a's DROP/REJECT rules, else the target's;
    `source_addr`: a's address as the target knows it (the fix's `-s`)."""
    b, addr, bad = reach.target, reach.addr or "", reach.failed
    if source_fault:
        what = f"{b}'s high ports " + ", ".join(str(t.port) for t in bad)
        return from_text((a, b), source_fault_message(a, b, addr, what, rules))
    by_status: dict[str, list[int]] = {}
    for t in bad:
        by_status.setdefault(t.words, []).append(t.port or 0)
    lines = [f"  port {', '.join(map(str, ports))}: {words}: "
             f"{describe_status(words, a, b, timeout)}" for words, ports in by_status.items()]
    if len(into_b) > 1:
        lines.append(f"  every node that tried fails into {b} ({', '.join(into_b)}): {b}'s "
                     f"INPUT is the filter")
    return from_text((a, b), (
        f"{a} -> {b} ({addr}): {b} drops new TCP connections on high ports from {a}; NCCL/gloo/"
        f"HCCL open such ports, and the launch would hang at initialization.\n"
        + "\n".join(lines) + "\n"
        + firewall_evidence(b, rules)
        + f"\n  fix, on {b}: iptables -I INPUT -p tcp -s {source_addr} -j ACCEPT "
        f"(or open 1024-65535/tcp between the cluster's nodes in the firewall in between)"))


# -- RTT ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rtt:
    median_ms: float
    jitter_ms: float  # standard deviation of the samples
    samples: int


def rtt_stats(samples: list[float]) -> Rtt | None:
    if not samples:
        return None
    jitter = statistics.pstdev(samples) if len(samples) > 1 else 0.0
    return Rtt(statistics.median(samples), jitter, len(samples))


def typical_rtt(baseline_ms: Iterable[float] | Counter[float]) -> float | None:
    """The cluster's typical pair RTT (median of the pairs' medians); None below two pairs.
    Counted, not sorted: RTTs come with a few digits, so a matrix of millions of pairs has
    few distinct values, and the median needs no list of them all (given as counts already
    where a Counter is passed)."""
    counts = baseline_ms if isinstance(baseline_ms, Counter) else Counter(baseline_ms)
    n = sum(counts.values())
    if n < 2:
        return None
    lo = hi = None
    seen = 0
    for v in sorted(counts):  # the values at (n-1)//2 and n//2, as statistics.median takes
        seen += counts[v]
        if lo is None and seen > (n - 1) // 2:
            lo = v
        if seen > n // 2:
            hi = v
            break
    assert lo is not None and hi is not None
    return float(lo) if n % 2 else (lo + hi) / 2


def is_outlier(value_ms: float, baseline_ms: list[float] | float | None, factor: float = 5.0,
               floor_ms: float = 2.0) -> bool:
    """True when a pair's median RTT is far above the cluster's typical pair (median of medians,
    or given already as :func:`typical_rtt`): more than `factor` times it and more than
    `floor_ms` above it (sub-millisecond LANs jitter)."""
    typical = (baseline_ms if isinstance(baseline_ms, float | None)
               else typical_rtt(baseline_ms))
    if typical is None:
        return False
    return value_ms > typical * factor and value_ms - typical > floor_ms


# -- firewall rules ----------------------------------------------------------------------------

_TARGETS = ("DROP", "REJECT")


def iptables_input_drops(text: str) -> list[str]:
    """Rules of `iptables -S` that drop or reject in INPUT, or in a chain INPUT jumps to, plus a
    DROP policy on INPUT; in the order printed."""
    rules: dict[str, list[str]] = {}
    policy: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "-P":
            policy[parts[1]] = parts[2]
        elif len(parts) >= 2 and parts[0] == "-A":
            rules.setdefault(parts[1], []).append(line.strip())
    reach, todo = [], ["INPUT"]
    while todo:
        chain = todo.pop(0)
        if chain in reach:
            continue
        reach.append(chain)
        for rule in rules.get(chain, []):
            m = re.search(r"\s-[jg]\s+(\S+)", rule)
            if m and m.group(1) in rules:
                todo.append(m.group(1))
    found = []
    if policy.get("INPUT") in _TARGETS:
        found.append(f"-P INPUT {policy['INPUT']}")
    for chain in reach:
        for rule in rules.get(chain, []):
            m = re.search(r"\s-j\s+(\S+)", rule)
            if m and m.group(1) in _TARGETS:
                found.append(rule)
    return found


def nft_input_drops(text: str) -> list[str]:
    """Lines of `nft list ruleset` that drop or reject inside a chain hooked on input (or a
    drop policy there)."""
    found, in_input, table, chain = [], False, "", ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("table "):
            table = line.rstrip("{ ").strip()
        elif line.startswith("chain "):
            chain = line.split()[1]
            in_input = False
        elif line.startswith("type filter hook input"):
            in_input = True
            if "policy drop" in line:
                found.append(f"{table} chain {chain}: {line}")
        elif in_input and re.search(r"\b(drop|reject)\b", line):
            found.append(f"{table} chain {chain}: {line}")
    return found


# -- *_SOCKET_IFNAME ---------------------------------------------------------------------------

@dataclass(frozen=True)
class IfSpec:
    """NCCL_SOCKET_IFNAME syntax (also HCCL's): comma list of prefixes; a leading `^` excludes,
    a leading `=` (after `^` if both) matches whole names.  GLOO_SOCKET_IFNAME: exact names."""

    raw: str
    names: tuple[str, ...]
    exclude: bool = False
    exact: bool = False

    def matches(self, ifname: str) -> bool:
        if self.exact:
            hit = ifname in self.names
        else:
            hit = any(ifname.startswith(p) for p in self.names)
        return hit != self.exclude

    def describe(self) -> str:
        how = ("exact names" if self.exact else "name prefixes")
        return f"{'not ' if self.exclude else ''}{how} {', '.join(self.names) or '(none)'}"


def nccl_list_prefix(value: str) -> tuple[bool, bool, str]:
    """NCCL's list syntax (NCCL_SOCKET_IFNAME, NCCL_IB_HCA): (exclude `^`, exact `=`, the rest)."""
    text = value.strip()
    exclude = text.startswith("^")
    if exclude:
        text = text[1:]
    exact = text.startswith("=")
    if exact:
        text = text[1:]
    return exclude, exact, text


def parse_ifspec(value: str, var: str = "NCCL_SOCKET_IFNAME") -> IfSpec:
    text = value.strip()
    if var.startswith("GLOO"):
        return IfSpec(value, tuple(n.strip() for n in text.split(",") if n.strip()), exact=True)
    exclude, exact, text = nccl_list_prefix(text)
    return IfSpec(value, tuple(n.strip() for n in text.split(",") if n.strip()), exclude, exact)


def usable(iface: Interface) -> bool:
    return iface.up and bool(iface.ips)


def matched_interfaces(spec: IfSpec, ifaces: dict[str, Interface]) -> list[Interface]:
    return [i for i in ifaces.values() if spec.matches(i.name)]


def socket_ifname_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {v: env[v] for v in SOCKET_IFNAME_VARS if env.get(v, "").strip()}


def describe_interfaces(ifaces: dict[str, Interface]) -> str:
    return ", ".join(
        f"{i.name} ({'up' if i.up else i.state.lower()}, mtu {i.mtu}, "
        f"{' '.join(i.addrs) or 'no address'})" for i in ifaces.values()
    ) or "none"


def hurt_into(m: PortMatrix, node: str) -> list[tuple[str, str]]:
    """The pairs (a, node) whose connections into `node` failed on a high port or, where the
    master port is free on `node`, on the master port (what F4 calls the launch's traffic)."""
    out = [(a, node) for a, row in m.results.items() if node in row and failed_ports(row[node])]
    master = (m.listeners.get(node) or {}).get("master") or {}
    if master.get("free"):
        out += [(a, node) for a, row in m.results.items() if node in row
                and (row[node].get("master") or {}).get("status") not in (None, "ok")
                and (a, node) not in out]
    return sorted(out)


def pair_failed(m: PortMatrix, a: str, b: str) -> bool:
    entry = m.results.get(a, {}).get(b)  # a compact entry (every port answered) never failed
    if not entry:
        return False
    return bool(failed_ports(entry) or (
        (entry.get("master") or {}).get("status") not in (None, "ok")))


def firewall_at_fault(m: PortMatrix, rules: dict[str, list[str] | None], a: str, b: str
                      ) -> str | None:
    """Whose own INPUT rules explain a -> b failing: b's, when it has DROP/REJECT rules and the
    matrix shows connections into it failing (F4 red on b); else a's, when a has such rules and
    is hurt itself, while b has none (a's INPUT drops the replies to its own connections); None
    when neither (a firewall in between, routing: the pair's own red)."""
    if rules.get(b) and hurt_into(m, b) and (a, b) in hurt_into(m, b):
        return b
    if rules.get(a) and hurt_into(m, a) and rules.get(b) == []:
        return a
    return None


def firewall_pairs(m: PortMatrix, rules: dict[str, list[str] | None], node: str
                   ) -> list[tuple[str, str]]:
    """Every ordered pair whose failure `node`'s own INPUT rules explain (F4's red on `node`
    breaks them all: hostfile.healthy drops one node of each)."""
    nodes = list(m.results)
    return sorted((a, b) for a in nodes for b in nodes if a != b and pair_failed(m, a, b)
                  and firewall_at_fault(m, rules, a, b) == node)
