"""judge/common/fieldread.py: a facts dataclass read by its fields' declared types, as the
hand-written readers read them (probes.py's helpers, the field's own default)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from cluster_tests.judge.common.fieldread import ByFields, by_fields
from cluster_tests.judge.common.probes import FactsError


@dataclass(frozen=True)
class Inner(ByFields, what="an inner thing"):
    name: str
    size: int | None = None


@dataclass(frozen=True)
class Outer(ByFields, what="an outer thing"):
    path: str
    uid: int = -1
    ok: bool = False
    seconds: float = 0.0
    error: str | None = None
    age: float | None = None
    owned: bool | None = None
    words: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    one: Inner = Inner("")
    maybe: Inner | None = None
    many: tuple[Inner, ...] = ()
    named: Mapping[str, Inner] = field(default_factory=dict)


@dataclass(frozen=True)
class Plain:
    names: Mapping[str, str]
    values: Mapping[str, str | None]
    other: frozenset[str] = frozenset()


def test_each_field_is_read_by_its_type_with_its_default():
    got = Outer.read({"path": "/x", "ok": True, "seconds": 2, "error": "e", "age": 3,
                      "owned": False, "words": ["a", 1, "b"], "one": {"name": "n", "size": 4},
                      "maybe": {"name": "m"}, "many": [{"name": "p"}, {"name": "q", "size": "?"}],
                      "env": {"A": "1", "B": 2}, "named": {"k": {"name": "v"}}})
    assert got == Outer("/x", -1, True, 2.0, "e", 3.0, False, ("a", "b"), {"A": "1"},
                        Inner("n", 4), Inner("m"), (Inner("p"), Inner("q")), {"k": Inner("v")})


def test_what_is_wrong_or_missing_reads_as_the_helpers_read_it():
    got = Outer.read({"path": 7, "uid": True, "ok": "yes", "seconds": "1", "age": None,
                      "owned": 1, "words": "ab", "one": None, "maybe": None, "many": {},
                      "env": [], "named": []})
    assert got == Outer("", -1, False, 0.0, None, None, None, (), {}, Inner(""), None, (), {})


def test_mappings_and_given_fields():
    d = {"names": {"a": "1", "b": 2}, "values": {"a": "1", "b": 2}, "other": ["x"]}
    assert by_fields(Plain, d, other=frozenset({"x"})) == Plain({"a": "1"}, {"a": "1", "b": None},
                                                                frozenset({"x"}))


def test_a_type_it_does_not_read_must_be_given():
    with pytest.raises(TypeError, match="Plain.other"):
        by_fields(Plain, {"names": {}, "values": {}})


def test_not_an_object_is_a_facts_error_naming_what():
    with pytest.raises(FactsError, match="an outer thing"):
        Outer.read([])
    with pytest.raises(FactsError, match="an inner thing"):
        Outer.read({"maybe": "x"})
