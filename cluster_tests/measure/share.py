"""D2 over the whole cluster: the share matrix of the output directory. Each node writes its
token once, each node reads every node's token once, each removes its own (storeprobe.py);
cached per path in the session memo, read by test_output_shared's pairs."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from cluster_tests.core.cluster import Cluster
from cluster_tests.core.memokey import MemoKey
from cluster_tests.judge.storage.storejudge import (
    READ,
    REMOVE,
    WRITE,
    ReadBack,
    Removed,
    Written,
)
from cluster_tests.measure import sort_outcomes


@dataclass
class ShareMatrix:
    session: str
    writes: dict[str, Written] = field(default_factory=dict)
    reads: dict[str, Mapping[str, ReadBack]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    removes: dict[str, Removed | BaseException] = field(default_factory=dict)


#: per path: SHARE_MATRIX(path)
SHARE_MATRIX: MemoKey[ShareMatrix] = MemoKey("storage", "share_matrix")


def share_matrix(cluster: Cluster, path: str) -> ShareMatrix:
    """Each node writes its token once, each node reads all tokens once, each removes its own."""
    def compute() -> ShareMatrix:
        m = ShareMatrix(session=secrets.token_hex(6))
        up = [n for n in cluster.names if cluster.login_error(n) is None]
        m.tokens = {n: secrets.token_hex(16) for n in up}

        def write(n: str) -> Written:
            return cluster.probe(n, WRITE, path=path, session=m.session, owner=n,
                                 token=m.tokens[n])

        try:
            sort_outcomes(zip(up, cluster.pool.map(write, up), strict=False), m.writes, m.errors)
            writers = [n for n, r in m.writes.items() if r.ok]

            def read(n: str) -> Mapping[str, ReadBack]:
                return cluster.probe(n, READ, path=path, session=m.session, writers=writers)

            sort_outcomes(zip(up, cluster.pool.map(read, up), strict=False), m.reads, m.errors)
        finally:
            written = list(m.writes)

            def remove(n: str) -> Removed:
                return cluster.probe(n, REMOVE, path=path, session=m.session, owner=n)

            m.removes = dict(zip(written, cluster.pool.map(remove, written), strict=False))
        return m
    return cluster.memo(SHARE_MATRIX(path), compute)
