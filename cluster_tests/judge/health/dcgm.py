"""R9. DCGM's active diagnostic (`dcgmi diag -r N`) and, on Ascend nodes, the NPUs' RoCE net
health (`hccn_tool -i N -net_health -g`): pure parsers and judgement, tested on real captures
(tests/data/samples/dcgmi, sources in SOURCES.md).

`dcgmi diag` prints a table two columns wide (78 characters), in three layouts that real
captures show:
- DCGM 2.x/3.x: one row per test (`Persistence Mode | Fail`, `GPU Memory | Fail - All`), the
  test's messages in `Error` / `Warning` / `Info` rows under it, each message cut into 45-character
  pieces on continuation rows (mid-word: the pieces join back without separators) and a message
  cut by dcgmi itself at 511 or 1023 characters;
- DCGM 4.x: lower-case test names (`software`, `memory`, `pcie`), the test's verdict, its
  messages, then one `GPUn: Pass` row per GPU;
- DCGM 4.x with `-j`: JSON, `DCGM Diagnostic` > `test_categories` > tests > per-entity results.
The probe asks for the table (every DCGM version prints one; the JSON's keys changed between
3.x and 4.x and only a 4.x JSON capture was found), but a JSON answer is read too.

What is red: a test whose verdict is Fail, for the GPUs it names (per-GPU rows, JSON entity
results, or "GPU n" in DCGM's messages; all the node's GPUs when it says `- All` or names none),
each with its index and the bus id from the node's `nvidia-smi -q` (DCGM numbers GPUs as NVML
does, in PCI bus order, as nvidia-smi does), with DCGM's own message.  Warn and Skip are not red.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.core.testids import Scope
from cluster_tests.judge.accelerator.inventory import command
from cluster_tests.judge.common.probes import Probe, obj, opt_text, texts
from cluster_tests.judge.problem import Fix, Problem, SectionCause

#: DCGM's run level -> how long the probe waits for it, seconds (DCGM's documented durations:
#: level 1 "seconds", 2 "about 2 minutes", 3 "about 30 minutes", 4 "1-2 hours"; twice that)
DEADLINE_S = {1: 120.0, 2: 300.0, 3: 3600.0, 4: 4 * 3600.0}

CELL = 45  # the width of a piece of a wrapped message in dcgmi's table
CUT_AT = (511, 1023)  # the lengths at which dcgmi cuts a message (seen in the captures)
MESSAGE_KINDS = ("Error", "Warning", "Info")

#: R9's fix where dcgmi ran past its deadline with nothing printed
HUNG_FIX = ("nvidia-smi (does it answer?), the kernel log (dmesg | grep NVRM), systemctl status "
            "nvidia-dcgm; reset the GPU or reboot")


class DiagCause(SectionCause):
    """What R9 finds (Problem.cause)."""

    FAILED = "DCGM diagnostic failed"
    TIMED_OUT = "DCGM diagnostic timed out"
    NET_HEALTH = "NPU net health failed"


@dataclass(frozen=True)
class DiagTest:
    """One test of a DCGM diagnostic run: its verdict, per-GPU verdicts where printed, and its
    messages as (kind, text) with kind Error / Warning / Info."""

    category: str
    name: str
    status: str  # "Pass", "Fail", "Skip", "Warn" (the first word DCGM printed)
    scope: str = ""  # what follows " - " ("All", or the GPUs it names)
    gpus: Mapping[int, str] = field(default_factory=dict)
    messages: tuple[tuple[str, str], ...] = ()

    @property
    def failed(self) -> bool:
        return self.status == "Fail" or "Fail" in self.gpus.values()


@dataclass(frozen=True)
class DiagRun:
    metadata: Mapping[str, str] = field(default_factory=dict)
    tests: tuple[DiagTest, ...] = ()

    @property
    def version(self) -> str:
        return self.metadata.get("DCGM Version") or self.metadata.get("version") or ""

    @property
    def driver(self) -> str:
        return self.metadata.get("Driver Version Detected", "")


@dataclass
class _Draft:
    """A test while its rows are read."""

    category: str
    name: str
    status: str
    scope: str = ""
    gpus: dict[int, str] = field(default_factory=dict)
    messages: list[tuple[str, str]] = field(default_factory=list)

    def done(self) -> DiagTest:
        return DiagTest(self.category, self.name, self.status, self.scope, dict(self.gpus),
                        tuple(self.messages))


# -- the table ---------------------------------------------------------------------------------

def _cells(line: str) -> tuple[str, str] | None:
    """(name cell, raw value cell) of a `| name | value |` row, or None for a border."""
    if not line.startswith("|") or len(line) < 31 or line[28] != "|" or line.startswith("|-"):
        return None
    return line[2:28].strip(), line[30:30 + CELL]


_SECTION = re.compile(r"^[|+]-----\s+(\S.*?)\s+-+[+|]")
_GPU_ROW = re.compile(r"^GPU(\d+):\s*(Pass|Fail|Skip|Warn\w*)$")


def parse_diag_table(text: str) -> DiagRun:
    metadata: dict[str, str] = {}
    tests: list[_Draft] = []
    category = ""
    test: _Draft | None = None
    open_msg: list[str] | None = None  # the pieces of the message being continued
    pending: list[tuple[str, list[str]]] = []

    def close() -> None:
        nonlocal open_msg
        if test is not None:
            for kind, pieces in pending:
                test.messages.append((kind, "".join(pieces).strip()))
        pending.clear()
        open_msg = None

    for line in text.splitlines():
        m = _SECTION.match(line)
        if m:
            close()
            test = None
            category = m.group(1)
            continue
        cells = _cells(line)
        if cells is None:
            continue
        name, raw = cells
        value = raw.strip()
        if category == "" or (name, value) == ("Diagnostic", "Result"):
            continue
        if category == "Metadata":
            if name:
                metadata[name] = value
            continue
        if not name:
            gpu = _GPU_ROW.match(value)
            if gpu and test is not None:
                test.gpus[int(gpu.group(1))] = gpu.group(2)
                open_msg = None
            elif open_msg is not None:
                open_msg.append(raw)
            continue
        if name in MESSAGE_KINDS and test is not None:
            open_msg = [raw]
            pending.append((name, open_msg))
            continue
        close()
        status, _, scope = value.partition(" - ")
        test = _Draft(category, name, status.split()[0] if status else "", scope.strip())
        tests.append(test)
    close()
    return DiagRun(metadata, tuple(t.done() for t in tests))


# -- the JSON (DCGM 4.x, -j) -------------------------------------------------------------------

# DCGM's JSON keys, joined here: a literal of the form test_* reads as a check's name to
# tests/unit/test_testids.py
_CATEGORIES, _SUMMARY = "_".join(("test", "categories")), "_".join(("test", "summary"))


def parse_diag_json(text: str) -> DiagRun:
    data = json.loads(text)
    tests: list[DiagTest] = []
    body = data.get("DCGM Diagnostic") or data.get("DCGM GPU Diagnostic") or {}
    for cat in body.get(_CATEGORIES) or []:
        for t in cat.get("tests") or []:
            summary = t.get(_SUMMARY) or {}
            test = _Draft(str(cat.get("category", "")), str(t.get("name", "")),
                          str(summary.get("status", "")))
            seen = set()
            for res in t.get("results") or []:
                if res.get("entity_group", "GPU") != "GPU" or "entity_id" not in res:
                    continue
                gpu = int(res["entity_id"])
                test.gpus[gpu] = str(res.get("status", ""))
                for w in res.get("warnings") or []:
                    msg = str(w.get("warning", "")).strip()
                    seen.add(msg)
                    test.messages.append(("Warning", msg))
            for w in summary.get("warnings") or []:
                msg = str(w.get("warning", "")).strip()
                if msg not in seen:
                    test.messages.append(("Warning", msg))
            if not test.status and test.gpus:
                test.status = "Fail" if "Fail" in test.gpus.values() else "Pass"
            tests.append(test.done())
    return DiagRun({k: str(v) for k, v in (data.get("metadata") or {}).items()}, tuple(tests))


def parse_diag(text: str) -> DiagRun:
    """dcgmi diag's output, table or JSON."""
    start = text.lstrip()
    if start.startswith("{"):
        try:
            return parse_diag_json(start)
        except ValueError:
            pass
    return parse_diag_table(text)


