"""judge/common/tooloutput.py, the vendor tools' output parsers A1, R7-R9 and E4 read
(nvidia-smi -L, npu-smi info and -l, hccn_tool), on the real captured samples in
tests/data/samples/ (their robustness against garbage and every other sample: test_parsers.py).
"""

from __future__ import annotations

import pytest
from paths import SAMPLES

from cluster_tests.judge.common import tooloutput


def sample(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8", errors="replace")


# ------------------------------------------------------------------ nvidia-smi -L


def test_nvidia_smi_L_8gpu() -> None:
    gpus = tooloutput.parse_nvidia_smi_L(sample("nvidia-smi-L-8gpu.txt"))
    assert [g.index for g in gpus] == list(range(8))
    assert {g.name for g in gpus} == {"Quadro RTX 8000"}
    assert gpus[0].uuid == "GPU-6b201039-6477-dd9c-1edd-137c8c44f8d6"
    assert gpus[7].uuid == "GPU-9f690c37-bb84-1e1a-1e4a-3dbfd1b1015c"
    assert all(g.mig == () for g in gpus)


def test_nvidia_smi_L_mixed_models() -> None:
    gpus = tooloutput.parse_nvidia_smi_L(sample("nvidia-smi-L-mixed-models.txt"))
    assert [(g.index, g.name) for g in gpus] == [(0, "NVIDIA T1000"), (1, "Tesla V100-PCIE-16GB")]
    assert gpus[1].uuid == "GPU-b08ecee0-0ea5-7b07-d459-baa5b95f5e89"


def test_nvidia_smi_L_mig_children() -> None:
    gpus = tooloutput.parse_nvidia_smi_L(sample("nvidia-smi-L-mig.txt"))
    assert len(gpus) == 4
    assert {g.name for g in gpus} == {"NVIDIA A100-SXM4-80GB"}
    mig = gpus[0].mig
    assert [m.index for m in mig] == [0, 1, 2, 3]
    assert {m.profile for m in mig} == {"1g.20gb"}
    assert mig[3].uuid == "MIG-930574a9-d43a-5d2b-95da-3e68384c8d6b"
    assert [len(g.mig) for g in gpus[1:]] == [0, 0, 0]


def test_nvidia_smi_L_truncated_uuid() -> None:
    gpus = tooloutput.parse_nvidia_smi_L("GPU 0: Tesla V100 (UUID: GPU-b08e")
    assert gpus == [tooloutput.Gpu(index=0, name="Tesla V100", uuid="GPU-b08e")]
    assert tooloutput.parse_nvidia_smi_L("GPU 1: Tesla V100")[0].uuid is None


# ------------------------------------------------------------------ npu-smi info


def test_npu_smi_info_910a_two_warnings_and_processes() -> None:
    info = tooloutput.parse_npu_smi_info(sample("npu-smi-info-910a-warning-with-procs.txt"))
    assert info.warnings == []
    assert (info.npu_smi_version, info.version) == ("24.1.RC2", "24.1.RC2")
    assert [n.npu_id for n in info.npus] == list(range(8))
    warned = [n.npu_id for n in info.npus if n.health is tooloutput.NpuHealth.WARNING]
    assert warned == [3, 7]
    assert info.npus[3].health_raw == "Warning"
    assert all(n.health is tooloutput.NpuHealth.OK for n in info.npus if n.npu_id not in (3, 7))
    npu3 = info.npus[3]
    assert (npu3.name, npu3.power_w, npu3.temp_c) == ("xxx", 206.9, 39.0)
    assert npu3.hugepages == tooloutput.Usage(1232, 1232)
    assert len(npu3.chips) == 1
    assert npu3.chips[0].chip_id == 0
    assert npu3.chips[0].bus_id == "0000:01:00.0"
    assert npu3.chips[0].memory_mb == tooloutput.Usage(3616, 15039)
    assert npu3.hbm_mb == tooloutput.Usage(0, 32768)
    assert len(info.processes) == 32
    assert info.processes[0] == tooloutput.NpuProcess(0, 0, 37656, "hlt_host_devmm_", 686)
    assert info.processes[-1] == tooloutput.NpuProcess(7, 0, 37663, "hlt_host_devmm_", 686)
    assert {pr.npu_id for pr in info.processes} == set(range(8))


def test_npu_smi_info_910b() -> None:
    info = tooloutput.parse_npu_smi_info(sample("npu-smi-info-910b.txt"))
    assert info.warnings == []
    assert info.version == "24.1.rc1.b030"
    assert len(info.npus) == 8
    assert {n.name for n in info.npus} == {"910B3"}
    assert all(n.health is tooloutput.NpuHealth.OK for n in info.npus)
    assert info.npus[0].power_w == 101.8
    assert info.npus[4].temp_c == 45
    assert info.npus[0].hbm_mb == tooloutput.Usage(3318, 65536)
    assert info.npus[7].hbm_mb == tooloutput.Usage(3315, 65536)
    assert info.npus[2].chips[0].bus_id == "0000:81:00.0"
    assert info.processes == []


# From the 310P Duo layout in Ascend docs: one NPU row, two "Chip Device" rows, no HBM column.
NPU_SMI_310P_TWO_CHIPS = """\
+--------------------------------------------------------------------------------------------+
| npu-smi 22.0.4                             Version: 22.0.4                                 |
+-------------------+-----------------+------------------------------------------------------+
| NPU     Name      | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device    | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===================+=================+======================================================+
| 1       310P3     | Critical        | NA           41                0     / 0             |
| 0       2         | 0000:1A:00.0    | 0            1654 / 21527                            |
| 1       3         | 0000:1A:00.0    | 3            1375 / 21527                            |
+===================+=================+======================================================+
| 2       310P3     | Fine            | 15.4         43                0    / 0              |
| 0       4         | 0000:89:00.0    | 0            1070 / 21534                            |
+===================+=================+======================================================+
+-------------------+-----------------+------------------------------------------------------+
| NPU     Chip      | Process id      | Process name             | Process memory(MB)      |
+===================+=================+======================================================+
| No running processes found in NPU 1                                                        |
+===================+=================+======================================================+
"""


def test_npu_smi_info_two_chips_per_npu_and_health_normalization() -> None:
    info = tooloutput.parse_npu_smi_info(NPU_SMI_310P_TWO_CHIPS)
    assert info.warnings == []
    npu1, npu2 = info.npus
    assert (npu1.health, npu1.health_raw) == (tooloutput.NpuHealth.CRITICAL, "Critical")
    assert (npu2.health, npu2.health_raw) == (tooloutput.NpuHealth.UNKNOWN, "Fine")
    assert npu1.power_w is None and npu1.temp_c == 41
    assert [(c.chip_id, c.device_id) for c in npu1.chips] == [(0, 2), (1, 3)]
    assert npu1.chips[1].memory_mb == tooloutput.Usage(1375, 21527)
    assert npu1.chips[1].aicore_percent == 3
    assert npu1.hbm_mb is None
    assert [(c.chip_id, c.device_id) for c in npu2.chips] == [(0, 4)]
    assert info.processes == []


@pytest.mark.parametrize(
    ("raw", "health"),
    [
        ("OK", tooloutput.NpuHealth.OK),
        ("warning", tooloutput.NpuHealth.WARNING),
        ("Alarm", tooloutput.NpuHealth.ALARM),
        (" Critical ", tooloutput.NpuHealth.CRITICAL),
        ("", tooloutput.NpuHealth.UNKNOWN),
        ("NA", tooloutput.NpuHealth.UNKNOWN),
    ],
)
def test_npu_health_from_raw(raw: str, health: tooloutput.NpuHealth) -> None:
    assert tooloutput.NpuHealth.from_raw(raw) is health


def test_npu_smi_info_truncated_mid_table() -> None:
    text = sample("npu-smi-info-910b.txt")
    cut = text[: text.index("| 3     910B3")]
    info = tooloutput.parse_npu_smi_info(cut + "| 3     910B3      | O")
    assert [n.npu_id for n in info.npus] == [0, 1, 2, 3]
    assert info.npus[3].health is tooloutput.NpuHealth.UNKNOWN


def test_npu_smi_info_cut_head_starts_with_chip_row() -> None:
    text = sample("npu-smi-info-910b.txt")
    cut = text.index("| 0                         | 0000:C1")
    info = tooloutput.parse_npu_smi_info(text[cut:])
    assert [n.npu_id for n in info.npus] == list(range(1, 8))
    assert info.warnings == ["line 1: chip row without its NPU row"]


def test_npu_smi_info_l() -> None:
    listing = tooloutput.parse_npu_smi_info_l(sample("npu-smi-info-l-8npu.txt"))
    assert listing.total_count == 8
    assert [n.npu_id for n in listing.npus] == list(range(8))
    assert {n.chip_count for n in listing.npus} == {1}
    assert listing.npus[5].fields == {"NPU ID": "5", "Chip Count": "1"}
    assert listing.warnings == []


def test_npu_smi_info_l_count_mismatch_is_a_warning() -> None:
    text = sample("npu-smi-info-l-8npu.txt")
    cut = text.index("NPU ID                         : 7")
    listing = tooloutput.parse_npu_smi_info_l(text[:cut])
    assert len(listing.npus) == 7
    assert listing.warnings == ["Total Count says 8 but 7 NPU blocks were read"]


# ------------------------------------------------------------------ hccn_tool


def test_hccn_tool_ip() -> None:
    values = tooloutput.parse_hccn_tool(sample("hccn-tool-ip-g.txt"))
    assert values == {"ipaddr": "10.xx.xx.10", "netmask": "255.255.255.0"}
    assert tooloutput.hccn_link_up(sample("hccn-tool-ip-g.txt")) is None


def test_hccn_tool_link_up_and_down() -> None:
    assert tooloutput.parse_hccn_tool(sample("hccn-tool-link-g-up.txt")) == {"link status": "UP"}
    assert tooloutput.hccn_link_up(sample("hccn-tool-link-g-up.txt")) is True
    assert tooloutput.hccn_link_up(sample("hccn-tool-link-g-down.txt")) is False
    assert tooloutput.hccn_link_up("link status:up\r\n") is True
    assert tooloutput.hccn_link_up("") is None
    assert tooloutput.hccn_link_up("link status: UNKNOWN") is None


def test_hccn_tool_net_health() -> None:
    values = tooloutput.parse_hccn_tool(sample("hccn-tool-net-health-g.txt"))
    assert values == {"net health status": "Init"}


def test_hccn_tool_tls_switch_line() -> None:
    values = tooloutput.parse_hccn_tool(sample("hccn-tool-tls-g-switch.txt"))
    assert values == {
        "dev_id": "0",
        "tls switch": "0",
        "tls preconfigured": "1",
        "tls alarm time threshold": "60",
    }
