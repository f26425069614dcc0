"""C1-C3 end to end: the all-reduce checks run for real over SSH on the simulated 3-node cluster.

Each fault is real (iptables in a node's namespace, a tbf qdisc on a node's eth0); each test
asserts exactly which ids fail, the words of the messages, and that no worker is left running.
Short sizes, few iterations and 5 s stage deadlines keep the whole file near a minute.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from suite import PYTEST, REPO, run_suite

from cluster_tests.judge.collective import collverdict as C
from cluster_tests.judge.collective import pairbw as pb
from cluster_tests.measure import allreducerun as R
from cluster_tests.report.colltable import AllReduceResult

FAST = ("-m", "collective", "--sizes", "64K,1M", "--iters", "5", "--warmup", "2",
        "--collective-connect-timeout", "5", "--collective-init-timeout", "10",
        "--collective-op-timeout", "30",
        # the sim's pairs share 2 busy cores: healthy pairs vary 2-5x, a shaped link is 50x slower
        "--pair-slow-ratio", "0.1")
PAIRS = {"test_allreduce_pair[node1<->node2]", "test_allreduce_pair[node1<->node3]",
         "test_allreduce_pair[node2<->node3]"}


def worker_pids(sim) -> list[int]:
    """Processes of the all-reduce harness (supervisors and workers) in the sim's nodes."""
    return [p.pid for p in sim.processes()
            if "allreduce.py" in p.cmdline and ("--world-size" in p.cmdline
                                                or "--supervise" in p.cmdline)]


def workers_left(sim, within: float = 5.0) -> str:
    """The all-reduce workers still running `within` s from now ("" when none), as `ps` says."""
    deadline = time.monotonic() + within
    while worker_pids(sim) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = worker_pids(sim)
    if not left:
        return ""
    return subprocess.run(["ps", "-o", "pid,ppid,stat,etime,wchan:20,args", "-p",
                           ",".join(map(str, left))], capture_output=True, text=True,
                          check=False).stdout[:3000] or "(gone while listed)"


def assert_no_workers(sim, within: float = 5.0) -> None:
    left = workers_left(sim, within)
    if left:
        raise AssertionError(f"all-reduce workers left running:\n{left}")


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("busbw") / "baseline.json"


# --- healthy: C1 passes, busbw per size in the JUnit properties, C2 every pair green ----------


@pytest.mark.alone  # it records the baseline that the rate-limited node's test compares with
def test_healthy_cluster_reports_busbw_per_size(healthy_sim, baseline: Path) -> None:
    # a healthy run never waits out a deadline: give the ranks' start-up skew on a loaded
    # machine room (the fault tests keep 5 s, which is what they wait)
    result = run_suite(healthy_sim, *FAST, "--min-busbw", "0.0001",
                       "--busbw-record", str(baseline), "--collective-connect-timeout", "20")
    assert result.returncode == 0, result.describe()
    assert result.passed == {"test_allreduce", "test_allreduce_busbw", *PAIRS}
    props = result.properties["test_allreduce"]
    assert props["backend"] == "gloo" and props["world_size"] == "3"
    assert props["sizes"] == "65536,1048576"
    c1 = AllReduceResult.from_json(props[AllReduceResult.PROPERTY])  # the table's record
    assert c1 is not None and [r.size_bytes for r in c1.rows] == [65536, 1048576]
    for row in c1.rows:
        size, time_us, algbw, busbw = row.size_bytes, row.time_us, row.algbw_GBps, row.busbw_GBps
        assert time_us > 0 and algbw > 0
        assert algbw == pytest.approx(size / (time_us * 1e-6) / 1e9, rel=1e-3)
        assert busbw == pytest.approx(algbw * 2 * (3 - 1) / 3, rel=1e-3)  # nccl-tests' factor
    assert float(result.properties["test_allreduce_pair[node1<->node3]"]["busbw_GBps"]) > 0
    verdict = result.properties["test_allreduce_busbw"]["busbw_verdict"]
    assert ">= --min-busbw 0.0001 GB/s" in verdict
    # the terminal summary carries both tables, with units and what was timed
    assert "all-reduce bandwidth (C1/C2)" in result.output
    assert "# timed: avg time per op of 5 back-to-back in-place all_reduce calls" in result.output
    assert re.search(r"^\s+1048576\s+262144\s+float32\s+sum\s", result.output, re.MULTILINE)
    assert re.search(r"node1<->node2\s+1048576\s", result.output)
    record = json.loads(baseline.read_text())
    assert record["world_size"] == 3
    assert [r["size_bytes"] for r in record["rows"]] == [65536, 1048576]
    assert_no_workers(healthy_sim)


