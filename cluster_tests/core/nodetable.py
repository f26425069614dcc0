"""The node table of the reports (terminal summary, `summary.json`, HTML): a row per node, its
columns declared by the sections that learn the facts.

A section declares a column next to the test that fills the fact, in its check module:

    nodetable.declare(NodeColumn("interface", _interface, rank=5))

where `_interface(cluster, node)` reads the session memo only (`cluster.cached(KEY)`), so a
column costs no SSH, and returns the cell (None or "" when the run did not learn it).  The table
itself declares the columns every run has (reachable, login, slots, hostname and the base
probe's Python).  A column name may be declared twice (E3's Python version overrides the base
probe's): each filled cell overwrites the one declared before it.

The reports need only the layout (`{column: (rank, varying_only)}`), which travels with the rows
(`NodeTable.layout`), so that the xdist controller, which imports no check module, lays out the
columns its workers declared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

#: what a column's reader reads the node's cell from: the run's cluster (`Cluster.node_table`
#: passes itself); this module needs nothing of it, so that report/ may use the table
View = TypeVar("View")

#: {column: (rank, varying_only)}: lower ranks first (equal ranks by name); a varying-only column
#: (a version) is shown per node only where the nodes differ, else once ("same on every node")
Layout = dict[str, tuple[int, bool]]
#: the rank of a column declared without one: after the ranked ones, by name
LAST = 100


@dataclass(frozen=True)
class NodeColumn(Generic[View]):
    name: str
    read: Callable[[View, str], str | None]
    rank: int = LAST
    varying_only: bool = False


class NodeTable(dict[str, dict[str, str]]):
    """{node: {column: cell}} and the layout of its columns."""

    def __init__(self, rows: dict[str, dict[str, str]] | None = None,
                 layout: Layout | None = None) -> None:
        super().__init__(rows or {})
        self.layout: Layout = dict(layout or {})

    def merge(self, rows: dict[str, dict[str, str]], layout: Layout) -> None:
        """Add another process's rows (cells it has overwrite ours) and layout."""
        for name, row in rows.items():
            self.setdefault(name, {}).update(row)
        self.layout = merge_layouts(self.layout, layout)


#: the columns every run has, filled by `Cluster.node_table` itself from the login and the base
#: probe (only their layout is declared here)
CORE_LAYOUT: Layout = {"reachable": (0, False), "login": (1, False), "hostname": (2, False),
                       "slots": (3, False), "python": (6, True)}

_DECLARED: dict[str, list[NodeColumn[Any]]] = {}


def declare(*columns: NodeColumn[Any]) -> None:
    """Declare columns; idempotent, a reader being known by its module and qualified name (so
    a module imported again declares nothing new)."""
    for col in columns:
        have = _DECLARED.setdefault(col.name, [])
        if not any(c.read.__qualname__ == col.read.__qualname__
                   and c.read.__module__ == col.read.__module__ for c in have):
            have.append(col)


def layout() -> Layout:
    """The layout of the table's own columns and of every column declared in this process."""
    return merge_layouts(CORE_LAYOUT, {
        name: (min(c.rank for c in cols), any(c.varying_only for c in cols))
        for name, cols in _DECLARED.items()})


def merge_layouts(a: Layout, b: Layout) -> Layout:
    out = dict(a)
    for name, (rank, varying) in b.items():
        have = out.get(name)
        out[name] = (rank, varying) if have is None else (min(have[0], rank), have[1] or varying)
    return out


def column_order(names: Iterable[str], lay: Layout) -> list[str]:
    """`names` in table order: by declared rank, then by name (undeclared ones last)."""
    return sorted(set(names), key=lambda n: (lay.get(n, (LAST, False))[0], n))


def build(cluster: View, base_rows: dict[str, dict[str, str]]) -> NodeTable:
    """The table: `base_rows` (the nodes the run logged in to, with the cluster's own cells)
    with every declared column's cell filled from the memo."""
    table = NodeTable(layout=layout())
    columns = [c for cols in _DECLARED.values() for c in cols]
    for name, row in base_rows.items():
        for col in columns:
            cell = col.read(cluster, name)
            if cell:
                row[col.name] = cell
        table[name] = {k: row[k] for k in column_order(row, table.layout)}
    return table

