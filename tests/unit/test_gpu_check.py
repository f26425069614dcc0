"""bench/gpu_check.sh and bench/gpu_check.py, the CPU-side logic (issue 17): argument handling,
the skip without a GPU (for real: this machine has none), the table, nccl-tests' formulas on a
report, the transport read from real NCCL INFO logs, and the harness/bare ratio."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from paths import REPO, SAMPLES, load_script

from cluster_tests.judge.collective import collverdict as C
from cluster_tests.judge.collective import rankplan as rk


def _mod():
    return load_script(REPO / "bench" / "gpu_check.py", "gpu_check", register=True)


G = _mod()


def _sh(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(REPO / "bench" / "gpu_check.sh"), *args], text=True,
                          capture_output=True, timeout=60, env=env, check=False)


def test_the_script_skips_cleanly_without_a_gpu(tmp_path: Path) -> None:
    res = _sh()
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "gpu_check: no GPU (nvidia-smi is not on PATH): skipped"
    # an nvidia-smi that lists nothing (a driver without devices) is a skip too
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    fake.chmod(0o755)
    import os

    res = _sh(env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert res.returncode == 0 and "no GPU (nvidia-smi -L lists none): skipped" in res.stdout
    assert G.main(["--budget", "10"]) == 0  # the Python side skips the same way


@pytest.mark.parametrize(("args", "message"), [
    (["--bogus"], "unknown argument: --bogus"),
    (["--wheels"], "--wheels needs a directory"),
    (["--wheels", "/nonexistent/wheels"], "is not a directory"),
    (["--budget", "soon"], "--budget must be a number"),
    (["--sizes"], "--sizes needs a value"),
])
def test_the_script_refuses_bad_arguments(args: list[str], message: str) -> None:
    res = _sh(*args)
    assert res.returncode == 2 and message in res.stderr


def test_help_and_python_side_argument_checks(capsys) -> None:
    assert "--wheels DIR" in _sh("--help").stdout
    args = G.parse_args(["--sizes", "1M,4G", "--budget", "300"])
    assert args.size_list == [1 << 20, 4 << 30] and args.budget == 300
    for bad in (["--budget", "0"], ["--budget", "451"], ["--sizes", "1.5M"], ["--iters", "0"]):
        with pytest.raises(SystemExit):
            G.parse_args(bad)
    assert "--budget must be in (0, 450]" in capsys.readouterr().err


def test_gpu_present_reads_nvidia_smi_listing() -> None:
    listing = (SAMPLES / "nvidia-smi-L-8gpu.txt").read_text()

    def run(argv, **_):
        return SimpleNamespace(returncode=0, stdout=listing, stderr="")

    ok, what = G.gpu_present(run=run, which=lambda _: "/usr/bin/nvidia-smi")
    assert ok and what.count("GPU ") == 8
    assert G.gpu_present(which=lambda _: None) == (False, "nvidia-smi is not on PATH")


def test_table_is_aligned_and_lists_every_row() -> None:
    rows = [G.Row("A1 nvidia-smi + torch", "ok", "1 GPU"), G.Row("T1", "skip", "why")]
    table = G.format_table(rows).splitlines()
    assert table[0].startswith("check") and "verdict" in table[0]
    assert table[2] == "A1 nvidia-smi + torch  ok       1 GPU"
    assert table[3] == "T1                     skip     why"


def _report(time_us: float, wrong: int = 0, algbw: float | None = None) -> C.CollectiveReport:
    ranks = rk.assign_ranks({"a": 1, "b": 1})
    size = 1 << 20
    real = size / (time_us * 1e-6) / 1e9
    events: dict[int, list[dict[str, Any]]] = {r.rank: [{"event": "start", "backend": "nccl"},
                       {"event": "result", "size_bytes": size, "count": size // 4,
                        "dtype": "float32", "time_us": time_us, "wrong": wrong},
                       {"event": "done"}] for r in ranks}
    rep = C.collect(events, ranks, {0: 0, 1: 0})
    if algbw is not None:  # a row whose figure is not bytes/time
        rep.rows[0] = C.SizeRow(size, size // 4, "float32", time_us, algbw, 2 * algbw, 0, 2)
    assert rep.rows[0].algbw_GBps == pytest.approx(real) or algbw is not None
    return rep


def test_formula_problems_holds_the_rows_to_nccl_tests_formulas() -> None:
    assert G.formula_problems(_report(100.0)) == []
    # 3 on each rank
    assert G.formula_problems(_report(100.0, wrong=3)) == ["1048576 B: 6 wrong elements"]
    bad = G.formula_problems(_report(100.0, algbw=99.0))
    assert bad[0].startswith("1048576 B: algbw 99.0 != bytes/time")
    assert "1048576 B: busbw != algbw*2(n-1)/n" in bad


def test_transport_from_real_nccl_info_logs() -> None:
    gke = (SAMPLES / "nccl-debug-socket-fallback-gke-h100-2node-rank0.txt").read_text()
    assert G.transports(gke) == ["NET/Socket/0", "P2P/CUMEM"]
    roce = (SAMPLES / "nccl-debug-roce-net-ib-p2p-ipc-shm-nccl2.5.7.txt").read_text()
    assert G.transports(roce) == ["NET/IB/0", "P2P/IPC", "direct shared memory"]
    assert G.transports("NCCL INFO Bootstrap : Using lo:127.0.0.1<0>") == []


def test_harness_to_bare_ratio() -> None:
    rep = _report(110.0)
    assert G.ratio_detail(rep, {1 << 20: 100.0}) == ("ok", "harness/bare time 1MB x1.10")
    assert G.ratio_detail(rep, {1 << 20: 50.0})[0] == "FAIL"
    assert G.ratio_detail(rep, {}) == ("FAIL", "no bare-loop figure")


def test_the_whole_run_rehearsed_on_cpu(tmp_path: Path, capsys) -> None:
    """Every step the GPU run takes, on gloo: the real worker (1 rank, then 2 ranks with their
    own environments), the formulas, the bare loop, the table last and results.json."""
    code = G.main(["--rehearse-on-cpu", "--sizes", "64K", "--iters", "3", "--warmup", "1",
                   "--budget", "200", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    table = out[out.index("check "):]
    assert code == 0, out
    for line in ("C1 gloo, 1 rank ", "C1 gloo, 2 ranks as 2 hosts ", "harness vs bare loop "):
        row = next(ln for ln in table.splitlines() if ln.startswith(line))
        assert "  ok  " in row, row
    assert "harness/bare time 64KB x" in table and "#wrong 0" in table
    import json

    rows = json.loads((tmp_path / "results.json").read_text())
    assert [r["check"] for r in rows][:2] == ["A1/H4", "C1 gloo, 1 rank"]
    assert (tmp_path / "c1-2hosts-rank1.stderr").exists()
