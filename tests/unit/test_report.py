"""Pure tests of what people read: the Recorder's views and JSON, the HTML report's pictures,
the progress lines and the -k spelling of pair ids (no cluster needed)."""

from __future__ import annotations

import json
import re

from records import c1_property

from cluster_tests.core.labels import PairLabel, keyword_form
from cluster_tests.core.progress import Progress
from cluster_tests.report import colltable
from cluster_tests.report import html as html_report
from cluster_tests.report.summary import Outcome, Recorder, node_columns

NODES = ["node1", "node2", "node3"]


def _recorder(red: tuple[str, str] = ("node1", "node3")) -> Recorder:
    rec = Recorder(list(NODES))
    for a in NODES:
        for b in NODES:
            bad = (a, b) == red
            msg = (f"{a} -> {b}: public key refused\n  fix: ssh {a} cat ~/.ssh/id_ed25519.pub | "
                   f"ssh {b} 'cat >> ~/.ssh/authorized_keys'") if bad else ""
            rec.outcomes[f"test_ssh_trust[{a}->{b}]"] = Outcome(
                f"test_ssh_trust[{a}->{b}]", "test_ssh_trust", "cluster_tests/checks/ssh.py",
                "failed" if bad else "passed", msg, pair=(a, b))
            rec.outcomes[f"test_reachable[{a}->{b}]"] = Outcome(
                f"test_reachable[{a}->{b}]", "test_reachable", "cluster_tests/checks/network.py",
                "passed", pair=(a, b), properties={"rtt_ms": f"{0.1 + NODES.index(b) / 10:.3f}",
                                                   "jitter_ms": "0.010"})
    for i, a in enumerate(NODES):
        for b in NODES[i + 1:]:
            rec.outcomes[f"test_allreduce_pair[{a}<->{b}]"] = Outcome(
                f"test_allreduce_pair[{a}<->{b}]", "test_allreduce_pair", "m", "passed",
                pair=(a, b), properties={"busbw_GBps": 1.5 if b != "node3" else 0.5},
                ordered=False)
    props = {"backend": "gloo", "world_size": 3, "busbw_GBps": 2.0,
             **c1_property({size: (10.0, bw / 1.3, bw)
                            for size, bw in ((1024, 0.1), (65536, 1.0), (1048576, 2.0))})}
    rec.outcomes["test_allreduce"] = Outcome("test_allreduce", "test_allreduce", "m", "passed",
                                             properties=props)
    return rec


FACTS = {n: {"reachable": "yes", "login": "0.20s", "slots": "1", "hostname": n,
             "python": "3.11.7", "torch": "2.13.0" if n != "node2" else "2.12.0"} for n in NODES}


def test_node_table_shows_only_differing_versions():
    columns, same = node_columns(FACTS)
    assert "torch" in columns and "python" not in columns
    assert same == {"python": "3.11.7"}
    lines = _recorder().render_nodes(FACTS)
    assert lines[-1] == "  same on every node: python 3.11.7"
    assert any(line.split()[0] == "node2" and "2.12.0" in line for line in lines)


def test_json_carries_units_pairs_and_node_facts():
    # read as summary.json's reader reads it
    data = json.loads(json.dumps(_recorder().to_json(FACTS, {"ssh_logins": 3})))
    node1 = data["nodes"][0]
    assert node1["login_s"] == 0.2 and node1["slots"] == 1 and "login" not in node1
    pair = next(p for p in data["pairs"] if p["pair"] == "node1->node3")
    assert pair["checks"] == {"test_ssh_trust": "failed", "test_reachable": "passed"}
    assert pair["rtt_ms"] == 0.3 and pair["jitter_ms"] == 0.01
    assert data["latency_rtt_ms"]["node2->node1"] == 0.1
    assert data["allreduce"]["busbw_GBps"] == 2.0
    assert data["allreduce"]["pair_busbw_GBps"] == {"node1<->node2": 1.5, "node1<->node3": 0.5,
                                                    "node2<->node3": 0.5}
    assert [r["size_bytes"] for r in data["allreduce"]["sizes"]] == [1024, 65536, 1048576]
    assert data["meta"]["ssh_logins"] == 3 and data["meta"]["duration_s"] >= 0


