"""Where the ranks were at a deadline: faulthandler dumps parsed and grouped
(judge/common/stacks.py), on REAL dumps relayed by the supervisor (tests/data/samples/stacks_*.json,
see SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cluster_tests.judge.common import stacks as S

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


# The three ranks' connections at their init deadline, as node/allreduce.py tcp_peers read them
# on the simulated cluster (node3's firewall drops inbound high ports but the store's 29500):
# tests/e2e/test_e2e_collective.py test_communicator_init_hang_fails_at_its_deadline, run
# 2026-12-05, rank<R>-<node>.sockets.json of its report directory.
HANG_JSON: dict[int, dict[str, list[Any]]] = {
    0: {"syn_sent": [], "established": [[39525, "10.3.66.2:41544"], [29500, "10.3.66.2:54112"],
                                        [29500, "10.3.66.3:60564"], [46712, "10.3.66.1:29500"],
                                        [29500, "10.3.66.1:46712"]]},
    1: {"syn_sent": [], "established": [[41544, "10.3.66.1:39525"], [54112, "10.3.66.1:29500"]]},
    2: {"syn_sent": ["10.3.66.1:39525"], "established": [[60564, "10.3.66.1:29500"]]},
}
HANG_SOCKETS = {rank: S.Sockets.read(raw) for rank, raw in HANG_JSON.items()}
HANG_HOSTS = {0: "node1", 1: "node2", 2: "node3"}
HANG_OWNERS = {"10.3.66.1": "node1", "10.3.66.2": "node2", "10.3.66.3": "node3"}


def test_the_node_in_every_missing_connection_is_named() -> None:
    nodes = ["node1", "node2", "node3"]
    stuck = S.stuck_connects(HANG_SOCKETS, HANG_HOSTS, HANG_OWNERS, nodes, 29500)
    assert stuck.suspect == "node3"
    assert stuck.lines == [
        "rank 0 (node1): no connection with node3",
        "rank 1 (node2): no connection with node3",
        "rank 2 (node3): still connecting to node1 (10.3.66.1:39525), no answer; "
        "no connection with node1, node2",
    ]


def test_the_store_connections_do_not_count_and_one_missing_pair_names_no_node() -> None:
    # without the store port, rank 0's store server sockets would hide its missing peer
    nodes = ["node1", "node2", "node3"]
    loose = S.stuck_connects(HANG_SOCKETS, HANG_HOSTS, HANG_OWNERS, nodes, None)
    assert "rank 0 (node1)" not in "\n".join(loose.lines)
    one: dict[int, dict[str, list[Any]]] = {
        0: {"syn_sent": [], "established": []},
        1: {"syn_sent": ["10.3.66.1:1"], "established": []}}
    stuck = S.stuck_connects({r: S.Sockets.read(raw) for r, raw in one.items()}, HANG_HOSTS,
                             HANG_OWNERS, ["node1", "node2"], 29500)
    assert stuck.suspect is None  # node1<->node2 only: either end may hold the cause
    assert stuck.lines[1] == ("rank 1 (node2): still connecting to node1 (10.3.66.1:1), "
                              "no answer; no connection with node1")
    none = S.stuck_connects({}, HANG_HOSTS, HANG_OWNERS, ["node1"], 29500)
    assert none == S.StuckConnects([], None)


def test_sockets_are_read_as_the_worker_wrote_them_and_written_back_the_same() -> None:
    for raw in HANG_JSON.values():
        assert S.Sockets.read(raw).as_json() == raw
    # what is not of the worker's shape is left out
    assert S.Sockets.read({"syn_sent": "x", "established": [[1], ["p", "a:1"], [2, "b:2"]]}) \
        == S.Sockets((), ((2, "b:2"),))
    assert S.Sockets.read(None) == S.Sockets()


def test_tcp_peers_reads_a_real_connection_of_this_process() -> None:
    """node/allreduce.py's reader of /proc/<pid>/net/tcp, on a loopback connection of ours."""
    import os
    import runpy
    import socket

    from fixtures import localcollective as LC

    worker = runpy.run_path(str(LC.WORKER_SCRIPT), run_name="not_main")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    try:
        peers = worker["tcp_peers"](os.getpid())
        port = server.getsockname()[1]
        local = client.getsockname()[1]
        assert [local, f"127.0.0.1:{port}"] in peers["established"], peers
        assert [port, f"127.0.0.1:{local}"] in peers["established"], peers
        assert worker["_proc_endpoint"]("0100007F:1F90") == "127.0.0.1:8080"
        assert worker["_proc_endpoint"]("0000000000000000FFFF00000100007F:1F90") == \
            "127.0.0.1:8080"
        assert worker["tcp_peers"](-1) == {"syn_sent": [], "established": []}
    finally:
        for s in (client, conn, server):
            s.close()


def test_the_red_says_where_the_ranks_were_and_which_node_to_look_at_first() -> None:
    g = S.group(dumps("stacks_gloo_connect_vs_rendezvous.json"), HOSTS, ranks=[0, 1, 2])
    lines = S.where_lines(g, S.StuckConnects([], None), HOSTS, g.differ, "every dump in d")
    assert lines[0] == "  where the ranks were when the deadline passed (every dump in d):"
    assert lines[1].startswith("    ranks 0,1 (node1) in rendezvous")
    assert lines[-1] == ("    node3 differs: its ranks are not where the others are: look there "
                         "first")
    # the stacks alone single out no node: the one in every missing connection is named
    stuck = S.stuck_connects(HANG_SOCKETS, HANG_HOSTS, HANG_OWNERS, ["node1", "node2", "node3"],
                             29500)
    lines = S.where_lines(g, stuck, HANG_HOSTS, [], "could not write the dumps: disk full")
    assert lines[-1] == ("    node3 is in every connection the ranks were missing: a firewall "
                         "on it, or its link, drops them: look there first")
    assert "    rank 0 (node1): no connection with node3" in lines
