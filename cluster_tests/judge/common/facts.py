"""Typed facts at the node boundary: what a probe's JSON says, read once by measure/ into
values that judge/ takes (instead of `dict[str, Any]`).

A probe section's JSON is read here and nowhere else; where a node script reports a status in
its own words, the enum's values are those words (tests/unit/test_facts.py holds the node
scripts to them).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cluster_tests.judge.ssh import sshfail


@dataclass(frozen=True)
class Command:
    """One command a probe ran on a node (node/prelude.py `run_command`): its exit status, the
    tails of its output, and how long it took. Exit 124: it ran past its deadline; 127: not
    found; 126: it could not start."""

    rc: int
    out: str = ""
    err: str = ""
    seconds: float | None = None

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Command:
        seconds = raw.get("seconds")
        return cls(rc=int(raw["rc"]), out=str(raw.get("out") or ""),
                   err=str(raw.get("err") or ""),
                   seconds=float(seconds) if seconds is not None else None)


@dataclass(frozen=True)
class SshLeg:
    """`ssh <target> true` run on a node as pdsh runs it (node/probe.py `ssh_pairs`): S4's
    measurement of one ordered pair, with the cause OpenSSH's own words name when it failed."""

    target: str
    command: Command

    @property
    def ok(self) -> bool:
        return self.command.ok

    @property
    def cause(self) -> sshfail.Cause | None:
        """Why it failed (None: it did not)."""
        return None if self.ok else sshfail.classify(self.command.err, self.command.rc)

    @property
    def evidence(self) -> str:
        """What ssh said, for the red: the tail of its stderr, else its exit status."""
        return (self.command.err.strip() or f"exit {self.command.rc}")[-800:]


def ssh_legs(raw: Mapping[str, Any]) -> dict[str, SshLeg]:
    """The `ssh_pairs` section's JSON ({target: command}) as legs, per target."""
    return {target: SshLeg(target, Command.from_json(res)) for target, res in raw.items()}


# -- the port matrix: node/netprobe.py `connect` -----------------------------------------------


class PortStatus(enum.Enum):
    """How one connection attempt of node/netprobe.py's `connect` ended, in the script's own
    words (`_classify`, `_connect`, and the master address that did not resolve)."""

    OK = "ok"  # our listener answered with the session's greeting
    OTHER_LISTENER = "other listener"  # something answered, not our listener
    REFUSED = "refused"
    TIMED_OUT = "timed out"
    UNREACHABLE = "unreachable"
    ERROR = "error"  # any other OSError: the script prints "error: <the error>"
    UNRESOLVED = "unresolved"  # (the master port only) --master_addr did not resolve

    @classmethod
    def of(cls, words: str) -> PortStatus:
        """The status the script's words say ("error: ..." is ERROR)."""
        if words.startswith(cls.ERROR.value + ":"):
            return cls.ERROR
        return cls(words)


@dataclass(frozen=True, slots=True)
class PortTry:
    """One connection from a node to a port of another: how it ended (`words`: the script's
    own, "error: [Errno 13] ..." included) and how long it took (None: not timed)."""

    port: int | None  # None: not said (the plain connect to sshd)
    status: PortStatus
    words: str
    ms: float | None = None
    error: str | None = None  # UNRESOLVED: why the name did not resolve

    @property
    def ok(self) -> bool:
        return self.status is PortStatus.OK

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], port: int | None = None) -> PortTry:
        words = str(raw["status"])
        ms = raw.get("ms")
        got = raw.get("port", port)
        return cls(port=int(got) if got is not None else None, status=PortStatus.of(words),
                   words=words, ms=float(ms) if ms is not None else None,
                   error=raw.get("error"))


@dataclass(frozen=True, slots=True)
class Reach:
    """What one node's `connect` found of one target (node/netprobe.py `section_connect`): the
    target's address as the node resolves it, each high port tried, the master port where
    tried, the handshake round-trip times, and the plain connect to sshd where no high port
    answered."""

    target: str
    addr: str | None
    resolve_error: str | None = None
    ports: tuple[PortTry, ...] = ()  # in port order
    master: PortTry | None = None
    master_addr: str | None = None  # where the master port was tried, when it resolved
    rtt_ms: tuple[float, ...] = ()
    ssh: PortTry | None = None

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

    @classmethod
    def from_json(cls, target: str, raw: Mapping[str, Any]) -> Reach:
        if is_compact(raw):  # netprobe's compact form (every port answered): ports, median RTT
            return cls(target=target, addr=raw.get("addr"),
                       ports=tuple(_answered(int(p)) for p in raw["ok"]),
                       rtt_ms=tuple(float(x) for x in raw.get("rtt_ms") or ()))
        ports = sorted((PortTry.from_json(r, int(p)) for p, r in (raw.get("ports") or {}).items()),
                       key=lambda t: t.port or 0)
        master, ssh = raw.get("master"), raw.get("ssh")
        return cls(target=target, addr=raw.get("addr"), resolve_error=raw.get("resolve_error"),
                   ports=tuple(ports),
                   master=PortTry.from_json(master) if master else None,
                   master_addr=raw.get("master_addr"),
                   rtt_ms=tuple(float(x) for x in raw.get("rtt_ms") or ()),
                   ssh=PortTry.from_json(ssh) if ssh else None)


def reach_row(raw: Mapping[str, Any]) -> dict[str, Reach]:
    """One node's `connect` section ({target: entry}) as what it reached, per target (under
    --pairs matrix its `*detail`: the compact targets are read when asked,
    :meth:`judge.network.PortMatrix.reach`)."""
    return {target: Reach.from_json(target, entry) for target, entry in raw.items()}


def is_compact(raw: Mapping[str, Any]) -> bool:
    """netprobe's compact entry (--pairs matrix): a target whose every port answered."""
    return "ok" in raw


@functools.lru_cache(maxsize=1024)
def _answered(port: int) -> PortTry:
    # one value per port for a million answered tries (PortTry is frozen)
    return PortTry(port, PortStatus.OK, "ok")
