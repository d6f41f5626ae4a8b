"""Operator tables (torch.profiler's view): one row per aten op (optionally per input shape)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerscope.core.document import Record, ResultDocument, omit_none
from layerscope.core.records import ENVIRONMENT, Noise
from layerscope.core.report import SCHEMA_VERSION

# torch.profiler's memory figures: allocated minus freed, negative for an op that frees more
_SIGNED_BYTES = {"minimum": None}


@dataclass
class OpRow(Record):
    """One operator (per input shape with ``--group-by-shape``), per run."""

    name: str
    calls: int  # per run
    self_s: float  # per run
    total_s: float  # per run, including the ops it called
    mean_s: float  # total_s / calls
    share: float  # of the summed self time of all ops
    input_shapes: str | None = None
    self_memory_bytes: int | None = field(default=None, metadata=_SIGNED_BYTES)
    memory_bytes: int | None = field(default=None, metadata=_SIGNED_BYTES)


@dataclass
class OpTable(ResultDocument):
    """torch.profiler's operator table, per run."""

    model: str
    device: str
    sort: str
    runs: int
    rows: list[OpRow]
    total_self_s: float  # per run, all ops (not only the rows shown)
    ops_total: int  # distinct rows before --top
    trace: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict, metadata=ENVIRONMENT)
    # core.noise section from the profiled runs' wall times (``layerscope ops``; a training
    # run's table, and results saved before it, have none)
    noise: Noise | None = field(default=None, metadata=omit_none())
    kind: str = "ops"
    schema_version: str = SCHEMA_VERSION
