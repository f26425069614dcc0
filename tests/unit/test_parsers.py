"""The tool output parsers (tests/toolparsers.py; judge/common/tooloutput.py's own tests are in
test_judge_tooloutput.py) on the real captured samples in tests/data/samples/.

Each sample file is parsed by at least one test that asserts values read from the file.
The fuzz tests at the end check the "never raise" contract of every parser, both modules'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import toolparsers as tp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import SAMPLES, TESTS

from cluster_tests.judge.collective import collverdict as C
from cluster_tests.judge.common import tooloutput


def sample(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8", errors="replace")


def test_every_sample_has_a_test() -> None:
    """A new sample file must be named in a test module (so that some test parses it): this
    one, or another parser test module (tests/unit/test_judge_nccllog.py for section R)."""
    source = "".join(f.read_text(encoding="utf-8") for f in TESTS.rglob("test_*.py")
                     if f.name != "test_e2e_health.py")
    untested = [f.name for f in SAMPLES.glob("*.txt") if f.name not in source]
    assert not untested


# ------------------------------------------------------------------ nvidia-smi --query-gpu


def test_nvidia_smi_query_csv_units_become_numbers() -> None:
    rows = tp.parse_nvidia_smi_query_csv(sample("nvidia-smi-query-gpu-csv-2gpu.txt"))
    assert len(rows) == 2
    assert rows[0] == {
        "index": "0",
        "name": "NVIDIA RTX A5000",
        "uuid": "GPU-30667114-4567-bc4a-029b-3375d117048e",
        "memory.total": 24564,
        "driver_version": "610.57.04",
        "power.limit": 230.0,
    }
    assert rows[1]["name"] == "NVIDIA RTX 4500 Ada Generation"
    assert rows[1]["memory.total"] == 24570
    assert rows[1]["power.limit"] == 210.0


def test_nvidia_smi_query_csv_noheader_nounits_and_na() -> None:
    text = "0, 24564, [N/A]\n1, 24570, [Not Supported]\n"
    rows = tp.parse_nvidia_smi_query_csv(
        text, fields=["index", "memory.total [MiB]", "power.draw [W]"]
    )
    assert rows == [
        {"index": "0", "memory.total": 24564, "power.draw": None},
        {"index": "1", "memory.total": 24570, "power.draw": None},
    ]


def test_nvidia_smi_query_csv_skips_short_rows() -> None:
    text = sample("nvidia-smi-query-gpu-csv-2gpu.txt")
    assert len(tp.parse_nvidia_smi_query_csv(text[: text.index("GPU-fbe2")])) == 1


# ------------------------------------------------------------------ topology matrices


def test_nvidia_smi_topo_h100() -> None:
    topo = tp.parse_nvidia_smi_topo(sample("nvidia-smi-topo-m-h100-8gpu.txt"))
    assert topo.devices == [f"GPU{i}" for i in range(8)]
    assert topo.warnings == []
    for a in topo.devices:
        for b in topo.devices:
            assert topo.link(a, b) == ("X" if a == b else "NV18")
    assert topo.affinity["GPU0"] == {"CPU Affinity": "0-51,104-155", "NUMA Affinity": "0"}
    assert topo.affinity["GPU7"] == {"CPU Affinity": "52-103,156-207", "NUMA Affinity": "1"}


def test_nvidia_smi_topo_2gpu_nvlink() -> None:
    topo = tp.parse_nvidia_smi_topo(sample("nvidia-smi-topo-m-2gpu-nvlink.txt"))
    assert topo.devices == ["GPU0", "GPU1"]
    assert topo.link("GPU0", "GPU1") == topo.link("GPU1", "GPU0") == "NV2"
    assert topo.affinity["GPU1"] == {"CPU Affinity": "0-23", "NUMA Affinity": "N/A"}


def test_nvidia_smi_topo_legend_alone_is_ignored() -> None:
    topo = tp.parse_nvidia_smi_topo(sample("nvidia-smi-topo-m-legend.txt"))
    assert topo.devices == [] and topo.links == {}


def test_nvidia_smi_topo_with_legend_tabs_and_nics() -> None:
    """The real tool separates columns with tabs and appends NIC rows and a NIC legend."""
    text = (
        "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV12\tPXB\t0-31\t0\t\tN/A\n"
        "GPU1\tNV12\t X \tSYS\t32-63\t1\t\tN/A\n"
        "NIC0\tPXB\tSYS\t X \n"
        "\n" + sample("nvidia-smi-topo-m-legend.txt") + "\nNIC Legend:\n\n  NIC0: mlx5_0\n"
    )
    topo = tp.parse_nvidia_smi_topo(text)
    assert topo.devices == ["GPU0", "GPU1", "NIC0"]
    assert topo.link("GPU0", "NIC0") == "PXB"
    assert topo.link("NIC0", "GPU1") == "SYS"
    assert topo.affinity["GPU1"]["CPU Affinity"] == "32-63"
    assert "NIC0" not in topo.affinity
    assert topo.nic_names == {"NIC0": "mlx5_0"}


def test_npu_smi_topo_910b() -> None:
    topo = tp.parse_npu_smi_topo(sample("npu-smi-info-t-topo-910b.txt"))
    assert topo.devices == [f"NPU{i}" for i in range(8)]
    assert topo.warnings == []
    assert topo.link("NPU0", "NPU0") == "X"
    assert topo.link("NPU3", "NPU6") == "HCCS"
    assert {topo.affinity[d]["CPU Affinity"] for d in topo.devices} == {
        "144-167",
        "96-119",
        "0-23",
        "48-71",
    }
    assert topo.affinity["NPU4"] == {"CPU Affinity": "0-23"}


def test_topo_header_without_indent() -> None:
    topo = tp.parse_nvidia_smi_topo(sample("nvidia-smi-topo-m-2gpu-nvlink.txt").lstrip())
    assert topo.link("GPU1", "GPU0") == "NV2"


def test_npu_smi_info_m_mapping() -> None:
    rows = tp.parse_npu_smi_info_m(sample("npu-smi-info-m-910a.txt"))
    assert len(rows) == 8
    assert rows[0] == tp.NpuChipMapping(0, 0, 0, "Ascend 910A")
    assert rows[7] == tp.NpuChipMapping(7, 0, 7, "Ascend 910A")
    assert tp.parse_npu_smi_info_m("3   1   -   Mcu\n") == [tp.NpuChipMapping(3, 1, None, "Mcu")]


def test_npu_smi_board() -> None:
    board = tp.parse_npu_smi_board(sample("npu-smi-info-t-board-910b.txt"))
    assert board["NPU ID"] == "0"
    assert board["Product Name"] == "IT21HMDC_Bin5"
    assert board["Software Version"] == "25.5.1"
    assert board["Firmware Version"] == "7.8.0.6.201"
    assert board["PCIe Bus Info"] == "0000:C1:00.0"
    assert board["Chip Count"] == "1"
    assert len(board) == 19


# ------------------------------------------------------------------ hccn_tool -link_stat


def test_hccn_tool_link_stat() -> None:
    text = sample("hccn-tool-link-stat-g.txt")
    values = tooloutput.parse_hccn_tool(text)
    assert values["current time"] == "Wed Jun  7 10:08:28 2023"
    assert values["link up count"] == "2"
    stat = tp.parse_hccn_link_stat(text)
    assert stat.device == 0
    assert stat.link_up_count == 2
    assert stat.changes == [
        ("Tue Jun 6 16:32:12 2023", "UP"),
        ("Tue Jun 6 16:32:10 2023", "DOWN"),
        ("Tue Jun 6 16:31:55 2023", "UP"),
    ]


# ------------------------------------------------------------------ nccl-tests

NCCL_SAMPLES = {
    "nccl-tests-all-reduce-perf-1node-8gpu.txt": 8,
    "nccl-tests-all-reduce-perf-2node-16gpu.txt": 16,
}


def test_nccl_tests_1node() -> None:
    result = tp.parse_nccl_tests(sample("nccl-tests-all-reduce-perf-1node-8gpu.txt"))
    assert result.warnings == []
    assert result.params["nGpus"] == "8"
    assert result.params["maxBytes"] == "10737418240"
    assert result.params["warmup iters"] == "5"
    assert result.nranks == 8
    assert result.hosts == ["inst-ks8ls-comp"]
    device5 = tp.NcclDevice(5, 0, 944, "inst-ks8ls-comp", 5, "0x92", "NVIDIA A100-SXM4-40GB")
    assert result.devices[5] == device5
    assert len(result.rows) == 28
    assert result.rows[0].size_bytes == 64
    assert result.rows[-1].size_bytes == 8589934592
    last = result.rows[-1]
    assert (last.type, last.redop, last.root) == ("float", "sum", -1)
    assert last.out_of_place == tp.NcclTiming(63929.0, 134.37, 235.14, 0)
    assert last.in_place == tp.NcclTiming(63911.0, 134.40, 235.21, 0)
    assert result.avg_busbw == 81.112
    assert result.out_of_bounds == 0 and result.out_of_bounds_ok is True
    assert result.total_wrong == 0


def test_nccl_tests_2node() -> None:
    result = tp.parse_nccl_tests(sample("nccl-tests-all-reduce-perf-2node-16gpu.txt"))
    assert result.warnings == []
    # Quirk: the header says nGpus 1 (one GPU per process), yet 16 ranks ran on two hosts.
    assert result.params["nGpus"] == "1"
    assert result.nranks == 16
    assert result.hosts == ["inst-xxxxx-comp", "inst-yyyyy-comp"]
    assert [d.device for d in result.devices] == list(range(8)) * 2
    (row,) = result.rows
    assert row.size_bytes == 10737418240 and row.count == 2684354560
    assert row.out_of_place == tp.NcclTiming(90330.0, 118.87, 222.88, 0)
    assert row.in_place.busbw == 218.96
    assert result.avg_busbw == 220.921


@pytest.mark.parametrize(("name", "nranks"), NCCL_SAMPLES.items())
def test_nccl_busbw_is_algbw_times_factor(name: str, nranks: int) -> None:
    result = tp.parse_nccl_tests(sample(name))
    assert result.nranks == nranks
    factor = C.busbw_factor("all_reduce_perf", result.nranks)
    # algbw and busbw are each printed rounded to 0.01.
    tolerance = 0.005 * factor + 0.005 + 1e-9
    for row in result.rows:
        for timing in (row.out_of_place, row.in_place):
            assert timing.algbw is not None and timing.busbw is not None
            assert abs(timing.algbw * factor - timing.busbw) <= tolerance, row


@pytest.mark.parametrize("name", NCCL_SAMPLES)
def test_nccl_algbw_is_size_over_time(name: str) -> None:
    for row in tp.parse_nccl_tests(sample(name)).rows:
        for timing in (row.out_of_place, row.in_place):
            assert timing.time_us is not None and timing.algbw is not None
            expected = tooloutput.algbw(row.size_bytes, timing.time_us * 1e-6)
            # time printed with 4-5 significant digits, algbw to 0.01 GB/s.
            assert expected == pytest.approx(timing.algbw, rel=1e-3, abs=0.006), row


@pytest.mark.parametrize("name", NCCL_SAMPLES)
def test_nccl_avg_busbw_is_mean_of_both_columns(name: str) -> None:
    result = tp.parse_nccl_tests(sample(name))
    busbws = [t.busbw for r in result.rows for t in (r.out_of_place, r.in_place)
              if t.busbw is not None]
    assert result.avg_busbw == pytest.approx(sum(busbws) / len(busbws), abs=0.01)


def test_nccl_tests_na_columns_and_older_header() -> None:
    """``-c 0`` prints N/A for #wrong; older nccl-tests had no Group and no root column."""
    text = (
        "# nccl-tests version 2.13.8 nccl-headers=21903 nccl-library=21903\n"
        "#   Rank  0 Pid  12345 on   node-a device  0 [0x1a] Tesla V100-SXM2-32GB\n"
        "#   Rank  1 Pid  12346 on   node-a device  1 [0x1b] Tesla V100-SXM2-32GB\n"
        "#                                  out-of-place                in-place\n"
        "#    size    count  type redop   time algbw busbw error   time algbw busbw error\n"
        " 1048576   262144 float   sum  50.00 20.97 20.97   N/A  51.00 20.56 20.56   N/A\n"
        "     2097152        524288   float\n"
        "# Avg bus bandwidth    : 20.765\n"
    )
    result = tp.parse_nccl_tests(text)
    assert [(d.rank, d.group, d.host) for d in result.devices] == [
        (0, None, "node-a"),
        (1, None, "node-a"),
    ]
    (row,) = result.rows
    assert (row.redop, row.root) == ("sum", None)
    assert row.out_of_place == tp.NcclTiming(50.0, 20.97, 20.97, None)
    assert len(result.warnings) == 1 and "2097152" in result.warnings[0]
    assert result.avg_busbw == 20.765
    assert result.version == "2.13.8"


