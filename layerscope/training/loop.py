"""The instrumented training loop: phase breakdown per step, metrics per epoch, atomic
checkpoints, exact resume, and the optimisation switches the ablation flips.

Determinism: every epoch starts by seeding all RNGs from (seed, epoch) and draws its batch
order from a generator seeded the same way, so an epoch is a pure function of the state at its
start; that is what makes ``--resume`` from an epoch checkpoint end with the same metrics as an
uninterrupted run (CPU; same thread count).

This module holds ``train`` and the run's end (MFU, the ranks gathered, the report); the rest is
one module per concern, each name still importable from here: ``loop_run`` (the run's state,
its loaders and checkpoint state), ``loop_steps`` (a step, an epoch, validation, what the
steps measured), ``loop_outputs`` (TensorBoard, checkpoints, metrics files, callbacks) and
``loop_profile`` (``--profile``).
"""
from __future__ import annotations

import dataclasses
import os
import resource
import time
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from typing import Any

import torch

from layerscope.analysis.memory_limit import LimitGuard
from layerscope.core.environment import environment, with_load
from layerscope.core.io import check_dir, make_dir
from layerscope.core.noise import read_machine
from layerscope.core.phases import per_step
from layerscope.core.records.memory import PostMortem
from layerscope.core.records.train import TrainReport  # its home is core; imported from here too
from layerscope.training import checkpoint as ckpt
from layerscope.training import distributed as dist_run
from layerscope.training import ranks as rank_table
from layerscope.training.config import TrainConfig
from layerscope.training.dataloading import probing

# the loop's parts, one module per concern; their names stay importable from here
from layerscope.training.loop_outputs import (  # noqa: F401
    Callback,
    Checkpoints,
    open_sinks,
    save_step,
    tensorboard_sink,
)
from layerscope.training.loop_profile import OP_TABLE_TOP, run_profiler  # noqa: F401
from layerscope.training.loop_run import (  # noqa: F401
    DRY_RUN_BATCH,
    LoopRun,
    SkipBatch,
    Stages,
    optimizer_keys,
    plain_value,
    seed_epoch,
    worker_init,
)
from layerscope.training.loop_steps import (  # noqa: F401
    STEP_ORDER,
    TRACE_STEPS,
    Measured,
    NvtxPhases,
    evaluate,
    finish_epoch,
    one_step,
    run_epoch,
    topk_correct,
)
from layerscope.training.phases import PHASES, PhaseTimer, PhaseTotals
from layerscope.training.sinks import Sink
from layerscope.training.sinks import write_json as _write_json

RANKS_TRACE = "ranks_trace.json"  # every rank's steps (the first TRACE_STEPS), in the run folder


def _resumed_config(config: TrainConfig) -> TrainConfig:
    """A resumed run continues with the checkpoint's settings; options the caller set to
    something other than their default (e.g. more --epochs) override them."""
    saved = ckpt.load(config.resume, resume=True)["config"]
    defaults = TrainConfig()
    merged = {}
    for f in dataclasses.fields(TrainConfig):
        mine = getattr(config, f.name)
        # --steps and --dry-run stop one invocation; they are not the run's settings
        if (f.name in ("resume", "out", "steps", "dry_run") or mine != getattr(defaults, f.name)
                or f.name not in saved):
            merged[f.name] = mine
        else:
            value = saved[f.name]
            merged[f.name] = tuple(value) if f.name == "synthetic_size" and value else value
    return TrainConfig(**merged)


# settings that act only on a CUDA device: pinned host memory makes the copies to a GPU
# asynchronous; cudnn.benchmark picks cuDNN's (GPU) convolution algorithms
CUDA_ONLY_SETTINGS = ("pin_memory", "cudnn_benchmark")


