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

``busbw_factor`` and ``algbw`` are formulas, not parsers: they raise ``ValueError`` on arguments
that make no sense (unknown collective, ``nranks < 1``, ``seconds <= 0``).

No I/O and no pytest here; the tests feed the real samples in ``tests/data/samples/``.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Union

Number = Union[int, float]

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
    return [Gpu(index=g.index, name=g.name, uuid=g.uuid, mig=tuple(m)) for g, m in zip(gpus, migs)]


# --------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu=... --format=csv
# --------------------------------------------------------------------------------------------

_CSV_HEADER_UNIT = re.compile(r"^\s*(.*?)\s*\[([^\]]*)\]\s*$")


def _csv_value(raw: str, unit: str | None) -> str | Number | None:
    value = raw.strip()
    if value.lower() in _MISSING:
        return None
    if unit is None:
        return value
    if unit and value.endswith(unit):
        value = value[: -len(unit)].strip()
    number = _num(value)
    return number if number is not None else raw.strip()


def parse_nvidia_smi_query_csv(
    text: str, fields: list[str] | None = None
) -> list[dict[str, str | Number | None]]:
    """Rows of ``nvidia-smi --query-gpu=... --format=csv[,nounits]`` as dicts.

    Keys are the header names without their unit (``"memory.total [MiB]"`` -> ``"memory.total"``).
    Where the header names a unit, the value becomes a number with the unit stripped
    (``"24564 MiB"`` -> 24564, ``"230.00 W"`` -> 230.0); other values stay strings (a driver
    version is not a number). ``[N/A]``/``[Not Supported]`` become None. For ``noheader`` output
    pass the queried ``fields`` (``"memory.total [MiB]"`` spelling allowed); every line is data.
    Rows with the wrong number of cells are skipped.
    """
    rows = [r for r in csv.reader(_lines(text), skipinitialspace=True) if any(c.strip() for c in r)]
    if fields is None:
        if not rows:
            return []
        header, rows = rows[0], rows[1:]
    else:
        header = list(fields)
    keys: list[str] = []
    units: list[str | None] = []
    for name in header:
        match = _CSV_HEADER_UNIT.match(name)
        keys.append(match.group(1) if match else name.strip())
        units.append(match.group(2).strip() if match else None)
    result: list[dict[str, str | Number | None]] = []
    for row in rows:
        if len(row) != len(keys):
            continue
        result.append({k: _csv_value(v, u) for k, v, u in zip(keys, row, units)})
    return result


# --------------------------------------------------------------------------------------------
# nvidia-smi topo -m  /  npu-smi info -t topo
# --------------------------------------------------------------------------------------------


@dataclass
class TopoMatrix:
    """The connection matrix of ``nvidia-smi topo -m`` or ``npu-smi info -t topo``.

    ``devices`` are the column names that are devices (``GPU0``, ``NIC1``, ``NPU3``), in order.
    ``links[a][b]`` is the printed link type (``X``, ``NV18``, ``SYS``, ``HCCS``, ...).
    ``affinity[a]`` holds the other columns of row ``a`` (``"CPU Affinity"``, ``"NUMA Affinity"``,
    ``"GPU NUMA ID"``); a column a row leaves empty is absent. ``nic_names`` maps ``NIC0`` to
    ``mlx5_0`` from the "NIC Legend". The link-type legend is ignored.
    """

    devices: list[str] = field(default_factory=list)
    links: dict[str, dict[str, str]] = field(default_factory=dict)
    affinity: dict[str, dict[str, str]] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def link(self, a: str, b: str) -> str | None:
        return self.links.get(a, {}).get(b)


_TOPO_DEVICE = re.compile(r"^(GPU|NIC|NPU|mlx\S*)\d+$")
_TOPO_SPLIT = re.compile(r"\t|\s{2,}")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


