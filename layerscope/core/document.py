"""What every saved result shares: JSON with ``schema_version`` and ``kind`` first, reading it
back (nested row lists rebuilt, unknown newer fields ignored) and a notebook view."""
from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, ClassVar


class ResultDocument:
    """Mixin for result dataclasses that have ``kind`` and ``schema_version`` fields."""

    # field name -> dataclass of its list items, rebuilt by from_dict
    _row_types: ClassVar[dict[str, type]] = {}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {"schema_version": d.pop("schema_version"), "kind": d.pop("kind")} | d

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in d.items() if k in names}
        for name, row_type in cls._row_types.items():
            row_names = {f.name for f in fields(row_type)}
            values[name] = [row_type(**{k: v for k, v in r.items() if k in row_names})
                            for r in values.get(name, [])]
        return cls(**values)

    def _repr_html_(self) -> str:
        from layerscope.core import display

        return display.html(self)
