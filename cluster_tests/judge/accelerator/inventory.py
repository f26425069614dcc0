"""A1's facts and verdict (pure): what accelerators a node has, from the vendor tools' output
(node/probe.py's `accelerators`, parsed with judge/common/tooloutput), and whether the framework
the launch uses allocates on each of them (node/envprobe.py's `devices`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cluster_tests.core import testids as ids
from cluster_tests.judge.common import tooloutput
from cluster_tests.judge.common.facts import Command
from cluster_tests.judge.common.fieldread import ByFields
from cluster_tests.judge.common.probes import (
    Probe,
    integer,
    obj,
)
from cluster_tests.judge.problem import Problem, SectionCause

#: A1's fix where a card's own health is the cause
NPU_FIX = ("npu-smi info -t health -i <id> for the cause; reset or replace the card "
           "(npu-smi set -t reset -i <id> -c 0), or leave it out with --exclude")
#: A1's fix where the framework does not see or cannot use the devices the vendor tool lists
FRAMEWORK_FIX = ("install the framework build that matches the driver into the remote python, "
                 "and check the *_VISIBLE_DEVICES variables in ~/.bashrc")
#: A1's fix where a vendor tool exists but fails on a node it finds no device on
TOOL_FIX = "check the driver (dmesg, the tool's own log)"


class AcceleratorCause(SectionCause):
    """What can be wrong with a node's accelerators (Problem.cause)."""

    TOOL_FAILED = "vendor tool fails"
    DEVICE_UNHEALTHY = "accelerator unhealthy"
    FRAMEWORK = "framework cannot use the accelerators"


def command(raw: object, what: str) -> Command | None:
    """A `run_command` result of a node script (None: the tool was not there to run)."""
    return None if raw is None else Command.read(raw, what)


@dataclass(frozen=True)
class ToolFailure:
    """A vendor tool that exists on the node but failed."""

    argv: str  # "nvidia-smi -L"
    rc: int
    err: str

    def describe(self) -> str:
        return f"{self.argv} failed (exit {self.rc}): {self.err.strip()[:300]}"


@dataclass(frozen=True)
class Unhealthy:
    """An NPU whose health npu-smi info does not give as OK."""

    npu_id: int | None
    name: str
    health: str  # as npu-smi prints it: "Warning"

    def describe(self) -> str:
        return f"NPU {self.npu_id} ({self.name}): Health {self.health}"


@dataclass(frozen=True)
class Inventory:
    """A node's accelerators (`accelerators`), read by A1, H4, E4, C1/C2 and T."""

    kind: str  # "nvidia", "ascend" or "cpu"
    count: int
    names: tuple[str, ...] = ()
    unhealthy: tuple[Unhealthy, ...] = ()
    failures: tuple[ToolFailure, ...] = ()  # a tool that exists but failed
    evidence: str = ""

    def describe(self) -> str:
        if self.kind == "cpu":
            return f"no accelerator (CPU only, {self.count} CPUs)"
        what = "GPU" if self.kind == "nvidia" else "NPU"
        return f"{self.count} {what}{'s' if self.count != 1 else ''}"

    @classmethod
    def read(cls, raw: object) -> Inventory:
        d = obj(raw, "accelerators")
        failures: list[ToolFailure] = []
        res = command(d.get("nvidia_smi_L"), "nvidia_smi_L")
        if res is not None and res.ok:
            gpus = tooloutput.parse_nvidia_smi_L(res.out)
            return cls("nvidia", len(gpus), tuple(g.name for g in gpus), evidence=res.out)
        if res is not None:
            failures.append(ToolFailure("nvidia-smi -L", res.rc, res.err))
        res = command(d.get("npu_smi_info"), "npu_smi_info")
        if res is not None and res.ok:
            return _ascend(res, command(d.get("npu_smi_info_l"), "npu_smi_info_l"))
        if res is not None:
            failures.append(ToolFailure("npu-smi info", res.rc, res.err))
        return cls("cpu", integer(d.get("cpu_count")) or 1, failures=tuple(failures))


