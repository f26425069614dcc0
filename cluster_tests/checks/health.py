"""R. RDMA fabric, limits, /dev/shm and GPU/NPU health (CHECKLIST R1-R9), as the launch
meets them: read by `healthprobe.py` in the non-interactive ssh shell that pdsh gets, judged by
the pure functions of `rdma.py`, `gpuhealth.py` and `dcgm.py`, and compared across nodes where a
port or a GID is only wrong because the peers differ."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from typing import TypeVar

import pytest

from cluster_tests.core import nodetable, outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, Declared, ProbeError
from cluster_tests.core.memokey import MemoKey
from cluster_tests.core.nodetable import NodeColumn
from cluster_tests.core.settings import Settings
from cluster_tests.judge.common.probes import Probe
from cluster_tests.judge.health import dcgm, gpuhealth, rdma
from cluster_tests.judge.health.dcgm import DIAG
from cluster_tests.judge.health.gpuhealth import ACCEL, AccelFacts
from cluster_tests.judge.health.rdma import FABRIC, FabricFacts
from cluster_tests.judge.problem import Problem

#: per node: its RDMA ports and where they were read from
PORTS: MemoKey[rdma.RdmaFacts] = MemoKey("health", "ports")
#: per node: R8's verdict (None: no npu-smi there)
NPU: MemoKey[gpuhealth.NpuVerdict | None] = MemoKey("health", "npu")

pytestmark = pytest.mark.health

T = TypeVar("T")


def node_probes(settings: Settings) -> list[Declared]:
    """The probes this section's tests ask of every node they touch (`Cluster.prefetch`)."""
    diag: dict[str, object] = {**_diag_params(settings)}
    return [(FABRIC, {}), (ACCEL, {}), (DIAG, diag)]


def _diag_params(settings: Settings) -> dict[str, float]:
    """R9's probe: DCGM's level and deadline (the ssh command's own timeout a little longer)."""
    level = settings.health.dcgm_level
    deadline = dcgm.DEADLINE_S[level]
    return {"dcgm_level": level, "deadline": deadline, "timeout": deadline + 30.0}


def _rdma_column(cluster: Cluster, node: str) -> str | None:
    facts = cluster.cached(PORTS(node))
    ports = facts.ports if facts is not None else ()
    return f"{sum(p.up for p in ports)}/{len(ports)} ports active" if ports else None


nodetable.declare(NodeColumn("rdma", _rdma_column))


class HealthWarning(UserWarning):
    """Works, but worth a look (persistence mode off, an application Xid in the kernel log)."""


def _facts(cluster: Cluster, node: str, probe: Probe[T], check: ids.TestId) -> T:
    """The node's answer to `probe`, or the red of `check`, which needed it."""
    cluster.require(node)
    try:
        return cluster.probe(node, probe)
    except ProbeError as exc:
        outcome.fail(exc.problem(check.item))


def _fabric(cluster: Cluster, node: str, check: ids.TestId) -> FabricFacts:
    return _facts(cluster, node, FABRIC, check)


def _ports(cluster: Cluster, node: str) -> rdma.RdmaFacts:
    return cluster.memo(PORTS(node), lambda: cluster.probe(node, FABRIC).rdma)


def _peer_ports(cluster: Cluster, node: str) -> dict[str, tuple[rdma.Port, ...]]:
    """Every other reachable node's RDMA ports (their probes were started with this one's)."""
    out = {}
    for peer in cluster.names:
        if peer == node or cluster.login_error(peer) is not None:
            continue
        try:
            out[peer] = _ports(cluster, peer).ports
        except ProbeError:
            continue
    return out


def _ib_disabled(cluster: Cluster, node: str) -> str:
    value, where = _launch_env(cluster, node, "NCCL_IB_DISABLE")
    if value is not None and value.strip() not in ("", "0"):
        return f"{node}: NCCL_IB_DISABLE={value} (from {where}): NCCL will not use RDMA"
    return ""


