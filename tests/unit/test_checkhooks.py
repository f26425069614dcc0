"""core/checkhooks.py: what the check modules declare besides their tests, read through the
protocols (not found by name), on the real check modules."""

from __future__ import annotations

import importlib
from types import ModuleType

from cluster_tests.core import checkhooks, sections
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import BASE
from cluster_tests.core.settings import Settings


def _modules() -> list[ModuleType]:
    return [importlib.import_module(f"cluster_tests.checks.{s.module}") for s in sections.SECTIONS]


def test_a_module_that_declares_a_hook_has_it_whole() -> None:
    """A module with a hook's name has the protocol (a callable, a frozenset), so that none is
    passed over for a typo'd or half-declared hook."""
    for module in _modules():
        if hasattr(module, "node_probes"):
            assert isinstance(module, checkhooks.DeclaresProbes), module
        if hasattr(module, "session_start"):
            assert isinstance(module, checkhooks.StartsPhases), module
        if hasattr(module, "REHEARSAL_READERS"):
            assert isinstance(module, checkhooks.ReadsRehearsal), module
            assert isinstance(module.REHEARSAL_READERS, frozenset)


def test_node_probes_start_with_the_base_and_name_each_probe_once() -> None:
    modules = _modules()
    probes = checkhooks.node_probes(Settings(), modules + modules)
    assert probes[0] == (BASE, {})
    assert len(probes) == len(set(map(repr, probes))) > 1
    assert checkhooks.node_probes(Settings(), []) == ((BASE, {}),)


def test_the_rehearsal_readers_of_every_module() -> None:
    readers = checkhooks.rehearsal_readers(_modules())
    assert {ids.LAUNCH_REHEARSAL.name, ids.SOCKET_IFNAME.name} <= readers
    assert ids.PDSH.name not in readers
