"""The result of ``layerscope profile MODEL --loop DATASET`` (kind ``loop``): a model's
inference over a data loader, per phase and per layer, as typed records; their JSON schema is
generated from these fields (layerscope/schema/generate.py). training/inference_loop.py builds
them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerscope.core.document import Record, ResultDocument, omit_empty, omit_none, timing_bounds
from layerscope.core.records import ENVIRONMENT, Noise
from layerscope.core.records.efficiency import Efficiency
from layerscope.core.records.phases import PhaseBreakdown
from layerscope.core.report import SCHEMA_VERSION
from layerscope.core.stats import TimingStats


@dataclass
class LoopLayer(Record):
    """One leaf layer's forward time over the measured batches."""

    name: str
    type: str
    time: TimingStats = field(metadata={"description": "seconds per batch"})
    share: float | None = field(metadata={"optional": True,
                                          "description": "of the forward phase's median"})


@dataclass
class LoopProfile(ResultDocument):
    """profile --loop: inference over a data loader, per phase and per layer."""

    model: str
    dataset: str
    device: str
    batch_size: int = field(metadata={"minimum": 1})
    batches: int = field(metadata={"minimum": 1,
                                   "description": "measured (warm-up batches excluded)"})
    warmup: int
    phases: PhaseBreakdown = field(metadata={"description": "over the measured batches"})
    batch_time: TimingStats = field(metadata={"description": "the batches' wall time"})
    layers: list[LoopLayer]
    coverage: float | None = field(metadata={
        "optional": True, "description": "summed layer medians / forward-phase median"})
    forward_cpu_cores: float | None = field(default=None, metadata=omit_none(
        minimum=0, description="the process's CPU seconds per wall second over the measured "
                               "forwards (on the CPU; absent on CUDA and in results saved "
                               "before it)"))
    coverage_rest: str | None = field(default=None, metadata=omit_none(
        description="what the forward phase holds besides the layers, from forward_cpu_cores "
                    "and the load (training.inference_loop.uncovered_cause)"))
    notes: list[str] = field(default_factory=list, metadata=omit_empty(
        description="how the batches were drawn, when it matters: passes over the data set (the "
                    "loader iterated again), samples left out of each pass, a data set smaller "
                    "than one batch"))
    settings: dict[str, Any] = field(default_factory=dict)
    step_phases: dict[str, list[float]] | None = field(default=None, metadata=omit_none(
        **timing_bounds(signed=True),
        description="each phase's seconds in every measured batch, in batch order (at most "
                    "core.stats.SAMPLES_KEPT, evenly spaced): what layerscope diff ranks phase "
                    "by phase; absent in results saved before it"))
    environment: dict[str, Any] = field(default_factory=dict, metadata=ENVIRONMENT)
    noise: Noise | None = field(default=None, metadata=omit_none(
        description="core.noise section: spread of the batches' wall times, the machine at the "
                    "start, and the layers whose mean is far above their median (absent in "
                    "results saved before it)"))
    efficiency: Efficiency | None = field(default=None, metadata=omit_none(
        description="MFU and MBU of every batch (forward FLOPs and bytes over the batch's wall "
                    "time) against the measured ceilings; absent in results saved before it"))
    kind: str = "loop"
    schema_version: str = SCHEMA_VERSION
