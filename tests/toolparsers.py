"""Parsers of tool outputs that only the project's own tests use: they read the real captures in
tests/data/samples/ (nccl-tests, hccl_test, nvidia-smi/npu-smi topology and query output, hccn_tool
link statistics) to check our own figures and parsers against the tools'. They left the product
(cluster_tests/judge/common/tooloutput.py) because no check reads these outputs."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field

from cluster_tests.judge.collective.collverdict import busbw_factor
from cluster_tests.judge.common.tooloutput import (
    _DEVICE_PREFIX,
    _LINK_RECORD,
    _MISSING,
    Number,
    _float,
    _int,
    _lines,
    _num,
    parse_hccn_tool,
    parse_key_values,
)

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
        result.append({k: _csv_value(v, u) for k, v, u in zip(keys, row, units, strict=False)})
    return result

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
        topo.links[row] = dict(zip(topo.devices, values[:ndev], strict=False))
        extra = dict(zip(columns[ndev:], values[ndev:], strict=False))
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