def test_the_json_file_written_test_by_test_is_the_document(tmp_path):
    rec = _recorder()
    rec.write_json(tmp_path / "summary.json", FACTS, {"ssh_logins": 3}, {"healthy": {"kept": 2}})
    text = (tmp_path / "summary.json").read_text()
    got = json.loads(text)
    want = json.loads(json.dumps(rec.to_json(FACTS, {"ssh_logins": 3}, {"healthy": {"kept": 2}}),
                                 default=str))
    for doc in (got, want):  # the clock moves between the two
        for k in ("finished", "duration_s"):
            doc["meta"].pop(k)
    assert got == want and len(got["tests"]) == len(rec.outcomes) > 1
    assert list(got)[-1] == "tests"
    # a test a line: grep finds one whole test
    line = next(ln for ln in text.splitlines() if '"test_ssh_trust[node1->node3]"' in ln)
    assert json.loads(line.strip().rstrip(","))["outcome"] == "failed"


def test_the_collective_tables_read_the_records_and_pairs_their_labels():
    rec = _recorder()
    c1 = rec.allreduce()
    assert c1 is not None and [r.size_bytes for r in c1.rows] == [1024, 65536, 1048576]
    lines = colltable.tables(c1, rec.pair_results())
    assert any(line.split()[:8] == ["1048576", "262144", "float32", "sum", "10.00", "1.54",
                                    "2.00", "0"] for line in "\n".join(lines).splitlines())
    # the pair of a C2 test is its label's (`pair` property), either way; none from its id
    assert {o.pair: o.ordered for o in rec.by_function("test_allreduce_pair")} == {
        ("node1", "node2"): False, ("node1", "node3"): False, ("node2", "node3"): False}
    for text, label in (("node1->node3", PairLabel("node1", "node3")),
                        ("gpu-01<->gpu-02", PairLabel("gpu-01", "gpu-02", ordered=False)),
                        ("node3->*", PairLabel("node3", "*"))):
        assert PairLabel.read(text) == label and str(label) == text


def test_html_has_the_red_cell_and_the_plot():
    page = html_report.render(_recorder(), FACTS, {"hostfile": "/h", "rank0": "node1"})
    red = re.findall(r'<rect class="cell (\w+)" data-from="(\w+)" '
                     r'data-to="(\w+)"[^>]*fill="([^"]+)"',
                     page)
    ssh = red[: 9]
    assert [(a, b) for cls, a, b, fill in ssh if cls == "failed"] == [("node1", "node3")]
    assert all(fill == html_report.BAD for cls, a, b, fill in ssh if cls == "failed")
    assert 'id="heatmap-ssh"' in page and 'id="heatmap-latency"' in page
    assert 'id="heatmap-bandwidth"' in page and 'id="plot-bandwidth"' in page
    assert page.count('<polyline class="series') == 2
    assert "public key refused" in page and "cat &gt;&gt; ~/.ssh/authorized_keys" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script" not in page


def test_heatmaps_draw_only_the_checked_pairs():
    """With --pairs ring on many nodes the page grows with the pairs checked, not N x N: one
    cell per checked pair (both orders for the symmetric bandwidth), the rest one background."""
    nodes = [f"node{i}" for i in range(1, 65)]
    rec = Recorder(list(nodes))
    ring = [(a, nodes[(i + 1) % len(nodes)]) for i, a in enumerate(nodes)]
    for a, b in ring:
        rec.outcomes[f"test_ssh_trust[{a}->{b}]"] = Outcome(
            f"test_ssh_trust[{a}->{b}]", "test_ssh_trust", "cluster_tests/checks/ssh.py", "passed",
            pair=(a, b))
        rec.outcomes[f"test_allreduce_pair[{a}<->{b}]"] = Outcome(
            f"test_allreduce_pair[{a}<->{b}]", "test_allreduce_pair",
            "cluster_tests/checks/collective.py", "passed", pair=(a, b),
            properties={"busbw_GBps": "1.0"})
    ssh = html_report.trust_heatmap(rec)
    assert ssh is not None
    assert [(c.source, c.target) for c in ssh.cells] == sorted(
        ring, key=lambda p: (nodes.index(p[0]), nodes.index(p[1])))
    assert (ssh.cells[0].x, ssh.cells[0].y) == (html_report.LABEL + html_report.CELL,
                                                html_report.LABEL)  # node1 -> node2: row 0, col 1
    bw = html_report.bandwidth_heatmap(rec)
    assert bw is not None
    assert len(bw.cells) == 2 * len(ring)
    page = html_report.render(rec, {}, {"hostfile": "/h", "rank0": "node1"})
    assert page.count('<rect class="cell ') == 3 * len(ring)
    assert page.count('<rect class="grid none"') == 2


