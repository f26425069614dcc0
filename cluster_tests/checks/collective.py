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
any tested port) are blocked at once by those F3 tests, instead of waiting out a rendezvous
deadline (once per C2 round).

Runs: measure/allreducerun.py; verdicts: judge/collective/ (collverdict: a run's red;
confirmation: a slow pair's). What is timed, and the units: see ``node/allreduce.py`` (the
table's ``# timed:`` line).
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from cluster_tests.checks import block_on
from cluster_tests.core import outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster
from cluster_tests.core.memokey import MemoKey
from cluster_tests.judge.collective import collverdict as C
from cluster_tests.judge.collective import confirmation
from cluster_tests.judge.collective import pairbw as pb
from cluster_tests.judge.collective.collverdict import RemoteRun
from cluster_tests.judge.network import ifjudge
from cluster_tests.measure import allreducerun as R
from cluster_tests.measure import ports
from cluster_tests.measure.stackdump import RecordProperty
from cluster_tests.report.colltable import AllReduceResult, PairResult

Pair = tuple[str, str]
CLUSTER_RUN: MemoKey[RemoteRun] = MemoKey("collective", "cluster")
PAIR_RUNS: MemoKey[R.PairRuns] = MemoKey("collective", "pairs")
CONFIRM_RUNS: MemoKey[tuple[dict[Pair, confirmation.Retry], R.PairRuns]] = MemoKey(
    "collective", "confirm")

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
def allreduce_run(cluster: Cluster) -> RemoteRun | R.PortsBlocked:
    """C1's run, once per session (or why it was not run: the F3 port matrix shows its ports
    blocked)."""
    try:
        run = cluster.memo(CLUSTER_RUN, lambda: R.run_cluster(cluster))
    except R.PortsBlocked as exc:
        return exc
    path = cluster.settings.collective.busbw_record
    if path and run.report.rows:
        Path(path).expanduser().write_text(json.dumps(R.record(run), indent=2) + "\n")
    return run


@dataclass(frozen=True)
class PairRuns:
    """C2's runs, the slow pairs among them, and the confirmation pass's verdicts and runs."""

    runs: R.PairRuns
    slow: pb.SlowPairs
    confirm: confirmation.Confirmation
    reruns: R.PairRuns


@pytest.fixture(scope="session")
def pair_runs(cluster: Cluster, pytestconfig: pytest.Config) -> PairRuns:
    """C2's runs (every pair, circle rounds), once per session, the slow-pair analysis, and
    the confirmation pass that measures the slow pairs again before any is blamed."""
    runs = cluster.memo(PAIR_RUNS, lambda: R.run_pairs(cluster))
    # a pair whose sweep stopped before the largest size (too slow for its share of
    # --collective-budget) is slow whatever the others measured: compared apart
    measured = {p: r.report.rows[-1].busbw_GBps for p, r in runs.items()
                if isinstance(r, RemoteRun) and r.report.ok and r.report.rows
                and r.report.stopped is None}
    ratio = cluster.settings.collective.pair_slow_ratio
    slow = pb.flag_slow_pairs(measured, ratio=ratio, reference="upper_median")
    stopped = [p for p, r in runs.items()
               if isinstance(r, RemoteRun) and r.report.stopped is not None]
    bad = [p for p, _ in slow.slow] + stopped
    plan = confirmation.plan(bad, {p: bw for p, bw in measured.items() if p not in dict(slow.slow)},
                             cluster.names)
    retries, reruns = cluster.memo(CONFIRM_RUNS, lambda: R.confirm(
        cluster, plan, slow.threshold_GBps, _announcer(pytestconfig)))
    confirmed = confirmation.judge(plan, retries, bad, cluster.names)
    return PairRuns(runs, slow, confirmed, reruns)


def _announcer(config: pytest.Config) -> Callable[[str], None] | None:
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


def _record(record_property: RecordProperty, run: RemoteRun) -> None:
    rep = run.report
    record_property("backend", rep.backend or "?")
    record_property("world_size", rep.world_size)
    record_property("master", run.where)
    record_property("sizes", ",".join(str(r.size_bytes) for r in rep.rows))
    # the run's table, per size, as one record (report/colltable.py renders and reads it)
    record_property(AllReduceResult.PROPERTY, AllReduceResult.of_run(run).to_json())
    if rep.rows:
        record_property("busbw_GBps", round(rep.rows[-1].busbw_GBps, 6))
        record_property("size_bytes", rep.rows[-1].size_bytes)


def _stacks(config: pytest.Config, cluster: Cluster, run: RemoteRun, label: str,
            record_property: RecordProperty) -> list[str]:
    """Where every rank was when a deadline passed (their dumps), for the red."""
    from cluster_tests.measure import stackdump

    hosts = {r.rank: r.host for r in run.report.ranks}
    return stackdump.tell(config, label, run.stacks, run.native, hosts,
                          [r.rank for r in run.report.ranks], record_property,
                          run.sockets, R.address_owners(cluster, run.nodes) if run.sockets else {},
                          run.nodes, run.port)


def _block_by_ifname(cluster: Cluster, run: RemoteRun) -> None:
    """A failed run whose backend's *_SOCKET_IFNAME selects no usable interface on a node: F5's
    red there is the cause (the ranks cannot even create their device), not this one."""
    from cluster_tests.measure import ifaces

    chosen = run.report.backend or (run.options.backend if run.options.backend != "auto"
                                     else None)
    for backend in [chosen] if chosen else ["gloo", "nccl", "hccl"]:
        var = f"{backend.upper()}_SOCKET_IFNAME"
        block_on(ifjudge.ifname_roots(var, ifaces.ifname_picks(cluster, var), cluster.rank0.name))


def _after_run(cluster: Cluster, runs: list[RemoteRun], what: str, item: str,
               where: tuple[str, ...] | None = None) -> None:
    """Red when a node did not confirm that its workers are gone, or when a rank ran a backend
    other than its node's accelerators call for (issue 17)."""
    problem = C.leftover(runs, item=item, where=where) or C.wrong_backend(
        runs[0].report, R.accelerators(cluster, runs[0]), what, item=item, where=where)
    if problem is not None:
        outcome.fail(problem)


def _ports_blocked(cluster: Cluster, exc: R.PortsBlocked) -> None:
    """Blocked by the F red that found the run's ports blocked (returns where it is not run)."""
    if exc.blocked:
        pair = exc.blocked[0]
        block_on(C.ports_roots(pair, *ports.firewall_facts(cluster, pair.source, pair.target)))


def test_allreduce(allreduce_run: RemoteRun | R.PortsBlocked, cluster: Cluster,
                   record_property: RecordProperty, pytestconfig: pytest.Config) -> None:
    """C1 + C3: every rank of every node joins, inits and completes the sweep within its stage
    deadlines, with no wrong element; the table goes to the properties and the summary.  A
    node with active RDMA ports whose NCCL ranks used TCP sockets fails it (10-50x slower)."""
    run = allreduce_run
    if isinstance(run, R.PortsBlocked):
        _ports_blocked(cluster, run)
        outcome.fail(C.ports_blocked(f"all-reduce over every rank of {', '.join(cluster.names)}",
                                     run.blocked, item=ids.ALLREDUCE.items[0]))
    _record(record_property, run)
    for host, t in R.transports(run).items():
        record_property(f"transport@{host}", t.describe())
    fallback = C.socket_fallback(R.socket_fallbacks(cluster, run))
    what = f"all-reduce over {run.report.world_size} ranks"
    if not run.report.ok:
        _block_by_ifname(cluster, run)
        outcome.fail(C.run_failed(
            run, f"{what} on {', '.join(run.nodes)}", R.ports_seen(cluster, run.nodes),
            item=ids.ALLREDUCE.items[0],
            after=_stacks(pytestconfig, cluster, run, "allreduce", record_property)))
    if fallback is not None:
        outcome.fail(fallback)
    _after_run(cluster, [run], what, ids.ALLREDUCE.items[0])


def test_allreduce_busbw(allreduce_run: RemoteRun | R.PortsBlocked, cluster: Cluster,
                         record_property: RecordProperty) -> None:
    """C1: busbw at the largest size against --min-busbw and/or --busbw-baseline."""
    if isinstance(allreduce_run, R.PortsBlocked):
        _ports_blocked(cluster, allreduce_run)
        pytest.skip(f"no bandwidth to judge: {ids.ALLREDUCE} was not run")
    rep = allreduce_run.report
    if not rep.ok:
        pytest.skip(f"no bandwidth to judge: {ids.ALLREDUCE} failed ({rep.verdict})")
    if C.backend_problems(rep, R.accelerators(cluster, allreduce_run)):
        pytest.skip("no bandwidth to judge: the ranks did not run the launch's backend "
                    f"(see {ids.ALLREDUCE})")
    c = cluster.settings.collective
    baseline = None
    if c.busbw_baseline:
        try:
            baseline = R.load_baseline(c.busbw_baseline)
        except (OSError, ValueError) as exc:
            outcome.fail(C.baseline_unreadable(c.busbw_baseline, str(exc)))
    verdict = C.judge_busbw(rep.rows, c.min_busbw, baseline, c.busbw_tolerance, rep.stopped)
    record_property("busbw_verdict", verdict.message)
    if not verdict.judged:
        pytest.skip(verdict.message)
    problem = C.busbw_problem(rep, verdict)
    if problem is not None:
        outcome.fail(problem)


def _pair_run(cluster: Cluster, runs: PairRuns, pair: Pair) -> RemoteRun:
    """The pair's run; red (or blocked) where it could not be run."""
    run = runs.runs.get(pair)
    if isinstance(run, RemoteRun):
        return run
    if isinstance(run, R.NodeDown):
        cluster.require(run.node)
        outcome.fail(C.node_down(run.node, item=ids.ALLREDUCE_PAIR.item, where=pair))
    if isinstance(run, R.PortsBlocked):
        _ports_blocked(cluster, run)
        outcome.fail(C.ports_blocked(pb.pair_id(pair), run.blocked,
                                     item=ids.ALLREDUCE_PAIR.item, where=pair))
    outcome.fail(C.not_run(pb.pair_id(pair), str(run), item=ids.ALLREDUCE_PAIR.item, where=pair))


def _pair_failed(cluster: Cluster, runs: PairRuns, pair: Pair, run: RemoteRun,
                 record_property: RecordProperty, config: pytest.Config) -> None:
    """C2's red of a pair whose run did not pass, with the node the failing pairs share."""
    _block_by_ifname(cluster, run)
    failing = [p for p, r in runs.runs.items() if not (isinstance(r, RemoteRun) and r.report.ok)]
    stacks = _stacks(config, cluster, run, f"allreduce_pair-{pair[0]}-{pair[1]}",
                     record_property)
    outcome.fail(C.run_failed(run, pb.pair_id(pair), R.ports_seen(cluster, run.nodes),
                              item=ids.ALLREDUCE_PAIR.item, where=pair,
                              after=[*pb.common_node_words(failing, "failing"), *stacks]))


def test_allreduce_pair(pair_runs: PairRuns, node_pair: Pair, cluster: Cluster,
                        record_property: RecordProperty, pytestconfig: pytest.Config) -> None:
    """C2: all-reduce between two nodes completes, and its busbw is not far below the typical
    good pair's; a node common to the slow (or failing) pairs is named."""
    record_property(PairResult.PROPERTY, PairResult.of(  # its row of C2's table
        node_pair, pair_runs.runs.get(node_pair), pair_runs.slow, pair_runs.confirm).to_json())
    run = _pair_run(cluster, pair_runs, node_pair)
    _record(record_property, run)
    if not run.report.ok:
        _pair_failed(cluster, pair_runs, node_pair, run, record_property, pytestconfig)
    _after_run(cluster, [run], pb.pair_id(node_pair), ids.ALLREDUCE_PAIR.item, node_pair)
    confirmed = pair_runs.confirm
    verdict = confirmed.verdicts.get(node_pair)
    if verdict is None:
        return  # neither slow nor stopped
    _record_confirmation(record_property, confirmed, node_pair)
    reruns = [r for r in pair_runs.reruns.values() if isinstance(r, RemoteRun)]
    leftover = C.leftover(reruns, item=ids.ALLREDUCE_PAIR.item, where=node_pair)
    if leftover is not None:
        outcome.fail(leftover)
    first = confirmation.slow_words(node_pair, run.report, pair_runs.slow, len(pair_runs.runs))
    problem = confirmation.slow_pair(node_pair, run.report, first, confirmed, verdict)
    if problem is None:
        warnings.warn(CollectiveWarning(confirmation.flaky_words(first, verdict)), stacklevel=1)
        return
    outcome.fail(problem)


class CollectiveWarning(UserWarning):
    """C2: a pair slow once and fine when measured again (flaky: a warning, not a red)."""


def _record_confirmation(record_property: RecordProperty, confirmed: confirmation.Confirmation,
                         pair: Pair) -> None:
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