def _topo_cells(line: str) -> list[str]:
    return [c.strip() for c in _TOPO_SPLIT.split(line.strip())]


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse any ``topo -m`` style matrix (shared by NVIDIA and Ascend)."""
    topo = TopoMatrix()
    columns: list[str] = []
    for number, line in enumerate(_lines(text), 1):
        if not line.strip():
            continue
        nic = _NIC_LEGEND.match(line)
        if nic:
            topo.nic_names[nic.group(1)] = nic.group(2)
            continue
        if "=" in line or line.strip().rstrip(":") in ("Legend", "NIC Legend"):
            continue
        cells = [c for c in _topo_cells(line) if c]
        if not columns:
            indented = not line[:1].isalnum()
            second_is_device = len(cells) > 1 and _TOPO_DEVICE.match(cells[1]) is not None
            if cells and _TOPO_DEVICE.match(cells[0]) and (indented or second_is_device):
                columns = cells
                topo.devices = [c for c in cells if _TOPO_DEVICE.match(c)]
            else:
                topo.warnings.append(f"line {number}: not a topology header: {line.strip()!r}")
            continue
        if not cells or not _TOPO_DEVICE.match(cells[0]):
            topo.warnings.append(f"line {number}: not a matrix row: {line.strip()!r}")
            continue
        row, values = cells[0], cells[1:]
        ndev = len(topo.devices)
        topo.links[row] = dict(zip(topo.devices, values[:ndev]))
        extra = dict(zip(columns[ndev:], values[ndev:]))
        if extra:
            topo.affinity[row] = extra
        if len(values) < ndev:
            topo.warnings.append(f"line {number}: row {row} has {len(values)} of {ndev} links")
    return topo


def parse_nvidia_smi_topo(text: str) -> TopoMatrix:
    """``nvidia-smi topo -m``: GPU/NIC link matrix, CPU/NUMA affinity, NIC legend."""
    return parse_topo_matrix(text)


def parse_npu_smi_topo(text: str) -> TopoMatrix:
    """``npu-smi info -t topo``: NPU link matrix (``HCCS``, ``PIX``, ...) and CPU affinity."""
    return parse_topo_matrix(text)


# --------------------------------------------------------------------------------------------
# npu-smi info
# --------------------------------------------------------------------------------------------


class NpuHealth(str, Enum):
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
    for names, cell in zip(header, cells):
        tokens = _cell_tokens(cell)
        if len(tokens) > len(names) and names:
            keep = len(names) - 1
            tokens = [*tokens[:keep], " ".join(tokens[keep:])]
        for name, token in zip(names, tokens):
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
            if len(cells) > 1 and _BUS_ID.match(cells[1]):
                info.warnings.append(f"line {number}: chip row without its NPU row")
                continue
            raw = _map_row(npu_header, cells)
            if _int(raw.get("npu")) is None:
                info.warnings.append(f"line {number}: NPU row without an id: {stripped[:80]!r}")
                continue
            current = _npu_from(raw)
            info.npus.append(current)
        else:
            current.chips.append(_chip_from(_map_row(chip_header, cells)))
    return info


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


def parse_npu_smi_board(text: str) -> dict[str, str]:
    """``npu-smi info -t board -i <id>``: ``{"Product Name": ..., "Chip Count": "1", ...}``."""
    return parse_key_values(text)


@dataclass(frozen=True)
class NpuChipMapping:
    """A row of ``npu-smi info -m``. ``chip_logic_id`` is None for rows printed ``-`` (MCU)."""

    npu_id: int
    chip_id: int
    chip_logic_id: int | None
    chip_name: str


_MAPPING_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+|-)\s+(.*?)\s*$")


def parse_npu_smi_info_m(text: str) -> list[NpuChipMapping]:
    """``npu-smi info -m``: NPU ID / Chip ID / Chip Logic ID / Chip Name rows."""
    rows: list[NpuChipMapping] = []
    for line in _lines(text):
        match = _MAPPING_ROW.match(line)
        if match:
            rows.append(
                NpuChipMapping(
                    npu_id=int(match.group(1)),
                    chip_id=int(match.group(2)),
                    chip_logic_id=_int(match.group(3)),
                    chip_name=match.group(4),
                )
            )
    return rows


# --------------------------------------------------------------------------------------------
# hccn_tool
# --------------------------------------------------------------------------------------------

_DEVICE_PREFIX = re.compile(r"^\s*\[device\s*\d+\]")
_BRACKET_FIELD = re.compile(r"([A-Za-z_][\w ]*?)\s*\[([^\]]*)\]")
_LINK_RECORD = re.compile(r"^\s*(\w{3}\s+\w{3}\s+\d+\s+[\d:]+\s+\d{4})\s+LINK\s+(UP|DOWN)\s*$")


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


@dataclass
class HccnLinkStat:
    """``hccn_tool -i <n> -link_stat -g``: counters and the link change history (newest first)."""

    device: int | None = None
    current_time: str | None = None
    link_up_count: int | None = None
    changes: list[tuple[str, str]] = field(default_factory=list)  # (timestamp, "UP"|"DOWN")


def parse_hccn_link_stat(text: str) -> HccnLinkStat:
    stat = HccnLinkStat()
    for line in _lines(text):
        dev = re.match(r"^\s*\[device\s*(\d+)\]", line)
        if dev and stat.device is None:
            stat.device = int(dev.group(1))
        body = _DEVICE_PREFIX.sub("", line)
        record = _LINK_RECORD.match(body)
        if record:
            stat.changes.append((re.sub(r"\s+", " ", record.group(1)), record.group(2)))
    values = parse_hccn_tool(text)
    stat.current_time = values.get("current time")
    stat.link_up_count = _int(values.get("link up count"))
    return stat


# --------------------------------------------------------------------------------------------
# nccl-tests
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NcclDevice:
    """``#  Rank  0 Group  0 Pid 944 on host device  0 [0x0f] NVIDIA A100-SXM4-40GB``."""

    rank: int
    group: int | None
    pid: int
    host: str
    device: int
    bus_id: str | None
    name: str