def _need_rdma(cluster: Cluster, node: str, check: ids.TestId) -> rdma.RdmaFacts:
    _fabric(cluster, node, check)
    facts = _ports(cluster, node)
    if not facts.ports:
        pytest.skip(f"{node}: no RDMA devices (/sys/class/infiniband is empty or absent, and no "
                    f"ibv_devinfo/ibstat lists any): NCCL/HCCL will use TCP sockets here")
    disabled = _ib_disabled(cluster, node)
    if disabled:
        pytest.skip(disabled)
    return facts


def _launch_env(cluster: Cluster, node: str, var: str) -> tuple[str | None, str]:
    """A variable as the launched ranks get it: DeepSpeed exports the launcher's NCCL_*
    variables to every rank, over what the node's shell sets."""
    if os.environ.get(var, "").strip():
        return os.environ[var], "the launcher's environment (DeepSpeed forwards it)"
    value = cluster.base(node).env.get(var, "")
    return (value if value.strip() else None), f"{node}'s non-interactive shell"


def _fail(problem: Problem | None) -> None:
    if problem is not None:
        outcome.fail(problem)


def test_rdma_ports(cluster: Cluster, node: str, record_property) -> None:
    """R1: the node's RDMA ports are active and as fast as the same ports on its peers."""
    facts = _need_rdma(cluster, node, ids.RDMA_PORTS)
    record_property("rdma", rdma.rdma_summary(facts.ports))
    hca, _ = _launch_env(cluster, node, "NCCL_IB_HCA")
    spec = rdma.parse_hca_spec(hca) if hca else None
    _fail(rdma.judge_ports(node, facts, _peer_ports(cluster, node), spec))


def test_ib_hca(cluster: Cluster, node: str, record_property) -> None:
    """R2: NCCL_IB_HCA, as the ranks get it, names RDMA ports that exist here and are up."""
    value, where = _launch_env(cluster, node, "NCCL_IB_HCA")
    if value is None:
        record_property("NCCL_IB_HCA", "unset")
        _need_rdma(cluster, node, ids.IB_HCA)
        return  # NCCL uses every active port
    ports = _need_rdma(cluster, node, ids.IB_HCA).ports
    spec = rdma.parse_hca_spec(value)
    chosen, problems = rdma.judge_hca(spec, ports)
    record_property("NCCL_IB_HCA", f"{value} -> {', '.join(p.name for p in chosen) or 'nothing'}")
    _fail(rdma.hca_problem(node, value, where, spec, ports, problems))


def test_ib_gid_index(cluster: Cluster, node: str, record_property) -> None:
    """R3: for RoCE, NCCL_IB_GID_INDEX exists on every active RoCE port, with the same RoCE
    version as on the other nodes."""
    ports = _need_rdma(cluster, node, ids.IB_GID_INDEX).ports
    if not any(p.roce and p.up for p in ports):
        pytest.skip(f"{node}: no active RoCE port (InfiniBand needs no GID index)")
    value, where = _launch_env(cluster, node, "NCCL_IB_GID_INDEX")
    if value is None:
        record_property("NCCL_IB_GID_INDEX", "unset")
        return  # NCCL >= 2.21 picks the index itself (older: 0, i.e. RoCE v1)
    try:
        index = int(value.strip())
    except ValueError:
        outcome.fail(rdma.gid_index_not_a_number(node, value, where))
    types, _ = rdma.judge_gid_index(index, ports)
    record_property("NCCL_IB_GID_INDEX", f"{index}: " + (", ".join(
        f"{k} {v}" for k, v in types.items()) or "none"))
    _fail(rdma.gid_index_problem(node, index, where, ports, _peer_ports(cluster, node)))


def test_memlock(cluster: Cluster, node: str, record_property) -> None:
    """R4: max locked memory (ulimit -l) in pdsh's shell is unlimited where RDMA devices exist."""
    lim = _fabric(cluster, node, ids.MEMLOCK).limits
    record_property("memlock", f"{rdma.fmt_kb(lim.memlock_soft_kb)} "
                               f"(hard {rdma.fmt_kb(lim.memlock_hard_kb)})")
    ports = _ports(cluster, node).ports
    minimum = cluster.settings.health.min_memlock_kb or rdma.UNLIMITED
    _fail(rdma.memlock_problem(node, lim, len(ports),
                               bool(ports) and not _ib_disabled(cluster, node), minimum))


