"""Generate the record definitions of ``report.schema.json`` from the record dataclasses.

The definitions in ``GENERATED`` (the measured sections, the layer rows, and the llm, plan,
train, ablate, loop and scaling kinds with their sections) are built from each record's fields:
the type hints give the JSON types (``dict[str, X]``: an object whose values are X),
``field(metadata=...)`` the descriptions and constraints (``description``, ``minimum``,
``optional``, ``schema``), the class docstring the definition's description. Every integer is
``minimum: 0`` unless its metadata says ``minimum: None`` (all the integers layerscope writes
are counts, sizes or ranks). The rest of the schema (the header, the environment, the
per-kind definitions of the other result kinds, ``report`` and ``profile``) is hand-written
and refers to the generated definitions with ``$ref``. The phases of a training breakdown's
``seconds`` (and of each rank's ``phases``) are written from ``core.phases.STEP_PHASES``.

    python -m layerscope.schema.generate          # rewrite report.schema.json
    python -m layerscope.schema.generate --check  # exit 1 if the shipped file is out of date

tests/test_schema.py checks that the shipped file equals the generated one.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import types
import typing
from typing import Any, Union

from layerscope.core import llm_records as lr
from layerscope.core import records as r
from layerscope.core.document import Record
from layerscope.core.phases import STEP_PHASES
from layerscope.core.records import ablate, loop, phases, scaling, train
from layerscope.core.report import LayerRow, Totals, UncountedOp
from layerscope.core.stats import TimingStats
from layerscope.schema import SCHEMA_PATH, load_schema

# $defs name -> record class
GENERATED: dict[str, type[Record]] = {
    "timing": TimingStats,
    "end_to_end": r.EndToEnd,
    "achieved": r.Achieved,
    "roofline_point": r.RooflinePoint,
    "ceilings": r.Ceilings,
    "above_roof": r.AboveRoof,
    "backward": r.BackwardTiming,
    "type_timing": r.TypeTiming,
    "noise": r.Noise,
    "layer": LayerRow,
    "totals": Totals,
    "uncounted_op": UncountedOp,
    "llm": lr.LLMReport,
    "llm_prefill": lr.PrefillCost,
    "llm_decode": lr.DecodeCost,
    "llm_kv_cache": lr.KVCache,
    "llm_roofline": lr.LLMRoofline,
    "llm_attention_layers": lr.AttentionLayers,
    "plan": lr.PlanReport,
    "plan_activations": lr.PlanActivations,
    "plan_row": lr.PlanRow,
    "phases": phases.PhaseBreakdown,
    "train": train.TrainReport,
    "train_epoch": train.TrainEpoch,
    "train_script": train.WatchedScript,
    "train_layer": train.LayerSeconds,
    "train_phase_memory": train.PhaseMemory,
    "train_rank": train.RankEntry,
    "train_communication": train.Communication,
    "train_bucket": train.Bucket,
    "train_straggler": train.Straggler,
    "ablate": ablate.AblationReport,
    "ablate_variant": ablate.VariantResult,
    "loop": loop.LoopProfile,
    "loop_layer": loop.LoopLayer,
    "scaling": scaling.ScalingReport,
    "scaling_point": scaling.ScalingPoint,
}
_NAMES = {cls: name for name, cls in GENERATED.items()}
_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def type_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of a type hint (records become ``$ref``s to their definitions)."""
    if hint in _NAMES:
        return {"$ref": f"#/$defs/{_NAMES[hint]}"}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            return {}
        schema = type_schema(inner[0])
        if "type" in schema:
            return {**schema, "type": [schema["type"], "null"]}
        return {"anyOf": [schema, {"type": "null"}]}
    if hint is list or origin in (list, tuple):
        return {"type": "array"} | ({"items": type_schema(args[0])} if args else {})
    if hint is dict or origin is dict:
        values = type_schema(args[1]) if len(args) == 2 else {}
        return {"type": "object"} | ({"additionalProperties": values} if values else {})
    return {}  # Any


def _is_integer(schema: dict[str, Any]) -> bool:
    t = schema.get("type")
    return t == "integer" or (isinstance(t, list) and "integer" in t)


def _property(hint: Any, metadata: typing.Mapping[str, Any]) -> dict[str, Any]:
    schema = type_schema(hint)
    if metadata.get("schema"):
        schema = dict(metadata["schema"])
    minimum = metadata.get("minimum", 0 if _is_integer(schema) else None)
    if minimum is not None:
        schema["minimum"] = minimum
    if metadata.get("description"):
        schema["description"] = metadata["description"]
    return schema


def record_schema(cls: type[Record]) -> dict[str, Any]:
    """A record's definition: its fields, then its computed properties (``_computed``)."""
    hints = typing.get_type_hints(cls)
    props, required = {}, []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        props[f.name] = _property(hints[f.name], f.metadata)
        has_default = not (f.default is dataclasses.MISSING
                           and f.default_factory is dataclasses.MISSING)
        if not has_default and not f.metadata.get("optional"):
            required.append(f.name)
    for name in cls._computed:
        getter = getattr(cls, name).fget
        props[name] = _property(typing.get_type_hints(getter)["return"], {})
    required = list(getattr(cls, "_schema_required", required))
    doc = " ".join((cls.__doc__ or "").split("\n\n")[0].split())
    return {"type": "object", "description": f"{cls.__name__}: {doc}",
            "required": required, "properties": props}


def phases_schema(what: str, extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Seconds by phase (core.phases): a number per phase; a phase shown only when spent may
    be absent (reports written before it existed lack it), and a key not listed is a number
    too."""
    props = {p.name: {"type": "number", "description": p.meaning
                      + (" (present only when some step spent time in it)" if p.when_spent else "")
                      + (" (data-parallel runs)" if p.distributed else "")}
             for p in STEP_PHASES}
    props.update({k: {"type": "number", "description": v} for k, v in (extra or {}).items()})
    return {"type": "object", "description": what, "properties": props,
            "additionalProperties": {"type": "number"}}


def _set_phases(defs: dict[str, Any]) -> None:
    defs["phases"]["properties"]["seconds"] = phases_schema(
        "seconds by phase, summed over the steps; the phases sum to wall_s")
    defs["train_rank"]["properties"]["phases"] = phases_schema(
        "seconds per step by phase: the phases sum to step_s, communication overlaps backward",
        {"communication": "time inside collectives (overlaps backward; not in step_s)"})


def generated_schema(base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``base`` (the shipped schema) with every generated definition rebuilt."""
    schema: dict[str, Any] = json.loads(json.dumps(base if base is not None else load_schema()))
    defs = schema.setdefault("$defs", {})
    for name, cls in GENERATED.items():
        defs[name] = record_schema(cls)
    _set_phases(defs)
    return schema


def schema_text(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m layerscope.schema.generate",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the shipped schema differs from the generated one")
    args = parser.parse_args(argv)
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        shipped = f.read()
    text = schema_text(generated_schema(json.loads(shipped)))
    if args.check:
        if text != shipped:
            print(f"{SCHEMA_PATH} is out of date: run python -m layerscope.schema.generate",
                  file=sys.stderr)
            return 1
        return 0
    if text != shipped:
        with open(SCHEMA_PATH, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
