"""judge/problem.py: the value every red is, the base of the sections' causes, and the Problem of
a red that no judge made."""

from __future__ import annotations

import json

from cluster_tests.judge.problem import Fix, Problem, SectionCause, unjudged


class ToyCause(SectionCause):
    DOWN = "link down"
    SLOW = "link slow"


def test_a_cause_prints_its_words_wherever_it_is_printed():
    # a plain (str, Enum) prints "ToyCause.DOWN" in an f-string on Python 3.11
    assert f"{ToyCause.DOWN}" == str(ToyCause.DOWN) == "link down"
    assert f"{ToyCause.SLOW:>10}" == " link slow"


def test_a_cause_read_back_from_json_is_the_same_key():
    p = Problem(("node3",), ToyCause.DOWN, "node3: eth0 is down", fix="on node3: ip link set "
                "eth0 up", fixes=(Fix("node3", "bring eth0 up", ("ip link set eth0 up",)),),
                item="X1")
    back = Problem.from_json(p.to_json())
    assert back is not None and json.loads(p.to_json())["cause"] == "link down"
    assert back.key() == p.key() and hash(back.key()) == hash(p.key())
    assert {p.cause: 1}.get(back.cause) == 1 and back.cause == ToyCause.DOWN


def test_the_fix_is_said_once_after_the_message():
    p = Problem(("node3",), ToyCause.DOWN, "node3: eth0 is down", fix="on node3: ip link set "
                "eth0 up")
    assert p.text() == "node3: eth0 is down\n  fix: on node3: ip link set eth0 up"
    assert Problem(("node3",), ToyCause.DOWN, "node3: eth0 is down").text() == \
        "node3: eth0 is down"


def test_a_red_no_judge_made_keeps_its_text_and_reads_no_fix_out_of_it():
    text = "node2: /data is not mounted\n  fix: mount it"
    p = unjudged(("node2",), text, "test_mount[node2]")
    assert (p.cause, p.message, p.fix, p.fixes) == ("node2: /data is not mounted", text, "", ())
    assert p.check == "test_mount[node2]" and p.text() == text
    crash = unjudged(("node2",), "def test_x():\n>   assert 0\nE   assert 0", "test_x[node2]",
                     headline="AssertionError: assert 0")
    assert crash.cause == "AssertionError: assert 0"
    assert unjudged(("node2",), "", "test_x[node2]").cause == "test_x[node2]"
