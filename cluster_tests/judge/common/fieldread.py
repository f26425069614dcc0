"""One reader for the simple facts: a frozen dataclass built from a JSON object, each field read
by its declared type with judge/common/probes.py's helpers, the way every hand-written reader
reads it::

    @dataclass(frozen=True)
    class Written(ByFields, what="a token written"):  # Written.read(raw)
        ok: bool
        file: str

or, where a field's key, default or shape differs, `by_fields(cls, d, file=...)` in a hand-
written `read`.

What a field's type gives (the key is the field's name; `given` overrides a field whose key,
default or shape differs):

    str, int, float          text / integer / number, the field's own default where it has one
    bool                     flag
    str|int|float|bool|None  opt_text / opt_int / a number or None / a bool or None
    tuple[str, ...]          texts
    Mapping[str, str]        text_map (str | None values: opt_text_map)
    X (a dataclass)          X.read(value or {})
    X | None                 X.read(value), None where the key is null or absent
    tuple[X, ...]            X.read of each item of a list (anything else: ())
    Mapping[str, X]          X.read of each value of an object (anything else: {})

A field of a type it does not know must be given: else a TypeError, at its first read.
Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import ClassVar, TypeVar

from cluster_tests.judge.common import probes

T = TypeVar("T")
B = TypeVar("B", bound="ByFields")
Conv = Callable[[object], object]

_READERS: dict[type, tuple[tuple[str, Conv], ...]] = {}


def _opt_number(value: object) -> float | None:
    return None if value is None else probes.number(value)


def _opt_bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


_OPTIONAL: dict[object, Conv] = {str: probes.opt_text, int: probes.opt_int, float: _opt_number,
                                 bool: _opt_bool}


def _nested(kind: object) -> Callable[[object], object] | None:
    read = getattr(kind, "read", None)
    return read if dataclasses.is_dataclass(kind) and callable(read) else None


def _plain(kind: object, default: object) -> Conv | None:
    if kind is bool:
        return probes.flag
    if kind is str:
        own_text = default if isinstance(default, str) else ""
        return lambda v: probes.text(v, own_text)
    if kind is int:
        own_int = default if type(default) is int else 0
        return lambda v: probes.integer(v, own_int)
    if kind is float:
        own_number = default if type(default) is float else 0.0
        return lambda v: probes.number(v, own_number)
    return None


def _optional(kind: object) -> Conv | None:
    args = typing.get_args(kind)
    if typing.get_origin(kind) not in (typing.Union, types.UnionType) or len(args) != 2 \
            or type(None) not in args:
        return None
    inner = args[0] if args[1] is type(None) else args[1]
    if inner in _OPTIONAL:
        return _OPTIONAL[inner]
    read = _nested(inner)
    if read is None:
        return None
    return lambda v, r=read: None if v is None else r(v)  # type: ignore[misc]


def _collection(kind: object) -> Conv | None:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if args[0] is str:
            return probes.texts
        read = _nested(args[0])
        if read is not None:
            return lambda v, r=read: (tuple(r(e) for e in v)  # type: ignore[misc]
                                      if isinstance(v, list) else ())
    if origin is Mapping and len(args) == 2 and args[0] is str:
        if args[1] is str:
            return probes.text_map
        if args[1] == (str | None):
            return probes.opt_text_map
        read = _nested(args[1])
        if read is not None:
            return lambda v, r=read: ({str(k): r(e) for k, e in v.items()}  # type: ignore[misc]
                                      if isinstance(v, Mapping) else {})
    return None


def _converter(cls: type, f: dataclasses.Field[object], kind: object) -> Conv:
    conv = _plain(kind, f.default) or _optional(kind) or _collection(kind)
    if conv is not None:
        return conv
    read = _nested(kind)
    if read is not None:
        return lambda v, r=read: r(v or {})  # type: ignore[misc]
    why = f"{cls.__name__}.{f.name}: no reader for {kind!r}; give it (read it by hand)"

    def unknown(value: object) -> object:
        raise TypeError(why)
    return unknown


def _readers(cls: type) -> tuple[tuple[str, Conv], ...]:
    got = _READERS.get(cls)
    if got is None:
        hints = typing.get_type_hints(cls)
        got = _READERS[cls] = tuple((f.name, _converter(cls, f, hints[f.name]))
                                    for f in dataclasses.fields(cls))
    return got


def by_fields(cls: type[T], d: Mapping[str, object], **given: object) -> T:
    """`cls` (a dataclass) from the JSON object `d`: each field from the key of its name, read
    by its declared type (the module docstring), but those in `given`, taken as they are."""
    values = {name: given[name] if name in given else conv(d.get(name))
              for name, conv in _readers(cls)}
    return cls(**values)


class ByFields:
    """A base for facts read wholly by `by_fields`, naming what they are for FactsError::

        @dataclass(frozen=True)
        class Written(ByFields, what="a token written"):
            ok: bool
            ...

    `Written.read(raw)` is then `by_fields(Written, obj(raw, "a token written"))`."""

    _what: ClassVar[str] = "facts"

    def __init_subclass__(cls, what: str = "", **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if what:
            cls._what = what

    @classmethod
    def read(cls: type[B], raw: object) -> B:
        return by_fields(cls, probes.obj(raw, cls._what))