def test_progress_is_throttled_and_says_done():
    now = [0.0]
    out: list[str] = []
    p = Progress(out.append, every=2.0, first=1.0, clock=lambda: now[0])
    p("probing nodes", 0, 4)
    p("probing nodes", 1, 4)  # before `first`: quiet
    now[0] = 1.5
    p("probing nodes", 2, 4)
    now[0] = 2.0
    p("probing nodes", 3, 4)  # within `every`: quiet
    p("probing nodes", 4, 4)
    assert out == ["[cluster] probing nodes: 2/4 (50%)", "[cluster] probing nodes: 4/4 (100%) done"]
    out.clear()
    p("quick phase", 0, 2)
    p("quick phase", 2, 2)  # a phase that was never shown ends quietly too
    assert out == []


def test_keyword_form_of_pair_ids():
    assert keyword_form("ssh and node1->node2") == "ssh and node1_to_node2"
    assert (keyword_form("test_allreduce_pair[gpu-01<->gpu-02]")
            == "test_allreduce_pair[gpu-01_to_gpu-02]")


def test_html_folds_the_ranks_stacks_by_group():
    """Issue 26: a C1 red's stacks (the `stack_groups` property) fold one <details> per group,
    the group whose node differs marked; read back from JUnit the property is its repr."""
    import json
    from pathlib import Path

    from cluster_tests.judge.common import stacks as S

    events = json.loads((Path(__file__).resolve().parents[1] / "data" / "samples"
                         / "stacks_gloo_connect_vs_rendezvous.json").read_text())
    dumps = {e["stack_rank"]: e["text"] for e in events if e["event"] == "stack"}
    hosts = {0: "node1", 1: "node1", 2: "node3"}
    g = S.group(dumps, hosts, [0, 1, 2])
    groups = [{"label": f"{S.describe(x.ranks, hosts)} {x.where}", "text": x.text, "native": "",
               "differ": any(n in g.differ for n in x.nodes)} for x in g.groups]
    for value in (groups, repr(groups)):
        rec = _recorder()
        rec.outcomes["test_allreduce"] = Outcome("test_allreduce", "test_allreduce", "m", "failed",
                                                 "hang", properties={"stack_groups": value})
        page = html_report.render(rec, FACTS, {"hostfile": "/h", "rank0": "node1"})
        assert page.count('<details class="stacks">') == 2
        assert "<summary>ranks 0,1 (node1) in rendezvous (allreduce.py)</summary>" in page
        assert "<summary>rank 2 (node3) in connect (allreduce.py) (differs)</summary>" in page
        assert "in connect" in page and "Current thread 0x" in page


