"""Typed records and their one JSON path.

``Record`` is the mixin for every dataclass layerscope writes as JSON: ``to_dict`` walks the
fields (nested records, lists, dicts) and ``from_dict`` rebuilds them from the type hints, so a
record's JSON shape is its field list (the JSON schema is generated from the same fields, see
layerscope/schema/generate.py). Field metadata that shapes the JSON:

- ``omit_none``: the key is left out when the value is None (fields added after 1.0, measured
  sections of an analyze report);
- ``omit_empty``: the key is left out when the value is None or an empty list or dict (lists
  added after 1.0 that are usually empty, so a result that has nothing to say is written as
  earlier versions wrote it);
- ``transient``: kept in memory only, never written nor read back (e.g. arrays that are saved to
  a file of their own);
- ``seconds`` (``timing_bounds()``): a timing, each of its numbers finite and within bounds;
- ``description``, ``minimum``, ``optional`` (not in the schema's ``required`` list although
  the dataclass needs it), ``schema`` (a hand-written schema for an open value),
  ``required_in`` (the kinds whose results must have the key, not null: a profile's measured
  sections): for the schema.

Records also read like the dicts they replaced (``row.time["median_s"]``, ``.get``, ``in``,
``dict(record)``), so code written against the dicts keeps working.

``ResultDocument`` adds what every saved result shares: ``schema_version`` and ``kind`` first,
a notebook view, and its place in the kinds table (``core.kinds.Result``: the class's ``kind``
default registers it).
"""
from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any, ClassVar, TypeVar, Union

from layerscope.core.kinds import Result

T = TypeVar("T")
R = TypeVar("R", bound="Record")


def omit_none(**metadata: Any) -> dict[str, Any]:
    """Metadata for a field whose key is absent from the JSON while it is None."""
    return {"omit_none": True, **metadata}


def omit_empty(**metadata: Any) -> dict[str, Any]:
    """Metadata for a field whose key is absent from the JSON while it is None, [] or {}."""
    return {"omit_empty": True, **metadata}


def transient(**metadata: Any) -> dict[str, Any]:
    """Metadata for a field that is never written to the JSON nor read from it."""
    return {"transient": True, **metadata}


# the most seconds a timing may hold (about 32 years): a result file is data from elsewhere, and
# a timing that is NaN, infinite, above this or (a measured duration) negative is damage,
# refused when the result is read, in one line naming the field (schema/check.py)
MAX_SECONDS = 10**9


def timing_bounds(signed: bool = False, positive: bool = False, **metadata: Any
                  ) -> dict[str, Any]:
    """Metadata for a field of seconds (a number, or a list or dict of numbers): a measured
    duration, 0 .. MAX_SECONDS; ``signed``: a remainder that rounding can make a little
    negative (a step's ``other`` phase), -MAX_SECONDS .. MAX_SECONDS; ``positive``: a duration
    that cannot be 0 (a whole forward pass or training step, timed by a nanosecond clock:
    above 0 .. MAX_SECONDS). Every number finite."""
    low = -MAX_SECONDS if signed else 0
    return {"seconds": (low, MAX_SECONDS, positive), **metadata}


def _omitted(f: dataclasses.Field[Any], value: Any) -> bool:
    if f.metadata.get("transient"):
        return True
    if f.metadata.get("omit_empty"):
        return value is None or (isinstance(value, (list, dict)) and not value)
    return bool(f.metadata.get("omit_none")) and value is None


def to_json_value(value: Any) -> Any:
    """``value`` with every record (and plain dataclass) turned into dicts, containers copied."""
    if isinstance(value, Record):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return type(value)(to_json_value(v) for v in value)
    if isinstance(value, dict):
        return {k: to_json_value(v) for k, v in value.items()}
    return value