# --- C3: high ports dropped on node3 turns red within the connect deadline, naming node3 ------


@pytest.fixture(scope="module")
def node3_drops_high_ports(sim):
    """node3's firewall drops every inbound high port, the store's replies included: one run of
    C1 and C2 (about 30 CPU s), read by two tests (the pairs' reds; where C1's ranks waited).
    Returns (the result, the all-reduce workers left running after it)."""
    sim.restore()
    try:
        sim.iptables("node3", ["-A", "INPUT", "-p", "tcp", "--dport", "1024:65535", "-j", "DROP"])
        result = run_suite(sim, *FAST)
        return result, workers_left(sim)
    finally:
        sim.restore()


def test_high_ports_dropped_on_one_node(node3_drops_high_ports) -> None:
    """Cost: none of its own (node3_drops_high_ports, shared with
    test_ranks_that_never_join_are_shown_where_they_wait)."""
    result, left = node3_drops_high_ports
    assert result.failed == {"test_allreduce", "test_allreduce_pair[node1<->node3]",
                             "test_allreduce_pair[node2<->node3]"}, result.describe()
    assert result.passed == {"test_allreduce_pair[node1<->node2]"}
    assert "test_allreduce_busbw" in result.ids("skipped")
    msg = result.message("test_allreduce")
    assert re.search(r"rank 2 \(node3 local 0\) never joined the rendezvous at "
                     r"10\.\d+\.\d+\.1:29500 within 5 s", msg), msg
    # rank 2's own words when its connect deadline speaks first, else its stack says where it was
    # (the launcher's deadline and the rank's race; both name node3's rank in connect)
    assert ("rank 2 (node3 local 0) [connect]: cannot reach the rendezvous store" in msg
            or re.search(r"rank 2 \(node3\) in connect", msg)), msg
    assert "run `pytest -m network`" in msg
    assert "fix: let node3 reach node1" in msg and "iptables -S INPUT" in msg
    # the rendezvous of node1<->node3 is on node1, that of node2<->node3 on node3
    text = result.message("test_allreduce_pair[node1<->node3]")
    assert "rank 1 (node3 local 0) never joined the rendezvous" in text, text
    text = result.message("test_allreduce_pair[node2<->node3]")
    assert "fix: node3 cannot reach its own rendezvous store" in text, text
    for pair in ("node1<->node3", "node2<->node3"):
        text = result.message(f"test_allreduce_pair[{pair}]")
        assert "node3 is in 2 of 2 failing pairs: suspect node3" in text, text
    # every stage deadline is 5-30 s: a hang would take minutes (the time is printed, not asserted:
    # speed is bench/'s to measure)
    print(f"run took {result.seconds:.1f}s")
    assert not left, f"all-reduce workers left running:\n{left}"


def test_ports_found_blocked_by_f3_are_not_waited_out_again(healthy_sim) -> None:
    """With the network checks in the same run, C1 and node3's C2 pairs are blocked at once by
    the F3 reds that found the ports dropped (instead of a rendezvous deadline each: N-1 C2 rounds
    for one firewalled node); the pair without node3 still runs and passes."""
    healthy_sim.iptables("node3", ["-A", "INPUT", "-p", "tcp", "--dport", "1024:65535",
                                   "-j", "DROP"])
    result = run_suite(healthy_sim, *FAST[2:], "-m", "network or collective",
                       "-k", "high_ports or allreduce")
    # F4 (node3's own rules) is not selected: the F3 reds hold the cause, C is blocked by them
    assert not {i for i in result.failed if "allreduce" in i}, result.describe()
    by = {t: p["blocked_by"] for t, p in result.properties.items() if "blocked_by" in p}
    assert by["test_allreduce"] == by["test_allreduce_busbw"] == "test_high_ports[node1->node3]"
    assert by["test_allreduce_pair[node1<->node3]"] == "test_high_ports[node1->node3]"
    assert by["test_allreduce_pair[node2<->node3]"] == "test_high_ports[node2->node3]"
    assert "test_allreduce_pair[node1<->node2]" in result.passed, result.describe()
    text = result.message("test_allreduce_pair[node2<->node3]")
    assert "node3 takes no connection from node2 on high ports" in text, text
    assert "test_high_ports[node1->node3]" in result.failed
    assert_no_workers(healthy_sim)


