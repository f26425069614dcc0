"""The order the checklist runs in, and what an item's parameters say of the nodes it touches.

The checks run in the checklist's own order (core.sections: H, S, N, F, E, A, R, D, C, T), not
alphabetically: the quick checks that explain later failures come first, the long phases last;
within a section, in collection order.  Where the session runs the launch rehearsal, S5's legs
from the rank-0 node follow its last reader (`pdsh_legs_with_the_rehearsal`).
"""

from __future__ import annotations

from types import ModuleType

import pytest

from cluster_tests.core import checkhooks, sections
from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core import testids as ids

#: the parameters of a check that name nodes: one node, or two (a pair, a leg)
Params = dict[str, "str | tuple[str, str]"]


def item_params(item: pytest.Item) -> Params:
    """The item's cluster parameters; an empty parameter set (a hostfile with no valid host)
    leaves pytest's NOTSET in place of a node or pair, which is no parameter at all."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return {k: v for k, v in params.items() if isinstance(v, (str, tuple))}


def touched_nodes(item: pytest.Item) -> list[str]:
    """The nodes the item's test talks to (not the launcher, nor a pair's `*`)."""
    params = item_params(item)
    touched = [v for k in ("node", "rank0_node") if isinstance(v := params.get(k), str)]
    pair = params.get("pair")
    if isinstance(pair, tuple):
        touched.extend(n for n in pair if n != pairs_mod.ANY)
    site = params.get("launch_site")
    if isinstance(site, str) and site != ids.LAUNCHER:
        touched.append(site)
    for legs in ("pdsh_leg", "rendezvous_leg"):
        ends = params.get(legs)
        if isinstance(ends, tuple):
            touched.extend(n for n in ends if n != ids.LAUNCHER)
    return touched


def _section(item: pytest.Item) -> int:
    marks = [sections.BY_MARKER[m.name] for m in item.iter_markers()
             if m.name in sections.BY_MARKER]
    return marks[0].order if marks else len(sections.SECTIONS)


def in_checklist_order(items: list[pytest.Item], checks: list[pytest.Item]) -> None:
    """`items` sorted in place: what is not a check first, then the `checks` by section."""
    position = {id(item): i for i, item in enumerate(items)}
    is_check = {id(item) for item in checks}
    items.sort(key=lambda i: (_section(i) if id(i) in is_check else -1, position[id(i)]))


def _modules(items: list[pytest.Item]) -> list[ModuleType]:
    found = dict.fromkeys(getattr(item, "module", None) for item in items)
    return [m for m in found if isinstance(m, ModuleType)]


def pdsh_legs_with_the_rehearsal(items: list[pytest.Item], rank0: list[str]) -> None:
    """Where the session runs the launch rehearsal (a test that reads it is selected: each
    check module's REHEARSAL_READERS), S5's legs from the rank-0 node are read from its pdsh
    run (checks/ssh.py): they run right after the last of those readers, not in S's place,
    where they would hold every check between S and E back until the rehearsal's imports
    are done (those checks then ran one after another at its end, on one core)."""
    readers = checkhooks.rehearsal_readers(_modules(items))
    last = max((i for i, item in enumerate(items)
                if getattr(item, "originalname", None) in readers), default=None)
    if last is None:
        return
    legs = [item for item in items[:last] if getattr(item, "originalname", None) == ids.PDSH.name
            and item_params(item).get("pdsh_leg", ("",))[0] in rank0]
    if not legs:
        return
    moved = {id(item) for item in legs}
    anchor = items[last]
    kept = [item for item in items if id(item) not in moved]
    at = next(i for i, item in enumerate(kept) if item is anchor) + 1
    items[:] = kept[:at] + legs + kept[at:]


def pair_sources(items: list[pytest.Item]) -> dict[str, list[str]]:
    """{test function: the nodes its pair items run from}, each node once, in item order."""
    sources: dict[str, list[str]] = {}
    for item in items:
        pair = item_params(item).get("pair")
        if isinstance(pair, tuple) and pair[0] != pairs_mod.ANY:
            sources.setdefault(getattr(item, "originalname", item.name), []).append(pair[0])
    return {k: list(dict.fromkeys(v)) for k, v in sources.items()}


def selected_modules(items: list[pytest.Item]) -> list[ModuleType]:
    """The modules of the selected items, in their order."""
    return _modules(items)
