"""A hostfile name is what ssh makes of it (pure; no SSH, no I/O).

DeepSpeed needs no more of a hostfile name than ssh does: pdsh reaches each host through ssh,
the master address comes from ``ssh <first host> hostname -I``, each rank's own address from
its node, and the names are only keys in ``--world_info``.  So a name that only an ssh config
knows (cloud machines named in ``~/.ssh/config``: ``Host gpu-a`` / ``HostName 10.1.2.3``, no
DNS record, no /etc/hosts line) is as good as any, and the checks ask where a node's ssh goes
for it, the way OpenSSH does: ``ssh -G <name>`` (its ``hostname``, ``port`` and ``user``, every
Host and Match block and token applied), read on the node by its base probe (node/probe.py:
every name on the rank-0 node, where the launch's ssh runs; elsewhere the names the resolver
cannot place) and on the launcher (core/transport.ssh_g).

:func:`placement` says where a node sends a name: the name itself when it is an address, the
HostName of an ssh config block that renames it (resolved there when it is a name), else what
the resolver gives for it.  A ``--master_addr`` given as a name is another matter: every rank
resolves it with the resolver (torch's TCPStore), never with ssh.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cluster_tests.judge.common.basefacts import BaseFacts, Resolved, SshView
from cluster_tests.judge.common.netfacts import is_ip, own_addresses

#: where a name was placed: an address itself, an ssh config's HostName, the resolver, nowhere
BY_ADDRESS, BY_SSH, BY_RESOLVER, NOWHERE = "address", "ssh", "resolver", ""


@dataclass(frozen=True)
class Placement:
    """Where a viewer's ssh goes for a hostfile name."""

    name: str
    addrs: tuple[str, ...] = ()  # empty: not placed
    by: str = NOWHERE
    hostname: str = ""  # the HostName of the ssh config's block (by == BY_SSH)
    port: str = ""
    user: str = ""
    error: str = ""  # why it was not placed
    seconds: float | None = None  # how long the lookup the launch makes took

    @property
    def placed(self) -> bool:
        return bool(self.addrs)

    def describe(self) -> str:
        """How the viewer reads the name, for messages: "ssh config: HostName 10.1.2.3"."""
        if self.by == BY_SSH:
            to = (f" ({', '.join(self.addrs)})" if self.addrs and self.addrs != (self.hostname,)
                  else "")
            return f"ssh config: Host {self.name} -> HostName {self.hostname}{to}"
        if self.by == BY_RESOLVER:
            return f"resolves to {', '.join(self.addrs)}"
        if self.by == BY_ADDRESS:
            return "an address"
        return f"placed by neither ssh nor the resolver ({self.error or 'no address'})"


def ssh_view(facts: BaseFacts | None, name: str) -> SshView | None:
    """What the viewer's `ssh -G <name>` said (None: not asked there)."""
    return facts.ssh_names.get(name) if facts is not None else None


def placement(facts: BaseFacts | None, name: str) -> Placement:
    """Where the viewer whose base facts are `facts` sends `name` through ssh (see the module's
    docstring).  Without facts: not placed."""
    if is_ip(name):
        return Placement(name, (name,), BY_ADDRESS)
    view = ssh_view(facts, name) or SshView()
    host = view.hostname
    if not view.error and host and host != name:
        if is_ip(host):
            return Placement(name, (host,), BY_SSH, host, view.port, view.user, seconds=0.0)
        via = view.resolve or Resolved()
        return Placement(name, via.addrs, BY_SSH, host, view.port, view.user,
                         error=via.error or "", seconds=via.seconds)
    res = facts.resolve.get(name) if facts is not None else None
    if res is not None and res.addrs:
        return Placement(name, res.addrs, BY_RESOLVER, port=view.port, user=view.user,
                         seconds=res.seconds)
    return Placement(name, (), NOWHERE, port=view.port, user=view.user,
                     error=(res.error if res is not None else None) or view.error or "no address",
                     seconds=res.seconds if res is not None else None)


def misplaced(base_a: BaseFacts | None, base_b: BaseFacts | None,
              b: str) -> tuple[list[str], str] | None:
    """(where node a's ssh sends `b`, b's right address) when that is none of b's own addresses;
    None when it is right, unknown, not placed, or b is an address."""
    p = placement(base_a, b)
    if not p.placed or p.by == BY_ADDRESS:
        return None
    own = own_addresses(base_b)
    if not own or set(p.addrs) & set(own):
        return None
    return list(p.addrs), own[0]


def resolved(facts: BaseFacts | None, name: str) -> Placement:
    """`name` as the viewer's resolver alone takes it (a --master_addr: torch resolves it)."""
    if is_ip(name):
        return Placement(name, (name,), BY_ADDRESS)
    res = facts.resolve.get(name) if facts is not None else None
    addrs = res.addrs if res is not None else ()
    return Placement(name, addrs, BY_RESOLVER if addrs else NOWHERE,
                     error="" if addrs else ((res.error if res else None) or "no address"),
                     seconds=res.seconds if res is not None else None)


def parse_ssh_g(text: str) -> dict[str, str]:
    """The keys the checks read of `ssh -G` output (hostname, port, user)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key in ("hostname", "port", "user") and key not in out:
            out[key] = value.strip()
    return out


def known_by_ssh(viewers: Iterable[BaseFacts | None], name: str,
                 launcher_hostname: str) -> bool:
    """Whether a cluster knows `name` by its ssh configs (an alias) rather than by its
    resolvers: as the viewers whose facts are given place it (any by the resolver: not an
    alias), else as the launcher's ssh config does (its HostName for the name)."""
    ways = {placement(facts, name).by for facts in viewers if facts is not None}
    if BY_RESOLVER in ways:
        return False
    if BY_SSH in ways:
        return True
    return launcher_hostname != name


def place_fix(viewer: str, name: str, addr: str | None, alias: bool = False) -> str:
    """The fix for a name `viewer` cannot place: a hosts line or an ssh config block (`alias`:
    the block first, as the launcher knows the name so), never the node's hostname (the name is
    the hostfile's: the machine need not be called so)."""
    a = addr or "<its address>"
    where = "the launcher" if viewer == "launcher" else viewer
    block = f"a 'Host {name}' block with 'HostName {a}' to ~/.ssh/config"
    hosts = f"'{a} {name}' to /etc/hosts"
    if alias:
        return f"on {where}: add {block} (as the launcher's ssh config has it), or {hosts}"
    return f"on {where}: add {hosts} (or a DNS record, or {block})"


def alias_fix(viewer: str, name: str, addr: str | None) -> str:
    """The fix for an ssh config that sends `name` to another machine."""
    where = "the launcher" if viewer == "launcher" else viewer
    return (f"on {where}: make the 'Host {name}' block of the ssh config say "
            f"'HostName {addr or '<its address>'}'")