@dataclass(frozen=True)
class NcclTiming:
    """One half of a row. ``time_us`` in microseconds, bandwidths in GB/s (base 10).

    ``wrong`` is the ``#wrong`` count (None when printed ``N/A``, i.e. not checked).
    """

    time_us: float | None
    algbw: float | None
    busbw: float | None
    wrong: int | None


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    count: int
    type: str
    redop: str | None
    root: int | None
    out_of_place: NcclTiming
    in_place: NcclTiming


@dataclass
class NcclTestsResult:
    """A nccl-tests ``*_perf`` report.

    ``params`` is the first ``# nThread 1 nGpus 8 minBytes ...`` line as a dict of strings.
    ``nranks`` is the number of ``Rank`` device lines (what busbw's factor uses).
    ``out_of_bounds_ok`` comes from ``# Out of bounds values : 0 OK``.
    """

    params: dict[str, str] = field(default_factory=dict)
    devices: list[NcclDevice] = field(default_factory=list)
    rows: list[NcclRow] = field(default_factory=list)
    avg_busbw: float | None = None
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    version: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def nranks(self) -> int:
        return len(self.devices)

    @property
    def hosts(self) -> list[str]:
        return sorted({d.host for d in self.devices})

    @property
    def total_wrong(self) -> int:
        """Sum of every ``#wrong`` printed (N/A counts as 0)."""
        return sum((r.out_of_place.wrong or 0) + (r.in_place.wrong or 0) for r in self.rows)


_NCCL_DEVICE = re.compile(
    r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)"
    r"\s*(?:\[([^\]]*)\])?\s*(.*?)\s*$"
)
_NCCL_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_NCCL_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w+)?")
_NCCL_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)")


def _nccl_params(line: str) -> dict[str, str]:
    body = line.lstrip("#").strip()
    body = body.replace("step:", "step").replace("(factor)", "")
    tokens = re.sub(r":", " ", body).split()
    out: dict[str, str] = {}
    i = 0
    while i + 1 < len(tokens):
        key = tokens[i]
        if tokens[i + 1] == "iters" and i + 2 < len(tokens):  # "warmup iters: 5", "agg iters: 1"
            out[f"{key} iters"] = tokens[i + 2]
            i += 3
            continue
        out[key] = tokens[i + 1]
        i += 2
    return out


def _timing(tokens: list[str]) -> NcclTiming:
    return NcclTiming(
        time_us=_float(tokens[0]),
        algbw=_float(tokens[1]),
        busbw=_float(tokens[2]),
        wrong=_int(tokens[3]),
    )


