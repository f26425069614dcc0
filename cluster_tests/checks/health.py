"""R. RDMA fabric, limits, /dev/shm and GPU/NPU health (CHECKLIST R1-R9), as the launch
meets them: read by `healthprobe.py` in the non-interactive ssh shell that pdsh gets, judged by
the pure functions of `rdma.py`, `gpuhealth.py` and `dcgm.py`, and compared across nodes where a
port or a GID is only wrong because the peers differ."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping
from typing import Any

import pytest

from cluster_tests.core import nodetable, outcome
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, Declared, ProbeError
from cluster_tests.core.memokey import MemoKey
from cluster_tests.core.nodetable import NodeColumn
from cluster_tests.core.settings import Settings
from cluster_tests.judge.common.probes import untyped
from cluster_tests.judge.health import dcgm, gpuhealth, rdma
from cluster_tests.judge.health.rdma import FABRIC, FabricFacts
from cluster_tests.judge.problem import Problem, listed_problem

#: per node: its RDMA ports and where they were read from
PORTS: MemoKey[rdma.RdmaFacts] = MemoKey("health", "ports")
#: per node: R8's verdict (None: no npu-smi there)
NPU: MemoKey[gpuhealth.NpuVerdict | None] = MemoKey("health", "npu")

pytestmark = pytest.mark.health


def node_probes(settings: Settings) -> list[Declared]:
    """The probes this section's tests ask of every node they touch (`Cluster.prefetch`)."""
    return [(FABRIC, {}), (untyped("healthprobe.py", "accel"), {}),
            (untyped("healthprobe.py", "diag"), _diag_params(settings))]


def _diag_params(settings: Settings) -> dict[str, Any]:
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


def _section(cluster: Cluster, node: str, section: str) -> dict[str, Any]:
    cluster.require(node)
    try:
        return cluster.probe(node, section, script="healthprobe.py")
    except ProbeError as exc:
        pytest.fail(str(exc), pytrace=False)


def _fabric(cluster: Cluster, node: str, item: str) -> FabricFacts:
    cluster.require(node)
    try:
        return cluster.probe(node, FABRIC)
    except ProbeError as exc:
        outcome.fail(exc.problem(item))


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


def _need_rdma(cluster: Cluster, node: str, item: str) -> rdma.RdmaFacts:
    _fabric(cluster, node, item)
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
    facts = _need_rdma(cluster, node, "R1")
    record_property("rdma", rdma.rdma_summary(facts.ports))
    hca, _ = _launch_env(cluster, node, "NCCL_IB_HCA")
    spec = rdma.parse_hca_spec(hca) if hca else None
    _fail(rdma.judge_ports(node, facts, _peer_ports(cluster, node), spec))


def test_ib_hca(cluster: Cluster, node: str, record_property) -> None:
    """R2: NCCL_IB_HCA, as the ranks get it, names RDMA ports that exist here and are up."""
    value, where = _launch_env(cluster, node, "NCCL_IB_HCA")
    if value is None:
        record_property("NCCL_IB_HCA", "unset")
        _need_rdma(cluster, node, "R2")
        return  # NCCL uses every active port
    ports = _need_rdma(cluster, node, "R2").ports
    spec = rdma.parse_hca_spec(value)
    chosen, problems = rdma.judge_hca(spec, ports)
    record_property("NCCL_IB_HCA", f"{value} -> {', '.join(p.name for p in chosen) or 'nothing'}")
    _fail(rdma.hca_problem(node, value, where, spec, ports, problems))


def test_ib_gid_index(cluster: Cluster, node: str, record_property) -> None:
    """R3: for RoCE, NCCL_IB_GID_INDEX exists on every active RoCE port, with the same RoCE
    version as on the other nodes."""
    ports = _need_rdma(cluster, node, "R3").ports
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
    lim = _fabric(cluster, node, "R4").limits
    record_property("memlock", f"{rdma.fmt_kb(lim.memlock_soft_kb)} "
                               f"(hard {rdma.fmt_kb(lim.memlock_hard_kb)})")
    ports = _ports(cluster, node).ports
    minimum = cluster.settings.health.min_memlock_kb or rdma.UNLIMITED
    _fail(rdma.memlock_problem(node, lim, len(ports),
                               bool(ports) and not _ib_disabled(cluster, node), minimum))


def test_open_files(cluster: Cluster, node: str, record_property) -> None:
    """R5: open files (ulimit -n) in pdsh's shell are enough for the job's sockets."""
    lim = _fabric(cluster, node, "R5").limits
    record_property("nofile", f"{lim.nofile_soft} (hard {lim.nofile_hard})")
    world = sum(n.slots for n in cluster.nodes)
    _fail(rdma.nofile_problem(node, lim, world, node == cluster.rank0.name))


