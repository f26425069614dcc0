"""Pure parsers for the text that cluster tools print.

Covers ``nvidia-smi`` (``-L``, ``--query-gpu ... --format=csv``, ``topo -m``), ``npu-smi info``
(plain, ``-l``, ``-m``, ``-t board``, ``-t topo``), ``hccn_tool``, nccl-tests (``*_perf``) and
hccl_test. The checks in CHECKLIST.md (A1, H4, E3, E4, C1) call these on captured output.

Error policy, the same for every parser here:

* A parser never raises on any ``str`` input: empty, truncated, garbage, decoded with
  ``errors="replace"``. It returns what it could read and skips the rest.
* Parsers that return a result object (``NpuSmiInfo``, ``NcclTestsResult``, ...) list what they
  skipped or could not read in its ``warnings`` field, one readable line each. Parsers whose
  contract is a plain list or dict (``parse_nvidia_smi_L``, ``parse_nvidia_smi_query_csv``,
  ``parse_hccn_tool``, ...) skip lines they do not understand silently.
* Numbers that a tool prints as ``N/A``, ``NA``, ``-`` or ``[Not Supported]`` become ``None``.

``algbw`` is a formula, not a parser: it raises ``ValueError`` on ``seconds <= 0``. The busbw
factor is ``judge/collective.busbw_factor``.

No I/O and no pytest here; the tests feed the real samples in ``tests/data/samples/``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from cluster_tests.judge.problem import SectionCause

Number = int | float

_MISSING = {"", "n/a", "na", "-", "[n/a]", "[not supported]", "not supported", "[unknown error]"}


def _lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _num(token: str | None) -> Number | None:
    """``"12"`` -> 12, ``"1.5"`` -> 1.5, ``"N/A"`` or junk -> None."""
    if token is None:
        return None
    s = token.strip()
    if s.lower() in _MISSING:
        return None
    try:
        return int(s)
    except ValueError:
        pass
    try:
        value = float(s)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    return value


def _int(token: str | None) -> int | None:
    value = _num(token)
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    return value


def _float(token: str | None) -> float | None:
    value = _num(token)
    return None if value is None else float(value)


# --------------------------------------------------------------------------------------------
# nvidia-smi -L
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MigDevice:
    """A MIG instance listed under its parent GPU: ``MIG 1g.20gb Device 0: (UUID: MIG-...)``."""

    profile: str
    index: int
    uuid: str | None


@dataclass(frozen=True)
class Gpu:
    """One ``GPU <index>: <name> (UUID: <uuid>)`` line of ``nvidia-smi -L``."""

    index: int
    name: str
    uuid: str | None
    mig: tuple[MigDevice, ...] = ()


_GPU_L = re.compile(r"^\s*GPU\s+(\d+)\s*:\s*(.*)$")
_MIG_L = re.compile(r"^\s*MIG\s+(\S+)\s+Device\s+(\d+)\s*:\s*(.*)$")
_UUID = re.compile(r"\(\s*UUID\s*:\s*([^)\s]+)\s*\)?")


def _split_uuid(rest: str) -> tuple[str, str | None]:
    match = _UUID.search(rest)
    if not match:
        return rest.strip(), None
    return rest[: match.start()].strip(), match.group(1)


def parse_nvidia_smi_L(text: str) -> list[Gpu]:
    """GPUs of ``nvidia-smi -L`` in printed order, each with its MIG children.

    A truncated last line still yields the GPU, with ``uuid=None`` if the UUID was cut.
    """
    gpus: list[Gpu] = []
    migs: list[list[MigDevice]] = []
    for line in _lines(text):
        gpu = _GPU_L.match(line)
        if gpu:
            name, uuid = _split_uuid(gpu.group(2))
            gpus.append(Gpu(index=int(gpu.group(1)), name=name, uuid=uuid))
            migs.append([])
            continue
        mig = _MIG_L.match(line)
        if mig and gpus:
            _, uuid = _split_uuid(mig.group(3))
            migs[-1].append(MigDevice(profile=mig.group(1), index=int(mig.group(2)), uuid=uuid))
    return [Gpu(index=g.index, name=g.name, uuid=g.uuid, mig=tuple(m))
            for g, m in zip(gpus, migs, strict=False)]


# --------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu=... --format=csv
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# nvidia-smi topo -m  /  npu-smi info -t topo
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# npu-smi info
# --------------------------------------------------------------------------------------------


class NpuHealth(SectionCause):
    """Normalized ``Health`` column of ``npu-smi info``."""

    OK = "OK"
    WARNING = "Warning"
    ALARM = "Alarm"
    CRITICAL = "Critical"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def from_raw(cls, raw: str | None) -> NpuHealth:
        wanted = (raw or "").strip().lower()
        for member in cls:
            if member.value.lower() == wanted:
                return member
        return cls.UNKNOWN


@dataclass(frozen=True)
class Usage:
    """A ``used / total`` pair, in the unit the column header names (MB, pages)."""

    used: int | None
    total: int | None


@dataclass
class NpuChip:
    """A chip row under an NPU row (910A/910B: one; 310P Duo: two)."""

    chip_id: int | None
    device_id: int | None = None  # "Device" / "Phy-ID" column, where printed
    bus_id: str | None = None
    aicore_percent: float | None = None
    memory_mb: Usage | None = None
    hbm_mb: Usage | None = None
    raw: dict[str, str] = field(default_factory=dict)


@dataclass
class Npu:
    """An NPU row of ``npu-smi info`` and its chip rows."""

    npu_id: int | None
    name: str
    health_raw: str
    health: NpuHealth
    power_w: float | None = None
    temp_c: float | None = None
    hugepages: Usage | None = None
    chips: list[NpuChip] = field(default_factory=list)
    raw: dict[str, str] = field(default_factory=dict)

    @property
    def hbm_mb(self) -> Usage | None:
        """HBM of the first chip that reports it (one chip per NPU on 910A/910B)."""
        return next((c.hbm_mb for c in self.chips if c.hbm_mb is not None), None)


@dataclass(frozen=True)
class NpuProcess:
    npu_id: int | None
    chip_id: int | None
    pid: int | None
    name: str
    memory_mb: int | None


@dataclass
class NpuSmiInfo:
    """``npu-smi info``: the tool version, the NPUs, and the process table if printed."""

    npu_smi_version: str | None = None
    version: str | None = None
    npus: list[Npu] = field(default_factory=list)
    processes: list[NpuProcess] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


_NPU_SMI_VERSION = re.compile(r"npu-smi\s+(\S+)(?:.*?Version:\s*(\S+))?")
_DEFAULT_NPU_HEADER = [
    ["NPU", "Name"],
    ["Health"],
    ["Power(W)", "Temp(C)", "Hugepages-Usage(page)"],
]
_DEFAULT_CHIP_HEADER = [
    ["Chip"],
    ["Bus-Id"],
    ["AICore(%)", "Memory-Usage(MB)", "HBM-Usage(MB)"],
]
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:")
_PAIR = re.compile(r"(\S+)\s*/\s*(\S+)")


def _table_cells(line: str) -> list[str]:
    """``| a | b |`` -> ``["a", "b"]``; also copes with a cut-off line without closing bar."""
    body = line.strip()
    body = body.removeprefix("|")
    body = body.removesuffix("|")
    return [c.strip() for c in body.split("|")]


def _cell_tokens(cell: str) -> list[str]:
    """Split a cell into values, keeping ``used / total`` together as ``used/total``."""
    return _PAIR.sub(r"\1/\2", cell).split()


def _key(header: str) -> str:
    return re.sub(r"\(.*?\)", "", header).strip().lower()


def _map_row(header: list[list[str]], cells: list[str]) -> dict[str, str]:
    """Zip a data row's cells with the header's names, cell by cell; extra words join the last."""
    out: dict[str, str] = {}
    for names, cell in zip(header, cells, strict=False):
        tokens = _cell_tokens(cell)
        if len(tokens) > len(names) and names:
            keep = len(names) - 1
            tokens = [*tokens[:keep], " ".join(tokens[keep:])]
        for name, token in zip(names, tokens, strict=False):
            out[_key(name)] = token
    return out


def _usage(token: str | None) -> Usage | None:
    if not token or "/" not in token:
        return None
    used, _, total = token.partition("/")
    return Usage(_int(used), _int(total))


def _npu_from(raw: dict[str, str]) -> Npu:
    health = raw.get("health", "")
    return Npu(
        npu_id=_int(raw.get("npu")),
        name=raw.get("name", ""),
        health_raw=health,
        health=NpuHealth.from_raw(health),
        power_w=_float(raw.get("power")),
        temp_c=_float(raw.get("temp")),
        hugepages=_usage(raw.get("hugepages-usage")),
        raw=raw,
    )


def _chip_from(raw: dict[str, str]) -> NpuChip:
    bus = raw.get("bus-id")
    return NpuChip(
        chip_id=_int(raw.get("chip")),
        device_id=_int(raw.get("device", raw.get("phy-id"))),
        bus_id=None if bus is None or bus.lower() in _MISSING else bus,
        aicore_percent=_float(raw.get("aicore")),
        memory_mb=_usage(raw.get("memory-usage")),
        hbm_mb=_usage(raw.get("hbm-usage")),
        raw=raw,
    )


def _process_from(cells: list[str]) -> NpuProcess | None:
    if len(cells) < 4:
        return None
    first = cells[0].split()
    return NpuProcess(
        npu_id=_int(first[0]) if first else None,
        chip_id=_int(first[1]) if len(first) > 1 else None,
        pid=_int(cells[1]),
        name=cells[2],
        memory_mb=_int(cells[3]),
    )


def parse_npu_smi_info(text: str) -> NpuSmiInfo:
    """Parse ``npu-smi info``.

    The table prints each NPU as one NPU row (id, name, health, power, temp, hugepages) followed
    by one or more chip rows (chip id [, device id], bus id, AICore, memory, HBM) until the next
    ``+===+`` rule. Column names come from the two header rows, so layouts with or without HBM,
    ``Chip Device`` or ``Chip Phy-ID`` all map; without headers (truncated head) the 910 layout
    is assumed. A second table, ``NPU Chip | Process id | Process name | Process memory(MB)``,
    lists processes.
    """
    info = NpuSmiInfo()
    npu_header = _DEFAULT_NPU_HEADER
    chip_header = _DEFAULT_CHIP_HEADER
    section = "devices"
    current: Npu | None = None
    for number, line in enumerate(_lines(text), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("+"):
            current = None if "=" in stripped else current
            continue
        if not stripped.startswith("|"):
            info.warnings.append(f"line {number}: not a table row: {stripped[:80]!r}")
            continue
        cells = _table_cells(stripped)
        if info.npu_smi_version is None and "npu-smi" in stripped:
            match = _NPU_SMI_VERSION.search(stripped)
            if match:
                info.npu_smi_version, info.version = match.group(1), match.group(2)
            continue
        first_words = cells[0].split()
        if first_words[:1] in (["NPU"], ["Chip"]) and not any(c[:1].isdigit() for c in cells[0]):
            if len(cells) > 1 and cells[1].lower().startswith("process"):
                section = "processes"
                continue
            section = "devices"
            if first_words[0] == "NPU":
                npu_header = [c.split() for c in cells]
            else:
                chip_header = [c.split() for c in cells]
            continue
        if stripped.lower().startswith("| no running process"):
            continue
        if section == "processes":
            process = _process_from(cells)
            if process is None:
                info.warnings.append(f"line {number}: short process row: {stripped[:80]!r}")
            else:
                info.processes.append(process)
            continue
        if current is None:
            current = _npu_row(info, number, stripped, cells, npu_header)
        else:
            current.chips.append(_chip_from(_map_row(chip_header, cells)))
    return info


def _npu_row(info: NpuSmiInfo, number: int, stripped: str, cells: list[str],
             header: list[list[str]]) -> Npu | None:
    """An NPU row of `npu-smi info`'s device table, added to `info` (None: not one, said in
    its warnings)."""
    if len(cells) > 1 and _BUS_ID.match(cells[1]):
        info.warnings.append(f"line {number}: chip row without its NPU row")
        return None
    raw = _map_row(header, cells)
    if _int(raw.get("npu")) is None:
        info.warnings.append(f"line {number}: NPU row without an id: {stripped[:80]!r}")
        return None
    npu = _npu_from(raw)
    info.npus.append(npu)
    return npu


# --------------------------------------------------------------------------------------------
# npu-smi info -l / -t board / -m
# --------------------------------------------------------------------------------------------

_KV = re.compile(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$")


def parse_key_values(text: str) -> dict[str, str]:
    """``Key : value`` lines into a dict (last one wins); other lines are skipped."""
    out: dict[str, str] = {}
    for line in _lines(text):
        match = _KV.match(line)
        if match:
            out[match.group(1)] = match.group(2)
    return out


@dataclass
class NpuListEntry:
    """One block of ``npu-smi info -l``; ``fields`` holds every ``Key : value`` of the block."""

    npu_id: int | None
    chip_count: int | None
    fields: dict[str, str] = field(default_factory=dict)


@dataclass
class NpuSmiList:
    total_count: int | None = None
    npus: list[NpuListEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def parse_npu_smi_info_l(text: str) -> NpuSmiList:
    """``npu-smi info -l``: ``Total Count`` and one entry per ``NPU ID`` block."""
    result = NpuSmiList()
    block: dict[str, str] | None = None
    blocks: list[dict[str, str]] = []
    for number, line in enumerate(_lines(text), 1):
        if not line.strip():
            continue
        match = _KV.match(line)
        if not match:
            result.warnings.append(f"line {number}: not 'Key : value': {line.strip()[:80]!r}")
            continue
        key, value = match.group(1), match.group(2)
        if key == "Total Count":
            result.total_count = _int(value)
            continue
        if key == "NPU ID" or block is None:
            block = {}
            blocks.append(block)
        block[key] = value
    for fields in blocks:
        result.npus.append(
            NpuListEntry(
                npu_id=_int(fields.get("NPU ID")),
                chip_count=_int(fields.get("Chip Count")),
                fields=fields,
            )
        )
    if result.total_count is not None and result.total_count != len(result.npus):
        result.warnings.append(
            f"Total Count says {result.total_count} but {len(result.npus)} NPU blocks were read"
        )
    return result


# --------------------------------------------------------------------------------------------
# hccn_tool
# --------------------------------------------------------------------------------------------

_DEVICE_PREFIX = re.compile(r"^\s*\[device\s*\d+\]")
_LINK_RECORD = re.compile(r"^\s*(\w{3}\s+\w{3}\s+\d+\s+[\d:]+\s+\d{4})\s+LINK\s+(UP|DOWN)\s*$")
_BRACKET_FIELD = re.compile(r"([A-Za-z_][\w ]*?)\s*\[([^\]]*)\]")


def parse_hccn_tool(text: str) -> dict[str, str]:
    """``hccn_tool -i <n> -<what> -g`` output as ``{key: value}``, keys lower-cased.

    Handles ``key:value`` (``ipaddr:10.0.0.1``), ``key: value`` (``link status: UP``),
    ``[device 0]key : value`` (``-link_stat``) and the bracketed ``-tls`` line
    (``tls switch[0](0:disable, 1:enable)`` -> ``{"tls switch": "0"}``). The time-stamped
    ``LINK UP``/``LINK DOWN`` records of ``-link_stat`` are in ``parse_hccn_link_stat``.
    """
    out: dict[str, str] = {}
    for line in _lines(text):
        body = _DEVICE_PREFIX.sub("", line).strip()
        if not body or _LINK_RECORD.match(body):
            continue
        if "[" in body and "]" in body and not body.startswith("["):
            for key, value in _BRACKET_FIELD.findall(re.sub(r"\([^)]*\)", "", body)):
                out[key.strip().strip(",").strip().lower()] = value.strip()
            dev = re.match(r"^\s*dev_id\s*:\s*(\d+)", body)
            if dev:
                out["dev_id"] = dev.group(1)
            continue
        match = _KV.match(body)
        if match:
            out[match.group(1).lower()] = match.group(2)
    return out


def hccn_link_up(text: str) -> bool | None:
    """``hccn_tool -i <n> -link -g``: True for ``UP``, False for ``DOWN``, None if unreadable."""
    status = parse_hccn_tool(text).get("link status", "").strip().upper()
    return {"UP": True, "DOWN": False}.get(status)


# --------------------------------------------------------------------------------------------
# nccl-tests
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# hccl_test
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# Bandwidth formulas (nccl-tests doc/PERFORMANCE.md)
# --------------------------------------------------------------------------------------------


def algbw(size_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth in GB/s, base 10 (1 GB = 1e9 bytes), as nccl-tests prints it."""
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return size_bytes / seconds / 1e9


__all__ = [
    "Gpu",
    "MigDevice",
    "Npu",
    "NpuChip",
    "NpuHealth",
    "NpuListEntry",
    "NpuProcess",
    "NpuSmiInfo",
    "NpuSmiList",
    "Usage",
    "algbw",
    "hccn_link_up",
    "parse_hccn_tool",
    "parse_key_values",
    "parse_npu_smi_info",
    "parse_npu_smi_info_l",
    "parse_nvidia_smi_L",
]