def not_applied(config: TrainConfig, device: str) -> tuple[TrainConfig, list[str]]:
    """The config the run really uses on ``device``, and notes naming what was asked but not
    applied. Without a CUDA device the CUDA-only settings do nothing: they are recorded as off
    (in the report's config and the run's config.json) and named in a note, not refused, so the
    same command runs on a laptop and on a GPU machine. ``amp`` does apply on the CPU, with
    bfloat16 (float16 autocast is CUDA's): a note says which."""
    if device.startswith("cuda"):
        return config, []
    asked = [name for name in CUDA_ONLY_SETTINGS if getattr(config, name)]
    notes = []
    if asked:
        names = " and ".join(f"{n} (--{n.replace('_', '-')})" for n in asked)
        notes.append(f"{names} not applied: no CUDA device (device {device}); they act only "
                     "on copies to a GPU and on cuDNN, so the run used neither and records "
                     f"{'them' if len(asked) > 1 else 'it'} as off")
        config = dataclasses.replace(config, **{n: False for n in asked})
    if config.amp:
        notes.append(f"amp on {device}: autocast to bfloat16 (float16 autocast is for CUDA "
                     "devices)")
    return config, notes


def train(config: TrainConfig | None = None, *, on_epoch: Callback | None = None,
          progress: Callback | None = None, stages: Stages | None = None,
          **overrides: Any) -> TrainReport:
    """Train a recipe; returns the TrainReport (also written to the run directory).
    ``progress(epoch, steps done, steps)`` after each training step, ``on_epoch(row)`` after
    each epoch, ``stages(what, done, total)`` through the run's other phases that can take a
    while: each epoch's validation (``epoch N validation``, batches), counting the step's
    FLOPs for the MFU, saving the final model (``done`` 0 and ``total`` None: no count)."""
    config = TrainConfig.of(config, **overrides)
    if config.out:
        check_dir(config.out, "out")  # before any work: an existing file is not a run folder
    if config.resume:
        config = _resumed_config(config)
    old_threads = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    old_benchmark = torch.backends.cudnn.benchmark
    env = dist_run.detect()
    joined = False
    guarded = ExitStack()  # --memory-limit's guard, when given
    guard: LimitGuard | None = None
    made: LoopRun | None = None  # the run, once made (its folder for the post-mortem)
    finished: str | None = None  # the report's path, once the run finished on this rank
    try:
        notes: list[str] = []
        device = config.device
        if env is not None:
            joined = not torch.distributed.is_initialized()
            device = dist_run.join(env, config.device, config.comm_timeout)
        config, notes = not_applied(config, device)
        torch.backends.cudnn.benchmark = bool(config.cudnn_benchmark)
        if config.memory_limit is not None:  # every tensor from the model's creation on
            guard = LimitGuard(config.memory_limit)
            guarded.enter_context(guard)
        run = made = LoopRun(config, notes, env, device)
        if config.resume:
            _check_work_left(run)  # before anything in the run folder is written
        writes = run.rank == 0  # rank 0 writes the run folder; the others only measure
        if writes:
            make_dir(run.run_dir, "out")
            make_dir(os.path.join(run.run_dir, "checkpoints"), "checkpoint folder")
            _write_json(os.path.join(run.run_dir, "config.json"), plain_value(config.to_dict()))
        first_step = run.global_step
        with run_profiler(config.profile if writes else None, run.run_dir) as profiler:
            report = _train(run, on_epoch if writes else None, progress if writes else None,
                            getattr(profiler, "paused", nullcontext),
                            guard.post_mortem_of if guard is not None else None,
                            stages if writes else None)
        if config.profile == "torch" and writes:
            report.ops = profiler.table(report, run.global_step - first_step)
        if writes:
            _write_json(os.path.join(run.run_dir, "report.json"), report.to_dict())
        if report.post_mortem is not None:
            raise OutOfMemory(report)
        finished = os.path.join(run.run_dir, "report.json")
        return report
    except OutOfMemory:
        raise
    except Exception as exc:
        # out of memory before the first step (building the model under the limit): a report
        # of no step, with the post-mortem
        post_mortem = guard.post_mortem_of(exc) if guard is not None else None
        if post_mortem is None:
            raise
        guarded.close()
        raise OutOfMemory(_report_before_training(config, made, post_mortem)) from exc
    finally:
        guarded.close()
        torch.backends.cudnn.benchmark = old_benchmark
        torch.set_num_threads(old_threads)
        if joined:  # the group this run formed: after a finished run the ranks leave together
            dist_run.leave(finished is not None, finished)


