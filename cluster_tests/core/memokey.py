"""Typed keys for the session memo (`Cluster.memo`, `Cluster.cached`).

A key is declared once, as a module constant, by the module that produces the fact:
``MTUS: MemoKey[dict[str, tuple[str, int]]] = MemoKey("netcheck", "mtus")``; a key with a
per-node (or per-path) part is made by calling it: ``PORTS(node)``.  A key is a tuple, so it
hashes and compares like the bare tuple it replaces.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from cluster_tests.judge.common.basefacts import BaseFacts

T = TypeVar("T")


class MemoKey(tuple, Generic[T]):
    """A memo key whose value has type `T`."""

    def __new__(cls, *parts: str) -> MemoKey[T]:
        return super().__new__(cls, parts)

    def __call__(self, *more: str) -> MemoKey[T]:
        """This key narrowed by `more` (a node name, a path)."""
        return MemoKey(*self, *more)


# -- the keys of the core's own facts ----------------------------------------------------------
#: a node's login (its seconds), per node: LOGIN(node)
LOGIN: MemoKey[float] = MemoKey("login")


class Encoded(str):
    """A probe parameter encoded to JSON once, for the many probes that are given the same one
    (the port matrix's target list: every node gets every peer's ports, 600 KB at 4096 nodes).
    Its digest stands for it in memo keys, and `Cluster` splices its text into each probe's
    parameters (`dumps`) instead of encoding it again for every node."""

    digest: str

    def __new__(cls, value: object) -> Encoded:
        text = json.dumps(value, separators=(",", ":"))
        obj = super().__new__(cls, text)
        obj.digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
        return obj


def _marked(value: object, found: list[Encoded]) -> object:
    if isinstance(value, Encoded):
        found.append(value)
        return f"\0ct-encoded-{len(found) - 1}\0"
    if isinstance(value, dict):
        return {k: _marked(v, found) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_marked(v, found) for v in value]
    return value


def dumps(value: object) -> str:
    """`json.dumps(value)`, with every `Encoded` in it written as the JSON it already is."""
    found: list[Encoded] = []
    text = json.dumps(_marked(value, found))
    for i, raw in enumerate(found):
        text = text.replace(json.dumps(f"\0ct-encoded-{i}\0"), raw, 1)
    return text


def probe_key(node: str, section: str, params: Mapping[str, object] | None = None,
              script: str = "probe.py") -> MemoKey[Any]:
    """The key of `Cluster.probe(node, section, script=script, **params)`: the parameters as
    JSON, or their digest when long (the port matrix's `connect` names every peer: kept whole,
    1024 nodes' keys held 100 MB for the whole session, 4096 nodes' 1.6 GB); an `Encoded`
    parameter as its digest."""
    if not params:
        return _plain_probe_key(node, section, script)
    if any(isinstance(v, Encoded) for v in params.values()):
        params = {k: v.digest if isinstance(v, Encoded) else v for k, v in params.items()}
    text = json.dumps(params, sort_keys=True)
    if len(text) > 256:
        text = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return MemoKey("probe", node, script, section, text)


@functools.lru_cache(maxsize=262144)  # the nodes' sections: 120,000 at 4096 nodes
def _plain_probe_key(node: str, section: str, script: str) -> MemoKey[Any]:
    """probe_key without parameters, made once (asked by every check that reads a node's facts;
    its key was encoded again each time)."""
    return MemoKey("probe", node, script, section, "{}")


@functools.lru_cache(maxsize=65536)
def login_key(node: str) -> MemoKey[float]:
    """LOGIN(node), made once per node (asked twice per pair of a per-node item's peers)."""
    return LOGIN(node)


def base_key(node: str) -> MemoKey[BaseFacts]:
    """The key of a node's base facts (`Cluster.base`), for readers of the memo (made once per
    node, by `_plain_probe_key`'s cache: the pair checks ask for both ends' on every pair)."""
    return _plain_probe_key(node, "base", "probe.py")