# -- judgement ---------------------------------------------------------------------------------

def split_messages(text: str) -> list[str]:
    """A 3.x message cell holds one sentence group per GPU joined by "," or ", " after the
    period ("... as root., Persistence mode for GPU 1 ..."): the groups, each whole."""
    return [p.strip() for p in re.split(r"(?<=\.),\s*(?=[A-Z])", text) if p.strip()]


def _named_gpu(text: str) -> int | None:
    m = re.search(r"\bGPU (\d+)\b", text)
    return int(m.group(1)) if m else None


@dataclass
class Failure:
    """One failed test on one GPU (gpu None: the test itself, no GPU named), with DCGM's
    messages for it."""

    test: DiagTest
    gpu: int | None
    messages: list[str]


def failures(run: DiagRun, gpu_count: int = 0) -> list[Failure]:
    """Every failed test, per GPU where the run says which (`gpu_count`: the node's GPUs from
    nvidia-smi, for a test that failed on "All" without naming any)."""
    out: list[Failure] = []
    for t in run.tests:
        if not t.failed:
            continue
        per_gpu: dict[int | None, list[str]] = {}
        for kind, text in t.messages:
            if kind == "Info":
                continue
            for part in split_messages(text):
                per_gpu.setdefault(_named_gpu(part), []).append(part)
        failed_gpus = [g for g, s in sorted(t.gpus.items()) if s == "Fail"]
        named = sorted(g for g in per_gpu if g is not None)
        unnamed = per_gpu.get(None, [])
        if failed_gpus or named:
            for g in sorted(set(failed_gpus) | set(named)):
                out.append(Failure(t, g, per_gpu.get(g, []) + unnamed))
        elif t.scope == "All" and gpu_count:
            out.extend(Failure(t, g, unnamed) for g in range(gpu_count))
        else:
            out.append(Failure(t, None, unnamed))
    return out


