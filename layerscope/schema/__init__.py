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
def _check() -> Any:
    from layerscope.schema.check import Compiler

    return Compiler(load_schema()).root


def errors(d: Any) -> list[str]:
    """Every way ``d`` breaks the schema, as 'path: message' lines (empty when valid), in the
    order of their paths; an ``anyOf`` that failed (an ``X | None`` field is anyOf [record,
    null]) names its deepest branch's problem. Checked by the compiled validator
    (schema/check.py): linear in the size of ``d``."""
    found = _check()(d)
    if not found:
        return []
    out = []
    for path, message, context in sorted(found, key=lambda e: [str(p) for p in e[0]]):
        if context:  # the deepest branch error; ties: the first
            deepest = max(context, key=lambda c: len(c[0]))
            path, message = path + deepest[0], deepest[1]
        where = "/".join(str(p) for p in path) or "(top level)"
        msg = message if len(message) < 160 else message[:157] + "..."
        out.append(f"{where}: {msg}")
    return out


def first_error(d: Any) -> str | None:
    """The first of ``errors(d)``, or None."""
    found = errors(d)
    return found[0] if found else None
