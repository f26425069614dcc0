"""Network checks' logic (CHECKLIST F1-F6): the port matrix, firewall rules, interface specs.

The port matrix is measured once per session in O(N) SSH sessions (three per node):

1. per node, `netprobe.py listen` binds K ephemeral high ports (plus the master port on the
   rank-0 node) and leaves a detached child holding them for a bounded time;
2. per node, `netprobe.py connect` connects to every node's ports in parallel, each attempt with
   a short deadline, and times a few handshakes (RTT);
3. per node, `netprobe.py stop` ends the listener (by pid, checked against a session token),
   always, whatever happened in 1 and 2.

Each F-test then asserts on its slice.  The pure helpers (interface specs, iptables/nft rule
filters, RTT statistics) are tested on their own in tests/test_netcheck.py.
"""

from __future__ import annotations

import math
import re
import secrets
import statistics
from dataclasses import dataclass, field
from typing import Any

from cluster_tests.core import pairs
from cluster_tests.core.cluster import Cluster, ProbeError
from cluster_tests.core.memokey import MemoKey
from cluster_tests.judge.netfacts import Interface

PORT_MATRIX: MemoKey[Any] = MemoKey("netcheck", "port_matrix")

SCRIPT = "netprobe.py"
SOCKET_IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")


# -- the port matrix ---------------------------------------------------------------------------

@dataclass
class PortMatrix:
    token: str
    listeners: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> listen result
    listen_errors: dict[str, str] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # source -> target -> entry
    connect_errors: dict[str, str] = field(default_factory=dict)
    stops: dict[str, dict[str, Any]] = field(default_factory=dict)
    port_timeout: float = 3.0
    seconds: float = 0.0

    def entry(self, a: str, b: str) -> dict[str, Any] | None:
        return self.results.get(a, {}).get(b)


def port_timeout(cluster: Cluster) -> float:
    return cluster.settings.network.port_timeout


def port_matrix(cluster: Cluster) -> PortMatrix:
    """The whole matrix, measured once for the session."""
    return cluster.memo(PORT_MATRIX, lambda: measure(cluster))


def measure(cluster: Cluster) -> PortMatrix:
    import time

    start = time.monotonic()
    names = cluster.names
    up = [n for n in names if cluster.login_error(n) is None]
    timeout = port_timeout(cluster)
    fanout = cluster.settings.fanout
    count = cluster.settings.network.probe_ports
    widest = max([len(pairs.targets_of(cluster, n)) + 1 for n in up] or [1])
    rounds = math.ceil(min(len(names), widest) * (count + 1) / fanout) + 1
    connect_budget = rounds * timeout * 2 + 10
    hold = connect_budget + 30  # the listeners die by themselves after this, whatever happens
    matrix = PortMatrix(token=secrets.token_hex(8), port_timeout=timeout)
    rank0 = cluster.rank0.name
    master_port = cluster.settings.master_port

    def listen(node: str) -> dict[str, Any]:
        return cluster.probe(node, "listen", script=SCRIPT, token=matrix.token, ports=count,
                             hold=hold, master_port=master_port if node == rank0 else None,
                             timeout=30)

    for node, res in zip(up, cluster.pool.map(listen, up)):
        if isinstance(res, BaseException):
            matrix.listen_errors[node] = str(res)
        else:
            matrix.listeners[node] = res
    try:
        targets = []
        for node, lst in matrix.listeners.items():
            master = lst.get("master") or {}
            targets.append({"name": node, "ports": lst["ports"],
                            "master_port": master.get("port") if master.get("free") else None})
        for node in names:
            if node not in matrix.listeners:
                targets.append({"name": node, "ports": [], "master_port": None})

        def connect(node: str) -> dict[str, Any]:
            # only the targets of node's selected pairs (--pairs), and rank 0 (F2, master port)
            mine = set(pairs.targets_of(cluster, node)) | {rank0}
            return cluster.probe(node, "connect", script=SCRIPT, token=matrix.token,
                                 targets=[t for t in targets if t["name"] in mine],
                                 port_timeout=timeout, fanout=fanout,
                                 samples=cluster.settings.network.rtt_samples,
                                 timeout=connect_budget + 10)

        for node, res in zip(up, cluster.pool.map(connect, up)):
            if isinstance(res, BaseException):
                matrix.connect_errors[node] = str(res)
            else:
                matrix.results[node] = res
    finally:
        stoppable = [n for n, lst in matrix.listeners.items() if lst.get("pid")]

        def stop(node: str) -> dict[str, Any]:
            return cluster.probe(node, "stop", script=SCRIPT, token=matrix.token,
                                 pid=matrix.listeners[node]["pid"], timeout=20)

        for node, res in zip(stoppable, cluster.pool.map(stop, stoppable)):
            matrix.stops[node] = {"error": str(res)} if isinstance(res, BaseException) else res
    matrix.seconds = time.monotonic() - start
    return matrix


