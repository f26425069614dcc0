"""judge/health/gpuhealth.py: R7 (NVIDIA GPUs) and R8 (Ascend NPUs), on what node/healthprobe.py's
`accel` section really answers, run here with vendor tools (nvidia-smi, dmesg, npu-smi,
hccn_tool) on its PATH that print the real captures (tests/data/samples, SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

from nodescript import answer, fake_tools
from paths import SAMPLES

from cluster_tests.judge.health import gpuhealth
from cluster_tests.judge.health.gpuhealth import AccelFacts, GpuCause, IssueKind


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def accel(tmp_path: Path, tools: dict[str, str], env: dict[str, str] | None = None) -> AccelFacts:
    bindir = fake_tools(tmp_path / "bin", tools)
    return AccelFacts.read(answer("healthprobe.py", "accel", bindir,
                                  {"CLUSTER_TESTS_NVSWITCH_DIR": str(tmp_path / "none"),
                                   **(env or {})}))


def nvidia_smi(q: str, nvlink: str = "") -> str:
    """An nvidia-smi answering -q and nvlink -s with these samples."""
    return (f'case "$1" in -q) cat {{{q}}};; '
            + (f"nvlink) cat {{{nvlink}}};; " if nvlink else "") + "esac\n")


# -- nvidia-smi -q --------------------------------------------------------------------------------

def test_a10_with_a_row_remap_pending():
    gpus = gpuhealth.parse_nvidia_smi_q(sample("nvidia-smi-q-a10-1gpu-remap-pending.txt"))
    assert len(gpus) == 1 and gpus[0].bus_id == "00000000:07:00.0"
    assert gpus[0].remap_pending and gpus[0].rows_remapped_uncorrectable == 4
    issues, notes = gpuhealth.judge_gpu(gpus[0])
    assert gpus[0].label() == "GPU 0 (00000000:07:00.0, NVIDIA A10)" and notes == []
    assert [(i.kind, i.what) for i in issues] == [(IssueKind.RESET, (
        "row remapping pending (4 row(s) remapped for uncorrectable errors): the GPU must be "
        "reset to activate it"))]


def test_healthy_h100_and_idle_titan_v():
    h100 = gpuhealth.parse_nvidia_smi_q(sample("nvidia-smi-q-h100-gpu0-of-8.txt"))
    assert len(h100) == 1 and gpuhealth.judge_gpu(h100[0])[0] == []
    assert h100[0].fabric_state == "Completed" and h100[0].pcie_width == (16, 16)
    titan = gpuhealth.parse_nvidia_smi_q(sample("nvidia-smi-q-titanv-1gpu-pcie-gen1.txt"))[0]
    issues, notes = gpuhealth.judge_gpu(titan)
    # gen 1 of 3 at P8 is power saving, not a fault; persistence off is a note
    assert issues == [] and titan.pcie_gen == (3, 1)
    assert any("PCIe gen 1, below its gen 3 at P8 (normal when idle)" in n for n in notes)
    assert any("persistence mode disabled" in n for n in notes)


def test_page_retirement_8gpu():
    gpus = gpuhealth.parse_nvidia_smi_q(sample("nvidia-smi-q-d-page-retirement-8gpu.txt"))
    assert [g.index for g in gpus] == list(range(8))
    assert all(gpuhealth.judge_gpu(g)[0] == [] for g in gpus)


def test_nvlink_status():
    a100 = gpuhealth.parse_nvlink_status(sample("nvidia-smi-nvlink-s-a100-8gpu.txt"))
    assert len(a100) == 8 and all(len(links) == 12 for links in a100.values())
    assert gpuhealth.nvlink_problems(a100) == {}
    h100 = gpuhealth.parse_nvlink_status(sample("nvidia-smi-nvlink-s-h100-1gpu.txt"))
    assert h100[0][17] == "26.562 GB/s"
    one = gpuhealth.parse_nvlink_status(sample("nvidia-smi-nvlink-s-a100-1gpu.txt"))
    assert list(one) == [7] and len(one[7]) == 12


# -- the kernel log -------------------------------------------------------------------------------

def test_xids_hardware_and_application():
    gsp = gpuhealth.parse_xids(sample("dmesg-nvrm-xid-119-gsp-timeout.txt"))
    assert gsp and gsp[0].code == 119 and gsp[0].bus == "0000:9b:00" and gsp[0].hardware
    assert gpuhealth.bus_matches("0000:9b:00", "00000000:9B:00.0")
    app = gpuhealth.parse_xids(sample("dmesg-nvrm-xid-13-43.txt"))
    assert {x.code for x in app} == {13, 43} and not any(x.hardware for x in app)
    hard, soft = gpuhealth.summarize_xids(app)
    assert hard == {} and len(soft) == 2
    remap = gpuhealth.parse_xids(sample("dmesg-nvrm-xid-63-row-remapper.txt"))
    assert remap[0].code == 63 and remap[0].hardware
    off = gpuhealth.parse_xids(sample("dmesg-nvrm-gpu-fallen-off-bus-no-xid.txt"))
    assert [(x.bus, x.code) for x in off] == [("0000:b3:00.0", None)] and off[0].hardware


# -- R7: the node's verdict, from the probe --------------------------------------------------------

def test_the_probe_ties_each_finding_to_its_gpu_and_the_fixes_to_them(tmp_path):
    """The A10's pending remap is its GPU's; the GSP Xid is at a PCI address nvidia-smi does not
    list: said with that address."""
    facts = accel(tmp_path, {
        "nvidia-smi": nvidia_smi("nvidia-smi-q-a10-1gpu-remap-pending.txt"),
        "dmesg": "cat {dmesg-nvrm-xid-119-gsp-timeout.txt}\n"}).nvidia
    assert facts is not None and facts.query_failed is None and facts.nvswitches == ()
    assert [x.code for x in facts.xids] == [119]
    verdict = gpuhealth.judge_nvidia(facts)
    assert verdict.count == 1 and verdict.notes == ()
    assert [i.line[:62] for i in verdict.issues] == [
        "PCI:0000:9b:00: Xid 119 (GSP RPC timeout): pid=2024380, name=n",
        "GPU 0 (00000000:07:00.0, NVIDIA A10): row remapping pending (4"]
    p = gpuhealth.gpu_health_problem("node1", verdict)
    assert p is not None and p.cause is GpuCause.GPU_HEALTH and p.item == "R7"
    assert p.message.startswith("node1: GPU health:\n  PCI:0000:9b:00: Xid 119")
    assert p.fix.startswith("on node1: reset GPU 0 with nothing running on it (nvidia-smi -r "
                            "-i 0) or reboot the node; meanwhile leave it out (--exclude "
                            "node1:0); drain node1: ")
    assert p.facts == {"gpus": [0]}


def test_a_gpu_fallen_off_the_bus_is_read_from_the_kernel_log(tmp_path):
    """The driver says it over three lines ("The NVIDIA GPU <bus>", "... has", "fallen off
    the bus ..."): the probe keeps the line that names the GPU."""
    facts = accel(tmp_path, {
        "nvidia-smi": nvidia_smi("nvidia-smi-q-h100-gpu0-of-8.txt"),
        "dmesg": "cat {dmesg-nvrm-gpu-fallen-off-bus-no-xid.txt}\n"}).nvidia
    assert facts is not None
    verdict = gpuhealth.judge_nvidia(facts)
    assert [(i.kind, i.line) for i in verdict.issues] == [
        (IssueKind.OFF_BUS, "PCI:0000:b3:00.0: no Xid (fallen off the bus): fallen off the bus")]
    fixes = gpuhealth.gpu_fixes("node4", verdict.issues)
    assert fixes[0].startswith("reset GPU <index> with nothing running on it")
    assert fixes[1].startswith("drain node4: ")


def test_nvswitches_without_a_fabric_manager(tmp_path):
    switches = tmp_path / "nvswitch"
    (switches / "0").mkdir(parents=True)
    (switches / "1").mkdir()
    facts = accel(tmp_path, {"nvidia-smi": nvidia_smi("nvidia-smi-q-h100-gpu0-of-8.txt",
                                                     "nvidia-smi-nvlink-s-h100-1gpu.txt"),
                             "dmesg": "exit 0\n"},
                  {"CLUSTER_TESTS_NVSWITCH_DIR": str(switches)}).nvidia
    assert facts is not None and facts.nvswitches == ("0", "1")
    assert not facts.fabric_manager_running and len(facts.nvlinks[0]) == 18
    verdict = gpuhealth.judge_nvidia(facts)
    assert [i.line for i in verdict.fabric()] == [
        "2 NVSwitch(es) but no fabric manager running (nv-fabricmanager): CUDA fails with "
        "'system not yet initialized'"]
    p = gpuhealth.gpu_health_problem("node2", verdict)
    assert p is not None and p.fix == ("on node2: systemctl enable --now nvidia-fabricmanager "
                                       "(its version must match the driver's)")


def test_nvidia_smi_q_failing(tmp_path):
    facts = accel(tmp_path, {"nvidia-smi": "exit 9\n", "dmesg": "exit 0\n"}).nvidia
    assert facts is not None and facts.query_failed is not None and facts.gpus == ()
    p = gpuhealth.gpu_health_problem("node3", gpuhealth.judge_nvidia(facts))
    assert p is not None and p.message == "node3: GPU health:\n  nvidia-smi -q failed (exit 9): "
    assert p.fix == "on node3: see nvidia-smi -q on node3"


def test_no_vendor_tool(tmp_path):
    assert accel(tmp_path, {}) == AccelFacts(None, None)


# -- R8: Ascend -----------------------------------------------------------------------------------

HCCN = ('case "$3" in -net_health) cat {hccn-tool-net-health-g-socket-failed.txt};; '
        '-link) [ "$2" = 1 ] && cat {hccn-tool-link-g-down.txt} '
        '|| cat {hccn-tool-link-g-up.txt};; '
        '-ip) cat {hccn-tool-ip-g-unredacted.txt};; '
        '-tls) cat {hccn-tool-tls-g-switch.txt};; esac\n')
NPU_SMI = ('case "$2" in -l) cat {npu-smi-info-l-8npu.txt};; '
           '-t) cat {npu-smi-info-t-health-ok.txt};; esac\n')


def test_npus_healthy_but_one_link_down_and_one_device_ip_everywhere(tmp_path):
    facts = accel(tmp_path, {"npu-smi": NPU_SMI, "hccn_tool": HCCN}).ascend
    assert facts is not None and len(facts.health) == 8 and len(facts.hccn) == 8
    assert {r.status for r in facts.health} == {"OK"}
    verdict = gpuhealth.judge_npu(facts)
    assert verdict.tls == "0" and set(verdict.ips.values()) == {"192.161.200.10"}
    assert verdict.problems[0] == "device 1: link status DOWN"
    assert verdict.problems[1:3] == ("devices 0 and 1 share the device IP 192.161.200.10",
                                     "devices 0 and 2 share the device IP 192.161.200.10")
    # the net health is R9's (judge/health/dcgm.py): one cause, one red
    assert gpuhealth.net_health(facts) == {str(d): "Socket failed" for d in range(8)}
    p = gpuhealth.npu_health_problem("node2", verdict, {"node3": verdict})
    assert p is not None and p.cause is GpuCause.NPU_HEALTH and p.item == "R8"
    assert p.message.splitlines()[-1] == "  device IP(s) 192.161.200.10 also on node3"
    assert p.fix == f"on node2: {gpuhealth.NPU_FIX}"


def test_npus_without_hccn_tool(tmp_path):
    facts = accel(tmp_path, {"npu-smi": NPU_SMI}).ascend
    assert facts is not None and facts.hccn == {}
    verdict = gpuhealth.judge_npu(facts)
    assert verdict == gpuhealth.NpuVerdict((), {}, None)
    assert gpuhealth.npu_health_problem("node1", verdict, {"node2": verdict}) is None
