"""judge/hostfile/resourcefilter.py: DeepSpeed 0.19's --include / --exclude over the hostfile's
hosts and slots (equal to its own functions on examples and generated specs), and H5's red."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster_tests.judge.hostfile import resourcefilter as rf
from cluster_tests.judge.hostfile.hostmodel import HostfileCause
from cluster_tests.judge.hostfile.resourcefilter import ResourceFilterError, parse_resource_filter

runner = pytest.importorskip("deepspeed.launcher.runner")

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def ds_filter(pool: OrderedDict[str, int], inc: str, exc: str) -> object:
    try:
        return list(runner.parse_inclusion_exclusion(pool, inc, exc).items())
    except ValueError:
        return "ValueError"


def our_filter(pool: OrderedDict[str, int], inc: str, exc: str) -> object:
    try:
        return list(parse_resource_filter(pool, inc, exc).items())
    except ResourceFilterError:
        return "ValueError"


FILTER_TOKENS = ["node1", "node2", "node3", "nodeX", "", ":", ",", "@", "0", "1", "3", "-1", " 1"]
filter_spec = st.lists(st.sampled_from(FILTER_TOKENS), max_size=7).map("".join)
pools = st.lists(
    st.tuples(st.sampled_from(["node1", "node2", "node3"]), st.integers(0, 4)),
    min_size=1,
    max_size=3,
    unique_by=lambda t: t[0],
).map(OrderedDict)


@SETTINGS
@given(pools, filter_spec, filter_spec, st.integers(0, 2))
def test_generated_filters_equal_deepspeed(
    pool: OrderedDict[str, int], a: str, b: str, which: int
) -> None:
    inc, exc = [(a, ""), ("", a), (a, b)][which]
    assert our_filter(pool, inc, exc) == ds_filter(pool, inc, exc)


@SETTINGS
@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c"]), st.lists(st.integers(0, 3), max_size=4), min_size=1
    ),
    filter_spec.map(lambda s: s.replace("node", "")),
    st.booleans(),
)
def test_filters_on_slot_lists_equal_deepspeed(
    info: dict[str, list[int]], spec: str, include: bool
) -> None:
    inc, exc = (spec, "") if include else ("", spec)
    try:
        expected: object = list(runner.parse_resource_filter(dict(info), inc, exc).items())
    except ValueError:
        expected = "ValueError"
    try:
        got: object = list(parse_resource_filter(info, inc, exc).items())
    except ResourceFilterError:
        got = "ValueError"
    assert got == expected


POOL = OrderedDict([("node1", 4), ("node2", 2)])


@pytest.mark.parametrize(
    ("include", "exclude", "expected"),
    [
        ("", "", [("node1", [0, 1, 2, 3]), ("node2", [0, 1])]),
        ("node2@node1:1,0", "", [("node1", [0, 1]), ("node2", [0, 1])]),  # hostfile order
        ("node1@node1:2", "", [("node1", [2])]),  # whole host + slots = only those slots
        ("node1:3,3", "", [("node1", [3])]),
        ("", "node1", [("node2", [0, 1])]),
        ("", "node2:0@node1", [("node2", [1])]),
        ("", "node1@node2", []),  # nothing left: main() would then fail on [0]
    ],
)
def test_filter_examples(include: str, exclude: str, expected: list) -> None:
    assert list(parse_resource_filter(POOL, include, exclude).items()) == expected
    assert list(runner.parse_inclusion_exclusion(POOL, include, exclude).items()) == expected


@pytest.mark.parametrize(
    ("include", "exclude", "words"),
    [
        ("node1", "node2", "mutually exclusive"),
        ("nodeX", "", "--include names host 'nodeX', which is not in the hostfile"),
        ("", "nodeX:0", "--exclude names host 'nodeX'"),
        ("node2:2", "", "--include names slot 2 on host 'node2', which has slots 0..1"),
        ("node1:a", "", "slot 'a' in 'node1:a' is not a slot index"),
        ("node1:", "", "slot '' in 'node1:'"),
        ("fe80::1:0", "", "has 3 ':'"),
        ("node1@", "", "host ''"),
    ],
)
def test_filter_errors_name_the_culprit(include: str, exclude: str, words: str) -> None:
    with pytest.raises(ResourceFilterError) as info:
        parse_resource_filter(POOL, include, exclude)
    assert words in str(info.value)
    with pytest.raises(ValueError):
        runner.parse_inclusion_exclusion(POOL, include, exclude)


def test_h5_red_names_the_culprit_and_an_empty_launch() -> None:
    assert rf.judge_filter(POOL, include="node2:1") is None
    p = rf.judge_filter(POOL, include="nodeX")
    assert p is not None and p.cause is HostfileCause.FILTER_REFUSED and p.item == "H5"
    assert p.message == ("the launch's resource filter will be refused by DeepSpeed: --include "
                         "names host 'nodeX', which is not in the hostfile (hosts: node1, node2)")
    assert "--launch-include" in p.fix and p.nodes == ()
    p = rf.judge_filter(POOL, exclude="node1@node2")
    assert p is not None and p.cause is HostfileCause.FILTER_EMPTY
    assert p.message == "the include/exclude filters leave no slot to launch on"
