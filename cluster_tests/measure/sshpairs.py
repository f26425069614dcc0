"""S4/S5 over the whole cluster: ssh from every source to its targets (one round trip per
source, the sources overlapping), and `pdsh -w <all hosts>` from each launch site as deepspeed
runs it. Cached in the session memo; the S checks read their slice."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence

from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, ProbeError
from cluster_tests.core.memokey import MemoKey
from cluster_tests.core.testids import LAUNCHER
from cluster_tests.judge.common.facts import SshLeg
from cluster_tests.judge.ssh import sshfail, sshmodes

#: a pdsh run: (exit, output, the site's PDSH_RCMD_TYPE), or NO_PDSH where pdsh is not
#: installed
PdshRun = tuple[int, str, str | None] | str

#: one source's legs (False: it cannot log in), or the exception its probe raised
SourceLegs = Mapping[str, SshLeg] | bool | BaseException
#: every source's, started together
PAIRS_ALL: MemoKey[Sequence[SourceLegs]] = MemoKey("ssh", "pairs_all")
#: per source: its `ssh_pairs` probe read once, per target
LEGS: MemoKey[Mapping[str, SshLeg]] = MemoKey("ssh", "legs")
#: per launch site: PDSH(site)
PDSH: MemoKey[PdshRun] = MemoKey("pdsh")

PDSH_OK = "CT_PDSH_OK"
#: a pdsh run's output where it outlived its deadline (exit 124)
PDSH_TIMED_OUT = "pdsh timed out"
#: a pdsh run where pdsh is not installed
NO_PDSH = "pdsh not installed"


def pairs_from(cluster: Cluster, source: str) -> Mapping[str, SshLeg]:
    """ssh from `source` to its targets in the selected pairs (--pairs), fanned out on `source`
    in one round trip (cached), per target.  The first call starts every source the session's
    S4 tests need at once (bounded by --fanout), so the sources overlap instead of taking
    turns."""
    sources = pairs_mod.collected_sources(cluster, ids.SSH_TRUST.name)
    if source in sources and len(sources) > 1:
        cluster.memo(PAIRS_ALL, lambda: cluster.pool.map(
            lambda s: cluster.login_error(s) is None and _legs(cluster, s), sources))
    return _legs(cluster, source)


def _legs(cluster: Cluster, source: str) -> Mapping[str, SshLeg]:
    return cluster.memo(LEGS(source), lambda: _confirmed(
        cluster, source, _probe_pairs(cluster, source)))


def _confirmed(cluster: Cluster, source: str, legs: Mapping[str, SshLeg]
               ) -> Mapping[str, SshLeg]:
    """Confirm before blaming: the legs that timed out to a node the launcher logs in to are
    tried once more, at once (one probe of `source`, those targets), and the second answer
    stands. A firewall that drops the SSH port drops the second try too, and stays red; a
    login lost once in a burst (a busy sshd, a busy node) does not name a healthy pair."""
    again = [t for t, leg in legs.items()
             if leg.cause is sshfail.Cause.TIMEOUT and cluster.login_error(t) is None]
    if not again:
        return legs
    try:
        second = _probe_pairs(cluster, source, again)
    except ProbeError:
        return legs  # the first answers stand
    return {**legs, **{t: leg for t, leg in second.items() if t in again}}


# sshd's default MaxStartups is "10:30:100": past 10 connections that have not yet logged in, it
# drops 30% of new ones ("Connection closed by ... [preauth]"), which would read as a broken pair.
# With every source probing at once, each source starts at its own successor (a rotation) and
# has at most this many logins in flight, so no node sees more than about this many at once, plus
# the one login of the launch rehearsal's pdsh, which runs meanwhile (rehearsal.start_background).
SSHD_SAFE_FANOUT = 7


def _probe_pairs(cluster: Cluster, source: str, again: list[str] | None = None
                 ) -> Mapping[str, SshLeg]:
    """`source`'s ssh legs to its selected targets (`again`: those only, a second try)."""
    timeout = cluster.settings.timeout_connect
    targets = again if again is not None else pairs_mod.targets_of(cluster, source)
    names = cluster.names
    start = names.index(source) + 1 if source in names else 0
    order = {n: (i - start) % len(names) for i, n in enumerate(names)}
    targets = sorted(targets, key=lambda t: order.get(t, 0))
    fanout = min(cluster.settings.fanout, SSHD_SAFE_FANOUT)
    return cluster.probe(
        source, sshmodes.SSH_PAIRS, targets=targets, connect_timeout=timeout,
        fanout=fanout, timeout=timeout * (1 + len(targets) // fanout) + 30,
        attempt=1 if again is None else 2,
    )


def pdsh_here(cluster: Cluster, site: str) -> tuple[bool, str | None]:
    """(whether pdsh is installed at `site`, PDSH_RCMD_TYPE there), from what the site's
    non-interactive shell finds (the launcher: this process's PATH and environment)."""
    if site == LAUNCHER:
        return shutil.which("pdsh") is not None, os.environ.get("PDSH_RCMD_TYPE")
    facts = cluster.base(site)
    return bool(facts.which.get("pdsh")), facts.env.get("PDSH_RCMD_TYPE")


def _pdsh(cluster: Cluster, site: str) -> PdshRun:
    """Run `pdsh -S -w <all hosts> echo OK` from `site` as deepspeed would: (exit, output, the
    site's PDSH_RCMD_TYPE); NO_PDSH where pdsh is not installed there."""
    installed, rcmd = pdsh_here(cluster, site)
    if not installed:
        return NO_PDSH
    hosts = ",".join(cluster.names)
    timeout = cluster.settings.timeout_connect
    ssh_args = f"-o BatchMode=yes -o ConnectTimeout={int(timeout)}"
    if cluster.settings.ssh_port is not None:  # as DeepSpeed's PDSHRunner adds --ssh_port
        ssh_args += f" -p {cluster.settings.ssh_port}"
    # pdsh's own connect timer (-t, 10 s by default) would outlast ssh's on a black-holed node.
    pdsh = ["pdsh", "-S", "-t", str(max(1, int(timeout))), "-w", hosts, "echo", PDSH_OK]
    if site == LAUNCHER:
        if cluster.settings.ssh_config is not None:  # given: the run's -F (else ssh's own)
            ssh_args += f" -F {shlex.quote(cluster.settings.ssh_config)}"
        env = dict(os.environ, PDSH_RCMD_TYPE="ssh", PDSH_SSH_ARGS_APPEND=ssh_args)
        try:
            proc = subprocess.run(pdsh, env=env, capture_output=True, text=True, errors="replace",
                                  timeout=timeout * 2 + 30, check=False)
            return proc.returncode, proc.stdout + proc.stderr, rcmd
        except subprocess.TimeoutExpired:
            return 124, PDSH_TIMED_OUT, rcmd
    res = cluster.run(site, ["env", "PDSH_RCMD_TYPE=ssh", f"PDSH_SSH_ARGS_APPEND={ssh_args}",
                             *pdsh],
                      timeout=timeout * 2 + 30)
    return res.exit_status, res.stdout + res.stderr, rcmd


def pdsh_run(cluster: Cluster, site: str, together: Sequence[str] = ()) -> PdshRun:
    """`site`'s pdsh run, once; the runs of the sites in `together` start with it (on a dead
    node each waits out a connect timeout)."""
    start_pdsh(cluster, [s for s in together if s != site])
    return cluster.memo(PDSH(site), lambda: _pdsh(cluster, site))


def start_pdsh(cluster: Cluster, sites: Sequence[str]) -> None:
    """Start these sites' pdsh runs in the background (their own tests read them)."""
    for other in sites:
        if cluster.cached(PDSH(other)) is None:
            threading.Thread(target=_quiet_pdsh, args=(cluster, other), daemon=True).start()


def _quiet_pdsh(cluster: Cluster, site: str) -> None:
    """Start `site`'s pdsh run in the memo; its own tests report the outcome."""
    try:
        cluster.memo(PDSH(site), lambda: _pdsh(cluster, site))
    except BaseException:  # noqa: BLE001 - stored in the memo, re-raised to that site's tests
        pass
