"""judge/health/dcgm.py: R9's `dcgmi diag` parsing and judgement on REAL captures
(tests/data/samples/dcgmi, sources in SOURCES.md: DCGM 2.x-era, 3.x and 4.x tables, a 4.x JSON),
the Ascend net health verdict on the real hccn_tool captures, and the node-side `diag` section
(node/healthprobe.py) running a dcgmi found on PATH, read into DiagFacts."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from types import ModuleType

import pytest
from paths import PACKAGE, SAMPLES

from cluster_tests import node
from cluster_tests.judge.common import tooloutput
from cluster_tests.judge.health import dcgm, gpuhealth

DCGMI = SAMPLES / "dcgmi"
H100_Q = "nvidia-smi-q-h100-gpu0-of-8.txt"


def run_of(name: str) -> dcgm.DiagRun:
    return dcgm.parse_diag((DCGMI / name).read_text())


def _bus_ids() -> dict[int, str]:
    return {g.index: g.bus_id
            for g in gpuhealth.parse_nvidia_smi_q((SAMPLES / H100_Q).read_text())}


@pytest.mark.parametrize("name, version, tests", [
    ("dcgmi-diag-r2-pass-a100-8gpu.txt", "3.3.3", 11),
    ("dcgmi-diag-r2-pass-a10g-dcgm4.txt", "4.4.2", 3),
    ("dcgmi-diag-r4-pass-gpu-unknown.txt", "", 18),
])
def test_passing_runs_have_no_failure(name: str, version: str, tests: int) -> None:
    run = run_of(name)
    assert run.version == version and len(run.tests) == tests
    assert all(t.status == "Pass" for t in run.tests)
    assert dcgm.failures(run, 8) == []
    assert dcgm.verdict("node1", run, {}, "dcgmi diag -r 1") is None


def test_table_3x_rows_scopes_and_metadata() -> None:
    run = run_of("dcgmi-diag-r2-pass-a100-8gpu.txt")
    assert run.driver == "535.104.12"
    assert [(t.category, t.name, t.scope) for t in run.tests[-2:]] == [
        ("Integration", "PCIe", "All"), ("Hardware", "GPU Memory", "All")]


def test_table_4x_per_gpu_rows() -> None:
    run = run_of("dcgmi-diag-r2-fail-pcie-b200-8gpu-dcgm4.txt")
    assert [t.name for t in run.tests] == ["software", "memory", "pcie"]
    assert run.tests[0].gpus == {i: "Pass" for i in range(8)}
    pcie = run.tests[2]
    assert pcie.status == "Fail" and pcie.gpus == {i: "Pass" for i in range(8)}
    # the wrapped Warning cell joins back into DCGM's own message, exactly
    assert pcie.messages == (("Warning", (
        "There was an internal error during the test: 'Output of child process (11167) "
        "couldn't be parsed: '* Line 1, Column 1   Syntax error: value, object or array "
        "expected. '' Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun "
        "diagnostics.")),)


def test_r1_persistence_failure_per_gpu_with_bus_id() -> None:
    """The level-1 capture: `Persistence Mode | Fail` with one Error cell naming GPUs 0-5 (cut
    by dcgmi at 1023 characters mid-word)."""
    run = run_of("dcgmi-diag-r1-fail-persistence-h200-8gpu.txt")
    assert (run.version, run.driver) == ("3.1.8", "550.127.08")
    fails = dcgm.failures(run, 8)
    assert [(f.test.name, f.gpu) for f in fails] == [("Persistence Mode", g) for g in range(6)]
    assert fails[1].messages == [
        "Persistence mode for GPU 1 is currently disabled. The DCGM diagnostic requires "
        "peristence mode to be enabled. Enable persistence mode by running "
        "\"nvidia-smi -i <gpuId> -pm 1 \" as root."]
    problem = dcgm.verdict("node3", run, _bus_ids(), "dcgmi diag -r 1")
    assert problem is not None and problem.nodes == ("node3",) and problem.item == "R9"
    text = problem.text()
    assert text.startswith("node3: DCGM's diagnostic (`dcgmi diag -r 1`, DCGM 3.1.8, driver "
                           "550.127.08) failed Persistence Mode on GPU 0,1,2,3,4,5")
    assert ("GPU 0 (00000000:53:00.0): Persistence Mode (Deployment) Fail: Persistence mode for "
            "GPU 0 is currently disabled.") in text
    assert "GPU 1 (bus id unknown: not in nvidia-smi -q): Persistence Mode" in text
    # GPUs 6 and 7 not named because dcgmi cut the message at 1023 characters: said, and the
    # whole node is left out, not GPUs 0-5 alone
    assert "(Persistence Mode: dcgmi cut DCGM's message short; GPUs it did not reach" in text
    assert "nvidia-smi -pm 1" in text and "leave the node out (--exclude node3)" in text


def test_named_gpus_alone_are_left_out() -> None:
    """The JSON's software test fails on GPU 0 alone: with two GPUs known (a mapping of the
    test's own, not tool output) only GPU 0 is left out."""
    run = run_of("dcgmi-diag-r2-json-fail-software-gb10.json.txt")
    problem = dcgm.verdict("node1", run, {0: "00000000:01:00.0", 1: "00000000:02:00.0"},
                           "dcgmi diag -r 2")
    assert problem is not None and "leave the GPUs out (--exclude node1:0)" in problem.fix
    assert "GPU 0 (00000000:01:00.0): software (Deployment) Fail: Persistence Mode:" in \
        problem.message
    assert [f.commands for f in problem.fixes] == [("nvidia-smi -pm 1",)]


