"""Just the cluster's session memo (core/memo.py: thread-safe futures, a value kept alone once
computed, the background phases), for the tests of what is built on it without a cluster."""

from __future__ import annotations

from cluster_tests.core.memo import Memo


class SessionMemo(Memo):
    """The memo, as a stand-in for the cluster whose `memo`, `cached` and `in_background` the
    code under test calls."""
