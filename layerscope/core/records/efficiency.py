"""How much of the hardware's peak a timed run used, as one typed record (``efficiency`` in every
timed result), and the one pure function that computes it.

- **MFU** (model FLOPs utilisation) = model FLOPs per step / step seconds / peak FLOP/s. The
  model FLOPs are those the model needs (forward, backward, optimizer), counted by the same
  capture as ``analyze``.
- **HFU** (hardware FLOPs utilisation) = (model FLOPs + FLOPs recomputed by activation
  checkpointing) per step / step seconds / peak FLOP/s; equal to MFU without checkpointing.
- **MBU** (memory bandwidth utilisation) = bytes moved per step / step seconds / peak bytes/s;
  given for inference, where bytes are the bound.

Each ratio is given against the measured peak of this machine (``layerscope roofline``) and,
on a GPU with a datasheet entry, against the datasheet's dense peak. A ratio above 1 cannot be
right: it is refused (the field is null) and a note names the cause.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from layerscope.core.document import DictRecord, omit_empty, omit_none

_FRACTION = {"minimum": 0, "maximum": 1}
_NONNEG = {"minimum": 0}
MEASURED = "measured"


@dataclass(eq=False, kw_only=True)
class PeakRatio(DictRecord):
    """The same run's ratios against another peak (the GPU datasheet's dense figure)."""

    peak_flops_per_s: float = field(metadata=_NONNEG)
    peak_source: str
    mfu: float | None = field(default=None, metadata=_FRACTION)
    hfu: float | None = field(default=None, metadata=omit_none(**_FRACTION))
    peak_bytes_per_s: float | None = field(default=None, metadata=omit_none(**_NONNEG))
    mbu: float | None = field(default=None, metadata=omit_none(**_FRACTION))


@dataclass(eq=False, kw_only=True)
class Efficiency(DictRecord):
    """MFU, HFU and MBU of a timed run (fractions, not percent) at its median step: the median
    FLOPs per step over the median step seconds."""

    model_flops_per_step: float = field(metadata={
        **_NONNEG, "description": "model FLOPs of one step (forward + backward + optimizer; "
                                  "inference: of one batch), median over the measured steps"})
    hardware_flops_per_step: float | None = field(default=None, metadata=omit_none(
        **_NONNEG, description="model FLOPs plus the FLOPs recomputed by activation "
                               "checkpointing"))
    step_s: float = field(metadata={**_NONNEG, "description": "the median step (batch) time"})
    achieved_flops_per_s: float | None = field(metadata={
        "description": "model_flops_per_step / step_s"})
    peak_flops_per_s: float = field(metadata={
        **_NONNEG, "description": "the peak the ratios are taken against"})
    peak_source: str = field(metadata={
        "description": "\"measured\" (layerscope roofline on this machine) or the datasheet "
                       "it comes from"})
    mfu: float | None = field(metadata={
        **_FRACTION, "description": "achieved / peak; null when it would exceed 1 (see notes)"})
    hfu: float | None = field(default=None, metadata=omit_none(**_FRACTION))
    bytes_per_step: float | None = field(default=None, metadata=omit_none(**_NONNEG))
    peak_bytes_per_s: float | None = field(default=None, metadata=omit_none(**_NONNEG))
    mbu: float | None = field(default=None, metadata=omit_none(
        **_FRACTION, description="bytes moved per second / bandwidth (inference)"))
    datasheet: PeakRatio | None = field(default=None, metadata=omit_none(
        description="the same ratios against the GPU datasheet's dense peak"))
    mfu_per_step: list[float | None] = field(default_factory=list, metadata=omit_empty(
        description="MFU of every measured step against the measured peak"))
    notes: list[str] = field(default_factory=list, metadata=omit_empty())


def _ratio(what: str, achieved: float | None, peak: float | None, source: str,
           notes: list[str]) -> float | None:
    """achieved / peak, or None (with a note naming the cause) when it is above 1."""
    if achieved is None or not peak or peak <= 0:
        return None
    r = achieved / peak
    if r > 1.0:
        cause = ("the data stayed in the CPU caches, which move it faster than the large copy "
                 "that measured the bandwidth, or the ceilings look stale: measure them again "
                 "with `layerscope roofline --refresh`"
                 if what == "MBU" and source == MEASURED else
                 "the measured peak looks stale (measured while the machine was busier): "
                 "measure it again with `layerscope roofline --refresh`"
                 if source == MEASURED else
                 "the device is not the datasheet's GPU, or the FLOPs were run in a faster "
                 "dtype than the one the peak is for")
        notes.append(f"{what} against the {source} peak would be {r:.0%}, above 100%, and is "
                     f"not given: {cause}")
        return None
    return r


def efficiency(model_flops_per_step: Sequence[float] | float,
               step_seconds: Sequence[float] | float, peak_flops_per_s: float,
               peak_source: str = MEASURED, *,
               recompute_flops_per_step: Sequence[float] | float = 0.0,
               bytes_per_step: float | None = None, peak_bytes_per_s: float | None = None,
               datasheet: tuple[str, float, float | None] | None = None,
               training: bool = True) -> Efficiency:
    """The efficiency record of steps with these FLOPs and seconds (one value, or one per
    step) against ``peak_flops_per_s`` from ``peak_source``. ``datasheet``: (its name, dense
    peak FLOP/s, bandwidth bytes/s or None) for the ratios against a second peak;
    ``training=False``: inference batches (no HFU). Pure: the
    figures in the record are each other's quotients exactly."""
    secs = [float(step_seconds)] if isinstance(step_seconds, (int, float)) else \
        [float(s) for s in step_seconds]
    n = len(secs)

    def per_step(v: Sequence[float] | float) -> list[float]:
        return [float(v)] * n if isinstance(v, (int, float)) else [float(x) for x in v]

    flops, extra = per_step(model_flops_per_step), per_step(recompute_flops_per_step)
    if not secs or len(flops) != n or len(extra) != n:
        raise ValueError("efficiency: model_flops_per_step, recompute_flops_per_step and "
                         "step_seconds must have one value per step")
    notes: list[str] = []
    # the median step: the median FLOPs over the median seconds, so that MFU is
    # model_flops_per_step / step_s / peak as printed (a median of per-step rates is not,
    # with an even number of steps or steps of several shapes)
    step_s = statistics.median(secs)
    model = statistics.median(flops)
    hardware = statistics.median(f + e for f, e in zip(flops, extra))
    achieved = model / step_s if step_s > 0 else None
    hw_rate = hardware / step_s if step_s > 0 else None
    mfu = _ratio("MFU", achieved, peak_flops_per_s, peak_source, notes)
    recomputed = hardware != model
    hfu = (None if not training else
           _ratio("HFU", hw_rate, peak_flops_per_s, peak_source, notes) if recomputed else mfu)
    moved = bytes_per_step / step_s if bytes_per_step is not None and step_s > 0 else None
    mbu = (_ratio("MBU", moved, peak_bytes_per_s, peak_source, notes)
           if peak_bytes_per_s else None)
    steps = [f / s / peak_flops_per_s if s > 0 and peak_flops_per_s > 0 else None
             for f, s in zip(flops, secs)] if n > 1 else []
    steps = [r if r is None or r <= 1.0 else None for r in steps]
    sheet = None
    if datasheet is not None:
        name, peak, bandwidth = datasheet
        smfu = _ratio("MFU", achieved, peak, name, notes)
        sheet = PeakRatio(peak_flops_per_s=peak, peak_source=name, mfu=smfu,
                          hfu=None if not training else
                          _ratio("HFU", hw_rate, peak, name, notes) if recomputed else smfu,
                          peak_bytes_per_s=bandwidth if moved is not None else None,
                          mbu=_ratio("MBU", moved, bandwidth, name, notes)
                          if bandwidth and moved is not None else None)
    return Efficiency(model_flops_per_step=model,
                      hardware_flops_per_step=hardware if recomputed else None,
                      step_s=step_s, achieved_flops_per_s=achieved,
                      peak_flops_per_s=peak_flops_per_s, peak_source=peak_source, mfu=mfu,
                      hfu=hfu, bytes_per_step=bytes_per_step,
                      peak_bytes_per_s=peak_bytes_per_s if mbu is not None or moved else None,
                      mbu=mbu, datasheet=sheet, mfu_per_step=steps, notes=notes)
