"""judge/problem.py: the value every red is, the base of the sections' causes, and the Problem of
a red that no judge made."""

from __future__ import annotations

import json

from cluster_tests.judge.problem import (
    Fix,
    OutcomeCause,
    Problem,
    SectionCause,
    cause_of,
    unjudged,
    vocabularies,
)


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


# -- a cause read back is its vocabulary's member ---------------------------------------------


def _package_vocabularies() -> dict[type[SectionCause], tuple[str, ...]]:
    """Every vocabulary of the package (each module that defines one imported), with the items
    it speaks for."""
    import importlib
    import pkgutil

    import cluster_tests

    for m in pkgutil.walk_packages(cluster_tests.__path__, "cluster_tests."):
        if m.name.split(".")[1] in ("judge", "core"):
            importlib.import_module(m.name)
    return {v: items for v, items in vocabularies().items()
            if v.__module__.startswith("cluster_tests.")}


def test_every_cause_of_the_package_reads_back_as_itself():
    found = _package_vocabularies()
    assert len(found) > 15 and OutcomeCause in found
    for vocabulary, items in found.items():
        for member in vocabulary:
            p = Problem(("node1",), member, "text", item=items[0] if items else "")
            back = Problem.from_json(p.to_json())
            assert back is not None and back.cause is member, (vocabulary, member)
            assert back.key() == p.key() and back.to_json() == p.to_json()


def test_words_two_vocabularies_share_are_told_apart_by_the_item():
    """"name not resolved" is S's (an ssh leg) and N1's; the item of the red says which."""
    found = _package_vocabularies()
    by_words: dict[str, list[type[SectionCause]]] = {}
    for vocabulary in found:
        for member in vocabulary:
            by_words.setdefault(member.value, []).append(vocabulary)
    shared = {w: vs for w, vs in by_words.items() if len(vs) > 1}
    assert "name not resolved" in shared
    for words, sharing in shared.items():
        declared = [found[v] for v in sharing]
        assert sum(1 for items in declared if not items) <= 1, words
        for vocabulary, items in zip(sharing, declared, strict=True):
            for item in items:
                assert type(cause_of(words, item)) is vocabulary, (words, item)
    assert type(cause_of("name not resolved", "S4")).__name__ == "Cause"
    assert type(cause_of("name not resolved", "N1")).__name__ == "NamesCause"


def test_words_no_vocabulary_has_stay_words():
    got = cause_of("AssertionError: assert 0", "X9")
    assert got == "AssertionError: assert 0" and not isinstance(got, SectionCause)
    p = unjudged(("node2",), "node2: /data is not mounted", "test_mount[node2]")
    back = Problem.from_json(p.to_json())
    assert back is not None and back.cause == p.cause and not isinstance(back.cause, SectionCause)
    assert back.key() == p.key()
