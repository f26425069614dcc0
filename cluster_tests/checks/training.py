"""T. Training smoke (CHECKLIST T1, T2): a tiny DeepSpeed job trains, first on each node alone,
then on all nodes through the real launcher, started on the rank-0 node.

How the job reaches the nodes, how it is started, watched, bounded and cleaned up:
``cluster_tests.measure.trainruns``. Full logs: ``reports/training/T1-<node>.log``, ``T2.log``
(next to the JUnit report).

T2 needs every node to pass T1 first. When T1 was deselected (``-k multi_node``), T2 still runs
the T1 jobs as its prerequisite (once per session, all nodes at once) and is skipped, naming the
node and the cause, when one of them fails: a node that cannot train alone only makes the
multi-node launch hang in rendezvous, and its own T1 message says why more clearly.
A failed launch's red is judge/training/trainexplain.py's (its causes: traindiag.TrainCause).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tests.core import outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster
from cluster_tests.judge.hostfile import resourcefilter as rf
from cluster_tests.judge.ssh import sshfail
from cluster_tests.judge.training import trainexplain as tx
from cluster_tests.measure import trainruns as trr
from cluster_tests.measure.stackdump import RecordProperty

pytestmark = pytest.mark.training


def _log_dir(config: pytest.Config) -> Path:
    xml = getattr(config.option, "xmlpath", None)
    if xml:
        return Path(xml).absolute().parent / "training"
    return Path(config.invocation_params.dir) / "reports" / "training"


@pytest.fixture(scope="session")
def training(cluster: Cluster, request: pytest.FixtureRequest):
    """The session's T1/T2 runs; T1 starts on every node that a selected test needs, at once."""
    try:
        config = trr.config_from_settings(cluster.settings)
    except trr.ConfigError as exc:
        outcome.fail(tx.options_refused(str(exc)))
    runs = trr.TrainingRuns(cluster, config, _log_dir(request.config), cluster.run_tag)
    wanted: list[str] = []
    for item in request.session.items:
        name = getattr(item, "originalname", item.name)
        if name == ids.TRAIN_SINGLE_NODE.name:
            wanted.append(item.callspec.params["node"])  # type: ignore[attr-defined]
        elif name == ids.TRAIN_MULTI_NODE.name:
            try:
                wanted.extend(runs.active())
            except rf.ResourceFilterError:
                pass
    runs.prefetch_single_nodes(wanted)  # an unreachable node's T1 ends at once (setup error)
    yield runs
    runs.close()


def _record(record_property: RecordProperty, launch: trr.Launch) -> None:
    record_property("seconds", f"{launch.seconds:.1f}")
    record_property("ranks", launch.expected_ranks)
    if launch.result is not None:
        for r, rr in sorted(launch.result.ranks.items()):
            if rr.first_loss is not None and rr.last_loss is not None:
                record_property(f"loss_rank{r}", f"{rr.first_loss:.4g}->{rr.last_loss:.4g}")
    if launch.log_path is not None:
        record_property("log", str(launch.log_path))


def test_train_single_node(
    cluster: Cluster, node: str, training: trr.TrainingRuns, record_property: RecordProperty,
    pytestconfig: pytest.Config,
) -> None:
    """T1: the job trains on this node alone, on all its slots, within the deadline; loss falls."""
    cluster.require(node)
    if training.slots(node) == 0:
        pytest.skip(f"{node}: no slot left to launch on by --launch-include/--launch-exclude")
    stale = training.jit_owner(node)
    if stale is not None:  # the job would wait on that lock until its deadline
        outcome.block(ids.JIT_OPS.of(stale[0]), stale[1].split(": see ")[0])
    launch = training.single_node(node)
    _record(record_property, launch)
    if not launch.ok:
        outcome.fail(tx.launch_failed(launch, training.config, _stacks(
            pytestconfig, launch, f"train_single_node-{node}", record_property)))


def test_train_multi_node(cluster: Cluster, training: trr.TrainingRuns,
                          record_property: RecordProperty, pytestconfig: pytest.Config) -> None:
    """T2: the job through `deepspeed --hostfile` from the rank-0 node (pdsh, ssh, all nodes):
    every rank reports, the loss falls, all ranks end with identical weights."""
    try:
        active = training.active()
    except rf.ResourceFilterError as exc:
        outcome.fail(tx.filter_refused(str(exc)))
    if len(active) < 2:
        pytest.skip(f"only {', '.join(active) or 'no node'} to launch on: T1 covers a single node")
    training.prefetch_single_nodes(active)
    failed = []
    for n in active:
        err = cluster.login_error(n)
        if err is not None:
            outcome.block(ids.LOGIN.of(n), sshfail.node_state(n, err.cause))
            failed.append(f"{n} (unreachable: {err.cause.value}; see {ids.LOGIN.of(n)})")
            continue
        t1 = training.single_node(n)
        if not t1.ok:
            outcome.block(ids.TRAIN_SINGLE_NODE.of(n), f"{n} cannot train alone "
                                                        f"({tx.short_cause(t1)})")
            failed.append(f"{n} ({tx.short_cause(t1)}; see {ids.TRAIN_SINGLE_NODE.of(n)})")
    if failed:
        pytest.skip(
            "T2 needs every node to train alone first; T1 failed on " + "; ".join(failed)
        )
    launch = training.multi_node()
    _record(record_property, launch)
    record_property("rank0", launch.node)
    record_property("launch_command", launch.line)
    if not launch.ok:
        outcome.fail(tx.launch_failed(launch, training.config, _stacks(
            pytestconfig, launch, "train_multi_node", record_property)))


def _stacks(config: pytest.Config, launch: trr.Launch, label: str,
            record_property: RecordProperty) -> list[str]:
    """Where every rank was when its watchdog's deadline passed (each dumps its own stacks)."""
    from cluster_tests.measure import stackdump

    result = launch.result
    if result is None or not result.stacks:
        return []
    return stackdump.tell(config, label, result.stacks, {}, result.hosts(),
                          list(range(result.expected)), record_property)