def _nccl_row(tokens: list[str]) -> NcclRow | None:
    """size count type [redop] [root] + 4 out-of-place + 4 in-place values."""
    if len(tokens) < 11 or _int(tokens[0]) is None or _int(tokens[1]) is None:
        return None
    middle = tokens[2:-8]
    if not 1 <= len(middle) <= 3:
        return None
    return NcclRow(
        size_bytes=int(tokens[0]),
        count=int(tokens[1]),
        type=middle[0],
        redop=middle[1] if len(middle) > 1 else None,
        root=_int(middle[2]) if len(middle) > 2 else None,
        out_of_place=_timing(tokens[-8:-4]),
        in_place=_timing(tokens[-4:]),
    )


def parse_nccl_tests(text: str) -> NcclTestsResult:
    """Parse the stdout of an nccl-tests binary (``all_reduce_perf`` and friends)."""
    result = NcclTestsResult()
    for number, line in enumerate(_lines(text), 1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            device = _NCCL_DEVICE.match(stripped)
            if device:
                result.devices.append(
                    NcclDevice(
                        rank=int(device.group(1)),
                        group=_int(device.group(2)),
                        pid=int(device.group(3)),
                        host=device.group(4),
                        device=int(device.group(5)),
                        bus_id=device.group(6),
                        name=device.group(7),
                    )
                )
                continue
            avg = _NCCL_AVG.match(stripped)
            if avg:
                result.avg_busbw = _float(avg.group(1))
                continue
            oob = _NCCL_OOB.match(stripped)
            if oob:
                result.out_of_bounds = int(oob.group(1))
                result.out_of_bounds_ok = (oob.group(2) or "").upper() == "OK"
                continue
            version = _NCCL_VERSION.match(stripped)
            if version:
                result.version = version.group(1)
                continue
            if not result.params and re.match(r"^#\s*nThread\b", stripped):
                result.params = _nccl_params(stripped)
            continue
        row = _nccl_row(stripped.split())
        if row is None:
            result.warnings.append(f"line {number}: not a result row: {stripped[:100]!r}")
        else:
            result.rows.append(row)
    return result


# --------------------------------------------------------------------------------------------
# hccl_test
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HcclRow:
    """A row of hccl_test: bytes, average time in microseconds, algbw as printed, check result.

    Units: hccl_test's column says ``alg_bandwidth(GB/s)`` but the figure is bytes / time /
    2**30, i.e. GiB/s (the 8-NPU sample: 67108864 B in 2630.20 us -> 23.76 "GB/s" = 25.5e9
    B/s). ``alg_bandwidth_gbs`` keeps the printed figure; :attr:`algbw_GBps` converts it to
    nccl-tests' (and our) GB/s = 1e9 B/s, and :meth:`busbw_GBps` applies nccl-tests' all-reduce
    factor 2(n-1)/n, so hccl_test's figures compare with C1's. hccl_test prints no busbw.
    """

    data_size_bytes: int
    avg_time_us: float | None
    alg_bandwidth_gbs: float | None  # as printed: GiB/s despite the header
    check_result: str | None

    @property
    def ok(self) -> bool:
        return (self.check_result or "").lower() == "success"

    @property
    def alg_bandwidth_GiBps(self) -> float | None:
        return self.alg_bandwidth_gbs

    @property
    def algbw_GBps(self) -> float | None:
        """algbw in GB/s (1e9 B/s), from the printed GiB/s figure."""
        return None if self.alg_bandwidth_gbs is None else self.alg_bandwidth_gbs * 2**30 / 1e9

    def busbw_GBps(self, nranks: int, collective: str = "allreduce") -> float | None:
        """busbw in GB/s (1e9 B/s) for ``nranks`` ranks, nccl-tests' formula."""
        algbw_value = self.algbw_GBps
        return None if algbw_value is None else algbw_value * busbw_factor(collective, nranks)


@dataclass(frozen=True)
class HcclError:
    """``hccl interface return err <file:line>, retcode: 7`` and the message line after it."""

    retcode: int
    message: str
    location: str | None = None


@dataclass
class HcclTestResult:
    params: dict[str, int] = field(default_factory=dict)  # minbytes, maxbytes, iters, ...
    rows: list[HcclRow] = field(default_factory=list)
    errors: list[HcclError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def error(self) -> HcclError | None:
        """The first error reported, or None when the run reported none."""
        return self.errors[0] if self.errors else None

    @property
    def ok(self) -> bool:
        return not self.errors and bool(self.rows) and all(r.ok for r in self.rows)


_HCCL_PARAM = re.compile(r"(\w+)\s+is\s+(\d+)")
_HCCL_ERROR = re.compile(r"return err\s*(\S*?)\s*,?\s*retcode\s*:\s*(-?\d+)", re.IGNORECASE)


def parse_hccl_test(text: str) -> HcclTestResult:
    """Parse hccl_test (``all_reduce_test`` ...) output.

    Accepts both header spellings, ``avg_time(us):`` (documentation) and ``aveg_time(us):``
    (the binary), by mapping columns on their position after the ``data_size`` header.
    ``retcode`` errors are collected with the following message line; repeats (one per rank)
    are kept, since each is one rank's report.
    """
    result = HcclTestResult()
    lines = _lines(text)
    seen_header = False
    for index, line in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            continue
        error = _HCCL_ERROR.search(stripped)
        if error:
            message = ""
            if index + 1 < len(lines) and not _HCCL_ERROR.search(lines[index + 1]):
                message = lines[index + 1].strip()
            result.errors.append(
                HcclError(
                    retcode=int(error.group(2)), message=message, location=error.group(1) or None
                )
            )
            continue
        if stripped.startswith("the minbytes") or ("minbytes" in stripped and " is " in stripped):
            result.params.update({k: int(v) for k, v in _HCCL_PARAM.findall(stripped)})
            continue
        if stripped.lower().startswith("data_size"):
            seen_header = True
            continue
        cells = [c.strip() for c in stripped.split("|")]
        size = _int(cells[0]) if cells else None
        if len(cells) >= 2 and size is not None:
            result.rows.append(
                HcclRow(
                    data_size_bytes=size,
                    avg_time_us=_float(cells[1]),
                    alg_bandwidth_gbs=_float(cells[2]) if len(cells) > 2 else None,
                    check_result=(cells[3] or None) if len(cells) > 3 else None,
                )
            )
            if not seen_header:
                result.warnings.append(f"line {index + 1}: data row before any header")
            continue
        if result.errors and lines[index - 1].strip() and _HCCL_ERROR.search(lines[index - 1]):
            continue  # the message line of the error above
        result.warnings.append(f"line {index + 1}: not understood: {stripped[:100]!r}")
    return result


# --------------------------------------------------------------------------------------------
# Bandwidth formulas (nccl-tests doc/PERFORMANCE.md)
# --------------------------------------------------------------------------------------------

_BUSBW = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


def busbw_factor(collective: str, nranks: int) -> float:
    """busbw / algbw for ``collective`` on ``nranks`` ranks, as nccl-tests computes it.

    ``collective`` may be spelled ``allreduce``, ``all_reduce``, ``AllReduce`` or
    ``all_reduce_perf``. Raises ValueError for an unknown collective or ``nranks < 1``.
    """
    key = re.sub(r"[_\-\s]", "", collective.lower())
    key = key.removesuffix("perf")
    if key not in _BUSBW:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(sorted(_BUSBW))}")
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    return float(_BUSBW[key](nranks))


def algbw(size_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth in GB/s, base 10 (1 GB = 1e9 bytes), as nccl-tests prints it."""
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return size_bytes / seconds / 1e9


__all__ = [
    "Gpu",
    "HcclError",
    "HcclRow",
    "HcclTestResult",
    "HccnLinkStat",
    "MigDevice",
    "NcclDevice",
    "NcclRow",
    "NcclTestsResult",
    "NcclTiming",
    "Npu",
    "NpuChip",
    "NpuChipMapping",
    "NpuHealth",
    "NpuListEntry",
    "NpuProcess",
    "NpuSmiInfo",
    "NpuSmiList",
    "TopoMatrix",
    "Usage",
    "algbw",
    "busbw_factor",
    "hccn_link_up",
    "parse_hccl_test",
    "parse_hccn_link_stat",
    "parse_hccn_tool",
    "parse_key_values",
    "parse_nccl_tests",
    "parse_npu_smi_board",
    "parse_npu_smi_info",
    "parse_npu_smi_info_l",
    "parse_npu_smi_info_m",
    "parse_npu_smi_topo",
    "parse_nvidia_smi_L",
    "parse_nvidia_smi_query_csv",
    "parse_nvidia_smi_topo",
    "parse_topo_matrix",
]