@pytest.mark.parametrize(
    ("collective", "nranks", "factor"),
    [
        ("allreduce", 8, 1.75),
        ("all_reduce", 16, 1.875),
        ("AllReduce", 1, 0.0),
        ("reduce_scatter", 4, 0.75),
        ("all_gather_perf", 8, 0.875),
        ("alltoall", 2, 0.5),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
    ],
)
def test_busbw_factor(collective: str, nranks: int, factor: float) -> None:
    assert C.busbw_factor(collective, nranks) == pytest.approx(factor)


def test_busbw_factor_and_algbw_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="unknown collective"):
        C.busbw_factor("allscramble", 8)
    with pytest.raises(ValueError, match="nranks"):
        C.busbw_factor("allreduce", 0)
    with pytest.raises(ValueError, match="seconds"):
        tooloutput.algbw(1, 0)
    assert tooloutput.algbw(1e9, 0.5) == 2.0


# ------------------------------------------------------------------ hccl_test


def test_hccl_test_all_reduce_8npu() -> None:
    result = tp.parse_hccl_test(sample("hccl-test-all-reduce-8npu.txt"))
    assert result.warnings == [] and result.errors == [] and result.error is None
    assert result.params == {
        "minbytes": 8192,
        "maxbytes": 67108864,
        "iters": 20,
        "warmup_iters": 5,
    }
    assert len(result.rows) == 14
    assert result.rows[0] == tp.HcclRow(8192, 764.55, 0.00998, "success")
    assert result.rows[-1] == tp.HcclRow(67108864, 2630.20, 23.76245, "success")
    assert result.ok


