"""The facts section F reads, typed: node/netprobe.py's `listen`, `connect`, `stop` and
`firewall`, and node/probe.py's `routes`, each read once where its answer arrives (a `Probe`,
judge/common/probes.py) into frozen values; measure/ports.py's PortMatrix and every F check read
those, never the JSON.

Where the node script reports a connection's end in its own words, :class:`PortStatus`'s values
are those words (tests/unit/test_judge_portfacts.py holds netprobe.py to them). Pure: no I/O.
"""

from __future__ import annotations

import enum
import functools
import threading
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cluster_tests.judge.common.facts import Command
from cluster_tests.judge.common.fieldread import ByFields, by_fields
from cluster_tests.judge.common.probes import (
    FactsError,
    Probe,
    flag,
    integer,
    number,
    obj,
    opt_int,
    opt_text,
    text,
)

SCRIPT = "netprobe.py"


def _opt_number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


# -- connect: one connection, one target ---------------------------------------------------------


class PortStatus(enum.Enum):
    """How one connection attempt of netprobe.py's `connect` ended, in the script's own words
    (`_classify`, `_connect`, and the master address that did not resolve)."""

    OK = "ok"  # our listener answered with the session's greeting
    OTHER_LISTENER = "other listener"  # something answered, not our listener
    REFUSED = "refused"
    TIMED_OUT = "timed out"
    UNREACHABLE = "unreachable"
    ERROR = "error"  # any other OSError: the script prints "error: <the error>"
    UNRESOLVED = "unresolved"  # (the master port only) --master_addr did not resolve

    @classmethod
    def of(cls, words: str) -> PortStatus:
        """The status the script's words say ("error: ..." is ERROR); ValueError for others."""
        if words.startswith(cls.ERROR.value + ":"):
            return cls.ERROR
        return cls(words)


@dataclass(frozen=True, slots=True)
class PortTry:
    """One connection from a node to a port of another: how it ended (`words`: the script's
    own, "error: [Errno 13] ..." included), how long it took (None: not timed), and the address
    dialed where it is not the target's (its own gloo address, the address its name leads to)."""

    port: int | None  # None: not said (the plain connect to sshd)
    status: PortStatus
    words: str
    ms: float | None = None
    error: str | None = None  # UNRESOLVED: why the name did not resolve
    addr: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is PortStatus.OK

    @classmethod
    def read(cls, raw: object, port: int | None = None) -> PortTry:
        d = obj(raw, "a connection")
        words = d.get("status")
        if not isinstance(words, str):
            raise FactsError("a connection without a status")
        got = opt_int(d.get("port"))
        return cls(port=got if got is not None else port, status=PortStatus.of(words),
                   words=words, ms=_opt_number(d.get("ms")), error=opt_text(d.get("error")),
                   addr=opt_text(d.get("addr")))


@functools.lru_cache(maxsize=1024)
def answered(port: int) -> PortTry:
    """A high port that answered: one value per port for a million compact entries."""
    return PortTry(port, PortStatus.OK, "ok")