# --- C3: the store works but gloo's own connections are dropped: red at the init deadline ----


def test_communicator_init_hang_fails_at_its_deadline(healthy_sim) -> None:
    for rule in (["--sport", "29500"], ["--dport", "29500"],
                 ["--dport", "1024:65535", "-j", "DROP"]):
        healthy_sim.iptables("node3", ["-A", "INPUT", "-p", "tcp", *rule]
                             + ([] if "DROP" in rule else ["-j", "ACCEPT"]))
    result = run_suite(healthy_sim, *FAST, "-k", "test_allreduce and not pair",
                       "--collective-init-timeout", "6")
    assert result.failed == {"test_allreduce"}, result.describe()
    msg = result.message("test_allreduce")
    assert "every rank timed out in communicator init (init_process_group + first all_reduce)" \
        in msg, msg
    assert "rank 2 (node3 local 0) [init]: stage init did not finish within 6 s (watchdog)" in msg
    assert "`-k test_allreduce_pair` names the node" in msg
    # issue 26: before anything is killed every rank dumps its stack; the red groups them,
    # the dumps lie in the report directory and the HTML report folds them
    assert "where the ranks were when the deadline passed (every dump in " in msg, msg
    block = msg.split("where the ranks were when the deadline passed", 1)[1]
    # every rank is listed, by node, in a group that says where it was
    for who in ("(node1)", "(node2)", "(node3)"):
        assert who in block, block
    # gloo connects its full mesh inside init_process_group: every rank waits there, the Python
    # stacks are alike, and so are py-spy's native frames (every rank in gloo's
    # Pair::waitUntilConnected, whichever peer it misses)
    assert re.search(r"rank 0 \(node1\), rank 1 \(node2\), rank 2 \(node3\) in "
                     r"init_process_group \(allreduce\.py init_group\)", block), block
    assert "the stacks single out no node" in block, block
    # ... but each rank's own connections, read at its deadline, do: node3 is in every one missing
    assert "rank 0 (node1): no connection with node3" in block, block
    assert "rank 1 (node2): no connection with node3" in block, block
    assert re.search(r"rank 2 \(node3\): (still connecting to node[12] \([\d.]+:\d+\), no "
                     r"answer; )?no connection with node1, node2", block), block
    assert "node3 is in every connection the ranks were missing: a firewall on it, or its " \
           "link, drops them: look there first" in block, block
    assert result.properties["test_allreduce"].get("stack_differ") == "node3"
    folder = result.junit.parent / "stacks" / "allreduce"
    dumps = sorted(p.name for p in folder.glob("rank*.txt") if ".native." not in p.name)
    assert dumps == ["rank0-node1.txt", "rank1-node2.txt", "rank2-node3.txt"], dumps
    for name in dumps:
        assert "(most recent call first):" in (folder / name).read_text()
    assert len(list(folder.glob("rank*.sockets.json"))) == 3
    if (Path(sys.executable).parent / "py-spy").exists():  # make setup installs it (.[stacks])
        natives = sorted(folder.glob("rank*.native.txt"))
        assert len(natives) == 3, natives
        assert all("gloo::" in p.read_text() for p in natives)
    html = (result.junit.parent / "cluster_report.html").read_text()
    assert html.count('<details class="stacks">') == 1, "the stacks are not folded by group"
    assert_no_workers(healthy_sim)


