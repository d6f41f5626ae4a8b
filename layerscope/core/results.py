"""Saved results: turn any JSON object layerscope wrote back into its result object.

The one place that reads a result back; ``layerscope render``, ``layerscope report`` and
``layerscope.load`` go through it. Which class reads which ``kind`` is the kinds table
(core/kinds.py: every result class declares its kind); its record modules are imported on the
first read, never at start-up.
"""
from __future__ import annotations

import json
from typing import Any

from layerscope.core import kinds
from layerscope.core.errors import UserError, first_line
from layerscope.core.infiles import check_input_file
from layerscope.core.report import SCHEMA_VERSION


def all_kinds() -> tuple[str, ...]:
    """Every result kind, sorted."""
    return tuple(sorted(kinds.table()))


def record_class(kind: str) -> type[kinds.Result]:
    """The class that reads results of ``kind`` (KeyError for an unknown kind)."""
    return kinds.table()[kind]


def __getattr__(name: str) -> Any:  # KINDS: read on first use (it imports the record modules)
    if name == "KINDS":
        return all_kinds()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _major(version: Any) -> int | None:
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return None


def check_version(d: dict[str, Any], source: str) -> None:
    ours = int(SCHEMA_VERSION.split(".")[0])
    version = d.get("schema_version")
    major = _major(version) if version is not None else None
    if major is None:
        raise UserError(f"{source}: no readable schema_version ({version!r}); "
                        f"layerscope writes {SCHEMA_VERSION}")
    if major > ours:
        raise UserError(f"{source}: written by a newer layerscope (schema_version {version}; "
                        f"this one reads {ours}.x): upgrade layerscope")
    if major < ours:
        raise UserError(f"{source}: schema_version {version} is older than this layerscope "
                        f"reads ({ours}.x)")


def load_result(d: Any, source: str = "result", validate: bool = True) -> Any:
    """The result object for a dict from ``to_dict()`` (dispatch on ``kind``).

    Raises UserError (one line) for anything that is not a readable layerscope result.
    """
    if not isinstance(d, dict):
        raise UserError(f"{source}: not a layerscope result (expected a JSON object with "
                        f"'kind' and 'schema_version', got {type(d).__name__})")
    kind = d.get("kind")
    known = all_kinds()
    if not isinstance(kind, str) or kind not in known:
        what = f"unknown kind {kind!r}" if "kind" in d else "no 'kind' key"
        raise UserError(f"{source}: not a layerscope result ({what}); layerscope results are "
                        f"{', '.join(known)}")
    check_version(d, source)
    if validate:
        from layerscope.schema import first_error

        problem = first_error(d)
        if problem:
            raise UserError(f"{source}: not a valid {kind} result: {problem}")
    cls: Any = record_class(kind)
    try:
        return cls.from_dict(d)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - schema-valid but inconsistent data: one line
        raise UserError(f"{source}: malformed {kind} result "
                        f"({first_line(exc, with_type=True)})") from exc


def read_result(path: str, validate: bool = True) -> Any:
    """Read a saved result file; every failure is one UserError line naming the file."""
    check_input_file(path, "a saved result (.json)")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a saved result (.json)") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not JSON (not UTF-8 text)") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    try:
        d = json.loads(text, parse_int=_json_int)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}, column "
                        f"{exc.colno})") from None
    except RecursionError:
        raise UserError(f"{path}: not a layerscope result (JSON nested too deeply)") from None
    except UserError as exc:
        raise UserError(f"{path}: not a layerscope result ({exc})") from None
    try:
        return load_result(d, source=path, validate=validate)
    except RecursionError:
        raise UserError(f"{path}: not a layerscope result (JSON nested too deeply)") from None


def _json_int(text: str) -> int:
    """JSON integers as Python ints, refusing absurd lengths before int() does (its 4300-digit
    limit raises a bare ValueError); a layerscope result never holds more than int64."""
    if len(text.lstrip("-")) > 20:
        raise UserError(f"an integer of {len(text)} digits, {text[:12]}...")
    return int(text)