def test_dev_shm(cluster: Cluster, node: str, record_property) -> None:
    """R6: /dev/shm has room for the node's local ranks (slots x --shm-per-rank-mb)."""
    shm = _fabric(cluster, node, "R6").shm
    record_property("dev_shm", f"{rdma.fmt_bytes(shm.avail_bytes)} free of "
                               f"{rdma.fmt_bytes(shm.total_bytes)}")
    _fail(rdma.shm_problem(node, shm, cluster.node(node).slots,
                           cluster.settings.health.shm_per_rank_mb))


def _no_accelerator(cluster: Cluster, node: str) -> str:
    facts = cluster.base(node).which
    if not facts.get("nvidia-smi") and not facts.get("npu-smi"):
        return f"{node}: CPU only (neither nvidia-smi nor npu-smi on the non-interactive PATH)"
    return ""


def _accel_facts(cluster: Cluster, node: str, key: str, what: str) -> dict[str, Any]:
    """The node's `accel` probe, or a skip when the node has no accelerator or not this kind
    (`key` absent): "no {what} not on the non-interactive PATH)"."""
    cpu = _no_accelerator(cluster, node)
    if cpu:
        pytest.skip(cpu)
    raw = _section(cluster, node, "accel")
    if key not in raw:
        pytest.skip(f"{node}: no {what} not on the non-interactive PATH)")
    return raw


def test_gpu_health(cluster: Cluster, node: str, record_property) -> None:
    """R7: every NVIDIA GPU is healthy beyond being listed: ECC, row remapping, throttling,
    PCIe width, NVLink, fabric manager, Xid errors (per device, with index and bus id)."""
    raw = _accel_facts(cluster, node, "nvidia_smi_q", "NVIDIA GPU (nvidia-smi")
    problems, notes, count = gpuhealth.judge_nvidia(raw)
    record_property("gpu_health", f"{count} GPU(s), {len(problems)} problem(s)")
    for note in notes:
        warnings.warn(HealthWarning(f"{node}: {note}"), stacklevel=1)
    if problems:
        pytest.fail(f"{node}: GPU health:\n  " + "\n  ".join(problems)
                    + f"\n  fix, on {node}: " + "; ".join(_gpu_fixes(node, problems)),
                    pytrace=False)


def _gpu_fixes(node: str, problems: list[str]) -> list[str]:
    """The fixes that the problems found call for (each once), naming the GPUs."""
    def gpus(*words: str) -> str:
        idx = sorted({m.group(1) for p in problems if any(w in p for w in words)
                      for m in [re.match(r"GPU (\d+) ", p)] if m}, key=int)
        return ",".join(idx) or "<index>"
    text = "\n".join(problems)
    fixes = []
    if any(w in text for w in ("pending", "Reset Required", "Xid 79", "fallen off")):
        i = gpus("pending", "Reset Required", "Xid")
        fixes.append(f"reset GPU {i} with nothing running on it (nvidia-smi -r -i {i}) or "
                     f"reboot the node; meanwhile leave it out (--exclude {node}:{i})")
    if any(w in text for w in ("uncorrectable ECC", "row remapping failed", "PCIe link width",
                               "NVLink down", "Xid")):
        fixes.append(f"drain {node}: errors that come back after a reset, a failed remap, a "
                     f"narrow PCIe link, a down NVLink or hardware Xids mean RMA "
                     f"(nvidia-bug-report.sh for the vendor)")
    if "clocks held down" in text:
        fixes.append("check cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER)")
    if "fabric manager" in text or "fabric state" in text:
        fixes.append("systemctl enable --now nvidia-fabricmanager (its version must match "
                     "the driver's)")
    return fixes or [f"see nvidia-smi -q on {node}"]


def _npu_verdict(cluster: Cluster, node: str) -> gpuhealth.NpuVerdict | None:
    """judge_npu of the node's `accel` probe, once per node (None: no npu-smi there)."""
    def compute() -> gpuhealth.NpuVerdict | None:
        raw = cluster.probe(node, "accel", script="healthprobe.py")
        return gpuhealth.judge_npu(raw) if "npu_smi_info_l" in raw else None
    return cluster.memo(NPU(node), compute)


def test_npu_health(cluster: Cluster, node: str, record_property) -> None:
    """R8: every Ascend NPU's health, RoCE port link (its net health is R9's) and device IP
    (set, one per NPU, no clash across nodes), and the TLS switch the same on every node."""
    raw = _accel_facts(cluster, node, "npu_smi_info_l", "Ascend NPU (npu-smi")
    verdict = _npu_verdict(cluster, node)
    assert verdict is not None  # npu-smi is there: _accel_facts skipped otherwise
    problems, notes, ips, tls = verdict
    problems, notes = list(problems), list(notes)  # the memo's lists stay as they are
    record_property("npu_device_ips", ", ".join(f"{d}={ip}" for d, ip in ips.items()) or "none")
    if raw.get("hccn") == {}:
        notes.append("hccn_tool not found: RoCE ports and device IPs not checked")
    for peer in cluster.names:
        if peer == node or cluster.login_error(peer) is not None:
            continue
        try:
            other = _npu_verdict(cluster, peer)
        except ProbeError:
            continue
        if other is None:
            continue
        _, _, peer_ips, peer_tls = other
        clash = sorted(set(ips.values()) & set(peer_ips.values()))
        if clash:
            problems.append(f"device IP(s) {', '.join(clash)} also on {peer}")
        if tls is not None and peer_tls is not None and tls != peer_tls:
            problems.append(f"TLS switch {tls} here but {peer_tls} on {peer} (HCCL links "
                            f"between them fail to establish)")
    for note in notes:
        warnings.warn(HealthWarning(f"{node}: {note}"), stacklevel=1)
    if problems:
        outcome.fail(listed_problem(node, "NPU health", problems, gpuhealth.NPU_FIX))


