"""The result of ``layerscope sweep`` (latency over a grid of batch sizes, threads, devices,
backends and dtypes), as typed records; its JSON schema is generated from these fields
(layerscope/schema/generate.py). The measuring lives in analysis/sweep.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from layerscope.core.document import Record, ResultDocument
from layerscope.core.records import Noise
from layerscope.core.report import SCHEMA_VERSION

_TIMING = {"anyOf": [{"$ref": "#/$defs/timing"}, {"type": "null"}]}
_ENVIRONMENT = {"$ref": "#/$defs/environment"}


@dataclass
class SweepCell(Record):
    """One (device, backend, dtype, threads, batch size): its latency and throughput, or why it
    could not run."""

    device: str
    backend: str
    dtype: str
    threads: int | None
    batch_size: int
    status: str = field(default="ok", metadata={"schema": {"enum": ["ok", "error"]}})
    error: str | None = None
    latency: dict[str, Any] | None = field(default=None, metadata={"schema": _TIMING})
    throughput_per_s: float | None = None
    # eager only: share of time per layer type (profile's by_type: over rows that never overlap,
    # shares of the same instrumented runs, so they add up to the profile's coverage, not more)
    by_type: list[dict[str, Any]] | None = None
    speedup: float | None = None  # throughput / first cell's throughput
    within_noise: bool | None = None

    _schema_required: ClassVar[tuple[str, ...]] = (
        "device", "backend", "dtype", "threads", "batch_size", "status")


@dataclass
class SweepReport(ResultDocument):
    """One cell per (device, backend, dtype, threads, batch size)."""

    model: str
    cells: list[SweepCell]
    settings: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict, metadata={"schema": _ENVIRONMENT})
    noise: Noise | None = None
    kind: str = "sweep"
    schema_version: str = SCHEMA_VERSION