class OutOfMemory(Exception):
    """``memory_limit`` (or the machine) ran out of memory: the training stopped. ``report``
    is the run's report up to there (the steps it finished), its ``post_mortem`` what was
    alive (``analysis.memory_limit.LimitGuard``); rank 0 wrote it to RUN_DIR/report.json when
    the run folder existed."""

    def __init__(self, report: TrainReport):
        self.report = report
        self.post_mortem: PostMortem = report.post_mortem  # type: ignore[assignment]
        super().__init__(f"out of memory in {self.post_mortem.module or 'the top level'} "
                         f"({self.post_mortem.phase})")


def _report_before_training(config: TrainConfig, made: LoopRun | None,
                            post_mortem: dict[str, Any]) -> TrainReport:
    """The report of a run that ran out of memory before its first step: no step measured,
    the post-mortem."""
    notes = list(made.notes) if made is not None else []
    notes.append("training stopped out of memory before its first step (building the model, "
                 "its optimizer or its data under --memory-limit)")
    return TrainReport(
        recipe=config.recipe, config=plain_value(config.to_dict()),
        run_dir=made.run_dir if made is not None else (config.out or ""), epochs=[],
        breakdown=PhaseTotals().to_dict(), epoch_breakdown=[], step_seconds=[],
        cpu_utilisation=None,
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        peak_cuda_bytes=None, notes=notes, environment=environment(),
        post_mortem=PostMortem.from_dict(post_mortem))


class AlreadyFinished(Exception):
    """A resumed run with nothing left to do: the checkpoint has ``done`` of ``total``
    ``unit`` ("epochs" or "steps") behind it. Nothing is trained and nothing in ``run_dir``
    is written (its report stays the finished run's)."""

    def __init__(self, run_dir: str, done: int, total: int, unit: str):
        self.run_dir, self.done, self.total, self.unit = run_dir, done, total, unit
        super().__init__(f"{run_dir}: the run {self.finished}; nothing to do (to train more, "
                         f"resume with {unit} above {done})")

    @property
    def finished(self) -> str:
        """'already finished 3 of 3 epochs' ('already finished 23 steps, more than 5' when a
        step limit below the steps done was given)."""
        if self.done == self.total:
            return f"already finished {self.done} of {self.total} {self.unit}"
        return f"already finished {self.done} {self.unit}, more than {self.total}"


def _check_work_left(run: LoopRun) -> None:
    """``AlreadyFinished`` when a resumed run has no batch left: every epoch done (no epoch
    stopped part-way), or ``steps`` optimizer steps already taken."""
    steps = run.config.steps
    if steps is not None and run.global_step >= steps:
        raise AlreadyFinished(run.run_dir, run.global_step, steps, "steps")
    if run.start_epoch >= run.epochs and not run.skip_batches:
        raise AlreadyFinished(run.run_dir, run.start_epoch, run.epochs, "epochs")

