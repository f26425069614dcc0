"""F1-F4's verdicts: the port matrix (measured by measure/ports.py, its facts read by
judge/network/portfacts.py), who is at fault in it, the firewall rules, RTT statistics, and the
Problem of each red. Pure: tested on their own in tests/unit/test_judge_portjudge.py.
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.core.testids import Scope
from cluster_tests.judge.network.portfacts import (
    ADDRESSES,
    Compact,
    Listening,
    MasterListen,
    PortStatus,
    PortTry,
    Reach,
    Stopped,
)
from cluster_tests.judge.problem import Problem, SectionCause


class NetworkCause(SectionCause, items=("F",)):
    """What can be wrong in section F (Problem.cause)."""

    PROBE_FAILED = "network probe failed"
    NO_RESULT = "no result in the port matrix"
    UNRESOLVED = "name does not resolve"
    UNREACHABLE = "node unreachable"
    SOURCE_DROPS = "the source drops the replies"
    PORTS_DROPPED = "high ports dropped"
    MASTER_PORT_TAKEN = "rendezvous port in use"
    NO_MASTER_ADDR = "no master address"
    MASTER_ADDR_UNRESOLVED = "master address does not resolve"
    MASTER_ADDR_SILENT = "master address does not answer"
    MASTER_PORT_DROPPED = "rendezvous port does not answer"
    FIREWALL_DROPS = "firewall drops the launch's ports"
    IFNAME_UNUSABLE = "socket interface unusable"
    NO_ROUTE = "no route"
    WRONG_INTERFACE = "route leaves by another interface"
    MTU_MISMATCH = "MTU differs"
    OWN_ADDRESS_NONE = "no own address to bind"
    OWN_ADDRESS_LOOPBACK = "own address is a loopback"
    OWN_ADDRESS_UNREACHABLE = "own address unreachable"
    OWN_ADDRESS_FAMILY = "own address of another family"


# -- the port matrix ---------------------------------------------------------------------------

@dataclass
class CompactRow:
    """One source's targets whose every port answered (netprobe's `*compact`, --pairs matrix),
    held without an object per pair (4096 nodes make 16.7 M pairs): `names` and `index` are
    shared by the rows that were asked the same targets, `addr` holds numbers of
    portfacts.ADDRESSES (0: that target is not compact, its entry is in `results`), `rtt` the
    median handshake RTT in ms (NaN: no sample). The arrays are the answer's own, as read."""

    names: list[str]
    index: dict[str, int]
    addr: array[int]
    rtt: array[float]


