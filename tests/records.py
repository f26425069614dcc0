"""The typed records the collective checks put on their tests (report/colltable.py), built for
the tests of the reports that read them."""

from __future__ import annotations

from cluster_tests.report.colltable import AllReduceResult, SizeResult


def c1_property(sizes: dict[int, tuple[float, float, float]], world_size: int = 3,
                backend: str = "gloo") -> dict[str, object]:
    """C1's record property, of a run that measured {size: (time_us, algbw, busbw)}."""
    rows = tuple(SizeResult(size, size // 4, "float32", t, algbw, busbw, 0)
                 for size, (t, algbw, busbw) in sizes.items())
    result = AllReduceResult(world_size, backend, {}, "", None, rows, "ok", "")
    return {AllReduceResult.PROPERTY: result.to_json()}
