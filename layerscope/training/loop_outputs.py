"""Where a training run's steps and epochs go: TensorBoard, the checkpoints (per step and per
epoch), the metrics files and the caller's callbacks, in that order."""
from __future__ import annotations

import os
from collections.abc import Callable

from layerscope.analysis import modes
from layerscope.training import checkpoint as ckpt
from layerscope.training import distributed as dist_run
from layerscope.training.loop_run import LoopRun
from layerscope.training.sinks import (
    CallbackSink,
    EpochResult,
    MetricsSink,
    Sink,
    StepResult,
    TensorBoardSink,
    summary_writer,
)

Callback = Callable[..., None]


def tensorboard_sink(run: LoopRun) -> TensorBoardSink:
    """TensorBoard in RUN_DIR/tensorboard, with the model's graph when it can be traced."""
    writer = summary_writer(os.path.join(run.run_dir, "tensorboard"), "TensorBoard folder",
                            "tensorboard", arguments="tensorboard")
    x, _ = run.train_set[0]
    try:
        modes.set_mode(run.model, False)
        writer.add_graph(run.model, x.unsqueeze(0).to(run.config.device))
    except Exception as exc:  # a graph that cannot be traced still gets its scalars
        run.notes.append(f"TensorBoard graph skipped: {type(exc).__name__}")
    return TensorBoardSink(writer)


class Checkpoints(Sink):
    """RUN_DIR/checkpoints: every ``checkpoint_every`` steps inside an epoch (step-NNNNNN.pt)
    and after each complete epoch (epoch-NNN.pt), each also as last.pt. Every rank takes part
    (FSDP's consolidated state dict is a collective); rank 0 writes."""

    def __init__(self, run: LoopRun):
        self.run = run

    def on_step(self, s: StepResult) -> None:
        every = self.run.config.checkpoint_every
        if every and s.step % every == 0 and s.batch < s.epoch_batches:
            save_step(self.run, s.epoch, s.batch, s.sums)

    def on_epoch(self, e: EpochResult) -> None:
        if e.complete:
            state = self.run.state(e.epoch + 1)
            if self.run.rank == 0:
                for name in (f"epoch-{e.epoch + 1:03d}.pt", "last.pt"):
                    ckpt.save_atomic(state, os.path.join(self.run.run_dir, "checkpoints", name))


def open_sinks(run: LoopRun, on_epoch: Callback | None, progress: Callback | None) -> list[Sink]:
    """The run's outputs, in the order each step and epoch reaches them: TensorBoard (rank 0,
    asked for), checkpoints (every rank), the metrics files (rank 0), the callbacks."""
    sinks: list[Sink] = []
    if run.config.tensorboard and run.rank == 0:
        sinks.append(tensorboard_sink(run))
    sinks.append(Checkpoints(run))
    if run.rank == 0:
        sinks.append(MetricsSink(run.run_dir))
    sinks.append(CallbackSink(progress, on_epoch))
    return sinks


def save_step(run: LoopRun, epoch: int, batch: int, sums: list[float]) -> None:
    """A checkpoint to go on from exactly here: ``batch`` batches of epoch ``epoch`` done, with
    the epoch's running sums (over all ranks); every rank takes part, rank 0 writes."""
    if run.env is not None:
        sums = dist_run.sum_across(sums, run.device)
    state = run.state(epoch, batch, {"loss_sum": sums[0], "correct": int(sums[1]),
                                     "seen": int(sums[2])})
    if run.rank == 0:
        for name in (f"step-{run.global_step:06d}.pt", "last.pt"):
            ckpt.save_atomic(state, os.path.join(run.run_dir, "checkpoints", name))
