"""Whole-cluster measurements over SSH (see the README's "Where code goes")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


def sort_outcomes(results: Iterable[tuple[str, T | BaseException]], ok: dict[str, T],
                  errors: dict[str, str]) -> None:
    """Each node's result of a `cluster.pool.map` into `ok`, or its failure (the exception's
    text) into `errors`; a node that failed in an earlier phase keeps that first failure."""
    for node, res in results:
        if isinstance(res, BaseException):
            errors.setdefault(node, str(res))
        else:
            ok[node] = res
