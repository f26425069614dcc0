"""The node table's columns are declared by the sections; the layout travels with the rows."""

from __future__ import annotations

from typing import Any

from cluster_tests.core import nodetable
from cluster_tests.core.nodetable import NodeColumn, NodeTable
from cluster_tests.report.summary import node_columns


class _Memo:
    """Just `cached`, which is all a column reads."""

    def __init__(self, facts: dict) -> None:
        self.facts = facts

    def cached(self, key):
        return self.facts.get(key)


def test_sections_declare_their_columns_and_layout():
    import cluster_tests.checks.env  # noqa: F401 - declares E3's versions
    import cluster_tests.checks.network  # noqa: F401 - declares the interface

    lay = nodetable.layout()
    assert lay["interface"] == (5, False)
    assert lay["torch"] == (7, True) and lay["cann"] == (nodetable.LAST, True)
    assert lay["python"] == (6, True)  # declared by the table (base probe) and by E3


def test_build_fills_declared_cells_in_table_order(monkeypatch):
    monkeypatch.setattr(nodetable, "_DECLARED", {})
    def zeta(memo, node):  # the stand-in memo's keys are plain tuples
        return memo.cached(("z", node))

    def python(memo, node):
        return memo.cached(("py", node))

    nodetable.declare(NodeColumn("zeta", zeta),
                      NodeColumn("python", python, rank=6, varying_only=True))

    def twice(cluster, node):
        return "twice"

    nodetable.declare(NodeColumn("zeta", twice))  # another reader: overrides when it has a cell
    rows = {"node1": {"reachable": "yes", "python": "3.9.0"}, "node2": {"reachable": "yes"}}
    memo: Any = _Memo({("z", "node1"): "1", ("py", "node1"): "3.11.7"})  # a stand-in for a Cluster
    table = nodetable.build(memo, rows)
    assert table["node1"] == {"reachable": "yes", "python": "3.11.7", "zeta": "twice"}
    assert list(table["node1"]) == ["reachable", "python", "zeta"]
    assert table.layout["zeta"] == (nodetable.LAST, False)


def test_declaring_again_adds_nothing(monkeypatch):
    monkeypatch.setattr(nodetable, "_DECLARED", {})

    def read(cluster, node):
        return "x"

    nodetable.declare(NodeColumn("a", read))
    nodetable.declare(NodeColumn("a", read))
    assert len(nodetable._DECLARED["a"]) == 1


def test_a_table_lays_out_with_its_own_layout_not_this_process():
    """Under xdist the controller declares no section column: the workers' layout decides."""
    facts = NodeTable({"node1": {"reachable": "yes", "gadget": "1.0", "rdma": "2/2 ports active"},
                       "node2": {"reachable": "yes", "gadget": "1.0", "rdma": "1/2 ports active"}},
                      {"gadget": (1, True), "rdma": (0, False)})
    columns, same = node_columns(facts)
    assert columns == ["node", "rdma", "reachable"] and same == {"gadget": "1.0"}
    plain, same = node_columns(dict(facts))  # no layout: undeclared columns by name, all shown
    assert plain == ["node", "reachable", "gadget", "rdma"] and same == {}


def test_merge_keeps_the_lowest_rank_and_any_varying():
    table = NodeTable({"node1": {"a": "1"}}, {"a": (3, False)})
    table.merge({"node1": {"b": "2"}, "node2": {"a": "9"}}, {"a": (1, True), "b": (2, False)})
    assert table == {"node1": {"a": "1", "b": "2"}, "node2": {"a": "9"}}
    assert table.layout == {"a": (1, True), "b": (2, False)}
