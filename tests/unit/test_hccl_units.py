"""hccl_test's bandwidth figures in nccl-tests' units (issue 17): its "GB/s" column is GiB/s;
converted, and with nccl-tests' busbw factor, they compare with C1's GB/s (1e9 B/s)."""

from __future__ import annotations

import pytest
import toolparsers as tp
from paths import SAMPLES

from cluster_tests.judge.collective import collverdict as C


def test_hccl_algbw_in_gigabytes_and_busbw_by_the_nccl_tests_formula() -> None:
    result = tp.parse_hccl_test((SAMPLES / "hccl-test-all-reduce-8npu.txt").read_text())
    for row in result.rows:
        assert row.avg_time_us is not None
        # our own figure for the same size and time (collective.algbw_gbps, 1 GB = 1e9 B)
        ours = C.algbw_gbps(row.data_size_bytes, row.avg_time_us)
        assert row.algbw_GBps == pytest.approx(ours, rel=2e-3)
        assert row.alg_bandwidth_GiBps == row.alg_bandwidth_gbs
        assert row.busbw_GBps(8) == pytest.approx(ours * C.allreduce_busbw_factor(8), rel=2e-3)
    last = result.rows[-1]
    assert last.algbw_GBps == pytest.approx(25.515, rel=1e-3)  # printed 23.76245 "GB/s"
    assert last.busbw_GBps(8) == pytest.approx(25.515 * 1.75, rel=1e-3)
    assert tp.HcclRow(8, None, None, None).busbw_GBps(8) is None
