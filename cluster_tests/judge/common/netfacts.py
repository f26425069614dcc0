"""Pure parsers of `ip -o addr` / `ip -o link` / `ip -o route get` output (iproute2)."""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass, field

from cluster_tests.judge.common.basefacts import BaseFacts


@dataclass
class Interface:
    name: str
    state: str = "UNKNOWN"
    mtu: int | None = None
    flags: tuple[str, ...] = ()
    addrs: list[str] = field(default_factory=list)  # "10.0.0.1/24"

    @property
    def up(self) -> bool:
        return "UP" in self.flags or self.state == "UP"

    @property
    def ips(self) -> list[str]:
        return [a.split("/")[0] for a in self.addrs]


_LINK = re.compile(r"^\d+:\s+(?P<name>[^:@\s]+)(?:@\S+)?:\s+<(?P<flags>[^>]*)>(?P<rest>.*)$")


def parse_interfaces(ip_link: str, ip_addr: str) -> dict[str, Interface]:
    ifaces: dict[str, Interface] = {}
    for line in ip_link.splitlines():
        m = _LINK.match(line.strip())
        if not m:
            continue
        rest = m.group("rest")
        mtu = re.search(r"\bmtu (\d+)", rest)
        state = re.search(r"\bstate (\S+)", rest)
        ifaces[m.group("name")] = Interface(
            name=m.group("name"),
            state=state.group(1) if state else "UNKNOWN",
            mtu=int(mtu.group(1)) if mtu else None,
            flags=tuple(f for f in m.group("flags").split(",") if f),
        )
    for line in ip_addr.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[2] not in ("inet", "inet6"):
            continue
        name = parts[1].split("@")[0]
        iface = ifaces.setdefault(name, Interface(name=name))
        iface.addrs.append(parts[3])
    return ifaces


def all_ips(ifaces: dict[str, Interface]) -> set[str]:
    return {ip for i in ifaces.values() for ip in i.ips}


def is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def route_device(ip_route_get: str) -> str | None:
    """`ip -o route get ADDR` -> the device the route leaves by ('lo' for a local address)."""
    m = re.search(r"\bdev (\S+)", ip_route_get)
    return m.group(1) if m else None


def own_addresses(base: BaseFacts | None) -> list[str]:
    """A node's non-loopback addresses from its base facts (sorted; [] when unknown)."""
    if base is None:
        return []
    return list(_own_addresses(base.ip_link, base.ip_addr))


@functools.lru_cache(maxsize=4096)
def _own_addresses(ip_link: str, ip_addr: str) -> tuple[str, ...]:
    # parsed once per node's text: every pair check of a node's peers asks (N per node)
    ips = all_ips(parse_interfaces(ip_link, ip_addr))
    return tuple(sorted(a for a in ips if not is_loopback(a)))


def misresolved(base_a: BaseFacts | None, base_b: BaseFacts | None,
                b: str) -> tuple[list[str], str] | None:
    """(what node a resolves `b` to, b's right address) when a's answer is none of b's own
    addresses; None when it is right, unknown, or b is an address."""
    # a's answer first: beyond --pairs all most nodes were not asked to resolve most names
    got = list(base_a.resolved(b).addrs) if base_a is not None else []
    if not got:
        return None
    own = own_addresses(base_b)
    if is_ip(b) or not own or set(got) & set(own):
        return None
    return got, own[0]