# --- issue 26: where every rank was when the deadline passed ---------------------------------


def test_ranks_that_never_join_are_shown_where_they_wait(node3_drops_high_ports) -> None:
    """node3's firewall drops every inbound high port, the store's replies included: ranks 0,1
    wait in the rendezvous until its deadline, rank 2 in the store's connect; every rank dumps
    its stack before it ends (rank 1 too when rank 0, its store, ends first at its own deadline:
    the launcher's ask for its stack would then come too late), and the red names node3 as the
    node whose rank differs. Cost: none of its own (C1 of node3_drops_high_ports' run, the pairs
    beside it)."""
    result, left = node3_drops_high_ports
    assert "test_allreduce" in result.failed, result.describe()
    msg = result.message("test_allreduce")
    block = msg.split("where the ranks were when the deadline passed", 1)[1]
    assert re.search(r"rank 0 \(node1\), rank 1 \(node2\) in rendezvous \(allreduce\.py\)",
                     block), block
    assert re.search(r"rank 2 \(node3\) in connect \(allreduce\.py\)", block), block
    assert "node3 differs: its ranks are not where the others are: look there first" in block
    assert result.properties["test_allreduce"].get("stack_differ") == "node3"
    html = (result.junit.parent / "cluster_report.html").read_text()
    # C1's red in the report (the pairs' reds beside it fold stacks of their own)
    c1 = [b for b in html.split('<div class="failure"')
          if re.match(r'[^>]*>\s*<h3>test_allreduce[ <]', b)]
    assert len(c1) == 1, html[-3000:]
    assert c1[0].count('<details class="stacks">') == 2, c1[0][-3000:]
    assert "rank 2 (node3) in connect" in c1[0] and "(differs)" in c1[0]
    assert not left, f"all-reduce workers left running:\n{left}"


# --- PITFALLS 9: inbound high ports dropped, replies let in: the pair that node serves fails --


def test_inbound_drop_with_replies_allowed_is_caught_where_the_node_serves(healthy_sim) -> None:
    """gloo may connect out of such a node only, so a run with the rendezvous elsewhere can pass
    (it did here for C1); the pairs put the rendezvous on alternating sides, and rank 0 connects
    to its own store through the master address, so the pair that node3 serves fails there."""
    healthy_sim.iptables("node3", ["-A", "INPUT", "-m", "conntrack", "--ctstate",
                                   "ESTABLISHED,RELATED", "-j", "ACCEPT"])
    healthy_sim.iptables("node3", ["-A", "INPUT", "-p", "tcp", "--dport", "1024:65535",
                                   "-j", "DROP"])
    result = run_suite(healthy_sim, *FAST, "-k", "pair")
    assert result.failed == {"test_allreduce_pair[node2<->node3]"}, result.describe()
    assert result.passed == {"test_allreduce_pair[node1<->node2]",
                             "test_allreduce_pair[node1<->node3]"}
    msg = result.message("test_allreduce_pair[node2<->node3]")
    assert "rank 0 (node3 local 0) [connect]: cannot create (listen on, then connect to) the " \
        "rendezvous store" in msg, msg
    assert "fix: node3 cannot reach its own rendezvous store" in msg
    assert "a firewall on node3 drops connections to port 29501" in msg
    assert_no_workers(healthy_sim)


# --- C2: a rate-limited node is named by its pairs; busbw below threshold and baseline --------