@dataclass(frozen=True, slots=True)
class Reach:
    """What one node's `connect` found of one target (netprobe.py `section_connect`): the
    address it dialed (the target's own, else where ssh or its name leads), each high port
    tried, the master port where tried, the handshake round-trip times, the plain connect to
    sshd where no high port answered, the connect to the target's own gloo address (F7), and
    where the own address failed, one port where its name leads (`alt`)."""

    target: str
    addr: str | None
    resolve_error: str | None = None
    ports: tuple[PortTry, ...] = ()  # in port order
    master: PortTry | None = None
    master_addr: str | None = None  # where the master port was tried, when it resolved
    rtt_ms: tuple[float, ...] = ()
    ssh: PortTry | None = None
    own: PortTry | None = None
    alt: PortTry | None = None
    retried: bool = False  # measure/ports.py's second try (the first timed out)

    @property
    def failed(self) -> tuple[PortTry, ...]:
        """The high ports that did not answer with our listener."""
        return tuple(t for t in self.ports if not t.ok)

    @property
    def blocked(self) -> bool:
        """Got through on none of the target's tested ports (high ports and master port)."""
        if self.addr is None:
            return False
        tried = [*self.ports, *([self.master] if self.master is not None else [])]
        return bool(tried) and not any(t.ok for t in tried)

    @property
    def timed_out(self) -> bool:
        """Some connection (high port, master port, own address) had no answer."""
        tries = [*self.ports, self.master, self.own]
        return any(t is not None and t.status is PortStatus.TIMED_OUT for t in tries)

    @property
    def elsewhere_ok(self) -> bool:
        """Dialed at the target's own address and no port answered, but one did where its name
        leads: the address is at fault, not the path (F7's cause, not F3's)."""
        return self.alt is not None and self.alt.ok

    @classmethod
    def read(cls, target: str, raw: object) -> Reach:
        d = obj(raw, f"the connect entry of {target}")
        ports = sorted((PortTry.read(r, int(p)) for p, r in obj(d.get("ports") or {}, "ports")
                        .items()), key=lambda t: t.port or 0)
        return cls(target=target, addr=opt_text(d.get("addr")),
                   resolve_error=opt_text(d.get("resolve_error")), ports=tuple(ports),
                   master=_opt_try(d.get("master")), master_addr=opt_text(d.get("master_addr")),
                   rtt_ms=_numbers(d.get("rtt_ms")), ssh=_opt_try(d.get("ssh")),
                   own=_opt_try(d.get("own")), alt=_opt_try(d.get("alt")),
                   retried=flag(d.get("retried")))

    @classmethod
    def compact(cls, target: str, addr: str, ports: Sequence[int], rtt_ms: float,
                own: PortTry | None) -> Reach:
        """A compact entry (every port answered, its own address too where tried), median RTT
        `rtt_ms` (NaN: no sample)."""
        return cls(target=target, addr=addr, ports=tuple(answered(p) for p in ports),
                   rtt_ms=() if rtt_ms != rtt_ms else (rtt_ms,), own=own)


def _opt_try(raw: object) -> PortTry | None:
    return PortTry.read(raw) if raw else None