def test_hccl_test_bandwidth_is_gibibytes_per_second() -> None:
    """Quirk: hccl_test's "GB/s" is bytes / time / 2**30 (GiB/s), unlike nccl-tests' 1e9."""
    for row in tp.parse_hccl_test(sample("hccl-test-all-reduce-8npu.txt")).rows:
        assert row.avg_time_us is not None
        gib = row.data_size_bytes / (row.avg_time_us * 1e-6) / 2**30
        assert gib == pytest.approx(row.alg_bandwidth_gbs, rel=1e-3)


def test_hccl_test_aveg_time_spelling_and_failed_check() -> None:
    text = sample("hccl-test-all-reduce-8npu.txt").replace("avg_time(us):", "aveg_time(us):")
    text = text.replace("23.76245        | success", "23.76245        | failed")
    result = tp.parse_hccl_test(text)
    assert len(result.rows) == 14 and result.warnings == []
    assert result.rows[3].avg_time_us == 900.00
    assert not result.rows[-1].ok and not result.ok


def test_hccl_test_retcode_error() -> None:
    result = tp.parse_hccl_test(sample("hccl-test-retcode7-error.txt"))
    assert result.rows == [] and not result.ok
    assert result.params["maxbytes"] == 2147483648
    assert len(result.errors) == 4
    assert result.error == tp.HcclError(
        retcode=7,
        message="This is an error in init_hcclComm.",
        location="./common/src/hccl_test_common.cc:538",
    )
    assert result.warnings == []


