"""Just Cluster's session memo, its own code on a bare object (thread-safe futures, a value
kept alone once computed), for the tests of what is built on it without a cluster."""

from __future__ import annotations

import threading
from typing import Any

from cluster_tests.core.cluster import Cluster


class SessionMemo:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._memo: dict[Any, Any] = {}
        self._values: dict[Any, Any] = {}
        self._background: list[Any] = []

    memo = Cluster.memo
    cached = Cluster.cached
    _computed = Cluster._computed
    _failed = Cluster._failed
    in_background = Cluster.in_background
