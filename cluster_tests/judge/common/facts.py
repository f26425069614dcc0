"""Typed facts at the node boundary: what a probe's JSON says, read once by measure/ into
values that judge/ takes (instead of `dict[str, Any]`).

A probe section's JSON is read here and nowhere else. (The port matrix's facts, netprobe.py's
sections: judge/network/portfacts.py.)
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster_tests.judge.common.probes import FactsError, obj, text
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
    def read(cls, raw: object, what: str) -> Command:
        """A `run_command` record, or FactsError naming `what` (not an object, no exit status)."""
        d = obj(raw, what)
        rc, seconds = d.get("rc"), d.get("seconds")
        if not isinstance(rc, int) or isinstance(rc, bool):
            raise FactsError(f"{what}: no exit status")
        return cls(rc, text(d.get("out")), text(d.get("err")),
                   float(seconds) if isinstance(seconds, (int, float)) else None)


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
