"""R. GPU (NVIDIA) and NPU (Ascend) health beyond visibility: pure parsers and judgement of
what `healthprobe.py`'s `accel` section gathered, tested on real captures (tests/data/samples).

What is red, per device (index and bus id in every message), and why:
- uncorrectable ECC errors (volatile: since the driver loaded; aggregate kept for the record),
  a pending page retirement (`Pending Page Blacklist: Yes`), a pending row remap or a row-remap
  failure (the GPU must be reset before the memory is trustworthy), `Reset Required: Yes`;
- an active clock event/throttle reason that means hardware trouble: HW Slowdown, HW Thermal
  Slowdown, HW Power Brake Slowdown (SW power cap, idle and application clocks are normal);
- a PCIe link *width* below its maximum (a link trained on fewer lanes stays so under load);
  a link *generation* below the maximum is normal on an idle GPU (it trains down to save power:
  the TITAN V sample runs gen 1 of 3 at P8), so it is red only in P0;
- an NVLink that is inactive (`nvidia-smi nvlink -s`) while the GPU's other links are up;
- on an NVSwitch system, no fabric manager running, or a GPU whose Fabric State is not
  `Completed` (CUDA then fails with "system not yet initialized");
- Xid lines in the kernel log whose catalogue entry is hardware or driver trouble (48 double
  bit ECC, 63/64 row remapping, 74 NVLink, 79 fallen off the bus, 92/94/95 ECC, 119/120 GSP,
  ...).  Application Xids (13, 31, 43, 45) are reported, never red: a previous job's bug.
Persistence mode disabled is a warning (the first CUDA call of every rank then pays the
driver's initialisation).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cluster_tests.judge.common import tooloutput

#: R8's fix, on the node with the unhealthy NPUs, clashing device IPs or another TLS switch
NPU_FIX = ("npu-smi info -t health -i <id> -c 0 for the cause; device IPs: hccn_tool -i <dev> "
           "-ip -s address <ip> netmask <mask> (one subnet per device rank, unique across nodes); "
           "TLS: hccn_tool -i <dev> -tls -s enable 0 (the same on every node)")

#: Xids that mean the GPU, its memory, its links or the driver are in trouble (NVIDIA's Xid
#: catalogue); others (13, 31, 43, 45, ...) are usually the application's own faults
HARDWARE_XIDS = {
    48: "double bit ECC error", 61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt", 63: "ECC page retirement / row remapping event",
    64: "ECC page retirement / row remapper failure", 74: "NVLink error",
    79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
    94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout",
    120: "GSP error", 122: "SPI PMU RPC read failure", 123: "SPI PMU RPC write failure",
    140: "unrecovered ECC error",
}
BAD_THROTTLE = ("HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown")


# -- nvidia-smi -q --------------------------------------------------------------------------------

def parse_nvidia_smi_q(text: str) -> list[dict[str, Any]]:
    """`nvidia-smi -q` as one nested dict per GPU (keys as printed, values as strings); the
    GPU's bus id is under "_bus_id" and its position under "_index"."""
    gpus: list[dict[str, Any]] = []
    stack: list[tuple[int, dict[str, Any]]] = []
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("="):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        m = re.match(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$", line)
        if m and indent == 0:
            gpu = {"_bus_id": m.group(1), "_index": len(gpus)}
            gpus.append(gpu)
            stack = [(0, gpu)]
            continue
        if not stack:
            continue
        while len(stack) > 1 and indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1]
        if " : " in line or line.endswith(" :"):
            key, _, value = line.partition(":")
            parent[key.strip()] = value.strip()
        else:
            child: dict[str, Any] = {}
            parent[line] = child
            stack.append((indent, child))
    return gpus


def _get(d: Mapping[str, Any], *path: str) -> Any:
    cur: Any = d
    for p in path:
        if not isinstance(cur, Mapping) or p not in cur:
            return None
        cur = cur[p]
    return cur