@cache
def _fields_of(cls: Any) -> dict[str, dataclasses.Field[Any]]:
    """A dataclass's fields by name (a record read as a dict looks one up per key)."""
    return {f.name: f for f in dataclasses.fields(cls)}


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _dataclass_type(hint: Any) -> type | None:
    """The dataclass a hint names, directly or as ``X | None``."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    if typing.get_origin(hint) in (Union, types.UnionType):
        found = [_dataclass_type(a) for a in typing.get_args(hint) if a is not type(None)]
        return found[0] if len(found) == 1 else None
    return None


def from_json_value(hint: Any, value: Any) -> Any:
    """``value`` read back as ``hint`` says: dataclasses (also inside lists and dict values)
    rebuilt, anything else as it came (lists and dicts copied)."""
    return _reader(hint)(value)


def _same(value: Any) -> Any:
    return value


@cache
def _reader(hint: Any) -> Any:
    """The function that reads a JSON value as ``hint`` says (``from_json_value``), made once
    per hint: reading a result is one pass over it, with no type hint looked at per value."""
    cls = _dataclass_type(hint)
    if cls is not None:
        return lambda value: build(cls, value) if isinstance(value, Mapping) else value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _reader(inner[0]) if len(inner) == 1 else _same
    if origin is list and args:
        item = _reader(args[0])
        if item is _same:
            return lambda value: list(value) if isinstance(value, list) else value
        return lambda value: [item(v) for v in value] if isinstance(value, list) else value
    if origin is dict and len(args) == 2:
        entry = _reader(args[1])
        if entry is _same:
            return lambda value: dict(value) if isinstance(value, dict) else value
        return lambda value: ({k: entry(v) for k, v in value.items()}
                              if isinstance(value, dict) else value)
    return _same


@cache
def _plan(cls: Any) -> tuple[list[tuple[str, Any]], list[str]]:
    """How ``build`` fills ``cls``: (field name, its reader) for the fields read from JSON, and
    the optional fields without a default (None when absent)."""
    hints = _hints(cls)
    read, optional = [], []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if not f.metadata.get("transient"):
            read.append((f.name, _reader(hints[f.name])))
        if f.metadata.get("optional") and f.default is dataclasses.MISSING \
                and f.default_factory is dataclasses.MISSING:
            optional.append(f.name)
    return read, optional


def build(cls: type[T], d: Mapping[str, Any]) -> T:
    """A dataclass from its JSON object. Unknown keys (written by a newer minor version) are
    ignored; a missing key takes the field's default, or None for a field marked ``optional``
    (results saved before the field was written)."""
    read, optional = _plan(cls)  # type: ignore[arg-type]  # classes are hashable
    values = {name: reader(d[name]) for name, reader in read if name in d}
    for name in optional:
        values.setdefault(name, None)
    return cls(**values)


class Record:
    """Mixin for dataclasses written as JSON."""

    # properties written after the fields (e.g. ``intensity``)
    _computed: ClassVar[tuple[str, ...]] = ()
    # keys written first, in this order (the rest follow in field order)
    _json_first: ClassVar[tuple[str, ...]] = ()

    def _keys(self) -> list[str]:
        names = [f.name for f in dataclasses.fields(self)  # type: ignore[arg-type]
                 if not _omitted(f, getattr(self, f.name))]
        first = [k for k in self._json_first if k in names]
        return first + [k for k in names if k not in first] + list(self._computed)

    def to_dict(self) -> dict[str, Any]:
        return {k: to_json_value(getattr(self, k)) for k in self._keys()}

    @classmethod
    def from_dict(cls: type[R], d: Mapping[str, Any]) -> R:
        return build(cls, d)


class DictRecord(Record, Mapping[str, Any]):
    """A record that also reads like the dict it replaced: ``r["median_s"]``, ``r.get(...)``,
    ``"time" in r``, ``dict(r)``; equal to a dict with the same JSON. Declare subclasses
    ``@dataclass(eq=False)`` so that this equality is kept."""

    # Mapping: read like the dict this record replaced
    def __getitem__(self, key: str) -> Any:
        f = _fields_of(type(self)).get(key)
        if f is None:
            if key not in self._computed:
                raise KeyError(key)
            return getattr(self, key)
        value = getattr(self, key)
        if _omitted(f, value):
            raise KeyError(key)
        if type(self)._keys is not Record._keys and key not in self._keys():
            raise KeyError(key)  # a record that leaves out a key by a rule of its own
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return bool(self.to_dict() == to_json_value(dict(other)))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


class ResultDocument(Record, Result):
    """Mixin for result dataclasses that have ``kind`` and ``schema_version`` fields; they show
    themselves in a terminal and a notebook (``Displayed``) and declare their kind (``Result``)."""

    _json_first: ClassVar[tuple[str, ...]] = ("schema_version", "kind")

