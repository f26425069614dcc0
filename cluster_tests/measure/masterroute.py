"""H3/F2's rendezvous address, measured once per session as DeepSpeed derives it.

With ``--master_addr`` (the launch's, from ``--launch-args`` or ``--master-addr``) the value is
the given one.  Without it, DeepSpeed's own command (``ssh [-p P] <first active host> hostname
-I``) runs on the rank-0 node, where deepspeed starts, through the user's own ssh there, and the
value is the first word of its stdout (judge/hostfile/masteraddr.py).  When that word is not an
address, a traced non-interactive bash on the first host names the startup-file line that printed
it. Each peer's route to an address value (``ip -o route get``) is measured once as well.
"""

from __future__ import annotations

import shlex

from cluster_tests.core.cluster import Cluster
from cluster_tests.core.memokey import MemoKey
from cluster_tests.judge.common.netfacts import own_addresses, parse_interfaces
from cluster_tests.judge.hostfile import masteraddr as ma
from cluster_tests.judge.ssh import sshnames
from cluster_tests.measure import rehearsal

MASTER_ADDR: MemoKey[ma.Derived] = MemoKey("masteraddr", "derived")
SSH_CHECK: MemoKey[ma.SshCheck | None] = MemoKey("masteraddr", "ssh_check")
ROUTES: MemoKey[dict[str, ma.Route]] = MemoKey("masteraddr", "routes")


def derived(cluster: Cluster) -> ma.Derived:
    """The ``--master_addr`` of the launch (measured once)."""
    def compute() -> ma.Derived:
        d = _derive(cluster)
        d.suggest = _suggest(cluster, d.first_host)
        return d
    return cluster.memo(MASTER_ADDR, compute)


def _suggest(cluster: Cluster, first: str) -> str:
    """What a fix should pass as --master_addr: "" (the first host's name) where the rank-0
    node's resolver knows that name, else the address its ssh reaches it at (an ssh alias's
    HostName), else one of its own addresses: every rank resolves --master_addr with its
    resolver, so a name only ssh configs know would not do."""
    facts = cluster.base_or_none(cluster.rank0.name)
    if facts is None or sshnames.resolved(facts, first).placed:
        return ""
    placed = sshnames.placement(facts, first).addrs
    own = own_addresses(facts)
    return placed[0] if placed else own[0] if own else ""


def _derive(cluster: Cluster) -> ma.Derived:
    s = cluster.settings
    site = cluster.rank0.name
    hosts = rehearsal.launch_hosts(cluster)
    first = hosts[0] if hosts else site
    if s.master_addr:
        return ma.given(site, first, s.master_addr)
    argv = ma.hostname_i_argv(first, s.ssh_port)
    connect = int(s.timeout_connect)
    try:
        res = cluster.run(site, ma.marked_command(argv, connect), timeout=connect + 30)
    except Exception as exc:  # noqa: BLE001 - the session to the site failed: no value
        return ma.derive(site, first, shlex.join(argv), None, str(exc), None)
    body, rc = ma.read_marked(res.stdout)
    d = ma.derive(site, first, shlex.join(argv), body, res.stderr, rc)
    if d.value is not None and not ma.is_address(d.value) and cluster.login_error(first) is None:
        trace = cluster.run(first, ma.trace_command(), timeout=connect + 30)
        text, _ = ma.read_marked(trace.stdout)
        line = next((ln for ln in d.noise if d.value in ln.split()), d.value)
        d.printed_at = ma.printed_by(text or "", line)
    return d


def ssh_check(cluster: Cluster) -> ma.SshCheck | None:
    """DeepSpeed's ssh check as the launch will run it (measured once); None when the launch
    skips it (--no_ssh_check or --no_ssh in --launch-args)."""
    return cluster.memo(SSH_CHECK, lambda: _ssh_check(cluster))


def _ssh_check(cluster: Cluster) -> ma.SshCheck | None:
    s = cluster.settings
    if {"--no_ssh_check", "--no_ssh"} & set(s.launch_passthrough):
        return None
    site = cluster.rank0.name
    hosts = rehearsal.launch_hosts(cluster)
    if len(hosts) < 2:
        return None  # DeepSpeed checks only a multi-node launch
    argv = ma.ssh_check_argv(hosts[0], s.ssh_port)
    connect = int(s.timeout_connect)
    try:
        res = cluster.run(site, ma.marked_command(argv, connect).replace(
            "</dev/null;", "</dev/null 2>&1;"), timeout=connect + 30)
    except Exception as exc:  # noqa: BLE001 - no session to the site: not run
        return ma.SshCheck(site, hosts[0], shlex.join(argv), None, str(exc))
    body, rc = ma.read_marked(res.stdout)
    return ma.SshCheck(site, hosts[0], shlex.join(argv), rc, body or res.stderr)


def routes(cluster: Cluster) -> dict[str, ma.Route]:
    """Each reachable peer's route to the master address, when it is an address (else empty)."""
    return cluster.memo(ROUTES, lambda: _routes(cluster))


def _routes(cluster: Cluster) -> dict[str, ma.Route]:
    d = derived(cluster)
    if d.value is None or not ma.is_address(d.value):
        return {}
    peers = [n for n in rehearsal.launch_hosts(cluster)
             if n != d.first_host and cluster.login_error(n) is None]
    cmd = (f"echo {ma.BEGIN}; ip -o route get {shlex.quote(d.value)} 2>&1; rc=$?; echo; "
           f"echo \"{ma.END} $rc\"")
    out: dict[str, ma.Route] = {}
    results = cluster.pool.map(lambda n: cluster.run(n, cmd, timeout=20), peers)
    for node, res in zip(peers, results, strict=False):
        if isinstance(res, BaseException):
            out[node] = ma.Route(False, f"could not ask: {res}")
        else:
            body, rc = ma.read_marked(res.stdout)
            out[node] = ma.read_route(rc if rc is not None else res.exit_status, body or "",
                                      res.stderr)
    return out


def rank0_addresses(cluster: Cluster) -> dict[str, str] | None:
    """The rank-0 node's addresses, each with its interface (what H3 judges the master address
    against, beside each peer's route to it); None where rank 0 cannot be probed (its own red
    says why)."""
    facts = cluster.base_or_none(cluster.rank0.name)
    if facts is None:
        return None
    ifaces = parse_interfaces(facts.ip_link, facts.ip_addr)
    return {ip: i.name for i in ifaces.values() for ip in i.ips}
