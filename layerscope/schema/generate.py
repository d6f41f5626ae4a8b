"""Generate the record definitions of ``report.schema.json`` from the record dataclasses.

Generated from the kinds table (core/kinds.py): the list of kinds in the header, the dispatch on
``kind`` (the top-level ``allOf``: a result of each kind must match its definitions), and the
definition of every kind, named after its kind (or as ``GENERATED`` names it: ``report`` for
analyze and profile), with the records it holds named ``<kind>_<field>`` (a list's field in the
singular) unless ``GENERATED`` names them. ``GENERATED`` names the records that several kinds
share (timing, end_to_end, achieved, roofline_point, ceilings, backward, type_timing, noise,
layer, totals, uncounted_op, phases) and keeps earlier names (report, compare_side,
compare_numbers, llm, plan, train, ablate, loop, scaling sections). A definition is built from
the record's fields: the type hints give the JSON types (``dict[str, X]``: an object whose
values are X), ``field(metadata=...)`` the descriptions and constraints (``description``,
``minimum``, ``optional``, ``schema``, ``seconds``: a timing's bounds on each of its numbers),
the class docstring the definition's description. Every
integer is ``minimum: 0`` unless its metadata says ``minimum: None`` (the integers layerscope
writes are counts, sizes or ranks, but for torch.profiler's memory figures and the differences
compare writes).

A kind that must have more than its class's definition (``_schema_refs`` names a definition
after the class's own, e.g. ``profile``) gets that definition from the fields whose metadata
says ``required_in`` that kind: each is required there and not null, also inside the lists of
records the class holds (a profile's layers need ``time``, ``share`` and ``rank``).

The rest of the schema (the header's fields, ``environment`` and ``shapes``) is hand-written
and referred to with ``$ref`` (field metadata ``schema``). The phases of a training
breakdown's ``seconds`` (and of each rank's ``phases``) are written from
``core.phases.STEP_PHASES``.

A definition that the root (the header and the dispatch on ``kind``) does not reach, directly
or through other definitions, is dropped: a removed kind's definitions and a record's old name
go with it, and ``--check`` fails while the shipped file still holds one.

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
from functools import cache
from typing import Any, Union

from layerscope.core import kinds
from layerscope.core import llm_records as lr
from layerscope.core import records as r
from layerscope.core.compare_records import CompareSide, RowNumbers
from layerscope.core.document import MAX_SECONDS, Record
from layerscope.core.phases import STEP_PHASES
from layerscope.core.records import ablate, loop, memory, phases, scaling, train
from layerscope.core.report import LayerRow, Report, Totals, UncountedOp
from layerscope.core.results import all_kinds, record_class
from layerscope.core.stats import TimingStats
from layerscope.schema import SCHEMA_PATH, load_schema

# $defs name -> record class: shared records, and names kept from before they were derived
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
    "report": Report,
    "compare_side": CompareSide,
    "compare_numbers": RowNumbers,
    "llm_prefill": lr.PrefillCost,
    "llm_decode": lr.DecodeCost,
    "llm_kv_cache": lr.KVCache,
    "llm_roofline": lr.LLMRoofline,
    "llm_attention_layers": lr.AttentionLayers,
    "plan_activations": lr.PlanActivations,
    "plan_layer_group": lr.PlanLayerGroup,
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
    # the memory kind's rows, also a train report's post-mortem rows
    "memory_by_module_kind": memory.MemoryRow,
    "post_mortem": memory.PostMortem,
}
_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _records_in(hint: Any) -> list[tuple[type[Record], bool]]:
    """The records a field's type hint holds (directly, ``| None``, in a list or as dict
    values), each with whether it is a list's item."""
    if isinstance(hint, type) and issubclass(hint, Record) and dataclasses.is_dataclass(hint):
        return [(hint, False)]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return [found for a in args for found in _records_in(a)]
    if origin in (list, tuple) and args:
        return [(cls, True) for cls, _ in _records_in(args[0])]
    if origin is dict and len(args) == 2:
        return _records_in(args[1])
    return []


