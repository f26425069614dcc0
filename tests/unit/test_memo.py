"""The session memo (core/memo.py): each key computed once however many
threads ask at once; a value kept alone (no Future per key once computed: 20,000 per 1024
nodes); a failure kept and re-raised to every asker, never computed again."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from memostub import SessionMemo


def test_a_key_is_computed_once_and_kept_without_its_future():
    m: Any = SessionMemo()
    calls: list[int] = []

    def compute() -> str:
        calls.append(1)
        time.sleep(0.2)  # every other asker arrives while it runs
        return "facts"

    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda _: m.memo(("probe", "node1"), compute), range(64)))
    assert got == ["facts"] * 64 and len(calls) == 1
    assert m._memo == {} and m._values == {("probe", "node1"): "facts"}
    assert m.memo(("probe", "node1"), compute) == "facts" and len(calls) == 1
    assert m.cached(("probe", "node1")) == "facts" and not m.failed(("probe", "node1"))


def test_a_failure_is_kept_and_raised_to_every_asker():
    m: Any = SessionMemo()
    calls: list[int] = []

    def compute() -> str:
        calls.append(1)
        time.sleep(0.1)
        raise OSError("node3: connection refused")

    def ask(_: int) -> str:
        try:
            return m.memo(("login", "node3"), compute)
        except OSError as exc:
            return str(exc)

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(ask, range(32)))
    assert got == ["node3: connection refused"] * 32 and len(calls) == 1
    with pytest.raises(OSError):
        m.memo(("login", "node3"), compute)
    assert len(calls) == 1 and m.failed(("login", "node3"))
    assert m.cached(("login", "node3")) is None and ("login", "node3") not in m._values
