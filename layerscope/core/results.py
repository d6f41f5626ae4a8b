"""Saved results: turn any JSON object layerscope wrote back into its result object.

The one place that knows which class reads which ``kind``; ``layerscope render`` and
``layerscope report`` go through it. Result classes are imported lazily (some import torch).
"""
from __future__ import annotations

import importlib
import json
from typing import Any

from layerscope.core.errors import UserError, first_line
from layerscope.core.infiles import check_input_file
from layerscope.core.report import SCHEMA_VERSION

# kind -> (module, class); every class has from_dict() and a ``kind`` attribute
_CLASSES = {
    "analyze": ("layerscope.core.report", "Report"),
    "profile": ("layerscope.core.report", "Report"),
    "ops": ("layerscope.core.optable", "OpTable"),
    "sweep": ("layerscope.analysis.sweep", "SweepReport"),
    "train": ("layerscope.core.records.train", "TrainReport"),
    "ablate": ("layerscope.core.records.ablate", "AblationReport"),
    "activations": ("layerscope.analysis.activations", "ActivationCapture"),
    "compare": ("layerscope.analysis.compare", "Comparison"),
    "loop": ("layerscope.core.records.loop", "LoopProfile"),
    "scaling": ("layerscope.core.records.scaling", "ScalingReport"),
    "llm": ("layerscope.core.llm_records", "LLMReport"),
    "plan": ("layerscope.core.llm_records", "PlanReport"),
}
KINDS = tuple(_CLASSES)
# the result classes' names, each once (what core/display draws)
RESULT_CLASSES = tuple(dict.fromkeys(name for _, name in _CLASSES.values()))


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
    if kind not in _CLASSES:
        what = f"unknown kind {kind!r}" if "kind" in d else "no 'kind' key"
        raise UserError(f"{source}: not a layerscope result ({what}); layerscope results are "
                        f"{', '.join(KINDS)}")
    check_version(d, source)
    if validate:
        from layerscope.schema import first_error

        problem = first_error(d)
        if problem:
            raise UserError(f"{source}: not a valid {kind} result: {problem}")
    module, name = _CLASSES[kind]
    cls = getattr(importlib.import_module(module), name)
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
