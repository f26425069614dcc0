"""What a check module (cluster_tests/checks/<section>.py) may declare for the run besides its
tests, as protocols: each is optional, and a module that declares one has it whole.

- `node_probes(settings)`: the per-node probes its tests read (`Cluster.prefetch` asks them of
  every node at once);
- `session_start(cluster, selected)`: background phases to start after collection, given the
  names of the selected test functions;
- `REHEARSAL_READERS`: the names of its tests that read the launch rehearsal (the plugin
  orders S5's legs from the rank-0 node after the last of them).
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Protocol, runtime_checkable

from cluster_tests.core.cluster import BASE, Cluster, Declared
from cluster_tests.core.settings import Settings


@runtime_checkable
class DeclaresProbes(Protocol):
    def node_probes(self, settings: Settings) -> list[Declared]: ...


@runtime_checkable
class StartsPhases(Protocol):
    def session_start(self, cluster: Cluster, selected: frozenset[str]) -> None: ...


@runtime_checkable
class ReadsRehearsal(Protocol):
    REHEARSAL_READERS: frozenset[str]


def node_probes(settings: Settings, modules: Iterable[ModuleType]) -> tuple[Declared, ...]:
    """The per-node probes that the selected check modules ask of every node they touch, for
    `Cluster.prefetch`: base first, then what each module declares, with the parameters its
    tests pass (a mismatch only costs a second command)."""
    probes: list[Declared] = [(BASE, {})]
    for module in modules:
        if isinstance(module, DeclaresProbes):
            for probe in module.node_probes(settings):
                if probe not in probes:
                    probes.append(probe)
    return tuple(probes)


def start_phases(modules: Iterable[ModuleType], cluster: Cluster,
                 selected: frozenset[str]) -> None:
    """Each module's background phases for the `selected` tests."""
    for module in modules:
        if isinstance(module, StartsPhases):
            module.session_start(cluster, selected)


def rehearsal_readers(modules: Iterable[ModuleType]) -> frozenset[str]:
    """The tests of `modules` that read the launch rehearsal."""
    return frozenset().union(*(m.REHEARSAL_READERS for m in modules
                               if isinstance(m, ReadsRehearsal)))
