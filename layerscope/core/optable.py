"""Operator tables (torch.profiler's view): one row per aten op (optionally per input shape)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from layerscope.core.document import ResultDocument, omit_none
from layerscope.core.records import Noise
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
class OpTable(ResultDocument):
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
    # core.noise section from the profiled runs' wall times (``layerscope ops``; a training
    # run's table, and results saved before it, have none)
    noise: Noise | None = field(default=None, metadata=omit_none())
    kind: str = "ops"
    schema_version: str = SCHEMA_VERSION

    _schema_generated: ClassVar[bool] = False  # its definition is written by hand

