"""Operator tables (torch.profiler's view): one row per aten op (optionally per input shape)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from layerscope.core.report import SCHEMA_VERSION


@dataclass
class OpRow:
    name: str
    calls: int  # per run
    self_s: float  # per run
    total_s: float  # per run, including the ops it called
    mean_s: float  # total_s / calls
    share: float  # of the summed self time of all ops
    input_shapes: str | None = None
    self_memory_bytes: int | None = None
    memory_bytes: int | None = None


@dataclass
class OpTable:
    model: str
    device: str
    sort: str
    runs: int
    rows: list[OpRow]
    total_self_s: float  # per run, all ops (not only the rows shown)
    ops_total: int  # distinct rows before --top
    trace: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    kind: str = "ops"
    schema_version: str = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d = {"schema_version": d.pop("schema_version"), "kind": d.pop("kind")} | d
        return d

    def __rich__(self):
        from layerscope.renderers.terminal import render_ops

        return render_ops(self)

    def _repr_html_(self) -> str:
        from layerscope.renderers.html_table import render_html_table

        return render_html_table(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "OpTable":
        d = dict(d)
        d["rows"] = [OpRow(**r) for r in d["rows"]]
        return cls(**d)
