"""C1-C3 options (judge/collective/collopts.py): the size sweep."""

from __future__ import annotations

import pytest

from cluster_tests.judge.collective import collopts as copts


def test_parse_sizes_uses_powers_of_two() -> None:
    assert copts.parse_sizes("8,1K,64K,1M,2G") == [8, 1024, 65536, 1 << 20, 2 << 30]
    assert copts.parse_sizes(" 4kb , 16 ") == [4096, 16]
    for bad in ("", "0", "-1K", "1.5M", "K"):
        with pytest.raises(ValueError):
            copts.parse_sizes(bad)
    assert copts.format_size(65536) == "64K" and copts.format_size(1000) == "1000"


def test_default_sizes() -> None:
    gpu, cpu = copts.default_sizes("nccl"), copts.default_sizes("gloo")
    # accelerators reach 1-8 GiB, where GPUs peak (issue 17); the CPU sweep stays small
    assert gpu[0] == cpu[0] == 1024 and gpu[-1] == 4 << 30 and cpu[-1] == 16 << 20
    assert all(b == 4 * a for a, b in zip(gpu, gpu[1:], strict=False))