def _train(run: LoopRun, on_epoch: Callback | None, progress: Callback | None,
           unprofiled: Callable[[], Any] = nullcontext,
           post_mortem_of: Callable[[BaseException], dict[str, Any] | None] | None = None,
           stages: Stages | None = None) -> TrainReport:
    """The epochs; ``unprofiled()``: a context for work that is not a training step (the
    profiler's pause), so a per-step operator table counts training steps only. An error
    ``post_mortem_of`` gives a post-mortem for (``memory_limit``'s guard: out of memory) stops
    the epochs: the report has the steps finished before it and the post-mortem, and no
    MFU, no rank gathering and no final model (what is left of the run is not trained)."""
    c = run.config
    run.stages = stages
    with unprofiled():
        sinks = open_sinks(run, on_epoch, progress)
    m = Measured(c.warmup_steps)
    from layerscope.analysis.nvtx import nvtx_ranges

    nvtx, step_timer = _step_timer(run)
    cpu0, wall0, load0 = time.process_time(), time.perf_counter(), read_machine().loadavg
    if run.cuda:
        torch.cuda.reset_peak_memory_stats()
    autocast = (torch.autocast(device_type=c.device, dtype=run.amp_dtype) if c.amp
                else nullcontext())
    window = None
    if c.kernels:
        from layerscope.analysis.kernels import KernelWindow

        window = KernelWindow(run.model, "cuda" if run.cuda else "cpu", backward=True)
    try:
        with probing() as probe, nvtx_ranges(run.model, nvtx):  # probing: the data loaders
            rows, stopped = _epochs(run, m, sinks, step_timer, autocast, unprofiled, window,
                                    post_mortem_of)
    finally:
        if window is not None:
            window.finish()
    efficiency = _finish(run, m, sinks, stopped, unprofiled)
    wall = time.perf_counter() - wall0
    extra = _gather_ranks(run, m, efficiency) if run.env is not None and stopped is None \
        else {}
    extra["efficiency"] = efficiency
    if stopped is not None:
        extra["post_mortem"] = PostMortem.from_dict(stopped)
    return TrainReport(
        recipe=run.recipe.name, config=plain_value(c.to_dict()), run_dir=run.run_dir, epochs=rows,
        breakdown=m.totals.to_dict(), epoch_breakdown=m.epoch_breakdown,
        step_seconds=m.step_seconds, step_phases=per_step(m.phases) if m.phases else None,
        cpu_utilisation=(time.process_time() - cpu0) / wall if wall else None,
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        peak_cuda_bytes=torch.cuda.max_memory_allocated() if run.cuda else None,
        notes=run.notes, environment=with_load(load0),
        data_loading=probe.result(h2d_s=m.totals.seconds.get("h2d", 0.0), cuda=run.cuda)
        if probe is not None else None,
        kernels=window.result() if window is not None else None, **extra)


def _step_timer(run: LoopRun) -> tuple[bool, Any]:
    """Whether the steps get NVTX ranges (``--nvtx`` where CUDA has them; a note where not),
    and the timer of the steps' phases (wrapped to open them)."""
    from layerscope.analysis.nvtx import NO_CUDA_NOTE, available

    timer = PhaseTimer(cuda=run.cuda)
    if run.config.nvtx and not available():
        run.notes.append(NO_CUDA_NOTE)
    nvtx = run.config.nvtx and available()
    return nvtx, (NvtxPhases(timer) if nvtx else timer)


