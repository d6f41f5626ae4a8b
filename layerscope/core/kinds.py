"""The kinds table: which record class reads and writes each result ``kind``.

A result kind is declared once, on its record class: a class deriving from ``Result`` names its
kind (the ``kind`` field every result writes, ``kind: str = "sweep"``, or a ``kinds`` tuple for
a class that writes several) and registers itself when its module is imported. Everything else
is derived from this table: loading (core/results.py), the terminal and notebook display
(core/display.py: drawn for every ``Result``), the schema's dispatch on ``kind`` and its list of
kinds (schema/generate.py), and the check that every kind has a view.

The modules that define result records are found by name, so a new kind needs no line here:
the modules of ``layerscope.core`` named ``*records`` (and the modules of a ``records``
package), plus ``report`` and ``optable``. They are imported only when the table is read (a
record module imports nothing outside the standard library and core). No module named here is
above core.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any, ClassVar

from layerscope.core.display import Displayed

# core modules with result records whose names do not end in "records"
_OTHER_RECORD_MODULES = ("report", "optable")
_CORE = "layerscope.core"

_TABLE: dict[str, type[Result]] = {}


class Result(Displayed):
    """Base of every result class (what ``layerscope.load`` returns). A subclass that declares
    ``kind`` (or ``kinds``) in its own body is the record of that kind; a duplicate kind is
    refused."""

    # the kinds this class reads and writes, when it writes more than one (else its ``kind``)
    kinds: ClassVar[tuple[str, ...]] = ()
    # kind -> the schema definitions a result of that kind must match (default: the kind's);
    # all generated from the fields (schema/generate.py): a definition after the class's own
    # from the fields whose metadata says ``required_in`` that kind
    _schema_refs: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        declared = own.get("kinds") or ((own["kind"],) if isinstance(own.get("kind"), str)
                                        else ())
        for kind in declared:
            _register(kind, cls)


def _register(kind: str, cls: type[Result]) -> None:
    known = _TABLE.get(kind)
    if known is not None and _name(known) != _name(cls):
        raise ValueError(f"result kind {kind!r} is declared by {_name(known)} already "
                         f"(and again by {_name(cls)})")
    _TABLE[kind] = cls


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def record_modules() -> list[str]:
    """The modules of core that define result records (see the module's docstring)."""
    core = importlib.import_module(_CORE)
    names = list(_OTHER_RECORD_MODULES)
    for found in pkgutil.iter_modules(core.__path__):
        if not found.name.endswith("records"):
            continue
        names.append(found.name)
        if found.ispkg:
            package = importlib.import_module(f"{_CORE}.{found.name}")
            names += [f"{found.name}.{m.name}" for m in pkgutil.iter_modules(package.__path__)]
    return names


def table() -> dict[str, type[Result]]:
    """kind -> record class, for every kind whose record lives in core (imports them)."""
    for name in record_modules():
        importlib.import_module(f"{_CORE}.{name}")
    return dict(_TABLE)


def schema_refs(cls: type[Result] | None, kind: str) -> tuple[str, ...]:
    """The schema definitions (``$defs`` names) a result of ``kind`` must match."""
    if cls is None:
        return (kind,)
    return cls._schema_refs.get(kind, (kind,))
