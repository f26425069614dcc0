"""The all-reduce worker's verifiable pattern (node/allreduce.py), as pure arithmetic:
exact sums in every dtype for any world size (6000 ranks simulated, and far beyond), a different
rank set gives a different sum, and the torch implementation matches the integer reference,
across chunk boundaries. Also the worker's other pure helpers (device_id rule, HCCL deadline,
visible devices, the fallback hint)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from paths import load_script

from cluster_tests.judge.collective import collverdict as C
from fixtures import localcollective as LC

NP_DTYPES = {"float32": np.float32, "float16": np.float16, "float64": np.float64}


def _worker():
    path = LC.WORKER_SCRIPT
    return load_script(path, "ct_allreduce_worker_pattern")


W = _worker()


@pytest.mark.parametrize("dtype", sorted(W.EXACT_LIMIT))
@pytest.mark.parametrize("world", [1, 2, 3, 8, 17, 2600, 5800, 6000, 100_000])
def test_params_keep_every_sum_exact(dtype: str, world: int) -> None:
    k, base, mults = W.pattern_params(world, dtype)
    limit = W.EXACT_LIMIT[dtype]
    assert 1 <= k <= world and base >= 1
    assert k * (k - 1) // 2 + k * base <= limit  # the largest possible sum is exact
    assert mults and all(np.gcd(m, world) == 1 for m in mults)
    if world >= 2 and limit >= 2**11:
        assert base >= W.PATTERN_MIN_BASE and k >= 2  # never a constant per rank


@pytest.mark.parametrize(("world", "dtype"), [(6000, "float32"), (5800, "float32"),
                                              (2600, "float32"), (6000, "bfloat16"),
                                              (6000, "float16"), (9, "bfloat16"),
                                              (100_000, "float32")])
def test_every_element_sums_exactly_to_the_closed_form(world: int, dtype: str) -> None:
    """All `world` ranks simulated: the sum of their inputs is the expected value, exactly K of
    them contribute, and summing in the dtype in any order (a random one, as a ring or tree
    would) gives exactly that value."""
    k, _, _ = W.pattern_params(world, dtype)
    rng = random.Random(world)
    seed = W.pattern_seed(1 << 20, 3)
    for i in [0, 1, 2, 1023, 1 << 20, (1 << 31) + 5, *rng.sample(range(1 << 31), 6)]:
        values = [W.pattern_value(i, r, world, seed, dtype) for r in range(world)]
        expected = W.pattern_expected(i, world, seed, dtype)
        assert sum(values) == expected <= W.EXACT_LIMIT[dtype]
        assert sum(1 for v in values if v) == k
        assert len({v for v in values if v}) == k  # distinct contributions
        if dtype in NP_DTYPES:
            t = NP_DTYPES[dtype]
            order = values[:]
            rng.shuffle(order)
            # one element after the other, each partial sum rounded to the dtype
            acc = np.add.accumulate(np.array(order, dtype=t))[-1]
            assert float(acc) == expected
        else:  # bfloat16: torch's own rounding
            shuffled = torch.tensor(values, dtype=torch.int64)[torch.randperm(world)]
            acc = torch.zeros((), dtype=torch.bfloat16)
            for v in shuffled.tolist():
                acc = acc + torch.tensor(v, dtype=torch.bfloat16)
            assert float(acc) == expected


def test_rank_sets_with_equal_sums_of_r_plus_1_are_told_apart() -> None:
    """The old pattern (r+1)*(i%5+1) could not tell ranks {0,3} from {1,2} (both sum to 5)."""
    world, dtype, seed = 4, "float32", W.pattern_seed(4096)
    differ = sum(
        W.pattern_value(i, 0, world, seed, dtype) + W.pattern_value(i, 3, world, seed, dtype)
        != W.pattern_value(i, 1, world, seed, dtype) + W.pattern_value(i, 2, world, seed, dtype)
        for i in range(1000))
    assert differ > 500


@pytest.mark.parametrize("world", [8, 6000])
def test_a_missing_or_doubled_rank_is_seen(world: int) -> None:
    dtype, seed = "float32", W.pattern_seed(1 << 16)
    k, _, _ = W.pattern_params(world, dtype)
    n = 4000
    missing = doubled = 0
    for i in range(n):
        full = W.pattern_expected(i, world, seed, dtype)
        v5 = W.pattern_value(i, 5, world, seed, dtype)
        v6 = W.pattern_value(i, 6, world, seed, dtype)
        missing += (full - v5) != full
        doubled += (full - v6 + v5) != full  # rank 5's data in rank 6's place
    assert missing == sum(W.pattern_value(i, 5, world, seed, dtype) > 0 for i in range(n))
    assert missing >= n * k / world * 0.5 and doubled >= missing * 0.5


def test_the_size_seed_changes_every_value() -> None:
    a, b = W.pattern_seed(1024, 0), W.pattern_seed(4096, 1)
    same = sum(W.pattern_expected(i, 16, a, "float32") == W.pattern_expected(i, 16, b, "float32")
               for i in range(2000))
    assert same < 200  # a stale buffer of another size fails


@pytest.mark.parametrize(("world", "dtype"), [(3, "float32"), (6000, "float32"),
                                              (40, "bfloat16"), (7, "float16"), (5, "int64")])
def test_torch_fill_and_check_match_the_reference_across_chunks(world: int, dtype: str) -> None:
    n, chunk, seed = 5003, 1024, W.pattern_seed(5003 * 4, 2)
    total = torch.zeros(n, dtype=getattr(torch, dtype))
    for rank in sorted({0, 1, world // 2, world - 1}):
        buf = torch.empty(n, dtype=getattr(torch, dtype))
        W.fill_pattern(torch, buf, rank, world, seed, dtype, chunk=chunk)
        want = [W.pattern_value(i, rank, world, seed, dtype) for i in range(n)]
        assert buf.to(torch.int64).tolist() == want
    # the sum of all ranks checks clean; a single changed element is counted
    for rank in range(world) if world <= 40 else ():
        part = torch.empty(n, dtype=getattr(torch, dtype))
        W.fill_pattern(torch, part, rank, world, seed, dtype, chunk=chunk)
        total += part
    if world <= 40:
        assert W.count_wrong(torch, total, world, seed, dtype, chunk=chunk) == 0
        total[1500] += 1
        total[4999] = float("nan") if total.is_floating_point() else 0
        assert W.count_wrong(torch, total, world, seed, dtype, chunk=chunk) == 2
    zeros = torch.zeros(n)
    assert W.count_nonzero(torch, zeros, chunk=chunk) == 0
    zeros[1025] = 1
    assert W.count_nonzero(torch, zeros, chunk=chunk) == 1


def test_the_pattern_needs_only_chunk_sized_temporaries() -> None:
    """fill_pattern writes chunk by chunk: the largest temporary is CHUNK int64 elements, not
    the buffer (the old fill peaked near 8x the buffer: 8 GiB of float32 needed ~64 GiB)."""
    sizes = []
    real = W._pattern_chunk

    def spy(torch_, start, n, *rest, **kw):
        sizes.append(n)
        return real(torch_, start, n, *rest, **kw)

    W._pattern_chunk = spy
    try:
        buf = torch.empty(3 * W.CHUNK + 7)
        W.fill_pattern(torch, buf, 1, 4, 99, "float32")
        W.count_wrong(torch, buf, 4, 99, "float32")
    finally:
        W._pattern_chunk = real
    assert max(sizes) == W.CHUNK and sum(sizes) == 2 * buf.numel()


def test_device_id_follows_deepspeed_rule() -> None:
    import torch.distributed as dist

    class T:  # a torch stand-in with a chosen version
        def __init__(self, version: str) -> None:
            self.__version__ = version
            self.device = torch.device

    assert W.device_id_kwargs(T("2.13.0"), dist, "nccl", "cuda:1", 2) == {
        "device_id": torch.device("cuda:1")}
    assert W.device_id_kwargs(T("2.6.5+cu124"), dist, "nccl", "cuda:0", 2) == {}
    assert W.device_id_kwargs(T("2.13.0"), dist, "nccl", "cuda:0", 1) == {}
    assert W.device_id_kwargs(T("2.13.0"), dist, "gloo", "cpu", 4) == {}
    assert W.device_id_kwargs(T("2.13.0"), dist, "hccl", "npu:0", 4) == {}


def test_hccl_init_deadline_outlasts_hccl_connect_timeout() -> None:
    assert W.init_deadline("nccl", 30.0, {"HCCL_CONNECT_TIMEOUT": "600"}) == 30.0
    assert W.init_deadline("hccl", 30.0, {}) == 135.0
    assert W.init_deadline("hccl", 30.0, {"HCCL_CONNECT_TIMEOUT": "300"}) == 315.0
    assert W.init_deadline("hccl", 500.0, {"HCCL_CONNECT_TIMEOUT": "300"}) == 500.0
    assert W.init_deadline("hccl", 30.0, {"HCCL_CONNECT_TIMEOUT": "x"}) == 135.0


def test_visible_devices_and_the_fallback_hint(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    assert W.apply_visible_devices("", env) == {} and env == {}
    W.apply_visible_devices("4,5,6,7", env)
    assert env == {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"}
    assert W.accelerator_files(str(tmp_path)) == {"nvidia": 0, "ascend": 0}
    for name in ("nvidia0", "nvidia1", "nvidiactl", "davinci3", "davinci_manager"):
        (tmp_path / name).touch()
    files = W.accelerator_files(str(tmp_path))
    assert files == {"nvidia": 2, "ascend": 1}
    assert "2 NVIDIA device(s)" in W.fallback_hint(files, "x", "2.13.0+cpu", None)
    hint = W.fallback_hint({"nvidia": 0, "ascend": 8}, "torch_npu not usable (ImportError: "
                           "libhccl.so)", "2.1.0", None)
    assert "8 Ascend NPU(s)" in hint and "set_env.sh" in hint and "libhccl.so" in hint
    assert W.fallback_hint({"nvidia": 0, "ascend": 0}, "x", "2", None) == ""


@pytest.mark.parametrize("world", range(1, 17))
def test_worker_busbw_factor_is_the_judges(world: int) -> None:
    """node/allreduce.py keeps its own copy of the all-reduce busbw factor (it cannot import)."""
    assert W.busbw_factor(world) == C.allreduce_busbw_factor(world)
