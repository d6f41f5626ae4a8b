"""The published JSON schema of every result layerscope writes (``report.schema.json``,
draft 2020-12): a header (``schema_version``, ``kind``) and one definition per kind."""
from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import Any

SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "report.schema.json")


@lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        schema: dict[str, Any] = json.load(f)
    return schema


@lru_cache(maxsize=1)
def _validator() -> Any:
    try:
        import jsonschema
    except ImportError:  # validation is a check, not a requirement for rendering
        return None
    return jsonschema.Draft202012Validator(load_schema())


def errors(d: Any) -> list[str]:
    """Every way ``d`` breaks the schema, as 'path: message' lines (empty when valid)."""
    v = _validator()
    if v is None:
        return []
    out = []
    for e in sorted(v.iter_errors(d), key=lambda e: list(map(str, e.absolute_path))):
        if e.context:  # "X | None" fields are anyOf [record, null]: name the record's problem
            e = max(e.context, key=lambda c: len(c.path))  # deepest; ties: first
        path = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        msg = e.message if len(e.message) < 160 else e.message[:157] + "..."
        out.append(f"{path}: {msg}")
    return out


def first_error(d: Any) -> str | None:
    found = errors(d)
    return found[0] if found else None
