"""What each kind of result timed, as ``Measure``s keyed by (level, name): the figures
``layerscope diff`` puts side by side, with their per-run samples where the result kept them.

Kinds and their levels:
- profile: end_to_end (the bare forward runs), type (``by_type``), layer (rows with a time);
- loop: end_to_end (a batch), phase (``step_phases``, else the totals per batch), layer;
- train, run: end_to_end (a step: ``step_seconds``), phase (``step_phases``, else the totals
  per step), rank (a distributed run: each rank's median step, no spread), layer (``--layers``:
  each step's forward seconds, else, in older results, their mean per step and no spread);
- sweep: cell (one per device, backend, dtype, threads and batch size that ran);
- scaling: point (one per world size: the slowest rank's step);
- analyze: nothing timed (the static figures are compared by analysis/compare).
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from layerscope.core.errors import UserError
from layerscope.core.stats import DRIFT_BLOCKS, TimingStats, percentile

TIMED_KINDS = ("profile", "loop", "train", "sweep", "scaling")
KINDS = ("analyze",) + TIMED_KINDS
# the levels of the timed rows each kind's diff can have (the list above); analyze: none
LEVELS = {"profile": ("end_to_end", "type", "layer"), "loop": ("end_to_end", "phase", "layer"),
          "train": ("end_to_end", "phase", "rank", "layer"), "sweep": ("cell",),
          "scaling": ("point",), "analyze": ()}
# what one end-to-end sample is, per kind (the summary's first word)
UNIT = {"profile": "forward pass", "loop": "batch", "train": "step"}
# a run's first quarter of steps (one drift block) this much slower than the rest, with no
# warm-up left out: its warm-up was measured, and the drift rule reads it as level wander
WARMUP_SLOWER = 1.25


@dataclass
class Measure:
    """One timed figure of one result: its median and p10-p90 (None where only a mean was
    kept), its samples (None where not kept) and, for a layer, its type."""

    name: str
    level: str
    median: float
    p10: float | None = None
    p90: float | None = None
    samples: list[float] | None = None
    type: str | None = None
    n: int | None = None


def of_stats(name: str, level: str, stats: Mapping[str, Any] | TimingStats,
             type_: str | None = None) -> Measure:
    """A Measure from a ``timing`` object (a TimingStats or its dict)."""
    samples = stats.get("samples_s")
    return Measure(name, level, float(stats["median_s"]), stats.get("p10_s"),
                   stats.get("p90_s"), list(samples) if samples else None, type_,
                   stats.get("n"))


def of_samples(name: str, level: str, samples: Sequence[float]) -> Measure:
    return of_stats(name, level, TimingStats.of(samples, keep=True))


def pooled(measures: list[Measure]) -> Measure:
    """Several baseline files' measures of one thing as one: their samples together where
    every file kept them (else the median of medians and the widest p10-p90)."""
    first = measures[0]
    if len(measures) == 1:
        return first
    if all(m.samples for m in measures):
        xs = [x for m in measures for x in m.samples or []]
        m = of_samples(first.name, first.level, xs)
        m.type = first.type
        return m
    p10s = [m.p10 for m in measures if m.p10 is not None]
    p90s = [m.p90 for m in measures if m.p90 is not None]
    full = len(p10s) == len(p90s) == len(measures)
    return Measure(first.name, first.level, statistics.median(m.median for m in measures),
                   min(p10s) if full else None, max(p90s) if full else None, None, first.type,
                   sum(m.n or 0 for m in measures) or None)


@dataclass
class Timed:
    """What one result timed, in display order, and the figures that say how it was run."""

    kind: str
    measures: dict[tuple[str, str], Measure] = field(default_factory=dict)
    batch: float | None = None  # an int, or a run's mean samples per step
    device: str | None = None
    threads: int | None = None  # the torch threads it ran with, where its settings say
    notes: list[str] = field(default_factory=list)

    def add(self, m: Measure) -> None:
        self.measures[(m.level, m.name)] = m


def timed(result: Any) -> Timed:
    """The measures of a result of any kind ``diff`` reads."""
    kind = result.kind
    out = Timed(kind)
    if kind in ("profile", "analyze"):
        _report(result, out)
    elif kind == "loop":
        _loop(result, out)
    elif kind == "train":
        _train(result, out)
    elif kind == "sweep":
        for c in result.cells:
            if c.status == "ok" and c.latency:
                out.add(of_stats(cell_name(c), "cell", c.latency))
    elif kind == "scaling":
        out.device = result.device
        out.batch, out.threads = (same(getattr(p, f) for p in result.points)
                                  for f in ("batch_per_rank", "threads_per_rank"))
        for p in result.points:
            out.add(Measure(f"world {p.world_size}", "point", p.step_s, p.step_p10_s,
                            p.step_p90_s, list(p.step_samples_s or []) or None, None, p.steps))
    else:
        raise UserError(f"diff reads {', '.join(KINDS)} results, not {kind}")
    return out


def same(values: Any) -> Any:
    """The one value every point has (a scaling result's batch or threads per rank), else
    None."""
    found = set(values)
    return found.pop() if len(found) == 1 else None


def cell_name(c: Any) -> str:
    threads = f" {c.threads} threads" if c.threads else ""
    return f"{c.device} {c.backend} {c.dtype}{threads} batch {c.batch_size}"


def _report(r: Any, out: Timed) -> None:
    shapes = [i.get("shape") for i in r.inputs or []]
    out.batch = shapes[0][0] if shapes and shapes[0] else None
    out.device = (r.settings or {}).get("device")
    if r.kind != "profile" or r.end_to_end is None:
        return
    out.add(of_stats("end_to_end", "end_to_end", r.end_to_end))
    backward = getattr(r, "backward", None)
    if backward is not None and backward["end_to_end"] is not None:
        # profile --backward: the forward pass (the end to end) and the backward pass, phases
        out.add(of_stats("forward", "phase", r.end_to_end))
        out.add(of_stats("backward", "phase", backward["end_to_end"]))
    for t in r.by_type or []:  # records, or the dicts an in-memory report may hold
        out.add(of_stats(t["type"], "type", t["time"]))
    for row in r.layers:
        if row.time is not None:
            out.add(of_stats(row.name, "layer", row.time, row.type))


def _per_step_phases(out: Timed, step_phases: dict[str, list[float]] | None,
                     seconds: Mapping[str, float], steps: int) -> None:
    """Phases from their per-step samples, else (older results) their mean per step."""
    if step_phases:
        for name, xs in step_phases.items():
            if any(xs):
                out.add(of_samples(name, "phase", xs))
        return
    for name, total in seconds.items():
        if total and steps:
            out.add(Measure(name, "phase", total / steps))


def _loop(r: Any, out: Timed) -> None:
    out.batch, out.device = r.batch_size, r.device
    out.threads = (r.settings or {}).get("threads")
    out.add(of_stats("end_to_end", "end_to_end", r.batch_time))
    _per_step_phases(out, r.step_phases, r.phases["seconds"], r.phases["steps"])
    for layer in r.layers:
        out.add(of_stats(layer.name, "layer", layer.time, layer.type))


def _train(r: Any, out: Timed) -> None:
    out.batch = (r.config or {}).get("batch_size") or samples_per_step(r.breakdown)
    out.device = (r.config or {}).get("device")
    out.threads = (r.config or {}).get("threads")
    if r.step_seconds:
        out.add(of_samples("end_to_end", "end_to_end", r.step_seconds))
        out.notes += [n for n in [warmup_note(r.step_seconds, r.config or {})] if n]
    b = r.breakdown
    _per_step_phases(out, r.step_phases, b["seconds"], b["steps"])
    steps = len(r.step_seconds) or b["steps"]
    for layer in r.layers or []:
        samples = layer.get("forward_samples_s")
        if samples:  # each step's seconds (older results: only their mean per step)
            m = of_samples(layer["name"], "layer", samples)
            m.type = layer["type"]
            out.add(m)
            continue
        per_step = layer.get("forward_s_per_step")
        if per_step is None and steps:
            per_step = layer["forward_s"] / steps
        if per_step is not None:
            out.add(Measure(layer["name"], "layer", per_step, type=layer["type"]))
    for entry in r.ranks or []:  # records, or the dicts a report built by the loop holds
        out.add(Measure(f"rank {entry['rank']}", "rank", entry["step_s"]))
    if r.ranks:
        out.notes.append("distributed run: the end-to-end row and the phases are rank 0's "
                         "steps; each rank's median step is a row of its own")


def warmup_note(steps: Sequence[float], config: Mapping[str, Any]) -> str | None:
    """A note when a run left no warm-up steps out and its first quarter of steps (the first
    of the drift rule's blocks) took ``WARMUP_SLOWER`` times the rest's median or more: the
    drift rule takes that warm-up for wander of the run's level, which widens the noise every
    step and phase is judged against."""
    k = len(steps) // DRIFT_BLOCKS
    if config.get("warmup_steps") or len(steps) < 2 * DRIFT_BLOCKS:
        return None
    first, rest = statistics.median(steps[:k]), statistics.median(steps[k:])
    if rest <= 0 or first < WARMUP_SLOWER * rest:
        return None
    return (f"a result's first {k} of {len(steps)} steps took {first / rest - 1:.0%} longer "
            f"than the rest: its warm-up was measured (no --warmup-steps), and the drift it "
            f"makes widens what is within the noise; run with --warmup-steps {k}")


def samples_per_step(breakdown: Mapping[str, Any] | None) -> float | None:
    """A run's batch size where its config names none (``layerscope run``: the script's own
    loader): the samples over the measured steps per step, a mean (a last partial batch of an
    epoch makes it a little smaller than the loader's batch size); None without samples."""
    steps, samples = (breakdown or {}).get("steps"), (breakdown or {}).get("samples")
    if not steps or not samples:
        return None
    return round(samples / steps, 1)


def spread(m: Measure | None) -> float | None:
    """An end-to-end measure's relative p10-p90 half-width: what a figure without a spread of
    its own is judged against."""
    if m is None:
        return None
    if m.samples:
        xs = sorted(m.samples)
        lo, hi = percentile(xs, 0.1), percentile(xs, 0.9)
    elif m.p10 is not None and m.p90 is not None:
        lo, hi = m.p10, m.p90
    else:
        return None
    return (hi - lo) / 2 / m.median if m.median > 0 else None
