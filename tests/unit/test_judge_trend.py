"""judge/trend.py: a figure against its own median over its last passing runs, and nodes that
flap, on numbers given here."""

from __future__ import annotations

import pytest

from cluster_tests.judge import trend


def test_a_value_below_the_ratio_of_its_median_is_a_drop_with_its_numbers():
    d = trend.drop("C2 node1<->node2 busbw at 1MB", 0.6, [1.0, 1.1, 0.9, 1.0, 1.2])
    assert d is not None
    assert (d.value, d.median, d.runs, d.threshold) == (0.6, 1.0, 5, 0.7)
    assert d.ratio == pytest.approx(0.6)
    assert d.text() == ("C2 node1<->node2 busbw at 1MB: 0.6 GB/s, 0.60x its median 1 GB/s over "
                        "its last 5 passing runs (below 0.7x: --history-drop)")


def test_at_or_above_the_ratio_is_not_a_drop():
    assert trend.drop("x", 0.7, [1.0, 1.0, 1.0]) is None  # 0.7 x 1.0 exactly: not below
    assert trend.drop("x", 0.69, [1.0, 1.0, 1.0]) is not None
    assert trend.drop("x", 0.5, [1.0, 1.0, 1.0], ratio=0.4) is None


def test_too_short_a_history_or_no_value_has_no_median():
    assert trend.drop("x", 0.1, [1.0, 1.0]) is None  # fewer than MIN_RUNS (3)
    assert trend.drop("x", None, [1.0] * 5) is None
    assert trend.drop("x", 0.1, [1.0, 0.0, 1.0, None, 1.0]) is not None  # 3 usable values


def test_only_the_window_counts_newest_first():
    # the last 3 runs were slow already (0.5): the median of the window of 3 is 0.5, no drop
    history = [0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 1.0]
    assert trend.drop("x", 0.45, history, window=3) is None
    d = trend.drop("x", 0.45, history, window=7)
    assert d is not None and d.median == 1.0 and d.runs == 7


def test_drops_keeps_the_order_of_the_figures():
    got = trend.drops({"a": 0.5, "b": 1.0, "c": 0.1},
                      {"a": [1.0] * 4, "b": [1.0] * 4, "c": [1.0] * 4})
    assert [d.what for d in got] == ["a", "c"]


def test_a_node_red_in_three_of_its_last_five_runs_flaps_with_its_causes():
    history = {
        "node3": [(True, ["test_login[node3]: connection refused"]), (False, []),
                  (True, ["test_login[node3]: connection refused"]),
                  (True, ["test_ssh_modes[node3]: authorized_keys writable"]), (False, []),
                  (True, ["older"])],
        "node2": [(True, ["x"]), (True, ["x"]), (False, []), (False, []), (False, []),
                  (True, ["x"])],
    }
    got = trend.flapping(history)
    assert [(f.node, f.red, f.runs) for f in got] == [("node3", 3, 5)]
    assert got[0].causes == ("test_login[node3]: connection refused",
                             "test_ssh_modes[node3]: authorized_keys writable")
    assert got[0].text() == ("node3 flapping: red in 3 of its last 5 runs (test_login[node3]: "
                             "connection refused; test_ssh_modes[node3]: authorized_keys "
                             "writable)")