@pytest.mark.alone  # bandwidth against bandwidth: a workload beside it slows the healthy pairs
def test_rate_limited_node_named_by_its_pairs(healthy_sim, baseline: Path) -> None:
    if not baseline.exists():
        pytest.skip("needs the healthy run's --busbw-record")
    healthy_sim.tc("node2", ["qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "50mbit",
                             "burst", "32kbit", "latency", "50ms"])
    result = run_suite(healthy_sim, *FAST, "--min-busbw", "0.05",
                       "--busbw-baseline", str(baseline))
    assert result.failed == {"test_allreduce_busbw", "test_allreduce_pair[node1<->node2]",
                             "test_allreduce_pair[node2<->node3]"}, result.describe()
    assert result.passed == {"test_allreduce", "test_allreduce_pair[node1<->node3]"}
    for pair in ("node1<->node2", "node2<->node3"):
        text = result.message(f"test_allreduce_pair[{pair}]")
        assert re.search(rf"{pair}: busbw 0\.\d+ GB/s at 1MB, below 0\.\d+ GB/s = 0\.1 x the "
                         r"typical good pair", text), text
        # named only after the confirmation pass, with both retries' numbers
        assert re.search(r"node2 is in 2 of 2 slow pairs; confirmed: measured again, node2 is "
                         r"slow with node1 \(0\.\d+ GB/s\) and node3 \(0\.\d+ GB/s\), both fast "
                         r"in this run: suspect node2", text), text
        assert "tc qdisc show" in text
        props = result.properties[f"test_allreduce_pair[{pair}]"]
        assert props["confirm"] == "confirmed" and props["suspect"] == "node2", props
        good = float(result.properties["test_allreduce_pair[node1<->node3]"]["busbw_GBps"])
        for other in ("node1", "node3"):  # both retries slow, as the slow ratio counts it
            assert float(props[f"confirm_busbw_GBps@{other}"]) < 0.1 * good, props
    assert "C2: confirming before blaming, in 2 s: node2 (in the slow pairs) against node1 " \
           "and node3 (the fastest in this run)" in result.output
    assert "node1<->node2  retry: " in result.output  # the confirmation's block of C2's table
    assert "# suspect node: node2 (confirmed: " in result.output
    msg = result.message("test_allreduce_busbw")
    assert re.search(r"busbw 0\.\d+ GB/s at 1MB < --min-busbw 0\.05 GB/s", msg), msg
    assert re.search(r"vs baseline \d+\.\d+ GB/s \(-\d+%; tolerance -20%", msg), msg
    assert_no_workers(healthy_sim)


@pytest.mark.alone  # bandwidth against bandwidth: a workload beside it slows the healthy pairs
def test_a_pair_slow_only_once_is_flaky_not_red(healthy_sim) -> None:
    """node2's link shaped while C2's rounds run, and freed when the confirmation pass starts
    (it announces itself, then waits --confirm-pause): the retries are fast, so nothing is
    named and nothing is red; node2's pairs pass with a flaky warning carrying both numbers."""
    healthy_sim.tc("node2", ["qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "50mbit",
                             "burst", "32kbit", "latency", "50ms"])
    seen: list[str] = []

    def on_line(line: str) -> None:
        if "C2: confirming before blaming" in line and not seen:
            seen.append(line)
            healthy_sim.restore()  # the shaping goes; the retries measure a healthy link

    result = run_suite(healthy_sim, *FAST, "-k", "allreduce_pair", "--confirm-pause", "5",
                       on_line=on_line)
    assert seen and "node2 (in the slow pairs) against node1 and node3" in seen[0], result.output
    assert result.passed == PAIRS and not result.failed, result.describe()
    for pair in ("node1<->node2", "node2<->node3"):
        props = result.properties[f"test_allreduce_pair[{pair}]"]
        assert props["confirm"] == "flaky", props
        assert float(props["retry_busbw_GBps"]) > float(props["busbw_GBps"]), props
        assert props["suspect"] == "", props  # measured again, not named
        assert re.search(rf"CollectiveWarning: flaky: {pair}: busbw 0\.\d+ GB/s at 1MB, below "
                         r".*; fine when measured again: \d+\.\d+ GB/s: not a red",
                         result.output), result.output
    assert "FLAKY (slow once)" in result.output
    # the retries' numbers are in the JSON report too, on the pair and on its test
    report = json.loads((result.junit.parent / "summary.json").read_text())
    pair = next(p for p in report["pairs"] if p["pair"] == "node1<->node2")
    assert pair["retry_busbw_GBps"] > pair["busbw_GBps"], pair
    test = next(t for t in report["tests"] if t["test_id"].endswith("[node1<->node2]"))
    assert test["properties"]["confirm"] == "flaky", test
    assert "# suspect node: none (not confirmed: " in result.output
    assert_no_workers(healthy_sim)