@dataclass
class PortMatrix:
    """Every node's listeners and what every source reached of every target, as read once
    where each answer arrived (portfacts: nothing kept as JSON, nothing read twice)."""

    token: str
    listeners: dict[str, Listening] = field(default_factory=dict)
    listen_errors: dict[str, str] = field(default_factory=dict)
    #: source -> target -> what it reached; under --pairs matrix only the targets that are not
    #: compact (every source that answered has a row here, maybe empty)
    results: dict[str, dict[str, Reach]] = field(default_factory=dict)
    connect_errors: dict[str, str] = field(default_factory=dict)
    stops: dict[str, Stopped | str] = field(default_factory=dict)  # str: why it failed
    port_timeout: float = 3.0
    seconds: float = 0.0
    #: target -> the address every source dials for its high ports and RTT: its own address as
    #: its ranks advertise it (F7's, where it is a routable IPv4 address), else None (each
    #: source then resolves the target's name, or dials the address ssh reaches it at)
    dial: dict[str, str | None] = field(default_factory=dict)
    #: source -> its compact targets (--pairs matrix)
    compact: dict[str, CompactRow] = field(default_factory=dict)

    def add_compact(self, source: str, names: list[str], index: dict[str, int],
                    got: Compact) -> None:
        """Keep `source`'s compact answer for the targets `names` (in that order)."""
        if len(got.addr) != len(names):
            raise ValueError(f"compact answer of {len(got.addr)} entries for {len(names)} "
                             f"targets")
        self.compact[source] = CompactRow(names, index, got.addr, got.rtt)

    def compact_of(self, a: str, b: str) -> tuple[str, float] | None:
        """(the address a reached b at, the median RTT in ms, NaN if none) when a's entry for b
        is compact (every port answered); None otherwise."""
        row = self.compact.get(a)
        if row is None:
            return None
        i = row.index.get(b)
        if i is None or not row.addr[i]:
            return None
        return ADDRESSES[row.addr[i]], row.rtt[i]

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

    def reach(self, a: str, b: str) -> Reach | None:
        """What a reached of b (None: a did not try b, or did not answer)."""
        got = self.results.get(a, {}).get(b)
        if got is None:  # a compact entry is made when asked, not kept
            c = self.compact_of(a, b)
            if c is not None:
                lst = self.listeners.get(b)
                return Reach.compact(b, c[0], sorted(lst.ports) if lst is not None else (),
                                     c[1], self.compact_own(b))
        return got

    def compact_own(self, b: str) -> PortTry | None:
        """A compact entry's connect to b's own gloo address: tried where b's listener has one,
        and then it answered (else the entry is not compact); None where not tried."""
        lst = self.listeners.get(b)
        own = lst.own if lst is not None else None
        if own is None or not own.usable:
            return None
        return PortTry(own.port, PortStatus.OK, "ok", addr=own.addr)

    def master(self, node: str) -> MasterListen | None:
        """The master port as `node` bound it (None: not asked there, or no listener)."""
        lst = self.listeners.get(node)
        return lst.master if lst is not None else None

    def into(self, b: str) -> dict[str, Reach]:
        """What every source reached of b, by source, in name order."""
        return {a: r for a in sorted(self.results) if (r := self.reach(a, b)) is not None}


# -- who is at fault ---------------------------------------------------------------------------

def failed_ports(reach: Reach | None) -> dict[int, str]:
    """{port: status in the node's words} of the high ports that did not answer with our
    listener."""
    return {t.port or 0: t.words for t in reach.failed} if reach is not None else {}


def blocked(reach: Reach | None) -> bool:
    """True when a -> b got through on none of b's tested ports (high ports and master port)."""
    return reach is not None and reach.blocked


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


def failing_into(m: PortMatrix, b: str) -> list[str]:
    """The sources (b aside) whose high ports into b failed, in name order."""
    return sorted(x for x, row in m.results.items() if x != b and failed_ports(row.get(b)))


def _master_failed(reach: Reach | None) -> bool:
    return reach is not None and reach.master is not None and not reach.master.ok


def hurt_into(m: PortMatrix, node: str) -> list[tuple[str, str]]:
    """The pairs (a, node) whose connections into `node` failed on a high port or, where the
    master port is free on `node`, on the master port (what F4 calls the launch's traffic)."""
    out = [(a, node) for a, row in m.results.items() if failed_ports(row.get(node))]
    master = m.master(node)
    if master is not None and master.free:
        out += [(a, node) for a, row in m.results.items()
                if _master_failed(row.get(node)) and (a, node) not in out]
    return sorted(out)


def pair_failed(m: PortMatrix, a: str, b: str) -> bool:
    reach = m.results.get(a, {}).get(b)  # a compact entry (every port answered) never failed
    return bool(failed_ports(reach)) or _master_failed(reach)