def _kind_class(kind: str) -> type[Record]:
    """The record class of ``kind`` (every kind's is a record of core)."""
    return typing.cast("type[Record]", record_class(kind))


def _kind_classes() -> dict[str, type[Record]]:
    """$defs name -> record class of every kind not named in ``GENERATED`` (named after the
    class's first kind in sorted order)."""
    found: dict[str, type[Record]] = {}
    for kind in all_kinds():
        cls = _kind_class(kind)
        if cls not in found.values() and cls not in GENERATED.values():
            found[kind] = cls
    return found


@cache
def definitions() -> dict[str, type[Record]]:
    """Every generated definition: $defs name -> record class."""
    out = dict(GENERATED)
    named = {cls: name for name, cls in out.items()}

    def walk(name: str, cls: type[Record]) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            for inner, is_item in _records_in(hints[f.name]):
                if inner in named:
                    continue
                inner_name = f"{name}_{f.name[:-1] if is_item and f.name.endswith('s') else f.name}"
                named[inner], out[inner_name] = inner_name, inner
                walk(inner_name, inner)

    for name, cls in _kind_classes().items():
        named[cls] = name
        out[name] = cls
    # the hand-named definitions' records first: a record they hold keeps its name when a
    # kind added later holds it too
    for name, cls in GENERATED.items():
        walk(name, cls)
    for name, cls in _kind_classes().items():
        walk(name, cls)
    return out


def type_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of a type hint (records become ``$ref``s to their definitions)."""
    names = {cls: name for name, cls in definitions().items()}
    if hint in names:
        return {"$ref": f"#/$defs/{names[hint]}"}
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
    if metadata.get("seconds"):
        _bound(schema, *metadata["seconds"])
    elif minimum is not None:
        schema["minimum"] = minimum
    if metadata.get("description"):
        schema["description"] = metadata["description"]
    return schema


def _bound(schema: dict[str, Any], low: float, high: float, above: bool = False) -> None:
    """``minimum`` (``exclusiveMinimum`` when ``above``: the number must exceed ``low``) and
    ``maximum`` on every number ``schema`` holds: itself, a list's items, a dict's values
    (``seconds`` metadata: the checker also wants them finite)."""
    types = schema.get("type")
    if "number" in ([types] if isinstance(types, str) else types or []):
        schema.update({"exclusiveMinimum" if above else "minimum": low, "maximum": high})
    for inner in (schema.get("items"), schema.get("additionalProperties")):
        if isinstance(inner, dict):
            _bound(inner, low, high, above)
    for option in schema.get("anyOf") or []:
        _bound(option, low, high, above)


def record_schema(cls: type[Record]) -> dict[str, Any]:
    """A record's definition: its fields, then its computed properties (``_computed``)."""
    hints = typing.get_type_hints(cls)
    props, required = {}, []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.metadata.get("transient"):  # never written
            continue
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
    finite = {"type": "number", "minimum": -MAX_SECONDS, "maximum": MAX_SECONDS}
    props = {p.name: {**finite, "description": p.meaning
                      + (" (present only when some step spent time in it)" if p.when_spent else "")
                      + (" (data-parallel runs)" if p.distributed else "")}
             for p in STEP_PHASES}
    props.update({k: {**finite, "description": v} for k, v in (extra or {}).items()})
    return {"type": "object", "description": what, "properties": props,
            "additionalProperties": finite}


def _set_phases(defs: dict[str, Any]) -> None:
    # every phase breakdown (ablate's repeats extend it) lists the phases of its seconds
    for name, cls in definitions().items():
        if issubclass(cls, phases.PhaseBreakdown):
            defs[name]["properties"]["seconds"] = phases_schema(
                "seconds by phase, summed over the steps; the phases sum to wall_s")
    defs["train_rank"]["properties"]["phases"] = phases_schema(
        "seconds per step by phase: the phases sum to step_s, communication overlaps backward",
        {"communication": "time inside collectives (overlaps backward; not in step_s)"})