# --- issue 26: a crawling link is named within --collective-budget ----------------------------


@pytest.mark.alone  # bandwidth against bandwidth: a workload beside it slows the healthy pairs
def test_crawling_link_named_within_the_budget(healthy_sim) -> None:
    """node2's link shaped to 40 Mbit/s, the default options (sizes 1K..16M, the default
    budget): C1's sweep stops before the first size that would exceed its share and says so;
    node2's pairs stop before their largest size and are red as slow, naming node2; the
    pair without node2 passes. (The wall time is measured by bench, see README.)"""
    healthy_sim.tc("node2", ["qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "40mbit",
                             "burst", "32kbit", "latency", "50ms"])
    result = run_suite(healthy_sim, "-m", "collective")
    print(result.output)  # with -s: the tables and the run's time (README's figure)
    assert result.failed == {"test_allreduce_busbw", "test_allreduce_pair[node1<->node2]",
                             "test_allreduce_pair[node2<->node3]"}, result.describe()
    assert result.passed == {"test_allreduce", "test_allreduce_pair[node1<->node3]"}
    msg = result.message("test_allreduce_busbw")
    assert re.search(r"sweep stopped before \d+MB: one all_reduce of that size would take about "
                     r"[\d.]+ s \(scaled from the last size measured\) \(budget [\d.]+ s per "
                     r"size, its share of --collective-budget 40 s\)", msg), msg
    for pair in ("node1<->node2", "node2<->node3"):
        text = result.message(f"test_allreduce_pair[{pair}]")
        assert f"{pair}: too slow for its share of the budget: busbw " in text, text
        assert "sweep stopped before 16MB" in text, text
        assert re.search(r"node2 is in 2 of 2 slow pairs; confirmed: measured again, node2 is "
                         r"slow with node1 \(.*\) and node3 \(.*\), both fast in this run: "
                         r"suspect node2", text), text
    assert "SLOW (sweep stopped)" in result.output
    assert_no_workers(healthy_sim)


# --- C3: pytest killed mid-run leaves nothing behind on the nodes -----------------------------