def _epochs(run: LoopRun, m: Measured, sinks: list[Sink], step_timer: Any, autocast: Any,
            unprofiled: Callable[[], Any], window: Any,
            post_mortem_of: Callable[[BaseException], dict[str, Any] | None] | None
            ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The epochs left (up to a step limit): the metrics rows, and the post-mortem of the error
    that stopped them (None: they ran to their end), with its note."""
    rows = list(run.history)
    try:
        for epoch in range(run.start_epoch, run.epochs):
            result, stop = run_epoch(run, epoch, m, sinks, step_timer, autocast, unprofiled,
                                  window)
            rows = result.rows
            if stop:
                break
    except Exception as exc:
        stopped = post_mortem_of(exc) if post_mortem_of is not None else None
        if stopped is None:
            raise
        stopped["step"] = run.global_step + 1
        # the error (and the step's tensors its traceback holds) goes here
        run.notes.append(f"training stopped out of memory in step "
                         f"{run.global_step + 1}; the breakdown covers the steps "
                         "before it")
        run.notes.append("MFU not given: training stopped out of memory (the model's "
                         "FLOPs are not counted after the failure)")
        return rows, stopped
    return rows, None


def _finish(run: LoopRun, m: Measured, sinks: list[Sink], stopped: dict[str, Any] | None,
            unprofiled: Callable[[], Any]) -> Any:
    """After the epochs: the MFU (unprofiled), the sinks given it and closed, the final model
    saved (rank 0 writes); neither MFU nor model when the run stopped out of memory. Returns
    the efficiency (None: not counted)."""
    efficiency = None
    if stopped is None:
        run.stage("counting the step's FLOPs (MFU)")
        with unprofiled():
            efficiency = _efficiency(run, m)
    for sink in sinks:
        if efficiency is not None:
            sink.on_efficiency(m.numbers, efficiency.mfu_per_step or [efficiency.mfu])
        sink.close()
    if stopped is None:
        run.stage("saving the model")
        final = run.state(run.epochs)["model"] if run.fsdp else run.model.state_dict()
        if run.rank == 0:
            ckpt.save_atomic({"model": final, "config": plain_value(run.config.to_dict()),
                              "classes": list(run.classes), "recipe": run.recipe.name},
                             os.path.join(run.run_dir, "model.pt"))
    return efficiency


def _efficiency(run: LoopRun, m: Measured) -> Any:
    """MFU/HFU of the measured steps: each distinct input's step FLOPs counted once by the
    capture ``analyze`` uses, against this device's peaks (per rank: one device's). None, with
    a note, when the model cannot be counted or no step was measured."""
    from layerscope.analysis import efficiency as eff

    if not m.step_seconds:
        return None
    try:
        counted = {key: eff.step_flops(run.model, torch.zeros(key[0], dtype=key[1],
                                                               device=run.device),
                                       optimizer=run.optimizer)
                   for key in dict.fromkeys(m.inputs)}
        dtype = run.amp_dtype if run.config.amp else torch.float32
        return eff.of_steps(counted, m.inputs, m.step_seconds, run.device, dtype or torch.float32,
                            world_size=run.world)
    except Exception as exc:  # noqa: BLE001 - a model the capture cannot count still trains
        run.notes.append(f"MFU not given: the step's FLOPs could not be counted "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
        return None


def _gather_ranks(run: LoopRun, m: Measured, efficiency: Any = None) -> dict[str, Any]:
    """Several processes: every rank's phases and steps gathered on rank 0, which writes the
    merged trace; the report's per-rank fields and notes."""
    c = run.config
    entry = rank_table.rank_entry(run.rank, m.totals.to_dict())
    if efficiency is not None and efficiency.mfu is not None:
        entry["mfu"] = efficiency.mfu  # per GPU: this rank's own
    gathered = dist_run.gather((entry,
                                {"rank": run.rank, "steps": m.trace_steps}),
                               run.rank, run.world) or []
    entries = [g[0] for g in gathered]
    extra = {"world_size": run.world, "ranks": entries,
             "communication": run.comm.summary(run.gradient_bytes, param_bytes=run.param_bytes),
             "straggler": rank_table.straggler(entries),
             "job": rank_table.job_throughput(entries)}
    if run.rank == 0:
        from layerscope.training.chrome_trace import write_trace

        write_trace(os.path.join(run.run_dir, RANKS_TRACE), [g[1] for g in gathered])
        run.notes.append(f"every rank's phases and collectives, one process per rank: "
                         f"{os.path.join(run.run_dir, RANKS_TRACE)} (Perfetto, "
                         "chrome://tracing)")
    run.notes.append(f"{run.world} processes ({c.strategy}); --batch-size "
                     f"{run.batch_size} is per process: {run.batch_size * run.world} "
                     "samples per step in all")
    return extra


__all__ = ["AlreadyFinished", "TrainConfig", "TrainReport", "train", "PHASES"]
