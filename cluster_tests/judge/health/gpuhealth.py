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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.judge.accelerator.inventory import command
from cluster_tests.judge.common import tooloutput
from cluster_tests.judge.common.facts import Command
from cluster_tests.judge.common.probes import Probe, obj, text, texts
from cluster_tests.judge.problem import Problem, SectionCause

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




class GpuCause(SectionCause):
    """What R7/R8 find wrong with a node's accelerators (Problem.cause)."""

    GPU_HEALTH = "GPU unhealthy"
    NPU_HEALTH = "NPU unhealthy"


class IssueKind(SectionCause):
    """What an R7 finding calls for (the fixes are chosen by it)."""

    RESET = "reset pending"  # pending remap/retirement, Reset Required: reset the GPU
    OFF_BUS = "fallen off the bus"  # reset (or reboot), and drain
    XID = "hardware Xid"  # drain (and reset, for Xid 79)
    HARDWARE = "hardware fault"  # ECC, failed remap, narrow PCIe link, NVLink down: drain
    THROTTLE = "clocks held down"  # cooling and power
    FABRIC = "NVSwitch fabric"  # the fabric manager
    OTHER = "other"


@dataclass(frozen=True)
class Issue:
    """One R7 finding: what, on which GPU (`where`: its label, or a PCI address nvidia-smi
    does not list, or "" for the node's)."""

    kind: IssueKind
    what: str
    where: str = ""
    gpu: int | None = None
    code: int | None = None  # the Xid, for XID

    @property
    def line(self) -> str:
        return f"{self.where}: {self.what}" if self.where else self.what


# -- nvidia-smi -q --------------------------------------------------------------------------------

Tree = dict[str, object]