def test_open_files(cluster: Cluster, node: str, record_property) -> None:
    """R5: open files (ulimit -n) in pdsh's shell are enough for the job's sockets."""
    lim = _fabric(cluster, node, ids.OPEN_FILES).limits
    record_property("nofile", f"{lim.nofile_soft} (hard {lim.nofile_hard})")
    world = sum(n.slots for n in cluster.nodes)
    _fail(rdma.nofile_problem(node, lim, world, node == cluster.rank0.name))


def test_dev_shm(cluster: Cluster, node: str, record_property) -> None:
    """R6: /dev/shm has room for the node's local ranks (slots x --shm-per-rank-mb)."""
    shm = _fabric(cluster, node, ids.DEV_SHM).shm
    record_property("dev_shm", f"{rdma.fmt_bytes(shm.avail_bytes)} free of "
                               f"{rdma.fmt_bytes(shm.total_bytes)}")
    _fail(rdma.shm_problem(node, shm, cluster.node(node).slots,
                           cluster.settings.health.shm_per_rank_mb))


#: why a GPU or NPU check does not apply to a node
CPU_ONLY = "CPU only (neither nvidia-smi nor npu-smi on the non-interactive PATH)"


def _accel(cluster: Cluster, node: str, check: ids.TestId) -> AccelFacts:
    """The node's `accel` facts (a skip on a CPU-only node)."""
    which = cluster.base(node).which
    if not which.get("nvidia-smi") and not which.get("npu-smi"):
        pytest.skip(f"{node}: {CPU_ONLY}")
    return _facts(cluster, node, ACCEL, check)


def _warn(node: str, notes: Iterable[str]) -> None:
    for note in notes:
        warnings.warn(HealthWarning(f"{node}: {note}"), stacklevel=1)


def test_gpu_health(cluster: Cluster, node: str, record_property) -> None:
    """R7: every NVIDIA GPU is healthy beyond being listed: ECC, row remapping, throttling,
    PCIe width, NVLink, fabric manager, Xid errors (per device, with index and bus id)."""
    facts = _accel(cluster, node, ids.GPU_HEALTH).nvidia
    if facts is None:
        pytest.skip(f"{node}: no NVIDIA GPU (nvidia-smi not on the non-interactive PATH)")
    verdict = gpuhealth.judge_nvidia(facts)
    record_property("gpu_health", f"{verdict.count} GPU(s), {len(verdict.issues)} problem(s)")
    _warn(node, verdict.notes)
    _fail(gpuhealth.gpu_health_problem(node, verdict))


def _npu_verdict(cluster: Cluster, node: str) -> gpuhealth.NpuVerdict | None:
    """judge_npu of the node's `accel` probe, once per node (None: no npu-smi there)."""
    def compute() -> gpuhealth.NpuVerdict | None:
        facts = cluster.probe(node, ACCEL).ascend
        return gpuhealth.judge_npu(facts) if facts is not None else None
    return cluster.memo(NPU(node), compute)


def _peer_npus(cluster: Cluster, node: str) -> dict[str, gpuhealth.NpuVerdict]:
    out = {}
    for peer in cluster.names:
        if peer == node or cluster.login_error(peer) is not None:
            continue
        try:
            other = _npu_verdict(cluster, peer)
        except ProbeError:
            continue
        if other is not None:
            out[peer] = other
    return out