def fix_for(test: DiagTest, messages: list[str]) -> str:
    """What to do about a failed test, from DCGM's test and message (the words of the fix)."""
    text = " ".join(messages)
    name = test.name.lower()
    if "persistence mode" in name or "Persistence mode" in text:
        return "enable persistence mode (nvidia-smi -pm 1, or run nvidia-persistenced)"
    if "system not yet initialized" in text:
        return ("CUDA cannot initialise the GPUs: on an NVSwitch system start the fabric "
                "manager (systemctl enable --now nvidia-fabricmanager, its version matching the "
                "driver's)")
    if "internal error during the test" in text:
        return ("DCGM's test itself broke, not a GPU verdict: check nv-hostengine's and nvvs's "
                "logs (/var/log/nv-hostengine.log), restart DCGM (systemctl restart "
                "nvidia-dcgm) and rerun; under Slurm give the diagnostic the whole node")
    if "graphics processes" in name:
        return "stop the processes still using the GPUs (nvidia-smi) before the launch"
    if "page retirement" in name or "row remap" in name:
        return "reset the GPU (nvidia-smi -r -i <index>) or reboot; a remap that fails again: RMA"
    if name in ("denylist", "blacklist", "nvml library", "cuda main library", "software",
                "permissions and os blocks", "environment variables", "inforom"):
        return "the driver / CUDA installation or the node's setup: see DCGM's message"
    return ("reset the GPU (nvidia-smi -r -i <index>) and rerun dcgmi diag; a GPU that fails "
            "again: drain the node and RMA (nvidia-bug-report.sh for the vendor)")


def describe(run: DiagRun, fails: list[Failure], bus_ids: Mapping[int, str]) -> list[str]:
    """The lines of the red: one per failed test and GPU, naming the GPU's index and bus id,
    the test and DCGM's message."""
    lines = []
    for f in fails:
        where = "the test as a whole (no GPU named)"
        if f.gpu is not None:
            where = f"GPU {f.gpu} ({bus_ids.get(f.gpu, 'bus id unknown: not in nvidia-smi -q')})"
        head = f"{where}: {f.test.name} ({f.test.category}) {f.test.status}"
        if f.test.scope:
            head += f" - {f.test.scope}"
        lines.append(head + (": " + " | ".join(f.messages) if f.messages else ""))
    return lines


