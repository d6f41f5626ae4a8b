"""What a training step and an epoch produce, and the sinks that take them.

A loop (``train``'s epochs, a watched script's steps) makes ``StepResult`` and ``EpochResult``
records and hands each to every sink in its list; a sink writes one output (TensorBoard scalars,
the metrics files, checkpoints, a caller's callbacks). Every sink has the same three methods, so
the loop never asks which outputs were asked for.
"""
from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from layerscope.core.errors import UserError
from layerscope.core.io import make_dir, write_file


@dataclass
class StepResult:
    """One optimizer step: its phases (seconds, PhaseTimer's order), wall time and samples;
    ``loss`` and ``correct`` (predictions) where a loop computes them, the learning rate it
    stepped with, and ``comm`` (CommRecorder.step_end's record) in a distributed run.
    ``step`` is the run's step number (1-based); ``epoch`` (0-based), ``batch`` (batches of
    the epoch done), ``batches`` (where this invocation stops in the epoch) and
    ``epoch_batches`` (the epoch's length) place it; ``sums`` are the epoch's running
    (loss_sum, correct, seen) after it."""
    phases: dict[str, float]
    wall: float
    samples: int | None = None
    loss: float | None = None
    correct: int | None = None
    lr: float | None = None
    comm: dict[str, Any] | None = None
    step: int = 0
    epoch: int = 0
    batch: int = 0
    batches: int = 0
    epoch_batches: int = 0
    sums: list[float] = field(default_factory=list)
    inputs: Any = None  # the batch's (shape, dtype), for its FLOPs (MFU)


@dataclass
class EpochResult:
    """An epoch's metrics ``row`` (the report's and metrics.csv's), whether it ran to its end
    (``complete``: checkpointed and part of the history) and the report's rows so far."""
    epoch: int  # 0-based
    row: dict[str, Any]
    complete: bool
    rows: list[dict[str, Any]]


class Sink:
    """Takes every step and every epoch of a run; ``close()`` once it ends."""

    def on_step(self, step: StepResult) -> None:
        pass

    def on_epoch(self, epoch: EpochResult) -> None:
        pass

    def on_efficiency(self, steps: list[int], mfu: list[float | None]) -> None:
        """The MFU of the measured steps (their numbers), once the run's FLOPs are counted."""

    def close(self) -> None:
        pass


def summary_writer(folder: str, label: str, name: str, arguments: str | tuple[str, ...] = ()):
    """A TensorBoard SummaryWriter in ``folder`` (created; ``label`` names it in an error);
    ``name`` is the option that asked for it, in the missing-package message."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise UserError(f"{name} needs tensorboard: pip install tensorboard",
                        arguments=arguments) from None
    return SummaryWriter(make_dir(folder, label))


class TensorBoardSink(Sink):
    """Per-step scalars under ``step/`` (loss, lr and throughput where the step has them, each
    phase in ms under ``step/phase_ms/``, the step's wall time in ms, ``step/mfu`` once the run's
    FLOPs are counted: measured steps only) at the step's number, and
    each epoch's metrics under their own names at the epoch's number (1-based)."""

    def __init__(self, writer):
        self.writer = writer

    def on_step(self, s: StepResult) -> None:
        w, step = self.writer, s.step
        if s.loss is not None:
            w.add_scalar("step/loss", s.loss, step)
        if s.lr is not None:
            w.add_scalar("step/lr", s.lr, step)
        if s.samples is not None:
            w.add_scalar("step/throughput_per_s", s.samples / s.wall if s.wall else 0.0, step)
        for phase, seconds in s.phases.items():
            w.add_scalar(f"step/phase_ms/{phase}", seconds * 1e3, step)
        w.add_scalar("step/wall_ms", s.wall * 1e3, step)

    def on_efficiency(self, steps: list[int], mfu: list[float | None]) -> None:
        for step, value in zip(steps, mfu):
            if value is not None:  # a ratio above 1 is refused, not drawn
                self.writer.add_scalar("step/mfu", value, step)

    def on_epoch(self, e: EpochResult) -> None:
        for k, v in e.row.items():
            if k not in ("epoch", "step"):
                self.writer.add_scalar(k, v, e.epoch + 1)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class MetricsSink(Sink):
    """RUN_DIR/metrics.csv and metrics.json: the report's rows, rewritten after each epoch."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir

    def on_epoch(self, e: EpochResult) -> None:
        write_metrics(self.run_dir, e.rows)


class CallbackSink(Sink):
    """The caller's callbacks: ``progress(epoch, batches done, batches)`` after each step and
    ``on_epoch(row)`` after each epoch."""

    def __init__(self, progress: Callable[..., None] | None,
                 on_epoch: Callable[..., None] | None):
        self.progress, self.epoch_done = progress, on_epoch

    def on_step(self, s: StepResult) -> None:
        if self.progress:
            self.progress(s.epoch, s.batch, s.batches)

    def on_epoch(self, e: EpochResult) -> None:
        if self.epoch_done:
            self.epoch_done(e.row)


def write_metrics(run_dir: str, history: list[dict[str, Any]]) -> None:
    if not history:
        return
    buf = io.StringIO(newline="")
    writer = csv.DictWriter(buf, fieldnames=list(history[0]))
    writer.writeheader()
    writer.writerows(history)
    write_file(os.path.join(run_dir, "metrics.csv"), buf.getvalue())
    write_json(os.path.join(run_dir, "metrics.json"), history)


def write_json(path: str, obj: Any) -> None:
    write_file(path, json.dumps(obj, indent=2))