def firewall_at_fault(m: PortMatrix, rules: Mapping[str, list[str] | None], a: str, b: str
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


def firewall_pairs(m: PortMatrix, rules: Mapping[str, list[str] | None], node: str
                   ) -> list[tuple[str, str]]:
    """Every ordered pair whose failure `node`'s own INPUT rules explain (F4's red on `node`
    breaks them all: hostfile.healthy drops one node of each)."""
    nodes = list(m.results)
    return sorted((a, b) for a in nodes for b in nodes if a != b and pair_failed(m, a, b)
                  and firewall_at_fault(m, rules, a, b) == node)


def firewall_hurt(m: PortMatrix, node: str) -> list[str]:
    """What `node`'s firewall drops of the launch's traffic, one line per source: the high
    ports, and the master port where `node` holds it."""
    into = m.into(node)
    hurt = sorted(f"{a} -> {node}: ports {', '.join(str(t.port) for t in r.failed)}"
                  for a, r in into.items() if r.failed)
    master = m.master(node)
    if master is not None and master.free:
        hurt += [f"{a} -> {node}: master port {master.port}" for a, r in into.items()
                 if _master_failed(r)]
    return hurt


# -- what a failure means ----------------------------------------------------------------------

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


# -- the reds: F1, F3 --------------------------------------------------------------------------

def matrix_gap(a: str, b: str, node: str, what: str, error: str, item: str) -> Problem:
    """a -> b was not measured: `node` could not `what` ("open listeners", "run connections")."""
    return Problem((a, b), NetworkCause.PROBE_FAILED,
                   f"{a} -> {b}: could not {what} on {node}: {error}", item=item)


def no_result(a: str, b: str, item: str) -> Problem:
    return Problem((a, b), NetworkCause.NO_RESULT, f"{a} -> {b}: no result in the port matrix",
                   item=item)


def unresolved(a: str, b: str, error: str | None, item: str) -> Problem:
    """a could not resolve b's name (N1's red says why)."""
    return Problem((a, b), NetworkCause.UNRESOLVED,
                   f"{a} -> {b}: {a} cannot resolve {b} ({error}): see {ids.RESOLVES.of(a, b)}",
                   item=item)


def source_fault_problem(a: str, b: str, addr: str, what: str, rules_a: list[str] | None,
                         item: str) -> Problem:
    """The red of a -> b where a's side is at fault (:func:`source_at_fault`): no answer from
    `what`, a's own rules, the fix on a."""
    return Problem((a, b), NetworkCause.SOURCE_DROPS,
                   f"{a} -> {b} ({addr}): no answer from {what}; "
                   + SOURCE_CAUSE.format(a=a, b=b) + ".\n" + firewall_evidence(a, rules_a),
                   fix=SOURCE_FIX.format(a=a), item=item)


def unreachable_problem(a: str, reach: Reach) -> Problem:
    """F1's red: a reaches neither b's high ports nor its sshd."""
    b, addr = reach.target, reach.addr
    return Problem(
        (a, b), NetworkCause.UNREACHABLE,
        f"{a} -> {b} ({addr}): {a} reaches neither {b}'s high ports nor its sshd "
        f"(port 22: {reach.ssh.words if reach.ssh is not None else 'not tried'}).",
        fix=f"check the route (on {a}: ip route get {addr}) and {b}'s firewall "
            f"(on {b}: iptables -S INPUT)", item=ids.REACHABLE.item)


def high_ports_problem(reach: Reach, a: str, *, timeout: float, into_b: Sequence[str],
                       source_fault: bool, rules: list[str] | None, source_addr: str) -> Problem:
    """F3's red: a's connections to `reach.target`'s high ports failed. `into_b`: every source
    failing into it (:func:`failing_into`); `source_fault`: a's side is at fault
    (:func:`source_at_fault`), then `rules` are a's DROP/REJECT rules, else the target's;
    `source_addr`: a's address as the target knows it (the fix's `-s`)."""
    b, addr, bad = reach.target, reach.addr or "", reach.failed
    if source_fault:
        what = f"{b}'s high ports " + ", ".join(str(t.port) for t in bad)
        return source_fault_problem(a, b, addr, what, rules, ids.HIGH_PORTS.item)
    by_status: dict[str, list[int]] = {}
    for t in bad:
        by_status.setdefault(t.words, []).append(t.port or 0)
    lines = [f"  port {', '.join(map(str, ports))}: {words}: "
             f"{describe_status(words, a, b, timeout)}" for words, ports in by_status.items()]
    if len(into_b) > 1:
        lines.append(f"  every node that tried fails into {b} ({', '.join(into_b)}): {b}'s "
                     f"INPUT is the filter")
    return Problem(
        (a, b), NetworkCause.PORTS_DROPPED,
        f"{a} -> {b} ({addr}): {b} drops new TCP connections on high ports from {a}; NCCL/gloo/"
        f"HCCL open such ports, and the launch would hang at initialization.\n"
        + "\n".join(lines) + "\n" + firewall_evidence(b, rules),
        fix=f"on {b}: iptables -I INPUT -p tcp -s {source_addr} -j ACCEPT (or open "
            f"1024-65535/tcp between the cluster's nodes in the firewall in between)",
        item=ids.HIGH_PORTS.item)


# -- the reds: F2 ------------------------------------------------------------------------------

def listeners_failed(nodes: tuple[str, ...], node: str, error: str, item: str) -> Problem:
    """The listeners could not be opened on `node` (F2 on rank 0, F7)."""
    return Problem(nodes, NetworkCause.PROBE_FAILED,
                   f"could not open listeners on {node}: {error}", item=item)


def master_port_taken(node: str, rank0: str, port: int, master: MasterListen) -> Problem:
    """F2 on rank 0: the rendezvous port is held by another process there."""
    owner = master.owner or f"(run `ss -ltnp sport = :{port}` as root to see who)"
    return Problem(
        (node, rank0), NetworkCause.MASTER_PORT_TAKEN,
        f"{rank0}: the rendezvous port {port} (--master_port) is already in use "
        f"({master.error}): {owner}\n  rank 0 could not bind it and the launch would fail.",
        fix="stop that process, or launch with --master_port <free port> (and pass "
            "--master-port to this suite)", item=ids.MASTER_PORT.item)


def no_master_addr(node: str, rank0: str, port: int, why: Problem | None, command: str
                   ) -> Problem:
    """F2 where DeepSpeed derives no --master_addr (`why`: H3's red, where it judged one)."""
    return Problem((node, rank0), NetworkCause.NO_MASTER_ADDR,
                   f"{node} -> {rank0}:{port}: the launch has no --master_addr to connect to: "
                   + (why.text() if why is not None else f"`{command}` gave none"),
                   item=ids.MASTER_PORT.item)


def master_addr_unresolved(node: str, rank0: str, port: int, value: str | None,
                           master: PortTry) -> Problem:
    return Problem(
        (node, rank0), NetworkCause.MASTER_ADDR_UNRESOLVED,
        f"{node} -> {rank0}:{port}: {node} cannot resolve the launch's --master_addr "
        f"'{value}' ({master.error}), so its ranks cannot reach the rendezvous: see "
        f"{ids.MASTER_ADDR.of(rank0)}", item=ids.MASTER_PORT.item)


def master_leg_problem(node: str, reach: Reach, port: int, value: str | None, timeout: float,
                       *, source_fault: bool, rules: Mapping[str, list[str] | None]) -> Problem:
    """F2's red on node -> rank 0 (`reach.target`) where neither H3 nor a firewall of a node's
    own holds the cause: the launch's --master_addr (`value`) does not answer where it is not
    the address node knows rank 0 at; else node's side is at fault (`source_fault`:
    :func:`source_at_fault`); else the rendezvous port does not answer. `rules`: the two
    nodes' DROP/REJECT rules (None: unreadable)."""
    rank0, res = reach.target, reach.master
    words = res.words if res is not None else "not tried"
    said = f"{words}: {describe_status(words, node, rank0, timeout)}"
    maddr = reach.master_addr or reach.addr
    if maddr != reach.addr:
        return Problem(
            (node, rank0), NetworkCause.MASTER_ADDR_SILENT,
            f"{node} -> {rank0}:{port}: the launch's --master_addr {value} ({maddr}) does not "
            f"answer from {node}: {said}\n  ({node} knows {rank0} as {reach.addr}): see "
            f"{ids.MASTER_ADDR.of(rank0)}", item=ids.MASTER_PORT.item)
    if source_fault:
        return source_fault_problem(node, rank0, str(reach.addr),
                                    f"the rendezvous port {port} on {rank0}", rules.get(node),
                                    ids.MASTER_PORT.item)
    own = [r for r in rules.get(rank0) or [] if str(port) in r]
    blame = (f"  {rank0}'s own firewall {'rejects' if words == 'refused' else 'drops'} "
             f"this port: {own[0]}\n" if own else "")
    return Problem(
        (node, rank0), NetworkCause.MASTER_PORT_DROPPED,
        f"{node} -> {rank0}:{port} ({reach.addr}): the rendezvous port does not answer: {said}\n"
        f"  every rank connects there first; this one would wait until the rendezvous timeout.\n"
        + blame + firewall_evidence(rank0, rules.get(rank0)),
        fix=f"on {rank0}: iptables -I INPUT -p tcp --dport {port} -j ACCEPT",
        item=ids.MASTER_PORT.item)


# -- the reds: F4 ------------------------------------------------------------------------------

def firewall_problem(node: str, hurt: Sequence[str], broken: Sequence[tuple[str, str]],
                     pairs: Sequence[tuple[str, str]], rules: Sequence[str]) -> Problem:
    """F4's red: `node`'s own DROP/REJECT `rules` drop the launch's traffic (`hurt`:
    :func:`firewall_hurt`), breaking `pairs` (`broken`: those its rules explain, among them
    its own connections, whose replies it drops)."""
    outbound = [f"{a} -> {b}: the replies to {node}'s own connections" for a, b in broken
                if a == node]
    return Problem(
        (node,), NetworkCause.FIREWALL_DROPS,
        f"{node}: its firewall drops what the launch needs:\n    "
        + "\n    ".join([*hurt, *outbound])
        + "\n  the DROP/REJECT rules in its INPUT:\n    " + "\n    ".join(rules[:20]),
        fix=f"on {node}: delete the rule (iptables -D INPUT <rule spec>) or accept the "
            f"cluster's nodes before it (iptables -I INPUT -s <cluster subnet> -j ACCEPT); a "
            f"firewall policy is a person's decision",
        item=ids.FIREWALL_RULES.item, scope=Scope.PAIR, pairs=tuple(pairs))


# -- RTT ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rtt:
    median_ms: float
    jitter_ms: float  # standard deviation of the samples
    samples: int


def rtt_stats(samples: Sequence[float]) -> Rtt | None:
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


def outlier_limit(typical: float | None, factor: float = 5.0, floor_ms: float = 2.0) -> float:
    """The highest median RTT that is no outlier against the cluster's `typical` pair (infinite
    where there is none): `factor` times it, or `floor_ms` above it where that is more
    (sub-millisecond LANs jitter). One number, so that a million pairs are compared with it at
    once (judge/network/pairjudge.py)."""
    return math.inf if typical is None else max(typical * factor, typical + floor_ms)


def is_outlier(value_ms: float, baseline_ms: list[float] | float | None, factor: float = 5.0,
               floor_ms: float = 2.0) -> bool:
    """True when a pair's median RTT is far above the cluster's typical pair (median of medians,
    or given already as :func:`typical_rtt`): more than `factor` times it and more than
    `floor_ms` above it (:func:`outlier_limit`)."""
    typical = (baseline_ms if isinstance(baseline_ms, float | None)
               else typical_rtt(baseline_ms))
    return value_ms > outlier_limit(typical, factor, floor_ms)


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


