"""C. Collective communication (CHECKLIST C1-C3): all-reduce through torch.distributed, for real.

C1 runs one rank per slot on every node (rendezvous on the rank-0 node at --master-port) over a
size sweep and reports time, algbw and busbw per size as nccl-tests does; C3 is built into every
run: connect/rendezvous, communicator init and the sweep each have their own deadline, and a
failure names the ranks (host, local rank) that never joined or never finished. C2 runs every
unordered node pair (one rank each, largest size) in circle rounds of disjoint pairs; test ids
are ``node1<->node2`` with the nodes in hostfile order, one per unordered pair. The rendezvous
of a pair sits on alternating sides, so that every node serves one: a node that drops inbound
high ports but accepts the replies to its own connections passes C1 with gloo when it happens
to connect out only (PITFALLS 9), and fails the pair in which it serves. C1, and a pair, that
the session's F3 port matrix already shows blocked (a node takes no connection from another on
any tested port) fail at once, citing those F3 tests, instead of waiting out a rendezvous
deadline (once per C2 round).

What is timed, and the units: see ``node/allreduce.py`` (the table's ``# timed:`` line).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import warnings
from pathlib import Path
from typing import Any

import pytest

from cluster_tests.core import outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster
from cluster_tests.core.memokey import MemoKey
from cluster_tests.judge.collective import collopts as copts
from cluster_tests.judge.collective import collverdict as C
from cluster_tests.judge.collective import confirmation
from cluster_tests.judge.collective import pairbw as pb
from cluster_tests.measure import allreducerun as R

CLUSTER_RUN: MemoKey[Any] = MemoKey("collective", "cluster")
PAIR_RUNS: MemoKey[Any] = MemoKey("collective", "pairs")
CONFIRM_RUNS: MemoKey[Any] = MemoKey("collective", "confirm")

pytestmark = pytest.mark.collective


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``node_pair``: unordered pairs (a before b in the hostfile), ids ``a<->b``."""
    if "node_pair" in metafunc.fixturenames:
        from cluster_tests.core import pairs as pairs_mod
        from cluster_tests.core.cluster import CLUSTER_KEY

        cluster = metafunc.config.stash.get(CLUSTER_KEY, None)
        pairs = pairs_mod.node_pairs(cluster) if cluster else []  # all, or those of --pairs
        metafunc.parametrize("node_pair", pairs, ids=[pb.pair_id(p) for p in pairs])


@pytest.fixture(scope="session")
def allreduce_run(cluster: Cluster, pytestconfig: pytest.Config) -> R.RemoteRun:
    """C1's run, once per session; kept in config.stash for the terminal summary."""
    run = cluster.memo(CLUSTER_RUN, lambda: R.run_cluster(cluster))
    R.stash(pytestconfig)["cluster"] = run
    path = cluster.settings.collective.busbw_record
    if path and run.report.rows:
        Path(path).expanduser().write_text(json.dumps(R.record(run), indent=2) + "\n")
    return run


@pytest.fixture(scope="session")
def pair_runs(cluster: Cluster, pytestconfig: pytest.Config) -> dict:
    """C2's runs (every pair, circle rounds), once per session, the slow-pair analysis, and
    the confirmation pass that measures the slow pairs again before any is blamed."""
    runs = cluster.memo(PAIR_RUNS, lambda: R.run_pairs(cluster))
    # a pair whose sweep stopped before the largest size (too slow for its share of
    # --collective-budget) is slow whatever the others measured: compared apart
    measured = {p: r.report.rows[-1].busbw_GBps for p, r in runs.items()
                if isinstance(r, R.RemoteRun) and r.report.ok and r.report.rows
                and r.report.stopped is None}
    ratio = cluster.settings.collective.pair_slow_ratio
    slow = pb.flag_slow_pairs(measured, ratio=ratio, reference="upper_median")
    stopped = [p for p, r in runs.items()
               if isinstance(r, R.RemoteRun) and r.report.stopped is not None]
    bad = [p for p, _ in slow.slow] + stopped
    plan = confirmation.plan(bad, {p: bw for p, bw in measured.items() if p not in dict(slow.slow)},
                            cluster.names)
    retries, reruns = cluster.memo(CONFIRM_RUNS, lambda: R.confirm(
        cluster, plan, slow.threshold_GBps, _announcer(pytestconfig)))
    confirmed = confirmation.judge(plan, retries, bad, cluster.names)
    R.stash(pytestconfig).update(pairs=runs, slow=slow, confirm=confirmed, reruns=reruns)
    return {"runs": runs, "slow": slow, "confirm": confirmed, "reruns": reruns}