def _count(value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return 0


def _ecc_uncorrectable(gpu: Mapping[str, Any], scope: str) -> int:
    """Uncorrectable ECC errors in `scope` ("Volatile" or "Aggregate"): the newer layout
    (SRAM/DRAM Uncorrectable) and the older one (Double Bit / Total)."""
    sect = _get(gpu, "ECC Errors", scope)
    if not isinstance(sect, Mapping):
        return 0
    total = 0
    for key, value in sect.items():
        if isinstance(value, str) and "Uncorrectable" in key and "Parity" not in key:
            total += _count(value)
    dbe = sect.get("Double Bit")
    if isinstance(dbe, Mapping):
        total += _count(dbe.get("Total"))
    return total


@dataclass
class GpuFinding:
    index: int
    bus_id: str
    name: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def label(self) -> str:
        return f"GPU {self.index} ({self.bus_id}, {self.name})"


def judge_gpu(gpu: Mapping[str, Any]) -> GpuFinding:
    f = GpuFinding(gpu["_index"], gpu["_bus_id"], str(gpu.get("Product Name") or "?"))
    vol, agg = _ecc_uncorrectable(gpu, "Volatile"), _ecc_uncorrectable(gpu, "Aggregate")
    if vol:
        f.problems.append(f"{vol} uncorrectable ECC error(s) since the driver loaded "
                          f"(aggregate {agg})")
    elif agg:
        f.notes.append(f"{agg} uncorrectable ECC error(s) in its lifetime (none since the "
                       f"driver loaded)")
    rp = _get(gpu, "Retired Pages")
    if isinstance(rp, Mapping) and str(rp.get("Pending Page Blacklist", "")).lower() == "yes":
        f.problems.append("a page retirement is pending (Pending Page Blacklist: Yes)")
    rr = _get(gpu, "Remapped Rows")
    if isinstance(rr, Mapping):
        unc = _count(rr.get("Uncorrectable Error"))
        if str(rr.get("Pending", "")).lower() == "yes":
            f.problems.append(f"row remapping pending ({unc} row(s) remapped for uncorrectable "
                              f"errors): the GPU must be reset to activate it")
        elif unc:
            f.notes.append(f"{unc} row(s) remapped for uncorrectable errors")
        if str(rr.get("Remapping Failure Occurred", "")).lower() == "yes":
            f.problems.append("a row remapping failed (Remapping Failure Occurred: Yes)")
    if str(_get(gpu, "GPU Reset Status", "Reset Required") or "").lower() == "yes":
        f.problems.append("the driver asks for a GPU reset (Reset Required: Yes)")
    reasons = _get(gpu, "Clocks Event Reasons") or _get(gpu, "Clocks Throttle Reasons") or {}
    flat = _flatten(reasons)
    active = [k for k in BAD_THROTTLE if flat.get(k) == "Active"]
    if active:
        f.problems.append("clocks held down by " + ", ".join(active))
    pstate = str(gpu.get("Performance State") or "")
    gen = _get(gpu, "PCI", "GPU Link Info", "PCIe Generation") or {}
    width = _get(gpu, "PCI", "GPU Link Info", "Link Width") or {}
    wmax = _count(str(width.get("Max", "")).rstrip("x"))
    wcur = _count(str(width.get("Current", "")).rstrip("x"))
    if wmax and wcur and wcur < wmax:
        f.problems.append(f"PCIe link width x{wcur}, below its x{wmax}")
    gmax, gcur = _count(gen.get("Max")), _count(gen.get("Current"))
    if gmax and gcur and gcur < gmax:
        text = f"PCIe gen {gcur}, below its gen {gmax}"
        if pstate == "P0":
            f.problems.append(text + " while busy (P0)")
        else:
            f.notes.append(text + f" at {pstate or 'an unknown P-state'} (normal when idle)")
    if str(gpu.get("Persistence Mode", "")) == "Disabled":
        f.notes.append("persistence mode disabled (each rank's first CUDA call pays the "
                       "driver's start-up; nvidia-smi -pm 1)")
    fabric = _get(gpu, "Fabric", "State")
    if fabric and fabric not in ("N/A", "Completed"):
        f.problems.append(f"NVSwitch fabric state {fabric} (not Completed)")
    return f


def _flatten(d: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(d, Mapping):
        for k, v in d.items():
            if isinstance(v, Mapping):
                out.update(_flatten(v))
            else:
                out[k] = str(v)
    return out


# -- nvidia-smi nvlink -s -------------------------------------------------------------------------

def parse_nvlink_status(text: str) -> dict[int, dict[str, Any]]:
    """{gpu index: {"name": ..., "links": {n: "26.562 GB/s" or "<inactive>"}}}."""
    out: dict[int, dict[str, Any]] = {}
    cur = None
    for line in text.splitlines():
        m = re.match(r"^GPU (\d+): (.*?)(?: \(UUID: .*\))?$", line.strip())
        if m and not line.startswith((" ", "\t")):
            cur = out.setdefault(int(m.group(1)), {"name": m.group(2), "links": {}})
            continue
        m = re.match(r"^Link (\d+): (.*)$", line.strip())
        if m and cur is not None:
            cur["links"][int(m.group(1))] = m.group(2).strip()
    return out


def nvlink_problems(status: dict[int, dict[str, Any]]) -> dict[int, list[str]]:
    """GPU index -> its links that are down while others of the node's GPUs' links are up."""
    out: dict[int, list[str]] = {}
    any_up = any("GB/s" in v for g in status.values() for v in g["links"].values())
    if not any_up:
        return out
    for idx, g in status.items():
        down = [f"link {n} {v}" for n, v in sorted(g["links"].items()) if "GB/s" not in v]
        if down:
            out[idx] = down
    return out


# -- kernel log -----------------------------------------------------------------------------------

@dataclass
class Xid:
    bus: str  # as the driver prints it: 0000:9b:00
    code: int | None  # None: "fallen off the bus" without an Xid
    text: str

    @property
    def hardware(self) -> bool:
        return self.code is None or self.code in HARDWARE_XIDS


def parse_xids(lines: list[str] | str) -> list[Xid]:
    if isinstance(lines, str):
        lines = lines.splitlines()
    out = []
    for line in lines:
        m = re.search(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+), (.*)$", line)
        if m:
            out.append(Xid(m.group(1).lower(), int(m.group(2)), m.group(3).strip()))
            continue
        m = re.search(r"NVRM: The NVIDIA GPU ([0-9a-fA-F:.]+)", line)
        if m:
            out.append(Xid(m.group(1).lower(), None, "fallen off the bus"))
    for i, x in enumerate(out):
        if x.code is None and x.text == "fallen off the bus":
            out[i] = x
    return out


def bus_matches(xid_bus: str, smi_bus: str) -> bool:
    """'0000:9b:00' (dmesg) against '00000000:9B:00.0' (nvidia-smi)."""
    a = xid_bus.lower().split(".")[0].split(":")
    b = smi_bus.lower().split(".")[0].split(":")
    return len(a) == 3 and len(b) == 3 and int(a[0], 16) == int(b[0], 16) and a[1:] == b[1:]


def summarize_xids(xids: list[Xid]) -> tuple[dict[str, list[str]], list[str]]:
    """({bus: hardware Xid descriptions}, application Xid notes), each code once per bus."""
    hard: dict[str, list[str]] = {}
    soft: list[str] = []
    seen = set()
    for x in xids:
        if (x.bus, x.code) in seen:
            continue
        seen.add((x.bus, x.code))
        if x.hardware:
            what = HARDWARE_XIDS.get(x.code, "") if x.code is not None else "fallen off the bus"
            label = f"Xid {x.code}" if x.code is not None else "no Xid"
            hard.setdefault(x.bus, []).append(f"{label} ({what}): {x.text[:160]}")
        else:
            soft.append(f"Xid {x.code} on PCI:{x.bus} (an application fault): {x.text[:120]}")
    return hard, soft


# -- the node's verdict ---------------------------------------------------------------------------

def judge_nvidia(raw: Mapping[str, Any]) -> tuple[list[str], list[str], int]:
    """(problems, notes, number of GPUs) from the `accel` probe section of a node."""
    problems: list[str] = []
    notes: list[str] = []
    q = raw.get("nvidia_smi_q") or {}
    if q.get("rc") != 0:
        said = (q.get('err') or '').strip()[:300]
        return [f"nvidia-smi -q failed (exit {q.get('rc')}): {said}"], [], 0
    gpus = parse_nvidia_smi_q(q.get("out", ""))
    findings = [judge_gpu(g) for g in gpus]
    link = raw.get("nvlink_s") or {}
    if link.get("rc") == 0:
        for idx, down in nvlink_problems(parse_nvlink_status(link.get("out", ""))).items():
            f = next((x for x in findings if x.index == idx), None)
            (f.problems if f else problems).append("NVLink down: " + ", ".join(down))
    switches = raw.get("nvswitches") or []
    if switches:
        fm = raw.get("fabric_manager") or {}
        active = (fm.get("systemctl") or {}).get("out", "").strip() == "active"
        if not fm.get("pids") and not active:
            problems.append(f"{len(switches)} NVSwitch(es) but no fabric manager running "
                            f"(nv-fabricmanager): CUDA fails with 'system not yet initialized'")
    dmesg = raw.get("dmesg") or {}
    if dmesg and dmesg.get("rc") != 0 and not dmesg.get("lines"):
        notes.append(f"kernel log not readable here ({(dmesg.get('err') or '').strip()[:120]}): "
                     f"Xid errors not checked")
    hard, soft = summarize_xids(parse_xids(dmesg.get("lines") or []))
    notes += soft
    for bus, items in hard.items():
        f = next((x for x in findings if bus_matches(bus, x.bus_id)), None)
        (f.problems if f else problems).extend(
            (item if f else f"PCI:{bus}: {item}") for item in items)
    for f in findings:
        problems += [f"{f.label()}: {p}" for p in f.problems]
        notes += [f"{f.label()}: {n}" for n in f.notes]
    return problems, notes, len(gpus)


# -- Ascend ---------------------------------------------------------------------------------------

def net_health(raw: Mapping[str, Any]) -> dict[str, str]:
    """{device: `hccn_tool -i N -net_health -g` status} from the `accel` probe (devices whose
    command failed or printed no status left out): judged by R9 (judge/dcgm.judge_net_health),
    not here."""
    out = {}
    for dev, tools in (raw.get("hccn") or {}).items():
        nh = tools.get("net_health") or {}
        status = tooloutput.parse_hccn_tool(nh.get("out", "")).get("net health status", "") \
            if nh.get("rc") == 0 else ""
        if status:
            out[dev] = status
    return out


def parse_tls_switch(text: str) -> str | None:
    m = re.search(r"tls switch\[(\d)\]", text)
    return m.group(1) if m else None


#: R8's verdict on one node: (problems, notes, {device: device IP}, TLS switch or None/'mixed')
NpuVerdict = tuple[list[str], list[str], dict[str, str], str | None]


def judge_npu(raw: Mapping[str, Any]) -> NpuVerdict:
    """(problems, notes, {device: device IP}, TLS switch of the node or None/'mixed')."""
    problems: list[str] = []
    notes: list[str] = []
    for npu, res in sorted((raw.get("npu_health") or {}).items(), key=lambda kv: int(kv[0])):
        if res.get("rc") != 0:
            problems.append(f"NPU {npu}: npu-smi info -t health failed (exit {res.get('rc')})")
            continue
        kv = tooloutput.parse_key_values(res.get("out", ""))
        status = kv.get("Health Status") or kv.get("Health") or ""
        if status and status != "OK":
            problems.append(f"NPU {npu}: Health Status {status} (Error Code "
                            f"{kv.get('Error Code', '?')})")
    ips: dict[str, str] = {}
    tls: set[str] = set()
    for dev, tools in sorted((raw.get("hccn") or {}).items(), key=lambda kv: int(kv[0])):
        link = tools.get("link") or {}
        if link.get("rc") == 0 and tooloutput.hccn_link_up(link.get("out", "")) is False:
            problems.append(f"device {dev}: link status DOWN")
        ip = tools.get("ip") or {}
        addr = (tooloutput.parse_hccn_tool(ip.get("out", "")).get("ipaddr")
                if ip.get("rc") == 0 else None)
        if addr:
            ips[dev] = addr
        else:
            problems.append(f"device {dev}: no device IP (hccn_tool -i {dev} -ip -g printed none)")
        t = tools.get("tls") or {}
        sw = parse_tls_switch(t.get("out", "")) if t.get("rc") == 0 else None
        if sw is not None:
            tls.add(sw)
    seen: dict[str, str] = {}
    for dev, addr in ips.items():
        if addr in seen:
            problems.append(f"devices {seen[addr]} and {dev} share the device IP {addr}")
        seen.setdefault(addr, dev)
    switch = None if not tls else (tls.pop() if len(tls) == 1 else "mixed")
    if switch == "mixed":
        problems.append("the TLS switch differs between this node's devices")
    return problems, notes, ips, switch
