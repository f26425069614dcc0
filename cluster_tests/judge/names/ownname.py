"""N3: a node's own hostname as it resolves on the node itself (pure).

The base probe resolves the node's own hostname there (``gethostname()``, then
``getaddrinfo(AF_INET)``, answers in the resolver's order: with ``hosts: files dns``, the lines
of /etc/hosts that name it, in file order). A loopback answer is the Debian installer's
``127.0.1.1 <hostname>`` line, or the hostname added to ``127.0.0.1 localhost``. torch's gloo
ranks take the first answer that binds as the address they advertise to every peer (F7,
``judge/network/ownaddr.py``, judges that address against the peers that must dial it).

The fix (``fixcmd.own_name_hosts_cmd``) takes the hostname off the loopback lines, backing
/etc/hosts up once, and makes sure a line maps it to the node's routable address: the one its
hostname already resolves to besides the loopback (a line the user wrote), else the one its
hostfile name resolves to there (the address the launch reaches it by), else its only address
on a physical interface. Never a loopback, link-local or container-bridge address: where none is
certain, the fix needs a person.
"""

from __future__ import annotations

import ipaddress

from cluster_tests.core import testids as ids
from cluster_tests.judge.common import fixcmd
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.common.netfacts import is_ip, is_loopback, parse_interfaces
from cluster_tests.judge.hostfile.masteraddr import VIRTUAL_PREFIXES
from cluster_tests.judge.names.resolving import NamesCause
from cluster_tests.judge.problem import Fix, Problem

ITEM = ids.HOSTNAME_NOT_LOOPBACK.item
CAUSE = NamesCause.LOOPBACK


def answers(base: BaseFacts) -> tuple[str, list[str]]:
    """(the node's hostname, what it resolves to there, in order)."""
    hostname = base.hostname
    got = base.resolved(hostname).addrs
    return hostname, [str(a) for a in got]


def physical_addresses(base: BaseFacts) -> list[str]:
    """The node's addresses that a peer may reach: on an interface that is not loopback, a
    container bridge or a tunnel (masteraddr.VIRTUAL_PREFIXES), not link-local; in interface
    order, IPv4 first."""
    ifaces = parse_interfaces(base.ip_link, base.ip_addr)
    out: list[str] = []
    for iface in ifaces.values():
        if iface.name.startswith(VIRTUAL_PREFIXES):
            continue
        for ip in iface.ips:
            try:
                addr = ipaddress.ip_address(ip.split("%")[0])
            except ValueError:
                continue
            if not (addr.is_loopback or addr.is_link_local or addr.is_unspecified):
                out.append(ip)
    return sorted(out, key=lambda a: ":" in a)


def routable_address(node: str, base: BaseFacts) -> str | None:
    """The address the node's hostname should resolve to there (see the module's docstring);
    None where no address is certain."""
    own = physical_addresses(base)
    _, got = answers(base)
    for addr in got:
        if addr in own:
            return addr
    if is_ip(node):
        by_name = [node]
    else:
        by_name = list(base.resolved(node).addrs)
    for addr in by_name:
        if addr in own:
            return str(addr)
    v4 = [a for a in own if ":" not in a]
    if len(v4) == 1:
        return v4[0]
    return own[0] if len(own) == 1 else None


def judge(node: str, base: BaseFacts | None) -> Problem | None:
    """The red of a node whose own hostname resolves to a loopback address there (None: it
    does not, or its base facts are unknown), with the /etc/hosts fix where an address is
    certain."""
    if base is None:
        return None
    hostname, got = answers(base)
    loop = [a for a in got if is_loopback(a)]
    if not hostname or not loop:
        return None
    address = routable_address(node, base)
    first = " (the first answer, the one its gloo ranks take)" if got[0] in loop else ""
    message = (f"{node}: its hostname '{hostname}' resolves to {', '.join(got)} on the node "
               f"itself; {', '.join(loop)} is a loopback address{first}: ranks that advertise "
               f"it give their peers an address where each peer reaches only itself.")
    if address is None:
        candidates = physical_addresses(base)
        return Problem(
            (node,), CAUSE, message,
            fix=(f"on {node}: remove '{hostname}' from the 127.x line in /etc/hosts and add "
                 f"'<its address> {hostname}' (the address its peers reach it by"
                 + (f": one of {', '.join(candidates)})" if candidates else ")")),
            item=ITEM)
    if address in got:
        words = (f"on {node}: remove '{hostname}' from the 127.x line in /etc/hosts (the line "
                 f"'{address} {hostname}' is there)")
    else:
        words = (f"on {node}: remove '{hostname}' from the 127.x line in /etc/hosts and add "
                 f"'{address} {hostname}'")
    backup = "/etc/hosts" + fixcmd.HOSTS_BACKUP_SUFFIX
    fix = Fix(node, f"/etc/hosts: {hostname} is {address}, not {', '.join(loop)}",
              (fixcmd.as_root(base, fixcmd.own_name_hosts_cmd(hostname, address)),), ITEM,
              f"/etc/hosts as it was is kept in {backup} (before the first change; a backup "
              "already there is kept)")
    return Problem((node,), CAUSE, message, fix=words, fixes=(fix,), item=ITEM)