def _announcer(config: pytest.Config):
    """Where the confirmation pass says what it measures again (the terminal, as it starts)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capman = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return None

    def write(line: str) -> None:
        # a fixture runs under pytest's capture: lift it, so that the line shows as it happens
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            reporter.ensure_newline()
            reporter.write_line(line)
    return write


def _record(record_property, run: R.RemoteRun) -> None:
    rep = run.report
    record_property("backend", rep.backend or "?")
    record_property("world_size", rep.world_size)
    record_property("master", run.where)
    record_property("sizes", ",".join(str(r.size_bytes) for r in rep.rows))
    for row in rep.rows:
        record_property(f"time_us@{row.size_bytes}", round(row.time_us, 3))
        record_property(f"algbw_GBps@{row.size_bytes}", round(row.algbw_GBps, 6))
        record_property(f"busbw_GBps@{row.size_bytes}", round(row.busbw_GBps, 6))
    if rep.rows:
        record_property("busbw_GBps", round(rep.rows[-1].busbw_GBps, 6))
        record_property("size_bytes", rep.rows[-1].size_bytes)


def _leftover_fail(run: R.RemoteRun) -> None:
    left = R.leftovers(run)
    if left:
        pytest.fail(f"all-reduce workers may still run (their node did not confirm the kill): "
                    f"{left}", pytrace=False)


def _socket_fallbacks(cluster: Cluster, run: R.RemoteRun, record_property) -> list[str]:
    """C1: the transports NCCL chose on each node (the workers' NCCL_DEBUG=INFO, parsed by
    nccllog) go to the properties; nodes with active RDMA ports (section R's probe) whose
    ranks ended on TCP sockets are returned, with NCCL's reason."""
    from cluster_tests.core.cluster import ProbeError
    from cluster_tests.judge.collective import nccllog
    from cluster_tests.judge.health import rdma

    nodes = nccllog.by_node(run.report.transport_lines, run.report.ranks)
    rdma_nodes = {}
    for host, t in nodes.items():
        record_property(f"transport@{host}", t.describe())
        if not t.on_sockets:
            continue
        env = {**cluster.base(host).env, **{k: v for k, v in os.environ.items()
                                             if k.startswith("NCCL_")}}
        if env.get("NCCL_IB_DISABLE", "0").strip() not in ("", "0") or \
                env.get("NCCL_NET", "").strip().lower() == "socket":
            continue  # sockets on purpose
        try:
            ports = cluster.probe(host, rdma.FABRIC).rdma.ports
        except ProbeError:
            continue
        if any(p.up for p in ports):
            rdma_nodes[host] = ", ".join(p.name for p in ports if p.up)
    return nccllog.socket_fallbacks(nodes, rdma_nodes)


def _stacks(config: pytest.Config, cluster: Cluster, run: R.RemoteRun, label: str,
            record_property) -> str:
    """Where every rank was when a deadline passed (their dumps), for the red."""
    from cluster_tests.measure import stackdump

    hosts = {r.rank: r.host for r in run.report.ranks}
    return stackdump.tell(config, label, run.stacks, run.native, hosts,
                          [r.rank for r in run.report.ranks], record_property,
                          run.sockets, R.address_owners(cluster, run.nodes) if run.sockets else {},
                          run.nodes, run.port)


def test_allreduce(allreduce_run: R.RemoteRun, cluster: Cluster, record_property,
                   pytestconfig: pytest.Config) -> None:
    """C1 + C3: every rank of every node joins, inits and completes the sweep within its stage
    deadlines, with no wrong element; the table goes to the properties and the summary.  A
    node with active RDMA ports whose NCCL ranks used TCP sockets fails it (10-50x slower)."""
    run = allreduce_run
    _record(record_property, run)
    fallbacks = _socket_fallbacks(cluster, run, record_property)
    if not run.report.ok:
        _block_by_ifname(cluster, run)
        pytest.fail(R.explain(cluster, run, f"all-reduce over {run.report.world_size} ranks on "
                              f"{', '.join(run.nodes)}")
                    + _stacks(pytestconfig, cluster, run, "allreduce", record_property),
                    pytrace=False)
    if fallbacks:
        pytest.fail("all-reduce went over TCP sockets where RDMA is there:\n  "
                    + "\n  ".join(fallbacks)
                    + f"\n  fix: unset NCCL_IB_DISABLE / NCCL_NET=Socket; see {ids.IB_HCA} and "
                      f"{ids.MEMLOCK} of those nodes; install rdma-core (libibverbs) where the "
                      "ranks run; a container needs --device=/dev/infiniband and "
                      "--cap-add=IPC_LOCK", pytrace=False)
    _leftover_fail(run)
    _accelerator_fail(cluster, run, f"all-reduce over {run.report.world_size} ranks")


def _block_by_ifname(cluster: Cluster, run: R.RemoteRun) -> None:
    """A failed run whose backend's *_SOCKET_IFNAME selects no usable interface on a node: F5's
    red there is the cause (the ranks cannot even create their device), not this one."""
    from cluster_tests.measure import ifaces

    chosen = run.report.backend or (run.options.backend if run.options.backend != "auto"
                                     else None)
    for backend in [chosen] if chosen else ["gloo", "nccl", "hccl"]:
        found = ifaces.unusable_ifname(cluster, backend)
        if found is None:
            continue
        node, var, value = found
        outcome.block(ids.SOCKET_IFNAME.of(node), f"{var}={value} selects no usable interface "
                                                  f"on {node}")


def _accelerator_fail(cluster: Cluster, run: R.RemoteRun, what: str) -> None:
    """Red when a rank ran a backend other than its node's accelerators call for (issue 17)."""
    problems = R.accelerator_problems(cluster, run)
    if problems:
        pytest.fail(f"{what}: not the launch's backend:\n  " + "\n  ".join(problems) + "\n"
                    + R.ACCELERATOR_FIX, pytrace=False)


def test_allreduce_busbw(allreduce_run: R.RemoteRun, cluster: Cluster, record_property) -> None:
    """C1: busbw at the largest size against --min-busbw and/or --busbw-baseline."""
    rep = allreduce_run.report
    if not rep.ok:
        pytest.skip(f"no bandwidth to judge: {ids.ALLREDUCE} failed ({rep.verdict})")
    if R.accelerator_problems(cluster, allreduce_run):
        pytest.skip("no bandwidth to judge: the ranks did not run the launch's backend "
                    f"(see {ids.ALLREDUCE})")
    baseline_path = cluster.settings.collective.busbw_baseline
    baseline = None
    if baseline_path:
        try:
            baseline = json.loads(Path(baseline_path).expanduser().read_text())
        except (OSError, ValueError) as exc:
            pytest.fail(f"--busbw-baseline {baseline_path}: cannot read it: {exc}\n  fix: write "
                        f"one with --busbw-record {baseline_path} on a healthy run", pytrace=False)
    verdict = C.judge_busbw(rep.rows, cluster.settings.collective.min_busbw, baseline,
                            cluster.settings.collective.busbw_tolerance, rep.stopped)
    record_property("busbw_verdict", verdict.message)
    if not verdict.judged:
        pytest.skip(verdict.message)
    if not verdict.ok:
        pytest.fail(f"all-reduce over {rep.world_size} ranks ({rep.backend}): {verdict.message}\n"
                    f"  fix: run `-k {ids.ALLREDUCE_PAIR}` to find the slow node or link; check "
                    f"the NIC speed and that {rep.backend} uses the fast interface "
                    f"(NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME)", pytrace=False)


def test_allreduce_pair(pair_runs: dict, node_pair: tuple[str, str], cluster: Cluster,
                        record_property, pytestconfig: pytest.Config) -> None:
    """C2: all-reduce between two nodes completes, and its busbw is not far below the typical
    good pair's; a node common to the slow (or failing) pairs is named."""
    a, b = node_pair
    run = pair_runs["runs"].get(node_pair)
    if isinstance(run, R.NodeDown):
        cluster.require(run.node)
        pytest.fail(str(run), pytrace=False)
    if isinstance(run, R.PortsBlocked):
        if run.pairs:
            outcome.block(*R.ports_root(cluster, run.pairs[0]))
        pytest.fail(f"{pb.pair_id(node_pair)}: {run}", pytrace=False)
    if isinstance(run, BaseException):
        pytest.fail(f"{pb.pair_id(node_pair)}: could not run: {run}", pytrace=False)
    _record(record_property, run)
    if not run.report.ok:
        _block_by_ifname(cluster, run)
        failing = [p for p, r in pair_runs["runs"].items()
                   if not (isinstance(r, R.RemoteRun) and r.report.ok)]
        pytest.fail(R.explain(cluster, run, pb.pair_id(node_pair))
                    + _common_node(failing, "failing")
                    + _stacks(pytestconfig, cluster, run, f"allreduce_pair-{a}-{b}",
                              record_property),
                    pytrace=False)
    _leftover_fail(run)
    _accelerator_fail(cluster, run, pb.pair_id(node_pair))
    slow = pair_runs["slow"]
    confirmed: confirmation.Confirmation = pair_runs["confirm"]
    verdict = confirmed.verdicts.get(node_pair)
    if verdict is None:
        return  # neither slow nor stopped
    _record_confirmation(record_property, confirmed, node_pair)
    for rerun in pair_runs["reruns"].values():
        if isinstance(rerun, R.RemoteRun):
            _leftover_fail(rerun)
    if run.report.stopped is not None:
        row = run.report.rows[-1] if run.report.rows else None
        got = (f"busbw {row.busbw_GBps:.4f} GB/s at {copts.format_size(row.size_bytes)}B; "
               if row else "")
        first = (f"{pb.pair_id(node_pair)}: too slow for its share of the budget: {got}"
                 f"{run.report.stopped.describe()}"
                 + (f"; the typical good pair: {slow.reference_GBps:.3f} GB/s"
                    if slow.reference_GBps else ""))
    else:
        mine = dict(slow.slow)[node_pair]
        row = run.report.rows[-1]
        others = [bw for p, bw in slow.slow if p != node_pair]
        first = (
            f"{pb.pair_id(node_pair)}: busbw {mine:.3f} GB/s at "
            f"{copts.format_size(row.size_bytes)}B, "
            f"below {slow.threshold_GBps:.3f} GB/s = {slow.threshold_GBps / slow.reference_GBps:g}"
            f" x the typical good pair ({slow.reference_GBps:.3f} GB/s, median of the better half"
            f" of {len(pair_runs['runs'])} pairs)"
            + (f"; median of the other slow pairs {statistics.median(others):.3f} GB/s"
               if others else ""))
    if not verdict.red:
        warnings.warn(CollectiveWarning(f"flaky: {first}; {verdict.note}: not a red, but a "
                                        "link to watch (run `-m collective` again)"),
                      stacklevel=1)
        return
    pytest.fail(first + _blame(confirmed, node_pair, verdict)
                + f"\n  fix: compare `ethtool <iface>` speeds and `tc qdisc show` on {a} and {b}; "
                  f"iperf3 -s on {a}, iperf3 -c {a} on {b}",
                pytrace=False)


class CollectiveWarning(UserWarning):
    """C2: a pair slow once and fine when measured again (flaky: a warning, not a red)."""


def _record_confirmation(record_property, confirmed: confirmation.Confirmation,
                         pair: tuple[str, str]) -> None:
    """The confirmation's numbers on the slow pair's test (JUnit properties, the JSON report)."""
    verdict = confirmed.verdicts[pair]
    record_property("confirm", verdict.state)
    if verdict.retry is not None and verdict.retry.busbw_GBps is not None:
        record_property("retry_busbw_GBps", round(verdict.retry.busbw_GBps, 6))
    s = confirmed.plan.suspect
    if s and s in pair:
        record_property("suspect", confirmed.confirmed or "")
        for r in confirmed.partner_retries():
            other = r.pair[1] if r.pair[0] == s else r.pair[0]
            record_property(f"confirm_busbw_GBps@{other}",
                            round(r.busbw_GBps, 6) if r.busbw_GBps is not None else "")


def _blame(confirmed: confirmation.Confirmation, pair: tuple[str, str],
           verdict: confirmation.PairVerdict) -> str:
    """What the confirmation pass says of a red slow pair: the suspect, confirmed against two
    fast nodes; or the pair's own retry (and why the node it shares was not named)."""
    bad = sorted(confirmed.verdicts)
    s = confirmed.plan.suspect
    counts = f"{s} is in {sum(s in p for p in bad)} of {len(bad)} slow pairs" if s else ""
    if confirmed.confirmed and confirmed.confirmed in pair:
        return f"\n  {counts}; {confirmed.suspect_line()}"
    text = f"\n  {verdict.note}"
    if s and s in pair:
        return text + f"\n  {counts}; {confirmed.suspect_line()}"
    reds = [p for p, v in confirmed.verdicts.items() if v.red]
    if len(reds) >= 2 and pb.suspect_node(reds)[0] is None:
        text += f"\n  {len(reds)} slow pair(s) with no node in common: suspect the link(s)"
    return text


def _common_node(pairs: list[tuple[str, str]], kind: str, suspect: str | None = None) -> str:
    """'; node3 is in 2 of 2 failing pairs: suspect node3' or a link when no node is common."""
    if len(pairs) < 2:
        return ""
    common, counts = pb.suspect_node(pairs)
    if suspect is None:
        suspect = common
    if suspect is None:
        return f"\n  {len(pairs)} {kind} pair(s) with no node in common: suspect the link(s)"
    return (f"\n  {suspect} is in {counts.get(suspect, 0)} of {len(pairs)} {kind} pairs: "
            f"suspect {suspect} (its NIC, link, firewall or load)")