# ------------------------------------------------------------------ robustness

PARSERS: list[Callable[[str], object]] = [
    tooloutput.parse_nvidia_smi_L,
    tp.parse_nvidia_smi_query_csv,
    tp.parse_nvidia_smi_topo,
    tp.parse_npu_smi_topo,
    tooloutput.parse_npu_smi_info,
    tooloutput.parse_npu_smi_info_l,
    tp.parse_npu_smi_info_m,
    tp.parse_npu_smi_board,
    tooloutput.parse_hccn_tool,
    tooloutput.hccn_link_up,
    tp.parse_hccn_link_stat,
    tp.parse_nccl_tests,
    tp.parse_hccl_test,
    tooloutput.parse_key_values,
]
ALL_SAMPLES = sorted(f.name for f in SAMPLES.glob("*.txt"))

EMPTY_RESULTS: dict[Callable[[str], object], object] = {
    tooloutput.parse_npu_smi_info: tooloutput.NpuSmiInfo(),
    tp.parse_nccl_tests: tp.NcclTestsResult(),
    tp.parse_hccl_test: tp.HcclTestResult(),
    tooloutput.parse_npu_smi_info_l: tooloutput.NpuSmiList(),
}


def _touch(result: object) -> None:
    """Walk the result, so lazy properties run too."""
    if dataclasses.is_dataclass(result):
        for name in dir(result):
            if not name.startswith("_"):
                getattr(result, name)
    repr(result)


