"""Where the ranks were at a deadline: faulthandler dumps parsed and grouped (judge/stacks.py),
on REAL dumps relayed by the supervisor (tests/data/samples/stacks_*.json, see SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

from cluster_tests.judge import stacks as S

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "samples"


def dumps(name: str) -> dict[int, str]:
    events = json.loads((SAMPLES / name).read_text())
    out: dict[int, str] = {}
    for e in events:
        if e["event"] == "stack":
            out[e["stack_rank"]] = out.get(e["stack_rank"], "") + e["text"]
    return out


HOSTS = {0: "node1", 1: "node1", 2: "node3"}


def test_parse_finds_both_threads_and_the_main_one() -> None:
    text = dumps("stacks_gloo_allreduce_hang.json")[0]
    threads = S.parse(text)
    assert len(threads) == 2
    main = S.main_thread(threads)
    assert main is not None and main.current
    assert main.frames[0].func == "all_reduce"
    assert main.frames[0].file.endswith("torch/distributed/distributed_c10d.py")
    assert [f.func for f in main.frames[-3:]] == ["main", "<module>", "<module>"]
    watchdog = next(t for t in threads if t is not main)
    assert watchdog.frames[-1].func == "_bootstrap"


def test_where_names_the_call_and_our_step() -> None:
    text = dumps("stacks_gloo_allreduce_hang.json")[1]
    place = S.where(S.main_thread(S.parse(text)))
    assert place == "in all_reduce (allreduce.py timed_loop)"


def test_all_in_all_reduce_is_one_group_and_no_node_differs() -> None:
    stacks = dumps("stacks_gloo_allreduce_hang.json")
    g = S.group(stacks, HOSTS, ranks=[0, 1, 2])
    assert len(g.groups) == 1 and g.groups[0].ranks == [0, 1, 2]
    assert g.groups[0].nodes == ["node1", "node3"]
    assert g.differ == [] and g.missing == []
    assert g.lines(HOSTS)[0].startswith("ranks 0,1 (node1), rank 2 (node3) in all_reduce")
    assert g.lines(HOSTS)[1] == "every rank was in the same place: the stacks single out no node"


def test_ranks_in_different_stages_are_grouped_and_the_odd_node_named() -> None:
    stacks = dumps("stacks_gloo_connect_vs_rendezvous.json")
    g = S.group(stacks, HOSTS, ranks=[0, 1, 2])
    assert [grp.ranks for grp in g.groups] == [[0, 1], [2]]
    assert g.groups[0].where == "in rendezvous (allreduce.py)"
    assert g.groups[1].where == "in connect (allreduce.py)"
    assert g.differ == ["node3"]
    lines = g.lines(HOSTS)
    assert lines[0].startswith("ranks 0,1 (node1) in rendezvous")
    assert lines[1].startswith("rank 2 (node3) in connect")


def test_a_rank_without_a_stack_is_listed() -> None:
    stacks = dumps("stacks_gloo_connect_vs_rendezvous.json")
    del stacks[1]
    g = S.group(stacks, HOSTS, ranks=[0, 1, 2])
    assert g.missing == [1]
    assert g.lines(HOSTS)[-1].startswith("rank 1 (node1): no stack")
    # one rank each: no group is bigger, no node is named
    assert g.differ == []


def test_garbage_is_no_stack() -> None:
    assert S.parse("Traceback (most recent call last):\n  nothing\n") == []
    assert S.where(S.main_thread([])) == "no stack"