def test_r3_memory_fail_all_names_each_gpu_and_the_cause() -> None:
    run = run_of("dcgmi-diag-r3-fail-memory-h100-8gpu.txt")
    by_name = {t.name: t for t in run.tests}
    assert by_name["PCIe"].status == "Skip" and by_name["GPU Memory"].scope == "All"
    assert by_name["Persistence Mode"].status == "Pass"  # its Info row is no failure
    fails = dcgm.failures(run, 8)
    assert [(f.test.name, f.gpu) for f in fails] == [("GPU Memory", g) for g in range(8)]
    assert fails[7].messages[0].startswith("GPU 7 Error using CUDA API cuInit")
    assert "'system not yet initialized'" in fails[7].messages[0]
    problem = dcgm.verdict("node2", run, _bus_ids(), "dcgmi diag -r 3")
    assert problem is not None
    assert "GPU Memory (Hardware) Fail - All: GPU 0 Error using CUDA API cuInit" in problem.message
    assert "nvidia-fabricmanager" in problem.fix  # what 'system not yet initialized' means
    assert "leave the node out (--exclude node2)" in problem.fix  # Fail - All
    assert dcgm.needs_fabric_manager(run) and problem.cause is dcgm.DiagCause.FAILED


def test_4x_internal_error_is_the_test_not_a_gpu() -> None:
    run = run_of("dcgmi-diag-fail-pcie-l40s-4gpu-dcgm4.txt")
    fails = dcgm.failures(run, 4)
    assert [(f.test.name, f.gpu) for f in fails] == [("pcie", None)]
    assert len(fails[0].messages) == 4
    assert fails[0].messages[0] == (
        "There was an internal error during the test: 'A child process (152) exited with "
        "non-zero status 1' Check DCGM and system logs for errors. Reset GPU. Restart DCGM. "
        "Rerun diagnostics.")
    problem = dcgm.verdict("node1", run, {}, "dcgmi diag -r 1")
    assert problem is not None
    assert "the test as a whole (no GPU named): pcie (Integration) Fail" in problem.message
    assert "systemctl restart nvidia-dcgm" in problem.fix and "--exclude" not in problem.text()
    assert not dcgm.needs_fabric_manager(run)


def test_json_4x_entity_results() -> None:
    run = run_of("dcgmi-diag-r2-json-fail-software-gb10.json.txt")
    assert (run.version, run.driver) == ("4.5.2", "580.82.09")
    assert [(t.category, t.name, t.status) for t in run.tests] == [
        ("Deployment", "software", "Fail"), ("Hardware", "memory", "Pass"),
        ("Integration", "pcie", "Pass")]
    fails = dcgm.failures(run)
    assert [(f.test.name, f.gpu) for f in fails] == [("software", 0)]
    assert fails[0].messages == ["Persistence Mode: Persistence mode for GPU 0 is disabled. "
                                 "Enable persistence mode by running \"nvidia-smi -i <gpuId> "
                                 "-pm 1 \" as root."]


