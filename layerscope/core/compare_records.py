"""The result of ``layerscope compare`` (two reports joined by module path, every difference
explained), as typed records, and the metric names and labels they use; its JSON schema is
generated from these fields (layerscope/schema/generate.py). The joining and the rules live in
analysis/compare/."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from layerscope.core.document import DictRecord, Record, ResultDocument, omit_none
from layerscope.core.report import SCHEMA_VERSION

ROW_METRICS = ("params", "weight_bytes", "buffer_bytes", "macs", "flops", "bytes_read",
               "bytes_written", "activation_bytes")
TOTAL_METRICS = ROW_METRICS + ("peak_activation_bytes",)
LABELS = {"params": "parameters", "weight_bytes": "weight bytes", "buffer_bytes": "buffer bytes",
          "macs": "MACs", "flops": "FLOPs", "bytes_read": "bytes read",
          "bytes_written": "bytes written", "activation_bytes": "activation bytes",
          "peak_activation_bytes": "peak activation bytes"}

_NUMBERS = {"description": "one side's rows for this module, summed; null when that side has "
                           "none"}
_SIGNED = {"minimum": None}
_STRINGS = {"schema": {"type": "array", "items": {"type": "string"}}}


@dataclass(eq=False)
class RowNumbers(DictRecord):
    """One side's rows for a module path, summed (``ROW_METRICS``)."""

    params: int
    weight_bytes: int
    buffer_bytes: int
    macs: int
    flops: int
    bytes_read: int
    bytes_written: int
    activation_bytes: int


@dataclass(eq=False)
class CompareSide(DictRecord):
    """One side of a comparison: what was compared and its report's header."""

    source: str = field(metadata={"description": "the file or model name as given"})
    model: str
    frontend: str
    inputs: list[dict[str, Any]]
    exporter: str | None = field(default=None, metadata={
        "description": "ONNX sides: the exporter that wrote the file (dynamo or legacy)"})
    layers: int | None = field(default=None, metadata=omit_none(
        description="the report's rows"))
    kind: str | None = field(default=None, metadata=omit_none(
        description="the report's kind (analyze or profile)"))


@dataclass
class CompareRow(Record):
    """One module path: each side's rows summed (``a``/``b`` None where that side has none)."""

    module: str  # "(root)" for the model's own ops
    a_type: str
    b_type: str
    a: RowNumbers | None = field(metadata=_NUMBERS)
    b: RowNumbers | None = field(metadata=_NUMBERS)
    diff: dict[str, int] = field(metadata={"schema": {
        "type": "object", "additionalProperties": {"type": "integer"}},
        "description": "B - A of the numbers that differ"})
    rules: list[str] = field(default_factory=list)  # the rules that explain ``diff``
    summary: str | None = None  # a few words per rule, for the table
    explanation: str | None = None  # one sentence

    _schema_required: ClassVar[tuple[str, ...]] = (
        "module", "a_type", "b_type", "a", "b", "diff", "rules", "summary", "explanation")


@dataclass
class TotalRow(Record):
    """One metric of the whole models: A, B, B - A and the rules that explain it."""

    metric: str = field(metadata={"schema": {"enum": list(TOTAL_METRICS)}})
    a: int = field(metadata=_SIGNED)
    b: int = field(metadata=_SIGNED)
    diff: int = field(metadata=_SIGNED)  # B - A
    rules: list[str] = field(default_factory=list)
    explanation: str | None = None

    _schema_required: ClassVar[tuple[str, ...]] = (
        "metric", "a", "b", "diff", "rules", "explanation")


@dataclass
class Unrelated(Record):
    """Present when the models share few layers: ``matched`` of the smaller model's layers have
    a layer at the same module path in the other (under analysis.compare's
    ``RELATED_FRACTION``), so a row by row explanation of two different networks says little."""

    matched: int
    a_layers: int
    b_layers: int

    @property
    def text(self) -> str:
        smaller = min(self.a_layers, self.b_layers)
        return (f"the models look unrelated: {self.matched} of the smaller model's {smaller} "
                f"layers match a layer of the other by module path (A has {self.a_layers} "
                f"layers, B {self.b_layers}); the explanations compare different networks, so "
                "compare a model with a variant or an export of itself")


@dataclass
class Comparison(ResultDocument):
    """Two reports joined by module path: totals side by side, rows, and every difference
    explained."""

    a: CompareSide
    b: CompareSide
    totals: list[TotalRow]
    rows: list[CompareRow]
    explanations: list[str] = field(metadata=_STRINGS)  # every sentence, rows first, then totals
    identical: bool
    unexplained: int  # rows and totals with an unexplained part
    notes: list[str] = field(default_factory=list)
    # A's (else B's) analysis machine
    environment: dict[str, Any] = field(default_factory=dict, metadata={
        "schema": {"$ref": "#/$defs/environment"}})
    unrelated: Unrelated | None = field(default=None, metadata=omit_none())
    kind: str = "compare"
    schema_version: str = SCHEMA_VERSION

    @property
    def model(self) -> str:
        return f"{self.a.get('model')} vs {self.b.get('model')}"

    def differing_rows(self) -> list[CompareRow]:
        return [r for r in self.rows if r.diff]
