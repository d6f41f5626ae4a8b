"""The result of ``layerscope scaling`` (kind ``scaling``): data-parallel throughput per world
size, as typed records; their JSON schema is generated from these fields
(layerscope/schema/generate.py). training/scaling.py builds them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerscope.core.document import Record, ResultDocument, omit_none, timing_bounds
from layerscope.core.records import ENVIRONMENT
from layerscope.core.records.efficiency import Efficiency
from layerscope.core.report import SCHEMA_VERSION

_NONNEG = {"minimum": 0}


def _seconds(description: str | None = None) -> dict[str, Any]:
    return {**_NONNEG, **({"description": description} if description else {})}


@dataclass
class ScalingPoint(Record):
    """One world size of a scaling run: its step time, throughput, scaling against the first
    world size, and its communication."""

    world_size: int = field(metadata={"minimum": 1})
    threads_per_rank: int = field(metadata={"minimum": 1})
    batch_per_rank: int = field(metadata={"minimum": 1})
    steps: int
    step_s: float = field(metadata=timing_bounds(
        description="median over steps of the slowest rank's step time"))
    step_p10_s: float = field(metadata=timing_bounds())
    step_p90_s: float = field(metadata=timing_bounds())
    throughput_per_s: float = field(metadata=_seconds("samples per second, all ranks"))
    speedup: float = field(metadata=_seconds("throughput over the first world size's"))
    efficiency: float = field(metadata=_seconds("speedup x N0 / N: 1.0 is linear"))
    communication_s: float = field(metadata=_seconds(
        "per step, inside the gradient all-reduces"))
    communication_share: float = field(metadata=_NONNEG)
    exposed_s: float = field(metadata=_seconds(
        "per step, communication after backward's last gradient"))
    exposed_share: float = field(metadata=_NONNEG)
    buckets: int
    bytes_per_step: int
    theory_bytes_per_step: float = field(metadata=_NONNEG)
    oversubscribed: bool
    step_samples_s: list[float] | None = field(default=None, metadata=omit_none(
        **timing_bounds(),
        description="the steps' seconds in step order (at most core.stats.SAMPLES_KEPT): what "
                    "layerscope diff ranks; absent in results saved before it"))
    phases: dict[str, float] = field(default_factory=dict, metadata={
        "description": "rank-mean of the median seconds per step by phase"})
    utilisation: Efficiency | None = field(default=None, metadata=omit_none(
        description="MFU and HFU per GPU (rank 0's FLOPs and steps against one device's peak): "
                    "the train report's efficiency; absent in results saved before it"))


@dataclass
class ScalingReport(ResultDocument):
    """Scaling: data-parallel throughput per world size."""

    recipe: str
    device: str
    points: list[ScalingPoint]
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict, metadata=ENVIRONMENT)
    kind: str = "scaling"
    schema_version: str = SCHEMA_VERSION