def _ascend(info_run: Command, listing: Command | None) -> Inventory:
    info = tooloutput.parse_npu_smi_info(info_run.out)
    # a device is a chip: a two-chip card (310P Duo) is two devices to the framework
    count = sum(max(1, len(n.chips)) for n in info.npus)
    if listing is not None and listing.ok:
        parsed = tooloutput.parse_npu_smi_info_l(listing.out)
        chips = sum(e.chip_count or 1 for e in parsed.npus)
        count = max(count, chips, parsed.total_count or 0)
    unhealthy = tuple(Unhealthy(n.npu_id, n.name, n.health_raw) for n in info.npus
                      if n.health is not tooloutput.NpuHealth.OK)
    return Inventory("ascend", count, tuple(n.name for n in info.npus), unhealthy,
                     evidence=info_run.out)


ACCELERATORS = Probe("probe.py", "accelerators", Inventory.read)


@dataclass(frozen=True)
class Allocation(ByFields, what="devices[]"):
    """One device the framework tried to allocate a tensor on."""

    index: int
    ok: bool
    error: str | None


@dataclass(frozen=True)
class DeviceFacts(ByFields, what="devices"):
    """What the launch's framework sees (`devices`): torch's version, the backend ("cuda",
    "npu"; None: it could not be loaded), its device count and an allocation on each."""

    torch: str | None
    error: str | None
    kind: str | None
    count: int
    devices: tuple[Allocation, ...] = ()


DEVICES = Probe("envprobe.py", "devices", DeviceFacts.read)


def _framework_problems(inv: Inventory, dev: DeviceFacts) -> list[str]:
    framework = "torch_npu" if inv.kind == "ascend" else "torch (CUDA)"
    out = []
    if dev.error:
        out.append(f"{framework}: {dev.error}")
    elif dev.count < inv.count:
        build = f"torch {dev.torch}" if dev.torch else "torch"
        kind = "CUDA" if inv.kind == "nvidia" else "NPU"
        out.append(f"{build} sees {dev.count} {kind} device(s) where the vendor tool lists "
                   f"{inv.count} (a CPU-only build, CUDA_VISIBLE_DEVICES/"
                   f"ASCEND_RT_VISIBLE_DEVICES, or a driver/runtime mismatch)")
    out += [f"{framework} device {a.index}: allocation failed: {a.error}"
            for a in dev.devices if not a.ok]
    return out


def judge_accelerators(node: str, inv: Inventory, dev: DeviceFacts | None) -> Problem | None:
    """A1: the vendor tools list the node's devices, all healthy, and the framework (`dev`;
    None on a CPU-only node, where nothing is allocated) allocates on each of them."""
    failed = [f.describe() for f in inv.failures]
    if inv.kind == "cpu":
        if not failed:
            return None
        return Problem((node,), AcceleratorCause.TOOL_FAILED,
                       f"{node}: a vendor tool exists but fails:\n  " + "\n  ".join(failed),
                       fix=f"on {node}: {TOOL_FIX}", item=ids.ACCELERATORS.item)
    sick = [f"{u.describe()} (npu-smi info)" for u in inv.unhealthy]
    framework = _framework_problems(inv, dev) if dev is not None else []
    problems = failed + sick + framework
    if not problems:
        return None
    cause = (AcceleratorCause.DEVICE_UNHEALTHY if sick else
             AcceleratorCause.FRAMEWORK if framework else AcceleratorCause.TOOL_FAILED)
    facts: Mapping[str, object] = {"npus_unhealthy": [u.npu_id for u in inv.unhealthy]} \
        if sick else {}
    return Problem((node,), cause,
                   f"{node}: {inv.describe()}, not all usable:\n  " + "\n  ".join(problems),
                   fix=f"on {node}: {NPU_FIX if sick else FRAMEWORK_FIX}",
                   item=ids.ACCELERATORS.item,
                   facts=dict(facts))