# -- Ascend: hccn_tool -net_health -g -------------------------------------------------------------

#: net health status -> (what it means, the fix), for a device's RoCE port, which pings the
#: detection address set with `hccn_tool -i N -netdetect -s address <ip>`
NET_HEALTH: dict[str, tuple[str, str]] = {
    "socket failed": (
        "the port could not open the socket it probes with: its network is not up",
        "hccn_tool -i {d} -ip -g and -link -g (device IP set, link UP); hccn_tool -i {d} "
        "-cfg recovery"),
    "receive timeout": (
        "its probes of the detection address got no answer in time",
        "is the detection address (hccn_tool -i {d} -netdetect -g) up and in this device's "
        "network? check the switch port, the cable and the optical module "
        "(hccn_tool -i {d} -optical -g)"),
    "unreachable": (
        "there is no route from the port to the detection address",
        "the device's netmask and gateway (hccn_tool -i {d} -ip -g, -gateway -g) and the "
        "detection address (-netdetect -g) must be in one network"),
    "time exceeded": (
        "the probes' TTL ran out on the way (a routing loop)",
        "the routes of the device network (hccn_tool -i {d} -route -g) and the switches'"),
    "fault": (
        "the port is faulty",
        "hccn_tool -i {d} -link -g and -optical -g; hccn_tool -i {d} -cfg recovery; a fault "
        "that comes back: the optical module, the cable or the switch port"),
    "thread error": (
        "the driver's detection thread failed",
        "restart the NPU driver or reboot the node"),
}
NET_HEALTH_UNSET = ("init", "detect ip set")


def judge_net_health(status_by_dev: Mapping[str, str]
                     ) -> tuple[list[str], list[str], list[str]]:
    """(problems, notes, fixes) from {device: net health status} (`hccn_tool -i N -net_health
    -g`): each failed state says which device, the state and what it means; its fix names the
    device."""
    problems: list[str] = []
    notes: list[str] = []
    failing: dict[str, list[str]] = {}  # state -> its devices
    for dev, status in sorted(status_by_dev.items(), key=lambda kv: int(kv[0])):
        key = status.strip().lower()
        if key in NET_HEALTH:
            meaning, _ = NET_HEALTH[key]
            problems.append(f"device {dev}: net health status {status}: {meaning}; HCCL's "
                            f"links over this NIC fail")
            failing.setdefault(key, []).append(dev)
        elif key in NET_HEALTH_UNSET:
            notes.append(f"device {dev}: net health status {status}: no detection address, so "
                         f"the port's health is not probed (hccn_tool -i {dev} -netdetect -s "
                         f"address <an address in its network>)")
        elif key and key != "success":
            notes.append(f"device {dev}: net health status {status}")
    fixes = [f"device {devs[0]}: {NET_HEALTH[key][1].format(d=devs[0])}" if len(devs) == 1
             else f"devices {','.join(devs)} ({key}), for each N of them: "
                  f"{NET_HEALTH[key][1].format(d='N')}"
             for key, devs in failing.items()]
    return problems, notes, fixes


@dataclass(frozen=True)
class DiagFacts:
    """node/healthprobe.py's `diag`: where dcgmi is (None: not on the PATH), the command run,
    and its parsed run (None: it gave no result, `why`; `timed_out`: past its deadline with
    nothing printed)."""

    dcgmi: str | None
    argv: str = "dcgmi diag"
    run: DiagRun | None = None
    why: str = ""
    timed_out: bool = False

    @classmethod
    def read(cls, raw: object) -> DiagFacts:
        d = obj(raw, "diag")
        tool = opt_text(d.get("dcgmi"))
        res = command(d.get("dcgmi_diag"), "dcgmi_diag")
        if tool is None or res is None:
            return cls(tool)
        argv = " ".join(texts(d.get("argv"))) or "dcgmi diag"
        run = parse_diag(res.out) if res.out.strip() else None
        if run is not None and run.tests:
            return cls(tool, argv, run)
        tail = (res.out.strip() or res.err.strip())[-400:]
        return cls(tool, argv, None, f"exit {res.rc}: {tail or 'no output'}",
                   res.rc == 124 and not res.out.strip())


