"""The result of ``layerscope ablate`` (kind ``ablate``): each optimisation variant's phase
breakdown, speed-up over the baseline and whether it is beyond the noise, as typed records;
their JSON schema is generated from these fields (layerscope/schema/generate.py).
training/ablation.py builds them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerscope.core.document import Record, ResultDocument, omit_none, timing_bounds
from layerscope.core.records import ENVIRONMENT, Noise
from layerscope.core.records.phases import PhaseBreakdown
from layerscope.core.report import SCHEMA_VERSION
from layerscope.core.stats import TimingStats

STATUSES = ("ok", "n/a", "error")


@dataclass(eq=False, kw_only=True)
class RepeatBreakdown(PhaseBreakdown):
    """One repeat of a variant: its phase breakdown and the step-to-step spread (p10-p90 of
    its step times) that tells whether a speed-up is beyond the noise when there is one
    repeat."""

    step_p10_s: float | None = field(default=None, metadata=omit_none(
        **timing_bounds(),
        description="10th percentile of the repeat's step times (absent in 0.1 reports)"))
    step_p90_s: float | None = field(default=None, metadata=omit_none(
        **timing_bounds(),
        description="90th percentile of the repeat's step times (absent in 0.1 reports)"))
    step_seconds: list[float] | None = field(default=None, metadata=omit_none(
        **timing_bounds(),
        description="the repeat's measured step times in run order (absent in results of "
                    "earlier releases)"))


@dataclass
class VariantResult(Record):
    """One optimisation variant: its train flags, the phase breakdown of each repeat, its step
    time and speed-up over the baseline; ``status`` n/a (it does not apply on the device) or
    error (with the reason)."""

    variant: str
    flags: list[str]
    status: str = field(default="ok", metadata={"schema": {"enum": list(STATUSES)}})
    reason: str | None = None
    repeats: list[RepeatBreakdown] = field(default_factory=list, metadata={
        "description": "per repeat: the phase breakdown and the step times' spread"})
    step: TimingStats | None = field(default=None, metadata={
        "description": "the mean step time across repeats"})
    phases_ms: dict[str, float] | None = field(default=None, metadata={
        "description": "median over repeats of ms per step per phase"})
    speedup: float | None = None
    beyond_noise: bool | None = None
    expanded: str | None = field(default=None, metadata={
        "description": "what 'all' stood for, e.g. workers=2+compile+amp"})

    _schema_required = ("variant", "flags", "status")


@dataclass
class AblationReport(ResultDocument):
    """One row per optimisation variant; ms per step per phase."""

    recipe: str
    device: str
    steps: int
    warmup_steps: int
    repeats: int
    variants: list[VariantResult]
    environment: dict[str, Any] = field(default_factory=dict, metadata=ENVIRONMENT)
    noise: Noise | None = field(default=None, metadata={
        "description": "core.noise section from the baseline's step times (every speed-up is "
                       "relative to it)"})
    kind: str = "ablate"
    schema_version: str = SCHEMA_VERSION