def failed_ports(entry: dict[str, Any]) -> dict[int, str]:
    """{port: status} of the high ports that did not answer with our listener."""
    return {int(p): r["status"] for p, r in sorted(entry.get("ports", {}).items())
            if r["status"] != "ok"}


def blocked(entry: dict[str, Any] | None) -> bool:
    """True when a -> b got through on none of b's tested ports (high ports and master port)."""
    if not entry or entry.get("addr") is None:
        return False
    tried = [r["status"] for r in entry.get("ports", {}).values()]
    if entry.get("master"):
        tried.append(entry["master"]["status"])
    return bool(tried) and all(s != "ok" for s in tried)


def source_at_fault(m: PortMatrix, a: str, b: str) -> bool:
    """a reaches none of the nodes, while another node reaches b: what is broken is a's side
    (its INPUT drops the replies to its own connections, or its OUTPUT drops)."""
    row = m.results.get(a, {})
    if not row or not all(blocked(e) for e in row.values()):
        return False
    return any(x != a and not blocked(r.get(b)) for x, r in m.results.items())


def target_at_fault(m: PortMatrix, a: str, b: str) -> bool:
    """Some other node fails into b as well (or a is the only source that tried)."""
    others = [x for x in m.results if x not in (a, b)]
    return not others or any(failed_ports(m.entry(x, b) or {}) for x in others)


SOURCE_CAUSE = ("{a} reaches none of the nodes' ports while the others reach {b}: the fault is on "
                "{a}: its firewall drops the replies to its own connections (an INPUT rule on "
                "high ports without `-m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT` "
                "before it) or its OUTPUT chain drops")
SOURCE_FIX = "on {a}: iptables -I INPUT 1 -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT"


CAUSES = {
    "timed out": "no answer within {t:g} s: packets are dropped (a DROP rule in {b}'s INPUT chain, "
                 "or a security group / firewall in between)",
    "refused": "connection refused while our listener was up: a REJECT rule on {b} (or its "
               "listener died)",
    "unreachable": "host/network unreachable: a REJECT --reject-with icmp-host-prohibited rule on "
                   "{b}, or no route from {a}",
    "other listener": "something answered that is not our listener (a proxy or NAT in between)",
}


def describe_status(status: str, a: str, b: str, timeout: float) -> str:
    text = CAUSES.get(status)
    return text.format(a=a, b=b, t=timeout) if text else status


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


def is_outlier(value_ms: float, baseline_ms: list[float], factor: float = 5.0,
               floor_ms: float = 2.0) -> bool:
    """True when a pair's median RTT is far above the cluster's typical pair (median of medians):
    more than `factor` times it and more than `floor_ms` above it (sub-millisecond LANs jitter)."""
    if len(baseline_ms) < 2:
        return False
    typical = statistics.median(baseline_ms)
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


def socket_ifname_vars(env: dict[str, str]) -> dict[str, str]:
    return {v: env[v] for v in SOCKET_IFNAME_VARS if env.get(v, "").strip()}


def describe_interfaces(ifaces: dict[str, Interface]) -> str:
    return ", ".join(
        f"{i.name} ({'up' if i.up else i.state.lower()}, mtu {i.mtu}, "
        f"{' '.join(i.addrs) or 'no address'})" for i in ifaces.values()
    ) or "none"


def routes(cluster: Cluster, node: str) -> dict[str, Any]:
    """`ip -o route get` from node to the address it resolves each of its targets to (the
    selected pairs, --pairs; cached)."""
    facts = cluster.base(node)
    addrs = sorted({facts["resolve"][b]["addrs"][0] for b in pairs.targets_of(cluster, node)
                    if b != node and facts["resolve"].get(b, {}).get("addrs")})
    try:
        return cluster.probe(node, "routes", route_to=addrs)
    except ProbeError:
        return {}