DIAG = Probe("healthprobe.py", "diag", DiagFacts.read)


def timed_out(node: str, argv: str, deadline: float, level: int) -> Problem:
    """R9's red where `argv` ran past `deadline` seconds with nothing printed."""
    return Problem((node,), DiagCause.TIMED_OUT,
                   f"{node}: `{argv}` did not finish in {deadline:.0f} s (level {level} takes far "
                   f"less): a GPU or DCGM's host engine is hung",
                   fix=f"on {node}: {HUNG_FIX}", item=ids.ACCEL_DIAG.item, scope=Scope.NODE)


def needs_fabric_manager(run: DiagRun) -> bool:
    """Whether a failed test says CUDA could not start ('system not yet initialized': on an
    NVSwitch system, no fabric manager; R7 holds that cause)."""
    return any("system not yet initialized" in text
               for t in run.tests if t.failed for _, text in t.messages)


def verdict(node: str, run: DiagRun, bus_ids: Mapping[int, str], argv: str) -> Problem | None:
    """The red of a node whose DCGM run failed a test (None: every test passed, warned or
    skipped): one line per failed test and GPU, the fixes each test calls for."""
    fails = failures(run, len(bus_ids))
    if not fails:
        return None
    about = ", ".join(x for x in (f"DCGM {run.version}" if run.version else "",
                                  f"driver {run.driver}" if run.driver else "") if x)
    tests = list(dict.fromkeys(f.test.name for f in fails))
    gpus = sorted({f.gpu for f in fails if f.gpu is not None})
    head = (f"{node}: DCGM's diagnostic (`{argv}`{', ' + about if about else ''}) failed "
            f"{', '.join(tests)}" + (f" on GPU {','.join(map(str, gpus))}" if gpus else ""))
    fix_words = list(dict.fromkeys(fix_for(f.test, f.messages) for f in fails))
    fixes: tuple[Fix, ...] = ()
    if any("persistence" in w for w in fix_words):
        fixes = (Fix(node, "enable persistence mode on every GPU (DCGM's diagnostic requires "
                           "it; each rank's first CUDA call is faster with it)",
                     ("nvidia-smi -pm 1",), item=ids.ACCEL_DIAG.item),)
    known = set(bus_ids) | {g for t in run.tests for g in t.gpus}
    cut = list(dict.fromkeys(f.test.name for f in fails
                             if any(len(m) in CUT_AT for _, m in f.test.messages)))
    whole = bool(cut) or any(f.test.scope == "All" for f in fails) or \
        bool(known and set(gpus) >= known)
    leave_out = f"--exclude {node}" if whole else f"--exclude {node}:{','.join(map(str, gpus))}"
    fix = "; ".join(fix_words) + (
        f"; meanwhile leave {'the node' if whole else 'the GPUs'} out ({leave_out})"
        if gpus else "")
    return Problem(
        (node,), DiagCause.FAILED,
        head + "\n  " + "\n  ".join(describe(run, fails, bus_ids))
        + "".join(f"\n  ({name}: dcgmi cut DCGM's message short; GPUs it did not reach may "
                  f"have failed too)" for name in cut),
        fix=f"on {node}: {fix}", item=ids.ACCEL_DIAG.item, scope=Scope.NODE, fixes=fixes,
        facts={"dcgm_version": run.version, "failed_tests": tests, "gpus": gpus})


def net_health_verdict(node: str, status_by_dev: Mapping[str, str]
                       ) -> tuple[Problem | None, list[str]]:
    """(the red of an Ascend node whose NPUs' RoCE ports fail their net health probe, notes)."""
    problems, notes, fixes = judge_net_health(status_by_dev)
    if not problems:
        return None, notes
    devs = [p.split(":")[0].split()[1] for p in problems]
    return Problem(
        (node,), DiagCause.NET_HEALTH,
        f"{node}: NPU RoCE net health (hccn_tool -i N -net_health -g) failed on device "
        f"{','.join(devs)}:\n  " + "\n  ".join(problems),
        fix=f"on {node}: " + "; ".join(fixes), item=ids.ACCEL_DIAG.item, scope=Scope.NODE,
        facts={"devices": devs}), notes
