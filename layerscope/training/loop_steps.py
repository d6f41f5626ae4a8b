"""The training loop's mechanics: one optimizer step (its phases timed), one epoch's steps and
its metrics row, validation (``evaluate``), what the measured steps add up to (``Measured``)
and the NVTX ranges of ``--nvtx``."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from layerscope.analysis import modes, train_step
from layerscope.training import checkpoint as ckpt
from layerscope.training import distributed as dist_run
from layerscope.training import ranks as rank_table
from layerscope.training.loop_outputs import save_step
from layerscope.training.loop_run import LoopRun
from layerscope.training.phases import PhaseTimer, PhaseTotals
from layerscope.training.sinks import EpochResult, Sink, StepResult

TRACE_STEPS = 200  # steps per rank in a distributed run's merged trace (the first measured)


def topk_correct(logits: torch.Tensor, target: torch.Tensor, k: int) -> int:
    k = min(k, logits.shape[1])
    top = logits.topk(k, dim=1).indices
    return int((top == target.unsqueeze(1)).any(dim=1).sum())


def evaluate(model: nn.Module, loader: Any, device: str, loss_fn,
             channels_last: bool = False,
             progress: Callable[[int, int | None], None] | None = None) -> dict[str, float]:
    """Validation loss, top-1 and top-5 over ``loader``; ``progress(batches done, batches)``
    after each batch."""
    modes.set_mode(model, False)
    total, loss_sum, top1, top5 = 0, 0.0, 0, 0
    batches = len(loader) if hasattr(loader, "__len__") else None
    with torch.no_grad():
        for i, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            if channels_last and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
            out = model(x)
            loss_sum += float(loss_fn(out, y, reduction="sum"))
            top1 += topk_correct(out, y, 1)
            top5 += topk_correct(out, y, 5)
            total += len(y)
            if progress is not None:
                progress(i + 1, batches)
    return {"val_loss": loss_sum / total, "val_top1": top1 / total, "val_top5": top5 / total}


@dataclass
class Measured:
    """What the steps of one invocation measured: the phases of the steps after the warm-up
    (over the run and per epoch), every measured step's wall time, and this rank's steps for
    the merged trace of a distributed run."""
    warmup: int
    totals: PhaseTotals = field(default_factory=PhaseTotals)
    epoch: PhaseTotals = field(default_factory=PhaseTotals)
    epoch_breakdown: list[dict[str, Any]] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    trace_steps: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0
    # every measured step's input (shape, dtype): its FLOPs are counted once per distinct one
    inputs: list[tuple[Any, Any]] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)  # the measured steps' numbers
    phases: list[dict[str, float]] = field(default_factory=list)  # every measured step's

    def add(self, s: StepResult) -> None:
        if self.steps >= self.warmup:
            if s.comm is not None and len(self.trace_steps) < TRACE_STEPS:
                self.trace_steps.append({"t0": s.comm["t0"], "buckets": s.comm["buckets"],
                                         "phases": {p: s.phases[p] for p in rank_table.ADDITIVE}})
            self.totals.add(s.phases, s.wall, s.samples)
            self.epoch.add(s.phases, s.wall, s.samples)
            self.step_seconds.append(s.wall)
            self.phases.append(dict(s.phases))
            self.inputs.append(s.inputs)
            self.numbers.append(s.step)
        self.steps += 1

    def end_epoch(self) -> None:
        self.epoch_breakdown.append(self.epoch.to_dict())
        self.epoch = PhaseTotals()


STEP_ORDER = ("data", "h2d", "forward", "loss", "backward", "optimizer")  # _step's marks


class NvtxPhases:
    """--nvtx: a ``layerscope::step`` range around each step and a ``layerscope::<phase>`` range
    around each of its phases (the phase table's names), opened and closed at the timer's
    marks; stands in for the timer it wraps."""

    def __init__(self, timer: PhaseTimer):
        self.timer = timer
        self.open = 0  # 2: the step's and a phase's range are open

    def _push(self, name: str) -> None:
        torch.cuda.nvtx.range_push(f"layerscope::{name}")
        self.open += 1

    def _pop(self) -> None:
        torch.cuda.nvtx.range_pop()
        self.open -= 1

    def start(self) -> None:
        self.timer.start()
        self._push("step")
        self._push(STEP_ORDER[0])

    def mark(self, phase: str) -> None:
        self.timer.mark(phase)
        if self.open == 2:
            self._pop()
        i = STEP_ORDER.index(phase) + 1 if phase in STEP_ORDER else len(STEP_ORDER)
        if i < len(STEP_ORDER) and self.open == 1:
            self._push(STEP_ORDER[i])

    def stop(self) -> tuple[dict[str, float], float]:
        while self.open:
            self._pop()
        return self.timer.stop()


def one_step(run: LoopRun, batches: Iterator[Any], timer: PhaseTimer, autocast: Any) -> StepResult:
    """One optimizer step on the next of ``batches``: the copies to the device, then
    ``train_step.step`` (the step ``layerscope memory --mode training`` tracks): zero_grad,
    forward and loss under ``autocast``, backward, the optimizer (through the GradScaler with
    CUDA amp), each phase timed; with several processes, the end-of-step barrier and the gradient
    communication split out of the phases."""
    c, comm = run.config, run.comm
    if run.env is not None:
        dist_run.maybe_fault(run.rank, run.global_step + 1)
        comm.step_begin()
    timer.start()
    x, y = next(batches)
    timer.mark("data")
    x = x.to(run.device, non_blocking=c.pin_memory)
    y = y.to(run.device, non_blocking=c.pin_memory)
    if c.channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    timer.mark("h2d")

    def done(phase: str, value: Any) -> None:
        if phase == "backward" and comm is not None:
            comm.backward_end()
        if phase != "zero_grad":  # its time is the forward's (nothing to wait for)
            timer.mark(phase)

    out, loss = train_step.step(run.forward_model, (x,), {}, lambda o: run.loss_fn(o, y),
                                run.optimizer, autocast=autocast, scaler=run.scaler, done=done)
    phases, wall = timer.stop()
    record = None
    if comm is not None:
        # the end-of-step barrier: how long this rank waits for the slowest one
        wait = dist_run.barrier_seconds()
        record = comm.step_end()
        phases, wall = rank_table.split_step(phases, wait, record["communication_s"],
                                             record["exposed_s"])
    run.global_step += 1
    # after the step's one synchronisation, reading values costs nothing more
    return StepResult(phases, wall, samples=len(y), loss=float(loss.detach()),
                      correct=int((out.detach().argmax(1) == y).sum()),
                      lr=run.optimizer.param_groups[0]["lr"], comm=record, step=run.global_step,
                      inputs=(tuple(x.shape), x.dtype))


def run_epoch(run: LoopRun, epoch: int, m: Measured, sinks: list[Sink], timer: PhaseTimer,
           autocast: Any, unprofiled: Callable[[], Any],
           window: Any = None) -> tuple[EpochResult, bool]:
    """One epoch's steps (from where a resumed run stopped; up to ``steps``); returns its
    result and whether the run stops after it."""
    c = run.config
    modes.set_mode(run.model, True)
    skip, partial = (run.skip_batches, run.partial) if epoch == run.start_epoch else (0, None)
    loader = run.loader(epoch, skip)
    if run.resume_rng is not None and skip:
        ckpt.set_rng_state(run.resume_rng)  # continue the stopped epoch's random stream
    epoch_batches = skip + len(loader)
    n_batches = len(loader) if not c.dry_run else 1
    if c.steps is not None:
        n_batches = min(n_batches, c.steps - run.global_step)
    loss_sum, correct, seen = ((partial["loss_sum"], partial["correct"], partial["seen"])
                               if partial else (0.0, 0, 0))
    t_epoch = time.perf_counter()
    it = iter(loader)
    for i in range(n_batches):
        with window.step() if window is not None else nullcontext():  # --kernels
            s = one_step(run, it, timer, autocast)
        loss_sum += s.loss * s.samples
        correct += s.correct
        seen += s.samples
        m.add(s)
        s.epoch, s.batch, s.batches, s.epoch_batches = (epoch, skip + i + 1, skip + n_batches,
                                                        epoch_batches)
        s.sums = [loss_sum, correct, seen]
        for sink in sinks:
            sink.on_step(s)
    del it
    stop = c.steps is not None and run.global_step >= c.steps
    complete = skip + n_batches == epoch_batches
    if not complete:
        # stopped mid-epoch (--steps, --dry-run): a checkpoint to go on from exactly here,
        # taken before validation draws from the random streams
        save_step(run, epoch, skip + n_batches, [loss_sum, correct, seen])
        stop = True
    result = finish_epoch(run, epoch, complete, [loss_sum, correct, seen], t_epoch, unprofiled)
    m.end_epoch()
    for sink in sinks:
        sink.on_epoch(result)
    return result, stop


def finish_epoch(run: LoopRun, epoch: int, complete: bool, sums: list[float], t_epoch: float,
               unprofiled: Callable[[], Any]) -> EpochResult:
    """The epoch's metrics row: loss and top-1 over every rank's samples, the learning rate it
    ran with (the scheduler steps after a complete epoch), validation (unprofiled) and its
    wall time. A complete epoch joins the history (a partial one is reported, never
    checkpointed)."""
    c = run.config
    loss_sum, correct, seen = sums
    if run.env is not None:  # the epoch's metrics over every rank's samples
        loss_sum, correct_f, seen_f = dist_run.sum_across([loss_sum, correct, seen], run.device)
        correct, seen = int(correct_f), int(seen_f)
    if run.scheduler is not None:
        lr = run.scheduler.get_last_lr()[0]
        if complete:
            run.scheduler.step()
    else:
        lr = run.optimizer.param_groups[0]["lr"]
    row = {"epoch": epoch + 1, "step": run.global_step,
           "train_loss": loss_sum / max(seen, 1), "train_top1": correct / max(seen, 1),
           "lr": lr}
    if c.evaluate:
        with unprofiled():
            val = run.val_loader()
            if c.dry_run:
                val = [next(iter(val))]
            what = f"epoch {epoch + 1} validation"
            run.stage(what)
            row.update(evaluate(run.model, val, run.device, run.loss_fn, c.channels_last,
                                lambda done, total: run.stage(what, done, total)))
    row["epoch_seconds"] = time.perf_counter() - t_epoch
    rows = run.history + [row]
    if complete:
        run.history.append(row)
    return EpochResult(epoch, row, complete, rows)