def test_npu_health(cluster: Cluster, node: str, record_property) -> None:
    """R8: every Ascend NPU's health, RoCE port link (its net health is R9's) and device IP
    (set, one per NPU, no clash across nodes), and the TLS switch the same on every node."""
    facts = _accel(cluster, node, ids.NPU_HEALTH).ascend
    if facts is None:
        pytest.skip(f"{node}: no Ascend NPU (npu-smi not on the non-interactive PATH)")
    verdict = _npu_verdict(cluster, node)
    assert verdict is not None  # npu-smi is there: skipped above otherwise
    record_property("npu_device_ips",
                    ", ".join(f"{d}={ip}" for d, ip in verdict.ips.items()) or "none")
    problem = gpuhealth.npu_health_problem(node, verdict, _peer_npus(cluster, node))
    if not facts.hccn:
        _warn(node, ["hccn_tool not found: RoCE ports and device IPs not checked"])
    _fail(problem)


def test_accel_diag(cluster: Cluster, node: str, record_property) -> None:
    """R9: the accelerators' own diagnostic passes: DCGM's (`dcgmi diag -r N`, `--dcgm-level`)
    where dcgmi is on the non-interactive PATH, per GPU and test; on Ascend nodes each NPU's RoCE
    port's net health probe (`hccn_tool -i N -net_health -g`)."""
    cluster.require(node)
    which = cluster.base(node).which
    params = _diag_params(cluster.settings)
    try:
        diag = cluster.probe(node, DIAG, **params)
    except ProbeError as exc:
        outcome.fail(exc.problem(ids.ACCEL_DIAG.item))
    if diag.dcgmi:
        _judge_dcgm(cluster, node, diag, params, record_property)
        return
    if which.get("npu-smi"):
        _npu_net_health(cluster, node, record_property)
        return
    if which.get("nvidia-smi"):
        pytest.skip(f"{node}: dcgmi not on the non-interactive PATH: DCGM's diagnostic not run "
                    f"(R7 read the GPUs' health passively)")
    pytest.skip(f"{node}: {CPU_ONLY}")  # (nor dcgmi: it comes with a GPU driver)


def _npu_net_health(cluster: Cluster, node: str, record_property) -> None:
    """R9 on an Ascend node: each NPU's RoCE port's net health."""
    facts = _accel(cluster, node, ids.ACCEL_DIAG).ascend
    if facts is None or not facts.hccn:
        pytest.skip(f"{node}: Ascend NPUs but hccn_tool not on the non-interactive PATH: the "
                    f"RoCE ports' net health not probed")
    statuses = gpuhealth.net_health(facts)
    record_property("npu_net_health", ", ".join(
        f"{d}={s}" for d, s in sorted(statuses.items(), key=lambda kv: int(kv[0])))
        or "none read")
    problem, notes = dcgm.net_health_verdict(node, statuses)
    _warn(node, notes)
    _fail(problem)


def _judge_dcgm(cluster: Cluster, node: str, diag: dcgm.DiagFacts, params: dict[str, float],
                record_property) -> None:
    if diag.timed_out:
        outcome.fail(dcgm.timed_out(node, diag.argv, params["deadline"],
                                    int(params["dcgm_level"])))
    run = diag.run
    if run is None:
        said = (f"{node}: `{diag.argv}` gave no result ({diag.why}): DCGM's diagnostic not run "
                f"(its host engine, nv-hostengine, must be running: systemctl start nvidia-dcgm)")
        warnings.warn(HealthWarning(said), stacklevel=1)
        pytest.skip(said)
    gpus = (_accel(cluster, node, ids.ACCEL_DIAG).nvidia
            if cluster.base(node).which.get("nvidia-smi") else None)
    bus_ids = {g.index: g.bus_id for g in gpus.gpus} if gpus is not None else {}
    failed = sum(t.failed for t in run.tests)
    record_property("dcgm", f"{diag.argv}: DCGM {run.version or '?'}, {len(run.tests)} test(s), "
                            f"{failed} failed")
    if gpus is not None and dcgm.needs_fabric_manager(run):
        # CUDA cannot start without the fabric manager on an NVSwitch system: R7 holds that cause
        fabric = gpuhealth.judge_nvidia(gpus).fabric()
        if fabric:
            outcome.block(ids.GPU_HEALTH.of(node), f"{node}: {fabric[0].line}")
    _fail(dcgm.verdict(node, run, bus_ids, diag.argv))
