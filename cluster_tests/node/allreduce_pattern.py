"""Part of node/allreduce.py (sent before it, node.PARTS): the verifiable pattern every rank
fills its buffer with and checks its result against (torch is passed in; nothing else is
imported here but the standard library)."""

import functools

# Largest integer N such that every integer in [0, N] is exact in the dtype.
EXACT_LIMIT = {
    "float64": 2**53,
    "float32": 2**24,
    "float16": 2**11,
    "bfloat16": 2**8,
    "int32": 2**31 - 1,
    "int64": 2**63 - 1,
}


# --- the verifiable pattern -------------------------------------------------------------------
#
# In the spirit of nccl-tests' verifiable/verifiable.cu (genInput/genOutput): every element of
# every rank's input is a pseudo-random function of (seed, element index, rank), and the expected
# sum of every element is known in closed form, so each rank checks its whole result without
# anyone else's data. Per element i:
#
#   h1, h2, h3 = three rounds of a multiplicative hash of (i + seed) modulo the prime 2^31-1
#   q(r)       = (r * m + h1 mod W) mod W   a permutation of the ranks (m coprime to W, one of a
#                                            few multipliers picked by h2): each element has its
#                                            own rank order
#   input      = base + q  if q < K  else 0,   base = 1 + h3 mod B
#   expected   = K * base + K (K - 1) / 2
#
# K ranks are "active" at each element (all of them up to K_max; K_max 5785 in float32, 56 in
# float16, 16 in bfloat16) with distinct contributions, so a missing, doubled or substituted rank
# changes the sum wherever it is active (a fraction K/W of the elements, never the same ones), and
# a block of data landing at the wrong offset carries another element's base. Every value and
# every partial sum is a non-negative integer <= the dtype's exact-integer limit L
# (K (K - 1) / 2 + K B <= L), so any reduction order (ring, tree, NVLS, in fp32 or the dtype) is
# exact: a single wrong element is real. Computed in chunks of CHUNK elements, so the check needs
# one buffer plus a few chunk-sized temporaries (nccl-tests: send + receive + expected = 3x).

HASH_P = 2147483647  # 2^31 - 1, prime
HASH_A = (48271, 16807, 69621)
HASH_C = (12345, 54321, 99991)
MULTIPLIER_SEEDS = (1, 7919, 104729, 1299709, 15485863, 179424673, 982451653, 2038074743)
PATTERN_MIN_BASE = 8
CHUNK = 1 << 21


@functools.lru_cache(maxsize=None)
def pattern_params(world: int, dtype: str) -> tuple:
    """(K active ranks per element, B base values, multipliers) for ``world`` ranks in ``dtype``:
    the largest K <= world with K(K-1)/2 + K*B <= L for B >= PATTERN_MIN_BASE (B <= 2^31-1).
    Kept once worked out: :func:`pattern_value`, the per-element reference, asks again for every
    rank of every element (12 us a time at 100,000 ranks)."""
    if world < 1:
        raise ValueError(f"world size must be >= 1, got {world}")
    limit = EXACT_LIMIT[dtype]
    k = min(world, 1 + int((2 * limit) ** 0.5))
    while k > 1 and k * (k - 1) // 2 + k * PATTERN_MIN_BASE > limit:
        k -= 1
    base = min((limit - k * (k - 1) // 2) // k, HASH_P - 1)
    mults = []
    for seed in MULTIPLIER_SEEDS:
        m = seed % world
        if (m or world == 1) and _gcd(m, world) == 1 and m not in mults:
            mults.append(m)
    return k, base, tuple(mults) or (1,)


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def pattern_seed(nbytes: int, salt: int = 0) -> int:
    """One seed per size (and check), the same on every rank."""
    return (nbytes * 2654435761 + salt * 40503 + 1) % HASH_P


def _hashes(i: int, seed: int) -> tuple:
    h1 = ((i + seed) % HASH_P * HASH_A[0] + HASH_C[0]) % HASH_P
    h2 = (h1 * HASH_A[1] + HASH_C[1]) % HASH_P
    h3 = (h2 * HASH_A[2] + HASH_C[2]) % HASH_P
    return h1, h2, h3


def pattern_value(i: int, rank: int, world: int, seed: int, dtype: str) -> int:
    """Rank ``rank``'s input at element ``i`` (pure Python: the reference for the tests)."""
    k, base_range, mults = pattern_params(world, dtype)
    h1, h2, h3 = _hashes(i, seed)
    q = (rank * mults[h2 % len(mults)] + h1 % world) % world
    return 1 + h3 % base_range + q if q < k else 0


def pattern_expected(i: int, world: int, seed: int, dtype: str) -> int:
    """The sum over all ranks at element ``i`` (closed form)."""
    k, base_range, _ = pattern_params(world, dtype)
    return k * (1 + _hashes(i, seed)[2] % base_range) + k * (k - 1) // 2


def _pattern_chunk(torch: object, start: int, n: int, device: object, world: int, seed: int,
                   params: tuple, rank: object = None) -> object:
    """int64 tensor of elements [start, start+n): rank ``rank``'s input, or the expected sums."""
    k, base_range, mults = params
    i = torch.arange(start, start + n, dtype=torch.int64, device=device)  # type: ignore
    h1 = ((i + seed) % HASH_P * HASH_A[0] + HASH_C[0]) % HASH_P
    del i
    h2 = (h1 * HASH_A[1] + HASH_C[1]) % HASH_P
    base = (h2 * HASH_A[2] + HASH_C[2]) % HASH_P % base_range + 1
    if rank is None:
        return base * k + k * (k - 1) // 2
    table = torch.tensor(mults, dtype=torch.int64, device=device)  # type: ignore
    q = (table[h2 % len(mults)] * int(rank) + h1 % world) % world
    del h1, h2
    return torch.where(q < k, base + q, torch.zeros_like(q))  # type: ignore[attr-defined]


def fill_pattern(torch: object, buf: object, rank: int, world: int, seed: int, dtype: str,
                 chunk: int = CHUNK) -> None:
    """Write rank ``rank``'s input into ``buf`` (exact: every value is <= the dtype's limit)."""
    params = pattern_params(world, dtype)
    n = buf.numel()  # type: ignore[attr-defined]
    for start in range(0, n, chunk):
        part = _pattern_chunk(torch, start, min(chunk, n - start), buf.device, world, seed,  # type: ignore
                              params, rank)
        buf[start:start + part.numel()].copy_(part)  # type: ignore[index]


def count_wrong(torch: object, buf: object, world: int, seed: int, dtype: str,
                chunk: int = CHUNK) -> int:
    """Elements of ``buf`` that differ from the expected sum (compared in the dtype: exact)."""
    params = pattern_params(world, dtype)
    n = buf.numel()  # type: ignore[attr-defined]
    wrong = 0
    for start in range(0, n, chunk):
        part = buf[start:start + chunk]  # type: ignore[index]
        want = _pattern_chunk(torch, start, part.numel(), buf.device, world, seed, params)  # type: ignore
        wrong += int((part != want.to(part.dtype)).sum().item())
    return wrong


def count_nonzero(torch: object, buf: object, chunk: int = CHUNK) -> int:
    """Non-zero elements of ``buf``, chunk by chunk (no buffer-sized temporary)."""
    n = buf.numel()  # type: ignore[attr-defined]
    return sum(int(torch.count_nonzero(buf[s:s + chunk]).item())  # type: ignore
               for s in range(0, n, chunk))