def test_accel_diag(cluster: Cluster, node: str, record_property) -> None:
    """R9: the accelerators' own diagnostic passes: DCGM's (`dcgmi diag -r N`, `--dcgm-level`)
    where dcgmi is on the non-interactive PATH, per GPU and test; on Ascend nodes each NPU's RoCE
    port's net health probe (`hccn_tool -i N -net_health -g`)."""
    cluster.require(node)
    facts = cluster.base(node).which
    params = _diag_params(cluster.settings)
    try:
        diag = cluster.probe(node, "diag", script="healthprobe.py", **params)
    except ProbeError as exc:
        pytest.fail(str(exc), pytrace=False)
    if diag.get("dcgmi"):
        _judge_dcgm(cluster, node, diag, facts, params, record_property)
        return
    if facts.get("npu-smi"):
        raw = _section(cluster, node, "accel")
        if raw.get("hccn"):
            statuses = gpuhealth.net_health(raw)
            record_property("npu_net_health", ", ".join(
                f"{d}={s}" for d, s in sorted(statuses.items(), key=lambda kv: int(kv[0])))
                or "none read")
            problem, notes = dcgm.net_health_verdict(node, statuses)
            for note in notes:
                warnings.warn(HealthWarning(f"{node}: {note}"), stacklevel=1)
            if problem is not None:
                outcome.fail(problem)
            return
        pytest.skip(f"{node}: Ascend NPUs but hccn_tool not on the non-interactive PATH: the "
                    f"RoCE ports' net health not probed")
    if facts.get("nvidia-smi"):
        pytest.skip(f"{node}: dcgmi not on the non-interactive PATH: DCGM's diagnostic not run "
                    f"(R7 read the GPUs' health passively)")
    pytest.skip(f"{node}: CPU only (no dcgmi, nvidia-smi or npu-smi on the non-interactive PATH)")


def _judge_dcgm(cluster: Cluster, node: str, diag: dict[str, Any], facts: Mapping[str, str | None],
                params: dict[str, Any], record_property) -> None:
    argv = " ".join(diag.get("argv") or ["dcgmi", "diag"])
    res = diag.get("dcgmi_diag") or {}
    if res.get("rc") == 124 and not str(res.get("out") or "").strip():
        outcome.fail(Problem(
            (node,), "DCGM diagnostic timed out",
            f"{node}: `{argv}` did not finish in {params['deadline']:.0f} s (level "
            f"{params['dcgm_level']} takes far less): a GPU or DCGM's host engine is hung\n"
            f"  fix, on {node}: nvidia-smi (does it answer?), the kernel log (dmesg | grep "
            f"NVRM), systemctl status nvidia-dcgm; reset the GPU or reboot",
            fix="nvidia-smi (does it answer?), the kernel log (dmesg | grep NVRM), systemctl "
                "status nvidia-dcgm; reset the GPU or reboot",
            item="R9", launch="node"))
    run, why = dcgm.dcgm_output(diag)
    if run is None:
        text = (f"{node}: `{argv}` gave no result ({why}): DCGM's diagnostic not run (its "
                f"host engine, nv-hostengine, must be running: systemctl start nvidia-dcgm)")
        warnings.warn(HealthWarning(text), stacklevel=1)
        pytest.skip(text)
    bus_ids: dict[int, str] = {}
    if facts.get("nvidia-smi"):
        q = (_section(cluster, node, "accel").get("nvidia_smi_q") or {})
        if q.get("rc") == 0:
            bus_ids = {g["_index"]: g["_bus_id"]
                       for g in gpuhealth.parse_nvidia_smi_q(q.get("out", ""))}
    failed = sum(t.failed for t in run.tests)
    record_property("dcgm", f"{argv}: DCGM {run.version or '?'}, {len(run.tests)} test(s), "
                            f"{failed} failed")
    if any("system not yet initialized" in text
           for t in run.tests if t.failed for _, text in t.messages):
        # CUDA cannot start without the fabric manager on an NVSwitch system: R7 holds that cause
        fabric = [p for p in gpuhealth.judge_nvidia(_section(cluster, node, "accel"))[0]
                  if "fabric" in p.lower()]
        if fabric:
            outcome.block(ids.GPU_HEALTH.of(node), f"{node}: {fabric[0]}")
    problem = dcgm.verdict(node, run, bus_ids, argv)
    if problem is not None:
        outcome.fail(problem)
