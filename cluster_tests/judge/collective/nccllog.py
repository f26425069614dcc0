"""Which transports NCCL chose, from its `NCCL_DEBUG=INFO` output (C1/C2 workers write it to a
file per process through `NCCL_DEBUG_FILE`).  Pure: tested on real logs (tests/data/samples:
nccl-debug-*), of both outcomes: `NET/IB` (InfiniBand or RoCE) and the fall-back to
`NET/Socket` (TCP: a job that "works", 10-50x slower).

Lines NCCL prints (2.5 to 2.22 were seen):
  `NET/IB : Using [0]mlx5_0:1/RoCE ; OOB br0:10.137.141.16<0>`   the IB transport's devices
  `NET/IB : No device found.`                                      why it is not used
  `NET/Socket : Using [0]eth0:10.128.0.52<0>`                      the socket transport's
  `Using network Socket` / `Using network IB` (or a plugin's name) the net transport chosen
  `Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Socket/0`         per connection
  `Ring 00 : 0[1b000] -> 1[1c000] via P2P/IPC`, `via SHM/direct/direct`,
  `via direct shared memory` (older), `via P2P/CUMEM`              intra-node transports
  `... NCCL WARN ...`                                              kept as reasons
A line starts with `host:pid:tid [cuda dev] NCCL INFO` (the prefix may be missing, or carry
an mpirun `[rank] ` tag).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tests.judge.collective.rankplan import Rank

_PREFIX = re.compile(r"^(?:\[\d+\]\s+)?(?:(?P<host>[^\s:\[]+):(?P<pid>\d+):(?P<tid>\d+)\s+)?"
                     r"\[(?P<dev>\d+)\]\s+(?P<rest>.*)$")
_VIA = re.compile(r"\bvia\s+(NET/[\w.]+|P2P/[\w/]+|SHM/[\w/]+|direct shared memory|"
                  r"direct pointer|CollNet/\w+|NVLS)")


@dataclass
class Transports:
    """One process's (or one file's) view."""

    host: str = ""
    network: str = ""  # "IB", "Socket", a plugin's name ("AWS Libfabric"...), "" unknown
    net_devices: list[str] = field(default_factory=list)  # "mlx5_0:1/RoCE", "eth0:10.0.0.1<0>"
    net_transports: set[str] = field(default_factory=set)  # NET/IB, NET/Socket (from `via`)
    intra: set[str] = field(default_factory=set)  # P2P/IPC, SHM/direct/direct, P2P/CUMEM, ...
    reasons: list[str] = field(default_factory=list)  # "NET/IB : No device found.", WARN lines
    version: str = ""

    @property
    def on_sockets(self) -> bool:
        if self.net_transports:
            return all(t.startswith("NET/Socket") for t in self.net_transports)
        return self.network == "Socket"

    def describe(self) -> str:
        net = self.network or ("/".join(sorted(self.net_transports)) or "no network (one node)")
        if self.network == "IB" and self.net_devices:
            net += " (" + " ".join(self.net_devices) + ")"
        intra = ", ".join(sorted(self.intra)) or "-"
        return f"net {net}; intra-node {intra}"


def parse(text: str | Iterable[str]) -> Transports:
    lines = text.splitlines() if isinstance(text, str) else list(text)
    t = Transports()
    for raw in lines:
        line = raw.rstrip()
        m = _PREFIX.match(line.strip())
        rest = m.group("rest") if m else line.strip()
        if m and m.group("host") and not t.host:
            t.host = m.group("host")
        if "NCCL WARN" in rest:
            t.reasons.append(re.sub(r"^.*?NCCL WARN\s*", "", rest).strip())
            continue
        if "NCCL INFO" not in rest:
            v = re.match(r"^NCCL version (\S+)", line.strip())
            if v:
                t.version = v.group(1)
            continue
        body = rest.split("NCCL INFO", 1)[1].strip()
        v = re.match(r"^NCCL version (\S+)", body)
        if v:
            t.version = v.group(1)
            continue
        n = re.match(r"^Using network (.+)$", body)
        if n:
            t.network = n.group(1).strip()
            continue
        d = re.match(r"^NET/(IB|Socket)\s*: Using (.*)$", body)
        if d:
            devs = d.group(2).split(";")[0]
            found = re.findall(r"\[\d+\]([^\s\[;]+)", devs)
            if d.group(1) == "IB" or not t.net_devices:
                t.net_devices = found
            continue
        if re.match(r"^NET/IB\s*: No device found", body) or \
                re.match(r"^NET/IB\s*:.*(fail|error|disabled)", body, re.I):
            if body not in t.reasons:
                t.reasons.append(body)
            continue
        for via in _VIA.findall(body):
            if via.startswith("NET/"):
                t.net_transports.add("/".join(via.split("/")[:2]))
            else:
                t.intra.add(via)
    return t


def socket_fallback_reason(t: Transports) -> str:
    """What NCCL printed about why it did not use IB (its own words), for the C1 message."""
    ib = [r for r in t.reasons if "NET/IB" in r or "ibv" in r.lower() or "IB" in r]
    if ib:
        return "; ".join(dict.fromkeys(ib))
    return ("NCCL printed no reason (NCCL_IB_DISABLE=1, NCCL_NET=Socket, or no libibverbs "
            "in the process)")


# -- C1: per node, from the workers' `transport` events -------------------------------------------

def by_node(lines_by_rank: Mapping[int, Sequence[str]],
            ranks: Sequence[Rank]) -> dict[str, Transports]:
    """{host: what its ranks chose}, the lines of all its ranks together, in hostfile order."""
    host_of = {r.rank: r.host for r in ranks}
    grouped: dict[str, list[str]] = {}
    for r in ranks:
        if r.rank in lines_by_rank:
            grouped.setdefault(host_of[r.rank], []).extend(lines_by_rank[r.rank])
    return {host: parse(lines) for host, lines in grouped.items()}


def socket_fallbacks(nodes: Mapping[str, Transports],
                     rdma_nodes: Mapping[str, str]) -> dict[str, str]:
    """Nodes that have active RDMA ports (`rdma_nodes`: node -> its ports, described) but
    whose ranks' network traffic went over TCP sockets: node -> what NCCL did and said."""
    out = {}
    for host, t in nodes.items():
        if host in rdma_nodes and t.on_sockets and t.net_transports | ({t.network} - {""}):
            out[host] = (f"{host}: NCCL used sockets (NET/Socket) although the node has active "
                         f"RDMA ports ({rdma_nodes[host]}); NCCL said: "
                         f"{socket_fallback_reason(t)}")
    return out