def _non_null(hint: Any) -> Any:
    """``X`` of ``X | None``; any other hint as it is."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(inner) == 1:
            return inner[0]
    return hint


def required_in(cls: type[Record], kind: str) -> dict[str, Any] | None:
    """What a result of ``kind`` must have beyond ``cls``'s definition: the fields whose
    metadata says ``required_in`` that kind, required and not null, and the same inside the
    records the class holds (a list's items); None where nothing is."""
    hints = typing.get_type_hints(cls)
    props, required = {}, []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if kind in f.metadata.get("required_in", ()):
            required.append(f.name)
            props[f.name] = _property(_non_null(hints[f.name]), f.metadata)
            continue
        for inner, is_item in _records_in(hints[f.name]):
            nested = required_in(inner, kind)
            if nested is not None:
                props[f.name] = {"type": "array", "items": nested} if is_item else nested
    if not props:
        return None
    return {"type": "object", "required": required, "properties": props}


def kind_definitions() -> dict[str, dict[str, Any]]:
    """The definitions a kind has beyond its class's (``_schema_refs``: the names after the
    class's own), from the fields ``required_in`` that kind."""
    names = {cls: name for name, cls in definitions().items()}
    out = {}
    for kind in all_kinds():
        cls = _kind_class(kind)
        for ref in kinds.schema_refs(record_class(kind), kind):
            if ref == names[cls]:
                continue
            schema = required_in(cls, kind)
            if schema is None:
                raise ValueError(f"{cls.__name__}: no field is required_in {kind!r}, so its "
                                 f"schema definition {ref!r} would be empty")
            out[ref] = {"type": "object",
                        "description": f"{cls.__name__} of kind {kind}: the fields it must have "
                                       f"besides the {names[cls]} definition's",
                        **{k: v for k, v in schema.items() if k != "type"}}
    return out


def _dispatch(kind: str) -> dict[str, Any]:
    """``if kind == <kind> then <its definitions>``."""
    refs = kinds.schema_refs(record_class(kind), kind)
    then = [{"$ref": f"#/$defs/{ref}"} for ref in refs]
    return {"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
            "then": then[0] if len(then) == 1 else {"allOf": then}}


def generated_schema(base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``base`` (the shipped schema) with the kinds and every generated definition rebuilt."""
    schema: dict[str, Any] = json.loads(json.dumps(base if base is not None else load_schema()))
    defs = schema.setdefault("$defs", {})
    defs["header"]["properties"]["kind"] = {"enum": list(all_kinds())}
    schema["allOf"] = [_dispatch(kind) for kind in all_kinds()]
    for name, cls in definitions().items():
        defs[name] = record_schema(cls)
    defs.update(kind_definitions())
    _set_phases(defs)
    used = _reachable(schema)
    schema["$defs"] = {name: d for name, d in defs.items() if name in used}
    return schema


def _refs(node: Any) -> set[str]:
    """The ``$defs`` names that ``node`` refers to with ``$ref``, at any depth."""
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            found.add(ref[len("#/$defs/"):])
        node = list(node.values())
    if isinstance(node, list):
        for value in node:
            found |= _refs(value)
    return found


def _reachable(schema: dict[str, Any]) -> set[str]:
    """The definitions a result can use: those the schema's root (the header and the dispatch
    on ``kind``) refers to, and those they refer to in turn. A definition no registered kind
    reaches (a removed kind's, or a record's old name) is stale."""
    defs = schema.get("$defs", {})
    todo = _refs({k: v for k, v in schema.items() if k != "$defs"})
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        todo |= _refs(defs[name]) - seen
    return seen


def schema_text(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m layerscope.schema.generate",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the shipped schema differs from the generated one "
                             "or holds a definition no result kind produces")
    args = parser.parse_args(argv)
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        shipped = f.read()
    base = json.loads(shipped)
    generated = generated_schema(base)
    text = schema_text(generated)
    if args.check:
        stale = sorted(set(base.get("$defs", {})) - set(generated["$defs"]))
        if stale:
            print(f"{SCHEMA_PATH} holds definitions no result kind produces "
                  f"({', '.join(stale)}): run python -m layerscope.schema.generate",
                  file=sys.stderr)
            return 1
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