def _median_by_definition(rec: Recorder, nodes: list[str]) -> dict[str, float]:
    """Each node's median of every RTT at either end of a pair it is in (not its own cell)."""
    seen: dict[str, list[float]] = {}
    for a, b, v in rec.iter_latency():
        if a != b:
            for n in (a, b):
                if n in nodes:
                    seen.setdefault(n, []).append(v)
    return {n: sorted(seen[n])[len(seen[n]) // 2] for n in nodes if n in seen}


def test_latency_medians_are_the_medians_of_every_pair_at_both_ends():
    import random

    rnd = random.Random(7)
    for trial in range(30):
        names = [f"node{i}" for i in range(1, rnd.randint(2, 70))]
        rec = Recorder(list(names))
        for a in names:
            if rnd.random() < 0.1:
                continue  # a source with no row (its node->* item did not run)
            cells = [rnd.choice(["-", "-", f"{rnd.uniform(0.01, 900):.3f}",
                                 f"{rnd.choice([0.05, 0.1, 0.25]):.3f}"]) for _ in names]
            rec.outcomes[f"test_reachable[{a}->*]"] = Outcome(
                f"test_reachable[{a}->*]", "test_reachable", "m", "passed", pair=(a, "*"),
                properties={"rtt_row": " ".join(cells[:len(names) - (trial % 5 == 0)])})
        for _ in range(rnd.randint(0, 5)):  # pair items beside the rows
            a, b = rnd.choice(names), rnd.choice(names)
            rec.outcomes[f"test_reachable[{a}->{b}]"] = Outcome(
                f"test_reachable[{a}->{b}]", "test_reachable", "m", "passed", pair=(a, b),
                properties={"rtt_ms": f"{rnd.uniform(0.01, 5):.4f}"})
        wanted = [n for n in names if rnd.random() < 0.8]
        assert rec.latency_medians(wanted) == _median_by_definition(rec, wanted)


def test_latency_medians_leave_out_a_node_without_a_measured_pair():
    rec = Recorder(["node1", "node2", "node3"])
    rec.outcomes["test_reachable[node1->*]"] = Outcome(
        "test_reachable[node1->*]", "test_reachable", "m", "passed", pair=("node1", "*"),
        properties={"rtt_row": "0.100 0.200 -"})
    assert rec.latency_medians(["node1", "node2", "node3"]) == {"node1": 0.2, "node2": 0.2}


def _ring(n: int, red: set[tuple[str, str]]) -> Recorder:
    names = [f"node{i}" for i in range(1, n + 1)]
    rec = Recorder(names)
    for i, a in enumerate(names):
        for b in (names[i - 1], names[(i + 1) % n]):
            bad = (a, b) in red
            rec.outcomes[f"test_ssh_trust[{a}->{b}]"] = Outcome(
                f"test_ssh_trust[{a}->{b}]", "test_ssh_trust", "m", "failed" if bad else "passed",
                f"{a} -> {b}: public key refused" if bad else "", pair=(a, b))
    return rec


def test_the_terminal_matrix_is_whole_up_to_its_width():
    lines = _recorder().render_matrix()
    assert lines[0].startswith("SSH trust (row: from, column: to;")
    assert lines[1].split() == NODES and lines[2].split() == ["node1", ".", ".", "X"]
    assert lines[-1] == "  node1->node3: public key refused"


def test_a_big_clusters_matrix_shows_only_the_nodes_of_pairs_that_did_not_pass():
    assert _ring(4096, set()).render_matrix() == [
        "SSH trust: 8192 pairs over 4096 nodes, 8192 passed (every pair: summary.json's trust, "
        "the HTML report)"]
    lines = _ring(4096, {("node7", "node8"), ("node9", "node8")}).render_matrix()
    assert lines[0].startswith("SSH trust: 8192 pairs over 4096 nodes, 8190 passed; the 3 "
                               "nodes in a pair that did not pass:")
    assert lines[2].split() == ["node7", "node8", "node9"]
    assert lines[3].split() == ["node7", "-", "X", "-"]
    assert lines[5].split() == ["node9", "-", "X", "-"]
    assert lines[6:] == ["  node7->node8: public key refused", "  node9->node8: public key refused"]
    assert len("\n".join(lines)) < 1000


def test_past_its_width_the_nodes_get_a_line_each_and_the_red_pairs_stop():
    from cluster_tests.report.summary import MATRIX_NODES

    dead = [f"node{i}" for i in range(10, 4096, 10)]  # 10 % of the nodes: no login to them
    red = {(f"node{i - 1}", f"node{i}") for i in range(10, 4096, 10)}
    red |= {(f"node{i + 1}", f"node{i}") for i in range(10, 4096, 10)}
    lines = _ring(4096, red).render_matrix()
    assert lines[0].startswith(f"SSH trust: 8192 pairs over 4096 nodes, {8192 - len(red)} passed;"
                               f" the {3 * len(dead)} nodes in a pair that did not pass:")
    assert lines[1] == "  node9: from it 1 of 2 did not pass, to it 0 of 2"
    assert lines[2] == "  node10: from it 0 of 2 did not pass, to it 2 of 2"
    assert lines[MATRIX_NODES + 1] == f"  ... and {3 * len(dead) - MATRIX_NODES} more nodes"
    assert lines[-1] == f"  ... and {len(red) - MATRIX_NODES} more red pairs (causes above)"
    assert len(lines) == 2 * MATRIX_NODES + 3


def test_the_verdict_is_the_causes_the_blocked_counts_per_red_then_the_launch():
    """A red run ends with its causes, one line per red that blocks checks ("2 checks blocked
    by ..."), the fix script, and the launch lines last (pytest prints no line per blocked
    check: the summary counts them)."""
    from cluster_tests.judge.problem import BLOCKED_BY, PROPERTY, Problem
    from cluster_tests.judge.ssh import sshfail

    rec = Recorder(list(NODES))
    login = Problem(("node3",), sshfail.Cause.REFUSED, "node3: connection refused",
                    fix="start sshd on node3", check="test_login[node3]")
    rec.outcomes["test_login[node3]"] = Outcome(
        "test_login[node3]", "test_login", "m", "failed", login.text(), node="node3",
        properties={PROPERTY: login.to_json()})
    for t in ("test_ssh_trust[node1->node3]", "test_ssh_trust[node2->node3]"):
        rec.outcomes[t] = Outcome(t, "test_ssh_trust", "m", "skipped",
                                  "blocked by test_login[node3]: node3 refuses connections",
                                  properties={BLOCKED_BY: "test_login[node3]"})
    rec.outcomes["test_other"] = Outcome("test_other", "test_other", "m", "skipped", "not here")
    lines = rec.verdict_lines(["Launch now on 2 of 3 nodes", "deepspeed --hostfile h ..."],
                              "review and run fixes.sh, then pytest --lf")
    assert lines == [
        "Causes (1; one red each, the checks they block skipped):",
        "  node3: connection refused (test_login[node3]; blocks 2 checks)",
        "      fix (needs a person): start sshd on node3",
        "2 checks blocked by test_login[node3]",
        "review and run fixes.sh, then pytest --lf",
        "Launch now on 2 of 3 nodes",
        "deepspeed --hostfile h ...",
    ], lines
    # the tables above it no longer open with the causes
    assert not any(ln.startswith("Causes") for ln in rec.summary_lines({}))
    assert Recorder(list(NODES)).verdict_lines() == []


def test_what_does_not_apply_is_one_line_per_kind_and_items_read_as_ranges():
    """A green run's verdict says what could not run here, one line per reason, the items of
    that reason as ranges, where (every node, or which), the node names taken out of the
    reasons; a blocked check is not among them."""
    rec = Recorder(list(NODES))
    for item, fn in (("R1", "test_rdma_ports"), ("R2", "test_ib_hca"), ("R3", "test_ib_gid_index"),
                     ("R7", "test_gpu_health")):
        for n in NODES:
            reason = "no RDMA devices" if item != "R7" else "CPU only"
            rec.outcomes[f"{fn}[{n}]"] = Outcome(f"{fn}[{n}]", fn, "m", "skipped",
                                                 f"{n}: {reason}", node=n)
    rec.outcomes["test_ascend_env[node2]"] = Outcome(
        "test_ascend_env[node2]", "test_ascend_env", "m", "skipped", "node2: not an Ascend node",
        node="node2")
    rec.outcomes["test_socket_ifname_route[node1->node1]"] = Outcome(
        "test_socket_ifname_route[node1->node1]", "test_socket_ifname_route", "m", "skipped",
        "node1 -> node1: traffic to itself takes the loopback", pair=("node1", "node1"))
    rec.outcomes["test_include_exclude"] = Outcome(
        "test_include_exclude", "test_include_exclude", "m", "skipped", "no --launch-include")
    rec.outcomes["test_login_time[node3]"] = Outcome(
        "test_login_time[node3]", "test_login_time", "m", "skipped", "blocked by x",
        node="node3", properties={"blocked_by": "test_login[node3]"})
    assert rec.not_applicable() == [
        "Not applicable here:",
        "  H5: no --launch-include",
        "  F5: traffic to itself takes the loopback (node1)",
        "  E4: not an Ascend node (node2)",
        "  R1-R3: no RDMA devices (all 3 nodes)",
        "  R7: CPU only (all 3 nodes)"]