def _numbers(raw: object) -> tuple[float, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(number(x) for x in raw)


# -- connect: the whole answer -------------------------------------------------------------------


class AddressTable:
    """Every address a compact answer names, numbered once per process (index 0 is "-": that
    target is not compact), so that a compact row is an array of small numbers, not a string
    per pair (4096 nodes make 16.7 M pairs, and about 4096 distinct addresses)."""

    def __init__(self) -> None:
        self._words = ["-"]
        self._ids = {"-": 0}
        self._lock = threading.Lock()

    def __getitem__(self, i: int) -> str:
        return self._words[i]

    def ids(self, words: list[str]) -> array[int]:
        """`words` as their numbers (new ones numbered under the lock)."""
        ids = self._ids
        if not ids.keys() >= set(words):
            with self._lock:
                for w in words:
                    if w not in ids:
                        self._words.append(w)
                        ids[w] = len(self._words) - 1
        return array("I", map(ids.__getitem__, words))


ADDRESSES = AddressTable()


@dataclass(frozen=True)
class Compact:
    """netprobe's compact targets (`*compact`, --pairs matrix) in the order they were asked:
    each one's address (a number of :data:`ADDRESSES`, 0: not compact, its entry is whole in
    `*detail`) and median handshake RTT in ms (NaN: no sample). Read from its two strings
    straight into arrays: no object per pair."""

    addr: array[int]
    rtt: array[float]

    @classmethod
    def read(cls, raw: object) -> Compact:
        d = obj(raw, "the compact answer")
        addrs, rtts = d.get("addr"), d.get("rtt_ms")
        if not isinstance(addrs, str) or not isinstance(rtts, str):
            raise FactsError("the compact answer: addr and rtt_ms must be strings")
        # "-" (not compact) and "nan" (no sample) are NaN; an RTT is never negative
        got = cls(ADDRESSES.ids(addrs.split()), array("f", map(float, rtts.replace("-", "nan")
                                                                .split())))
        if len(got.addr) != len(got.rtt):
            raise FactsError(f"the compact answer: {len(got.addr)} addresses, "
                             f"{len(got.rtt)} RTTs")
        return got


@dataclass(frozen=True)
class Connected:
    """One node's `connect` answer: the targets it reached, whole (under --pairs matrix only
    those that are not compact), and its compact targets (None: not asked for)."""

    reached: Mapping[str, Reach]
    compact: Compact | None = None

    @classmethod
    def read(cls, raw: object) -> Connected:
        d = obj(raw, "connect")
        if "*compact" in d:
            return cls(_reach_row(d.get("*detail") or {}), Compact.read(d["*compact"]))
        return cls(_reach_row(d))


def _reach_row(raw: object) -> dict[str, Reach]:
    return {str(t): Reach.read(str(t), e) for t, e in obj(raw, "connect").items()}


# -- listen ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OwnAddress:
    """A node's own address as its gloo ranks take it, and the listener bound on exactly it
    (netprobe.py `_own_address`; F7): `how` it was found ("hostname", "loopback fallback",
    "GLOO_SOCKET_IFNAME=eth0"), the hostname and what it resolved to there, the first that
    bound (`addr`, `port`: None where none did), and why the others did not."""

    how: str
    addr: str | None = None
    port: int | None = None
    hostname: str | None = None
    candidates: tuple[str, ...] = ()
    family: int | None = None
    error: str | None = None
    bind_errors: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        """A listener is up on it: the peers were asked to connect there."""
        return bool(self.addr) and bool(self.port)

    @classmethod
    def read(cls, raw: object) -> OwnAddress:
        d = obj(raw, "the own address")
        return by_fields(cls, d, how=text(d.get("how")) or "hostname")


@dataclass(frozen=True)
class MasterListen(ByFields, what="the master port"):
    """The rendezvous port on the rank-0 node: bound (`free`), or who holds it."""

    port: int
    free: bool
    error: str | None = None
    owner: str = ""


@dataclass(frozen=True)
class Listening:
    """A node's `listen` answer: its high ports, the detached child holding them (pid), the
    master port where asked, its own gloo address where asked."""

    pid: int
    ports: tuple[int, ...]
    master: MasterListen | None = None
    hold: float = 0.0
    own: OwnAddress | None = None

    @classmethod
    def read(cls, raw: object) -> Listening:
        d = obj(raw, "listen")
        ports = d.get("ports")
        master, own = d.get("master"), d.get("own")
        return cls(integer(d.get("pid")),
                   tuple(integer(p) for p in ports) if isinstance(ports, list) else (),
                   MasterListen.read(master) if master else None, number(d.get("hold")),
                   OwnAddress.read(own) if own else None)


# -- stop, firewall, routes --------------------------------------------------------------------


@dataclass(frozen=True)
class Stopped(ByFields, what="stop"):
    """A node's `stop` answer: whether our listener was running, and is gone."""

    was_running: bool
    gone: bool
    note: str = ""


@dataclass(frozen=True)
class FirewallDump:
    """A node's `firewall` answer: `iptables -S` and `nft list ruleset` as run there (None:
    the tool is not installed), and the uid that ran them (reading them needs root)."""

    uid: int | None
    iptables: Command | None = None
    nft: Command | None = None

    @property
    def tools(self) -> tuple[tuple[str, Command], ...]:
        return tuple((name, c) for name, c in (("iptables", self.iptables), ("nft", self.nft))
                     if c is not None)

    @classmethod
    def read(cls, raw: object) -> FirewallDump:
        d = obj(raw, "firewall")
        ipt, nft = d.get("iptables"), d.get("nft")
        return cls(opt_int(d.get("uid")),
                   Command.read(ipt, "iptables") if ipt is not None else None,
                   Command.read(nft, "nft") if nft is not None else None)


def read_routes(raw: object) -> Mapping[str, Command]:
    """probe.py `routes`: `ip -o route get ADDR` as run on the node, per address."""
    return {str(a): Command.read(c, "a route") for a, c in obj(raw, "routes").items()}


LISTEN: Probe[Listening] = Probe(SCRIPT, "listen", Listening.read)
CONNECT: Probe[Connected] = Probe(SCRIPT, "connect", Connected.read)
STOP: Probe[Stopped] = Probe(SCRIPT, "stop", Stopped.read)
FIREWALL: Probe[FirewallDump] = Probe(SCRIPT, "firewall", FirewallDump.read)
ROUTES: Probe[Mapping[str, Command]] = Probe("probe.py", "routes", read_routes)