@pytest.mark.parametrize("parser", PARSERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("text", ["", " ", "\n\n\n", "|||", "+==+", "#", ":", "\x00\ufffd\ufffd"])
def test_garbage_never_raises(parser: Callable[[str], object], text: str) -> None:
    _touch(parser(text))


@pytest.mark.parametrize("parser", list(EMPTY_RESULTS), ids=lambda f: f.__name__)
def test_empty_input_gives_empty_result(parser: Callable[[str], object]) -> None:
    assert parser("") == EMPTY_RESULTS[parser]


@pytest.mark.parametrize("parser", PARSERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", ALL_SAMPLES)
def test_every_parser_survives_every_sample(parser: Callable[[str], object], name: str) -> None:
    """Wrong tool output for the parser (npu-smi text into the nccl parser...) never raises."""
    _touch(parser(sample(name)))


FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(text=st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=400))
def test_fuzz_random_text(text: str) -> None:
    for parser in PARSERS:
        _touch(parser(text))


@st.composite
def mangled_samples(draw: st.DrawFn) -> str:
    text = sample(draw(st.sampled_from(ALL_SAMPLES)))
    start = draw(st.integers(0, len(text)))
    end = draw(st.integers(start, len(text)))
    piece = text[start:end]
    if draw(st.booleans()) and piece:
        at = draw(st.integers(0, len(piece) - 1))
        junk = draw(st.text(max_size=5, alphabet="|:/ \t\n#+=-0123456789\ufffdXN/A"))
        piece = piece[:at] + junk + piece[at + 1 :]
    return piece


@FUZZ
@given(text=mangled_samples())
def test_fuzz_truncated_and_mangled_samples(text: str) -> None:
    for parser in PARSERS:
        _touch(parser(text))


# ------------------------------------------------------------------ NCCL INFO transports (issue 17)


def test_nccl_info_transport_lines_as_gpu_check_reads_them() -> None:
    """bench/gpu_check.py's `transports` reads these two real NCCL_DEBUG=INFO logs (its tests
    are in tests/unit/test_gpu_check.py); here: the lines it relies on are in them."""
    import re

    via = re.compile(r"\bvia (NET/\w+/\d+|P2P/\w+|direct shared memory)")
    gke = sample("nccl-debug-socket-fallback-gke-h100-2node-rank0.txt")
    roce = sample("nccl-debug-roce-net-ib-p2p-ipc-shm-nccl2.5.7.txt")
    assert {m.group(1) for m in via.finditer(gke)} == {"NET/Socket/0", "P2P/CUMEM"}
    assert {m.group(1) for m in via.finditer(roce)} == {"NET/IB/0", "P2P/IPC",
                                                         "direct shared memory"}