def test_killed_pytest_leaves_no_workers(healthy_sim, tmp_path: Path) -> None:
    argv = [*PYTEST, "--hostfile", str(healthy_sim.hostfile),
            "--ssh-config", str(healthy_sim.ssh_config), "-p", "no:cacheprovider", "-q",
            f"--junitxml={tmp_path / 'j.xml'}", *FAST, "-k", "test_allreduce and not pair",
            "--iters", "100000", "--collective-op-timeout", "300"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        # 3 supervisors + 3 ranks
        while len(worker_pids(healthy_sim)) < 6 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(worker_pids(healthy_sim)) >= 6, "the workers never started"
        time.sleep(1.0)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # no finally, no atexit: only the channels close
        proc.wait(timeout=10)
    assert_no_workers(healthy_sim, within=10.0)


# --- pure pieces -------------------------------------------------------------------------------


def test_bootstrap_is_the_workers() -> None:
    tree = ast.parse((REPO / "cluster_tests" / "node" / "allreduce.py").read_text())
    (value,) = [ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", "") == "BOOTSTRAP"]
    assert value == R.BOOTSTRAP


def test_upper_median_finds_the_slow_node_among_three() -> None:
    three = {("node1", "node2"): 0.002, ("node1", "node3"): 0.5, ("node2", "node3"): 0.002}
    assert pb.flag_slow_pairs(three, ratio=0.5).slow == []  # the plain median is a slow pair
    flagged = pb.flag_slow_pairs(three, ratio=0.5, reference="upper_median")
    assert {p for p, _ in flagged.slow} == {("node1", "node2"), ("node2", "node3")}
    assert flagged.suspect == "node2"
    assert flagged.reference_GBps == pytest.approx((0.002 + 0.5) / 2)
    healthy = {("a", "b"): 0.4, ("a", "c"): 0.6, ("b", "c"): 0.3}
    assert pb.flag_slow_pairs(healthy, ratio=0.2, reference="upper_median").slow == []


def _rows(*busbw: float) -> list[C.SizeRow]:
    return [C.SizeRow(1 << (10 + 10 * i), 1, "float32", 1.0, bw * 0.75, bw, 0, 2)
            for i, bw in enumerate(busbw)]


def test_judge_busbw_against_threshold_and_baseline() -> None:
    rows = _rows(1.0, 10.0)  # 1K, 1M
    assert not C.judge_busbw(rows).judged
    assert C.judge_busbw(rows, min_busbw=9.0).ok
    bad = C.judge_busbw(rows, min_busbw=11.0)
    assert not bad.ok and bad.message == "busbw 10.000 GB/s at 1MB < --min-busbw 11 GB/s"
    base = {"rows": [{"size_bytes": 1 << 20, "busbw_GBps": 12.0}]}
    assert C.judge_busbw(rows, baseline=base, tolerance=0.2).ok  # floor 9.6
    worse = C.judge_busbw(rows, baseline=base, tolerance=0.1)  # floor 10.8
    assert not worse.ok and "vs baseline 12.000 GB/s (-17%; tolerance -10%, floor 10.800" \
        in worse.message
    other = C.judge_busbw(rows, baseline={"rows": [{"size_bytes": 7, "busbw_GBps": 1.0}]})
    assert not other.ok and "shares no message size" in other.message


def test_network_hint_uses_the_port_matrix_when_the_session_has_one() -> None:
    from cluster_tests.core.cluster import Cluster
    from cluster_tests.core.settings import Settings
    from cluster_tests.core.transport import Pool
    from cluster_tests.judge.network.portfacts import Reach
    from cluster_tests.judge.network.portjudge import PortMatrix
    from cluster_tests.measure.ports import PORT_MATRIX

    matrix = PortMatrix("t", results={
        "node1": {"node3": Reach.read("node3", {"addr": "10.0.0.3", "ports": {
            "40001": {"status": "timed out"}, "40002": {"status": "ok"}}})},
        "node2": {"node1": Reach.read("node1", {"addr": "10.0.0.1", "ports": {
            "40003": {"status": "ok"}}})}})
    cluster = Cluster(Settings(), [], Pool({}))  # a session that reaches no node: the memo only
    assert "run `pytest -m network`" in C.network_words(R.ports_seen(cluster, ["node3"]),
                                                        ["node3"])
    cluster.memo(PORT_MATRIX, lambda: matrix)
    assert C.network_words(R.ports_seen(cluster, ["node3"]), ["node3"]) == (
        "the network checks (F) of this session found closed ports: node1->node3 port 40001: "
        "timed out")


def test_pair_results_are_keyed_in_hostfile_order(monkeypatch):
    """The circle schedule may name the later host first (node4<->node2 with 4 nodes); the
    results must still be found under the test's hostfile-ordered pair."""
    from types import SimpleNamespace

    from cluster_tests.core.settings import CollectiveSettings, Settings
    from cluster_tests.judge.collective import pairbw as pb
    from cluster_tests.measure import allreducerun as R

    names = ["node1", "node2", "node3", "node4"]
    assert any(names.index(a) > names.index(b) for rnd in pb.circle_schedule(names) for a, b in rnd)
    settings = Settings(collective=CollectiveSettings(backend="gloo"), master_port=29500)
    pool = SimpleNamespace(map=lambda fn, items: [fn(i) for i in items])
    cluster: Any = SimpleNamespace(names=names, settings=settings, pool=pool,
                                   login_error=lambda n: None,
                                   cached=lambda key: None)  # no F3 in this session
    monkeypatch.setattr(R, "worker_options", lambda *a, **k: None)
    monkeypatch.setattr(R, "chosen_sizes", lambda c: [1024])
    monkeypatch.setattr(R, "master_address", lambda *a, **k: "addr")
    monkeypatch.setattr(R, "run_allreduce",
                        lambda cluster, ranks, **k: tuple(sorted(r.host for r in ranks)))
    monkeypatch.setattr(R, "launch_exports_word", lambda c: "")
    results = R.run_pairs(cluster)
    expected = {(a, b) for i, a in enumerate(names) for b in names[i + 1:]}
    assert set(results) == expected
    assert all(results[p] == p for p in expected)