# -- Ascend ------------------------------------------------------------------------------------

def test_net_health_socket_failed_is_specific() -> None:
    failed = tooloutput.parse_hccn_tool((SAMPLES / "hccn-tool-net-health-g-socket-failed.txt")
                                     .read_text())["net health status"]
    init = tooloutput.parse_hccn_tool((SAMPLES / "hccn-tool-net-health-g.txt")
                                   .read_text())["net health status"]
    problem, notes = dcgm.net_health_verdict("node2", {"3": failed, "1": init})
    assert problem is not None and problem.nodes == ("node2",)
    assert problem.message.startswith("node2: NPU RoCE net health (hccn_tool -i N -net_health "
                                      "-g) failed on device 3")
    assert ("device 3: net health status Socket failed: the port could not open the socket it "
            "probes with") in problem.message
    assert problem.cause is dcgm.DiagCause.NET_HEALTH and problem.facts == {"devices": ["3"]}
    assert problem.fix.startswith("on node2: device 3: hccn_tool -i 3 -ip -g")
    assert "-cfg recovery" in problem.text()
    assert notes == ["device 1: net health status Init: no detection address, so the port's "
                     "health is not probed (hccn_tool -i 1 -netdetect -s address <an address "
                     "in its network>)"]
    assert dcgm.net_health_verdict("node2", {"0": "Success"}) == (None, [])


# -- the node-side section ----------------------------------------------------------------------

def _probe_module():
    mod = ModuleType("healthprobe")
    exec(compile(node.source("healthprobe.py"), str(PACKAGE / "node" / "healthprobe.py"), "exec"),
         mod.__dict__)
    return mod


def test_probe_runs_dcgmi_at_the_level_with_a_deadline(tmp_path: Path, monkeypatch) -> None:
    sample = DCGMI / "dcgmi-diag-r1-fail-persistence-h200-8gpu.txt"
    fake = tmp_path / "dcgmi"
    fake.write_text(f'#!/bin/sh\necho "$@" > {shlex.quote(str(tmp_path / "argv"))}\n'
                    f'[ "$3" = 2 ] && exec sleep 30\n[ "$3" = 3 ] && exit 1\n'
                    f'cat {shlex.quote(str(sample))}\nexit 226\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    mod = _probe_module()
    out = mod.section_diag({"dcgm_level": 1, "deadline": 20})
    assert out["dcgmi"] == str(fake) and out["argv"] == ["dcgmi", "diag", "-r", "1"]
    assert (tmp_path / "argv").read_text().split() == ["diag", "-r", "1"]
    assert out["dcgmi_diag"]["rc"] == 226 and out["dcgmi_diag"]["out"] == sample.read_text()
    facts = dcgm.DiagFacts.read(out)
    assert (facts.dcgmi, facts.argv, facts.why, facts.timed_out) == (
        str(fake), "dcgmi diag -r 1", "", False)
    assert facts.run is not None and facts.run == run_of(sample.name)
    slow = mod.section_diag({"dcgm_level": 2, "deadline": 0.5})
    assert slow["dcgmi_diag"]["rc"] == 124
    facts = dcgm.DiagFacts.read(slow)
    assert facts.run is None and facts.timed_out and facts.why == "exit 124: timed out after 0.5s"
    p = dcgm.timed_out("node1", facts.argv, 0.5, 2)
    assert p.cause is dcgm.DiagCause.TIMED_OUT and p.message == (
        "node1: `dcgmi diag -r 2` did not finish in 0 s (level 2 takes far less): a GPU or DCGM's "
        "host engine is hung")
    silent = dcgm.DiagFacts.read(mod.section_diag({"dcgm_level": 3, "deadline": 20}))
    assert silent.run is None and not silent.timed_out and silent.why == "exit 1: no output"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert mod.section_diag({"dcgm_level": 1}) == {"dcgmi": None}
    assert dcgm.DiagFacts.read({"dcgmi": None}).dcgmi is None
