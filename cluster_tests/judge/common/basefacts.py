"""A node's base facts (node/probe.py's `base` section), typed: who logs in, where its home and
~/.ssh are and with which modes, its hostname and what it and the hostfile's names resolve to
there (and what its ssh makes of them), its interfaces, environment, interpreter and tools.

Read once where the answer arrives (`BASE`, judge/common/probes.py); every section reads this
value. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cluster_tests.judge.common.fieldread import ByFields, by_fields
from cluster_tests.judge.common.probes import (
    Probe,
    integer,
    obj,
    text,
)


@dataclass(frozen=True)
class PathStat(ByFields, what="a path's stat"):
    """One path as `lstat` saw it on the node (node/probe.py's stat_path)."""

    path: str
    exists: bool
    error: str | None = None
    mode: int = 0
    uid: int = -1
    gid: int = -1
    is_dir: bool = False
    is_link: bool = False
    owner: str = ""
    group: str = ""
    #: Debian's StrictModes allowance: its group is the login user's private group
    group_private: bool = False


@dataclass(frozen=True)
class SshFiles(ByFields, what="~/.ssh"):
    """The login user's ~/.ssh as sshd's StrictModes walks it."""

    #: authorized_keys, ~/.ssh, home, then home's parents up to /
    chain: tuple[PathStat, ...]
    pubkeys: Mapping[str, str | None]  # id_*.pub -> its text (None: unreadable)
    private_keys: Mapping[str, PathStat]  # id_* -> its stat
    authorized_keys_text: str | None

    @property
    def authorized_keys(self) -> PathStat | None:
        return self.chain[0] if self.chain else None


@dataclass(frozen=True)
class Resolved(ByFields, what="a name's resolution"):
    """A name as the node's resolver answered (getaddrinfo, IPv4, in its order)."""

    addrs: tuple[str, ...] = ()
    error: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class SshView(ByFields, what="an ssh -G view"):
    """What the node's OpenSSH client makes of a name (`ssh -G NAME`)."""

    hostname: str = ""
    port: str = ""
    user: str = ""
    error: str = ""
    resolve: Resolved | None = None  # the HostName resolved there, where it is another name


@dataclass(frozen=True)
class BaseFacts:
    """The base section of one node."""

    hostname: str
    user: str
    uid: int
    gid: int
    group: str
    group_members: tuple[str, ...]
    home: str
    ssh: SshFiles
    hostname_I: tuple[str, ...]  # noqa: N815 - `hostname -I`, as the launch runs it
    env: Mapping[str, str]
    python_executable: str
    python_version: str
    resolve: Mapping[str, Resolved]
    ssh_names: Mapping[str, SshView]
    ip_addr: str  # `ip -o addr show` ('' where ip failed)
    ip_link: str  # `ip -o link show`
    which: Mapping[str, str | None]  # tool -> its path on the non-interactive PATH
    cpu_count: int | None = None

    @classmethod
    def read(cls, raw: object) -> BaseFacts:
        d = obj(raw, "base facts")
        python = d.get("python") if isinstance(d.get("python"), Mapping) else {}
        assert isinstance(python, Mapping)
        views = d.get("ssh_names")
        return by_fields(
            cls, d, uid=integer(d.get("uid"), -1), gid=integer(d.get("gid"), -1),
            python_executable=text(python.get("executable")),
            python_version=text(python.get("version")),
            ssh_names={str(k): SshView.read(v) for k, v in views.items()
                       if isinstance(v, Mapping)} if isinstance(views, Mapping) else {})

    def resolved(self, name: str) -> Resolved:
        """What `name` resolved to here (nothing, where it was not asked)."""
        return self.resolve.get(name) or Resolved(error="not asked")


#: the base section of node/probe.py
BASE: Probe[BaseFacts] = Probe("probe.py", "base", BaseFacts.read)