def _parse_q_tree(text: str) -> list[Tree]:
    """`nvidia-smi -q` as one nested dict per GPU (keys as printed, values as strings); the
    GPU's bus id is under "_bus_id"."""
    gpus: list[Tree] = []
    stack: list[tuple[int, Tree]] = []
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("="):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        m = re.match(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$", line)
        if m and indent == 0:
            gpu: Tree = {"_bus_id": m.group(1)}
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
            child: Tree = {}
            parent[line] = child
            stack.append((indent, child))
    return gpus


def _get(d: object, *path: str) -> object:
    cur = d
    for p in path:
        if not isinstance(cur, Mapping) or p not in cur:
            return None
        cur = cur[p]
    return cur


def _str(d: object, *path: str) -> str:
    return text(_get(d, *path)).strip()


def _count(value: object) -> int:
    v = text(value).strip().rstrip("x")
    return int(v) if v.isdigit() else 0


def _ecc_uncorrectable(gpu: Tree, scope: str) -> int:
    """Uncorrectable ECC errors in `scope` ("Volatile" or "Aggregate"): the newer layout
    (SRAM/DRAM Uncorrectable) and the older one (Double Bit / Total)."""
    sect = _get(gpu, "ECC Errors", scope)
    if not isinstance(sect, Mapping):
        return 0
    total = sum(_count(v) for k, v in sect.items()
                if isinstance(v, str) and "Uncorrectable" in k and "Parity" not in k)
    return total + _count(_get(sect, "Double Bit", "Total"))


def _flatten(d: object) -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(d, Mapping):
        for k, v in d.items():
            if isinstance(v, Mapping):
                out.update(_flatten(v))
            else:
                out[k] = str(v)
    return out


@dataclass(frozen=True)
class SmiGpu:
    """One GPU as `nvidia-smi -q` describes it: what R7 reads of it."""

    index: int
    bus_id: str
    name: str
    ecc_volatile: int = 0
    ecc_aggregate: int = 0
    page_retirement_pending: bool = False
    remap_pending: bool = False
    rows_remapped_uncorrectable: int = 0
    remap_failed: bool = False
    reset_required: bool = False
    throttled: tuple[str, ...] = ()  # the active BAD_THROTTLE reasons
    pstate: str = ""
    pcie_gen: tuple[int, int] = (0, 0)  # (max, current)
    pcie_width: tuple[int, int] = (0, 0)  # (max, current)
    persistence_disabled: bool = False
    fabric_state: str | None = None

    def label(self) -> str:
        return f"GPU {self.index} ({self.bus_id}, {self.name})"

    @classmethod
    def of(cls, index: int, gpu: Tree) -> SmiGpu:
        reasons = _flatten(_get(gpu, "Clocks Event Reasons")
                           or _get(gpu, "Clocks Throttle Reasons"))
        link = ("PCI", "GPU Link Info")
        return cls(
            index, text(gpu.get("_bus_id")), _str(gpu, "Product Name") or "?",
            _ecc_uncorrectable(gpu, "Volatile"), _ecc_uncorrectable(gpu, "Aggregate"),
            _str(gpu, "Retired Pages", "Pending Page Blacklist").lower() == "yes",
            _str(gpu, "Remapped Rows", "Pending").lower() == "yes",
            _count(_get(gpu, "Remapped Rows", "Uncorrectable Error")),
            _str(gpu, "Remapped Rows", "Remapping Failure Occurred").lower() == "yes",
            _str(gpu, "GPU Reset Status", "Reset Required").lower() == "yes",
            tuple(k for k in BAD_THROTTLE if reasons.get(k) == "Active"),
            _str(gpu, "Performance State"),
            (_count(_get(gpu, *link, "PCIe Generation", "Max")),
             _count(_get(gpu, *link, "PCIe Generation", "Current"))),
            (_count(_get(gpu, *link, "Link Width", "Max")),
             _count(_get(gpu, *link, "Link Width", "Current"))),
            _str(gpu, "Persistence Mode") == "Disabled",
            _str(gpu, "Fabric", "State") or None)


def parse_nvidia_smi_q(text: str) -> list[SmiGpu]:
    return [SmiGpu.of(i, g) for i, g in enumerate(_parse_q_tree(text))]


def _memory_issues(g: SmiGpu) -> tuple[list[tuple[IssueKind, str]], list[str]]:
    issues: list[tuple[IssueKind, str]] = []
    notes: list[str] = []
    if g.ecc_volatile:
        issues.append((IssueKind.HARDWARE, f"{g.ecc_volatile} uncorrectable ECC error(s) since "
                                           f"the driver loaded (aggregate {g.ecc_aggregate})"))
    elif g.ecc_aggregate:
        notes.append(f"{g.ecc_aggregate} uncorrectable ECC error(s) in its lifetime (none since "
                     f"the driver loaded)")
    if g.page_retirement_pending:
        issues.append((IssueKind.RESET,
                       "a page retirement is pending (Pending Page Blacklist: Yes)"))
    unc = g.rows_remapped_uncorrectable
    if g.remap_pending:
        issues.append((IssueKind.RESET, f"row remapping pending ({unc} row(s) remapped for "
                                        f"uncorrectable errors): the GPU must be reset to "
                                        f"activate it"))
    elif unc:
        notes.append(f"{unc} row(s) remapped for uncorrectable errors")
    if g.remap_failed:
        issues.append((IssueKind.HARDWARE,
                       "a row remapping failed (Remapping Failure Occurred: Yes)"))
    if g.reset_required:
        issues.append((IssueKind.RESET, "the driver asks for a GPU reset (Reset Required: Yes)"))
    return issues, notes


def judge_gpu(g: SmiGpu) -> tuple[list[Issue], list[str]]:
    """(issues, notes) of one GPU, each said with its label."""
    found, notes = _memory_issues(g)
    if g.throttled:
        found.append((IssueKind.THROTTLE, "clocks held down by " + ", ".join(g.throttled)))
    (wmax, wcur), (gmax, gcur) = g.pcie_width, g.pcie_gen
    if wmax and wcur and wcur < wmax:
        found.append((IssueKind.HARDWARE, f"PCIe link width x{wcur}, below its x{wmax}"))
    if gmax and gcur and gcur < gmax:
        said = f"PCIe gen {gcur}, below its gen {gmax}"
        if g.pstate == "P0":
            found.append((IssueKind.OTHER, said + " while busy (P0)"))
        else:
            notes.append(said + f" at {g.pstate or 'an unknown P-state'} (normal when idle)")
    if g.persistence_disabled:
        notes.append("persistence mode disabled (each rank's first CUDA call pays the "
                     "driver's start-up; nvidia-smi -pm 1)")
    if g.fabric_state and g.fabric_state not in ("N/A", "Completed"):
        found.append((IssueKind.FABRIC, f"NVSwitch fabric state {g.fabric_state} "
                                        f"(not Completed)"))
    return [Issue(k, w, g.label(), g.index) for k, w in found], notes


# -- nvidia-smi nvlink -s -------------------------------------------------------------------------

def parse_nvlink_status(text: str) -> dict[int, dict[int, str]]:
    """{gpu index: {link: "26.562 GB/s" or "<inactive>"}}."""
    out: dict[int, dict[int, str]] = {}
    cur: dict[int, str] | None = None
    for line in text.splitlines():
        m = re.match(r"^GPU (\d+): (.*?)(?: \(UUID: .*\))?$", line.strip())
        if m and not line.startswith((" ", "\t")):
            cur = out.setdefault(int(m.group(1)), {})
            continue
        m = re.match(r"^Link (\d+): (.*)$", line.strip())
        if m and cur is not None:
            cur[int(m.group(1))] = m.group(2).strip()
    return out


def nvlink_problems(status: Mapping[int, Mapping[int, str]]) -> dict[int, list[str]]:
    """GPU index -> its links that are down while others of the node's GPUs' links are up."""
    out: dict[int, list[str]] = {}
    if not any("GB/s" in v for links in status.values() for v in links.values()):
        return out
    for idx, links in status.items():
        down = [f"link {n} {v}" for n, v in sorted(links.items()) if "GB/s" not in v]
        if down:
            out[idx] = down
    return out


# -- kernel log -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Xid:
    bus: str  # as the driver prints it: 0000:9b:00
    code: int | None  # None: "fallen off the bus" without an Xid
    text: str

    @property
    def hardware(self) -> bool:
        return self.code is None or self.code in HARDWARE_XIDS


def parse_xids(lines: Sequence[str] | str) -> list[Xid]:
    """The kernel log's Xid lines, and the GPUs it says have fallen off the bus (the driver
    says so over three lines: "The NVIDIA GPU <bus>", "... has", "fallen off the bus ...")."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = re.search(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+), (.*)$", line)
        if m:
            out.append(Xid(m.group(1).lower(), int(m.group(2)), m.group(3).strip()))
            continue
        m = re.search(r"NVRM: The NVIDIA GPU ([0-9a-fA-F:.]+)", line)
        if m and any("fallen off the bus" in ln for ln in lines[i:i + 3]):
            out.append(Xid(m.group(1).lower(), None, "fallen off the bus"))
    return out


def bus_matches(xid_bus: str, smi_bus: str) -> bool:
    """'0000:9b:00' (dmesg) against '00000000:9B:00.0' (nvidia-smi)."""
    a = xid_bus.lower().split(".")[0].split(":")
    b = smi_bus.lower().split(".")[0].split(":")
    return len(a) == 3 and len(b) == 3 and int(a[0], 16) == int(b[0], 16) and a[1:] == b[1:]


def _xid_kind(x: Xid) -> IssueKind:
    return IssueKind.OFF_BUS if x.code is None else IssueKind.XID


def summarize_xids(xids: Sequence[Xid]) -> tuple[dict[str, list[Xid]], list[str]]:
    """({bus: its hardware Xids}, application Xid notes), each code once per bus."""
    hard: dict[str, list[Xid]] = {}
    soft: list[str] = []
    seen = set()
    for x in xids:
        if (x.bus, x.code) in seen:
            continue
        seen.add((x.bus, x.code))
        if x.hardware:
            hard.setdefault(x.bus, []).append(x)
        else:
            soft.append(f"Xid {x.code} on PCI:{x.bus} (an application fault): {x.text[:120]}")
    return hard, soft


def _xid_line(x: Xid) -> str:
    what = HARDWARE_XIDS.get(x.code, "") if x.code is not None else "fallen off the bus"
    label = f"Xid {x.code}" if x.code is not None else "no Xid"
    return f"{label} ({what}): {x.text[:160]}"


# -- the `accel` section --------------------------------------------------------------------------

@dataclass(frozen=True)
class NvidiaFacts:
    """What `accel` read of a node's NVIDIA GPUs."""

    query_failed: str | None  # "nvidia-smi -q failed (exit 9): ..."
    gpus: tuple[SmiGpu, ...] = ()
    nvlinks: Mapping[int, Mapping[int, str]] = field(default_factory=dict)
    nvswitches: tuple[str, ...] = ()
    fabric_manager_running: bool = False
    dmesg_unreadable: str | None = None  # why the kernel log could not be read
    xids: tuple[Xid, ...] = ()  # each (bus, code) once

    @classmethod
    def read(cls, d: Mapping[str, object]) -> NvidiaFacts:
        q = command(d.get("nvidia_smi_q"), "nvidia_smi_q") or Command(127)
        if not q.ok:
            return cls(f"nvidia-smi -q failed (exit {q.rc}): {q.err.strip()[:300]}")
        link = command(d.get("nvlink_s"), "nvlink_s")
        fm = obj(d.get("fabric_manager") or {}, "fabric_manager")
        state = command(fm.get("systemctl"), "systemctl")
        dmesg = obj(d.get("dmesg") or {}, "dmesg")
        lines = texts(dmesg.get("lines"))
        unreadable = (f"kernel log not readable here ({text(dmesg.get('err')).strip()[:120]}): "
                      f"Xid errors not checked"
                      if dmesg and dmesg.get("rc") != 0 and not lines else None)
        xids = list({(x.bus, x.code): x for x in reversed(parse_xids(lines))}.values())[::-1]
        return cls(None, tuple(parse_nvidia_smi_q(q.out)),
                   parse_nvlink_status(link.out) if link is not None and link.ok else {},
                   texts(d.get("nvswitches")),
                   bool(texts(fm.get("pids"))) or (state is not None
                                                   and state.out.strip() == "active"),
                   unreadable, tuple(xids))


@dataclass(frozen=True)
class NpuHealthRead:
    """`npu-smi info -t health -i N -c 0` of one NPU."""

    npu: str
    rc: int
    status: str  # "OK", "Warning", ... ("" when not printed)
    error_code: str


@dataclass(frozen=True)
class HccnDevice:
    """What hccn_tool says of one NPU's RoCE port (None / "": not read)."""

    link_up: bool | None
    ip: str | None
    tls: str | None
    net_health: str


def _hccn_device(raw: object, dev: str) -> HccnDevice:
    tools = obj(raw, f"hccn {dev}")
    runs = {w: command(tools.get(w), f"hccn {dev} {w}") for w in ("link", "ip", "tls",
                                                                     "net_health")}
    out = {w: (r.out if r is not None and r.ok else None) for w, r in runs.items()}
    link, ip, tls, nh = out["link"], out["ip"], out["tls"], out["net_health"]
    return HccnDevice(
        tooloutput.hccn_link_up(link) if link is not None else None,
        (tooloutput.parse_hccn_tool(ip).get("ipaddr") or None) if ip is not None else None,
        parse_tls_switch(tls) if tls is not None else None,
        tooloutput.parse_hccn_tool(nh).get("net health status", "") if nh is not None else "")


@dataclass(frozen=True)
class NpuFacts:
    """What `accel` read of a node's Ascend NPUs (`hccn`: {} when hccn_tool is not there)."""

    health: tuple[NpuHealthRead, ...]
    hccn: Mapping[str, HccnDevice]

    @classmethod
    def read(cls, d: Mapping[str, object]) -> NpuFacts:
        health = []
        for npu, raw in sorted(obj(d.get("npu_health") or {}, "npu_health").items(),
                               key=lambda kv: int(kv[0])):
            res = command(raw, f"npu_health {npu}") or Command(127)
            kv = tooloutput.parse_key_values(res.out) if res.ok else {}
            health.append(NpuHealthRead(npu, res.rc, kv.get("Health Status") or
                                        kv.get("Health") or "", kv.get("Error Code", "?")))
        hccn = obj(d.get("hccn") or {}, "hccn")
        return cls(tuple(health), {dev: _hccn_device(hccn[dev], dev)
                                   for dev in sorted(hccn, key=int)})


@dataclass(frozen=True)
class AccelFacts:
    """node/healthprobe.py's `accel`: R7's (None: no nvidia-smi) and R8's (None: no npu-smi)."""

    nvidia: NvidiaFacts | None
    ascend: NpuFacts | None

    @classmethod
    def read(cls, raw: object) -> AccelFacts:
        d = obj(raw, "accel")
        return cls(NvidiaFacts.read(d) if "nvidia_smi_q" in d else None,
                   NpuFacts.read(d) if "npu_smi_info_l" in d else None)


ACCEL = Probe("healthprobe.py", "accel", AccelFacts.read)


# -- R7: the node's verdict -----------------------------------------------------------------------

@dataclass(frozen=True)
class NvidiaVerdict:
    count: int  # GPUs nvidia-smi -q lists
    issues: tuple[Issue, ...]
    notes: tuple[str, ...]

    def fabric(self) -> list[Issue]:
        """The NVSwitch fabric's issues (what CUDA's 'system not yet initialized' means)."""
        return [i for i in self.issues if i.kind is IssueKind.FABRIC]


def judge_nvidia(facts: NvidiaFacts) -> NvidiaVerdict:
    """R7: every GPU's issues and notes, the node's own first (an NVLink, Xid at a PCI address
    nvidia-smi does not list, the fabric manager), then each GPU's."""
    if facts.query_failed is not None:
        return NvidiaVerdict(0, (Issue(IssueKind.OTHER, facts.query_failed),), ())
    judged = {g.index: judge_gpu(g) for g in facts.gpus}
    node: list[Issue] = []
    notes: list[str] = []
    labels = {g.index: g.label() for g in facts.gpus}
    for idx, down in nvlink_problems(facts.nvlinks).items():
        what = "NVLink down: " + ", ".join(down)
        if idx in judged:
            judged[idx][0].append(Issue(IssueKind.HARDWARE, what, labels[idx], idx))
        else:
            node.append(Issue(IssueKind.HARDWARE, what))
    if facts.nvswitches and not facts.fabric_manager_running:
        node.append(Issue(IssueKind.FABRIC, f"{len(facts.nvswitches)} NVSwitch(es) but no "
                                            f"fabric manager running (nv-fabricmanager): CUDA "
                                            f"fails with 'system not yet initialized'"))
    if facts.dmesg_unreadable:
        notes.append(facts.dmesg_unreadable)
    hard, soft = summarize_xids(facts.xids)
    notes += soft
    for bus, xids in hard.items():
        gpu = next((g for g in facts.gpus if bus_matches(bus, g.bus_id)), None)
        for x in xids:
            if gpu is not None:
                judged[gpu.index][0].append(Issue(_xid_kind(x), _xid_line(x), gpu.label(),
                                                  gpu.index, x.code))
            else:
                node.append(Issue(_xid_kind(x), _xid_line(x), f"PCI:{bus}", None, x.code))
    issues = node + [i for g in facts.gpus for i in judged[g.index][0]]
    notes += [f"{g.label()}: {n}" for g in facts.gpus for n in judged[g.index][1]]
    return NvidiaVerdict(len(facts.gpus), tuple(issues), tuple(notes))


def _gpus(issues: Sequence[Issue], kinds: set[IssueKind]) -> str:
    return ",".join(str(i) for i in sorted({x.gpu for x in issues
                                           if x.kind in kinds and x.gpu is not None})) \
        or "<index>"


def gpu_fixes(node: str, issues: Sequence[Issue]) -> list[str]:
    """The fixes that the issues call for (each once), naming the GPUs."""
    kinds = {i.kind for i in issues}
    fixes = []
    if kinds & {IssueKind.RESET, IssueKind.OFF_BUS} or any(i.code == 79 for i in issues):
        i = _gpus(issues, {IssueKind.RESET, IssueKind.OFF_BUS, IssueKind.XID})
        fixes.append(f"reset GPU {i} with nothing running on it (nvidia-smi -r -i {i}) or "
                     f"reboot the node; meanwhile leave it out (--exclude {node}:{i})")
    if kinds & {IssueKind.HARDWARE, IssueKind.XID, IssueKind.OFF_BUS}:
        fixes.append(f"drain {node}: errors that come back after a reset, a failed remap, a "
                     f"narrow PCIe link, a down NVLink or hardware Xids mean RMA "
                     f"(nvidia-bug-report.sh for the vendor)")
    if IssueKind.THROTTLE in kinds:
        fixes.append("check cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER)")
    if IssueKind.FABRIC in kinds:
        fixes.append("systemctl enable --now nvidia-fabricmanager (its version must match "
                     "the driver's)")
    return fixes or [f"see nvidia-smi -q on {node}"]


def gpu_health_problem(node: str, verdict: NvidiaVerdict) -> Problem | None:
    """R7's red: every issue of the node's GPUs, and the fixes they call for."""
    if not verdict.issues:
        return None
    return Problem((node,), GpuCause.GPU_HEALTH,
                   f"{node}: GPU health:\n  " + "\n  ".join(i.line for i in verdict.issues),
                   fix=f"on {node}: " + "; ".join(gpu_fixes(node, verdict.issues)),
                   item=ids.GPU_HEALTH.item,
                   facts={"gpus": sorted({i.gpu for i in verdict.issues if i.gpu is not None})})


# -- Ascend ---------------------------------------------------------------------------------------

def net_health(facts: NpuFacts) -> dict[str, str]:
    """{device: `hccn_tool -i N -net_health -g` status} (devices whose command failed or printed
    no status left out): judged by R9 (judge/health/dcgm.net_health_verdict), not here."""
    return {dev: d.net_health for dev, d in facts.hccn.items() if d.net_health}


def parse_tls_switch(text: str) -> str | None:
    m = re.search(r"tls switch\[(\d)\]", text)
    return m.group(1) if m else None


@dataclass(frozen=True)
class NpuVerdict:
    """R8's verdict on one node, before the comparison with its peers."""

    problems: tuple[str, ...]
    ips: Mapping[str, str]  # {device: device IP}
    tls: str | None  # the node's TLS switch ("mixed": its devices differ)


def judge_npu(facts: NpuFacts) -> NpuVerdict:
    problems = [f"NPU {r.npu}: npu-smi info -t health failed (exit {r.rc})" if r.rc != 0 else
                f"NPU {r.npu}: Health Status {r.status} (Error Code {r.error_code})"
                for r in facts.health if r.rc != 0 or (r.status and r.status != "OK")]
    ips: dict[str, str] = {}
    for dev, d in facts.hccn.items():
        if d.link_up is False:
            problems.append(f"device {dev}: link status DOWN")
        if d.ip:
            ips[dev] = d.ip
        else:
            problems.append(f"device {dev}: no device IP (hccn_tool -i {dev} -ip -g printed none)")
    seen: dict[str, str] = {}
    for dev, addr in ips.items():
        if addr in seen:
            problems.append(f"devices {seen[addr]} and {dev} share the device IP {addr}")
        seen.setdefault(addr, dev)
    tls = {d.tls for d in facts.hccn.values() if d.tls is not None}
    switch = None if not tls else (tls.pop() if len(tls) == 1 else "mixed")
    if switch == "mixed":
        problems.append("the TLS switch differs between this node's devices")
    return NpuVerdict(tuple(problems), ips, switch)


def npu_health_problem(node: str, verdict: NpuVerdict,
                       peers: Mapping[str, NpuVerdict]) -> Problem | None:
    """R8's red: the node's own problems, and the device IPs or TLS switch it has against
    its peers'."""
    problems = list(verdict.problems)
    for peer, other in peers.items():
        clash = sorted(set(verdict.ips.values()) & set(other.ips.values()))
        if clash:
            problems.append(f"device IP(s) {', '.join(clash)} also on {peer}")
        if verdict.tls is not None and other.tls is not None and verdict.tls != other.tls:
            problems.append(f"TLS switch {verdict.tls} here but {other.tls} on {peer} (HCCL "
                            f"links between them fail to establish)")
    if not problems:
        return None
    return Problem((node,), GpuCause.NPU_HEALTH,
                   f"{node}: NPU health:\n  " + "\n  ".join(problems),
                   fix=f"on {node}: {NPU_FIX}", item=ids.NPU_HEALTH.item)
