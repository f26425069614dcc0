"""What accelerators a node has, from the vendor tools' output (parsed with `parsers`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from cluster_tests.judge.common import tooloutput


@dataclass
class Inventory:
    kind: str  # "nvidia", "ascend" or "cpu"
    count: int
    names: list[str] = field(default_factory=list)
    unhealthy: list[str] = field(default_factory=list)  # "NPU 3: Warning"
    problems: list[str] = field(default_factory=list)  # a tool that exists but failed
    evidence: str = ""

    def describe(self) -> str:
        if self.kind == "cpu":
            return f"no accelerator (CPU only, {self.count} CPUs)"
        what = "GPU" if self.kind == "nvidia" else "NPU"
        return f"{self.count} {what}{'s' if self.count != 1 else ''}"


def from_probe(raw: dict) -> Inventory:
    """Turn the raw `accelerators` probe section into an inventory (pure, for tests)."""
    problems: list[str] = []
    if "nvidia_smi_L" in raw:
        res = raw["nvidia_smi_L"]
        if res["rc"] == 0:
            gpus = tooloutput.parse_nvidia_smi_L(res["out"])
            return Inventory("nvidia", len(gpus), [g.name for g in gpus], evidence=res["out"])
        problems.append(f"nvidia-smi -L failed (exit {res['rc']}): {res['err'].strip()[:300]}")
    if "npu_smi_info" in raw:
        res = raw["npu_smi_info"]
        if res["rc"] == 0:
            info = tooloutput.parse_npu_smi_info(res["out"])
            # a device is a chip: a two-chip card (310P Duo) is two devices to the framework
            count = sum(max(1, len(n.chips)) for n in info.npus)
            listing = raw.get("npu_smi_info_l") or {}
            if listing.get("rc") == 0:
                parsed = tooloutput.parse_npu_smi_info_l(listing["out"])
                chips = sum(e.chip_count or 1 for e in parsed.npus)
                count = max(count, chips, parsed.total_count or 0)
            unhealthy = [
                f"NPU {n.npu_id} ({n.name}): Health {n.health_raw}"
                for n in info.npus
                if n.health is not tooloutput.NpuHealth.OK
            ]
            return Inventory("ascend", count, [n.name for n in info.npus], unhealthy,
                             evidence=res["out"])
        problems.append(f"npu-smi info failed (exit {res['rc']}): {res['err'].strip()[:300]}")
    return Inventory("cpu", int(raw.get("cpu_count") or 1), problems=problems)
