"""--pairs on the 3-node sim: the pair checks run over exactly the selected pairs, the probes
reach only those targets, and the mode is shown in the header and the JSON summary."""

from __future__ import annotations

import json

from suite import logins_from, run_suite

RING3 = ["node1->node2", "node1->node3", "node2->node1", "node2->node3", "node3->node1",
         "node3->node2"]


def test_ring_runs_exactly_the_ring(healthy_sim):
    own = {n: healthy_sim.node(n).address for n in ("node1", "node2", "node3")}
    before = {n: logins_from(healthy_sim, n, a) for n, a in own.items()}
    r = run_suite(healthy_sim, "-m", "ssh or network", "-k", "trust or high_ports or master_port",
                  "--pairs", "ring", "-v")
    assert r.returncode == 0, r.describe()
    for test in ("test_ssh_trust", "test_high_ports"):
        ids = sorted(t for t in r.outcomes if t.startswith(test + "["))
        assert ids == sorted(f"{test}[{p}]" for p in RING3), r.output
        assert r.ids("passed", test + "[") == set(ids)
    # no self pair is selected: no ssh a -> a was made (S5's pdsh from node1 is deselected here)
    # but DeepSpeed's own `ssh node1 hostname -I` on node1, which F2 makes to derive the master
    # address as the launch does
    after = {n: logins_from(healthy_sim, n, a) for n, a in own.items()}
    assert after == {**before, "node1": before["node1"] + 1}
    assert "cluster: pairs: ring, 6 of 9 ordered pairs (--pairs)" in r.output
    meta = json.loads((r.junit.parent / "summary.json").read_text())["meta"]
    assert meta["pairs"] == {"mode": "ring", "requested": "ring", "pairs": 6, "all_pairs": 9}


def test_default_is_all_pairs_and_says_so(healthy_sim):
    r = run_suite(healthy_sim, "-m", "ssh", "-k", "trust", "-v")
    assert r.returncode == 0, r.describe()
    assert len(r.ids("passed", "test_ssh_trust[")) == 9
    assert "cluster: pairs: all (auto), 9 of 9 ordered pairs (--pairs)" in r.output


def test_bad_pairs_value_is_a_usage_error(healthy_sim):
    r = run_suite(healthy_sim, "-m", "ssh", "--pairs", "sample:x")
    assert r.returncode == 4, r.output
    assert "--pairs: bad value 'sample:x'" in r.output
