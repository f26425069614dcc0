"""A section of a node script, and how its answer becomes typed facts.

A node script (`cluster_tests/node/<script>`) answers each section it is asked with JSON. That
JSON is read once, where it arrives (`core/cluster.py`: a probe's own command, a node's bundle of
probes, a Slurm step, another xdist worker's result), into the frozen dataclass its `Probe`
names; every check, measurement and report then reads that one value, never the JSON::

    DIR = Probe("storeprobe.py", "dir", DirFacts.read)
    facts = cluster.probe(node, DIR, path="/ckpt")       # a DirFacts

A reader raises `FactsError` on an answer it cannot read (a node script of another version):
the probe then fails, naming the node and the section, as a probe whose script failed does.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class FactsError(ValueError):
    """A node script's answer does not have the shape its reader expects."""


@dataclass(frozen=True)
class Probe(Generic[T]):
    """One section of a node script, and the reader of its JSON answer."""

    script: str  # "storeprobe.py": a file in cluster_tests/node/
    section: str  # "dir": its section_dir(params) function
    read: Callable[[object], T] = field(compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.script}:{self.section}"


def _as_is(data: object) -> Any:
    return data


def untyped(script: str, section: str) -> Probe[Any]:
    """A section whose answer is still read as the JSON it is (no reader written yet)."""
    return Probe(script, section, _as_is)


# -- helpers for readers ------------------------------------------------------------------------


def obj(value: object, what: str) -> Mapping[str, object]:
    """`value` as a JSON object, or FactsError naming `what`."""
    if not isinstance(value, Mapping):
        raise FactsError(f"{what}: expected an object, got {type(value).__name__}")
    return value


def text(value: object, default: str = "") -> str:
    return value if isinstance(value, str) else default


def opt_text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def integer(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def opt_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def number(value: object, default: float = 0.0) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return default


def flag(value: object) -> bool:
    return value is True


def texts(value: object) -> tuple[str, ...]:
    """A JSON list of strings (anything else in it left out)."""
    if not isinstance(value, Sequence) or isinstance(value, str):
        return ()
    return tuple(v for v in value if isinstance(v, str))


def text_map(value: object) -> Mapping[str, str]:
    """A JSON object of strings (other values left out)."""
    if not isinstance(value, Mapping):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def opt_text_map(value: object) -> Mapping[str, str | None]:
    """A JSON object of strings or nulls."""
    if not isinstance(value, Mapping):
        return {}
    return {str(k): (v if isinstance(v, str) else None) for k, v in value.items()}
