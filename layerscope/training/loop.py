"""The instrumented training loop: phase breakdown per step, metrics per epoch, atomic
checkpoints, exact resume, and the optimisation switches the ablation flips.

Determinism: every epoch starts by seeding all RNGs from (seed, epoch) and draws its batch
order from a generator seeded the same way, so an epoch is a pure function of the state at its
start; that is what makes ``--resume`` from an epoch checkpoint end with the same metrics as an
uninterrupted run (CPU; same thread count).
"""
from __future__ import annotations

import dataclasses
import marshal
import os
import random
import resource
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, RandomSampler, Sampler

from layerscope.analysis import modes, train_step
from layerscope.analysis.memory_limit import LimitGuard
from layerscope.core import values
from layerscope.core.environment import environment, with_load
from layerscope.core.errors import UserError
from layerscope.core.io import check_dir, make_dir, place, temp_dir, write_file
from layerscope.core.noise import read_machine
from layerscope.core.phases import per_step
from layerscope.core.records.memory import PostMortem
from layerscope.core.records.train import TrainReport  # its home is core; imported from here too
from layerscope.training import checkpoint as ckpt
from layerscope.training import distributed as dist_run
from layerscope.training import ranks as rank_table
from layerscope.training.comm import gradient_bytes
from layerscope.training.config import TrainConfig
from layerscope.training.data import datasets
from layerscope.training.dataloading import probing
from layerscope.training.phases import PHASES, PhaseTimer, PhaseTotals
from layerscope.training.recipes import lookup, loss_function, make_optimizer, make_scheduler
from layerscope.training.sinks import (
    CallbackSink,
    EpochResult,
    MetricsSink,
    Sink,
    StepResult,
    TensorBoardSink,
    summary_writer,
)
from layerscope.training.sinks import write_json as _write_json

OP_TABLE_TOP = 10  # operators in the --profile torch table
TRACE_STEPS = 200  # steps per rank in a distributed run's merged trace (the first measured)
RANKS_TRACE = "ranks_trace.json"  # that trace, in the run folder
DRY_RUN_BATCH = 8  # samples in a dry run's one batch unless --batch-size says otherwise


Callback = Callable[..., None]
Stages = Callable[[str, int, "int | None"], None]  # (what, done, total): ``train``'s stages


def _seed_epoch(seed: int, epoch: int) -> torch.Generator:
    s = values.derived_seed(seed, epoch)
    torch.manual_seed(s)
    random.seed(s)
    np.random.seed(s % 2**32)
    return torch.Generator().manual_seed(s)


def _topk(logits: torch.Tensor, target: torch.Tensor, k: int) -> int:
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
            top1 += _topk(out, y, 1)
            top5 += _topk(out, y, 5)
            total += len(y)
            if progress is not None:
                progress(i + 1, batches)
    return {"val_loss": loss_sum / total, "val_top1": top1 / total, "val_top5": top5 / total}


class _Run:
    """Everything one training run holds; built from a config (and a checkpoint to resume)."""

    def __init__(self, config: TrainConfig, notes: list[str],
                 env: dist_run.DistEnv | None = None, device: str | None = None):
        self.config = config
        self.recipe = lookup(config.recipe)
        self.notes = notes
        self.stages: Stages | None = None  # the caller's (``train``'s ``stages``)
        c, r = config, self.recipe
        self.env = env
        self.rank, self.world = (env.rank, env.world_size) if env else (0, 1)
        self.device = device or c.device
        # the settings' values were checked when the config was made (TrainConfig); what
        # depends on this machine and this launch is checked here
        if c.device == "cuda" and not torch.cuda.is_available():
            raise UserError("device cuda: no CUDA GPU is available here; use cpu",
                            arguments="device")
        if env and c.torchscript:
            raise UserError("torchscript cannot be trained by several processes (DDP and FSDP "
                            "wrap the module); leave it out", arguments="torchscript")
        self.epochs = 1 if c.dry_run else (c.epochs or r.epochs)
        # a dry run checks that everything runs, not how fast: one small batch, unless asked
        self.batch_size = c.batch_size or (min(r.batch_size, DRY_RUN_BATCH) if c.dry_run
                                           else r.batch_size)
        self.train_set, self.val_set, self.classes = datasets(
            r.data, synthetic=c.synthetic, data_dir=c.data_dir, download=c.download,
            augment=r.augment, seed=c.seed, image_size=r.image_size,
            synthetic_size=c.synthetic_size)
        torch.manual_seed(c.seed)  # the same initial weights in every process
        self.model = r.build()
        if r.init_weights is not None:  # transfer learning
            self.notes.append(r.init_weights(self.model, c.weights))
        self.model.to(self.device)
        if c.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        saved = ckpt.load(c.resume, resume=True) if c.resume else None
        if saved is not None:  # weights first: FSDP shards what the model holds
            self._check_recipe(saved)
            ckpt.load_weights(self.model, saved, c.resume)
        # the bytes DDP all-reduces per step: every trainable parameter's gradient
        self.gradient_bytes = gradient_bytes(self.model)
        self.param_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        self.fsdp = env is not None and c.strategy == "fsdp"
        if self.fsdp:
            from torch.distributed.fsdp import fully_shard

            fully_shard(self.model)
        self.optimizer = make_optimizer(c.optimizer or r.optimizer, self.model.parameters(),
                                        c.lr or r.lr)
        self.scheduler = make_scheduler(r, self.optimizer)
        self.cuda = c.device == "cuda"
        self.amp_dtype = torch.float16 if self.cuda else torch.bfloat16
        self.scaler = torch.amp.GradScaler("cuda") if (c.amp and self.cuda) else None
        self.loss_fn = loss_function(r)
        self.start_epoch, self.global_step, self.history = 0, 0, []
        # resuming in the middle of an epoch: batches already done, the epoch's running sums
        # and the RNG state when it stopped (the epoch's own seeding must not replace it)
        self.skip_batches, self.partial, self.resume_rng = 0, None, None
        self.run_dir = c.out or os.path.join("runs", f"{r.name}-{time.strftime('%Y%m%d-%H%M%S')}")
        if saved is not None:
            self._restore(saved)
        self.comm = None
        if env is not None:
            from layerscope.training.comm import CommRecorder

            self.comm = CommRecorder(self.world)
        self.forward_model = self._wrap(self.model)

    def _wrap(self, model: nn.Module):
        c = self.config
        if c.torchscript:
            x, _ = self.train_set[0]
            example = x.unsqueeze(0).to(c.device)
            if c.channels_last and example.dim() == 4:
                example = example.contiguous(memory_format=torch.channels_last)
            modes.set_mode(model, True)
            return torch.jit.trace(model, example, check_trace=False)
        if self.comm is not None and self.fsdp:
            self.comm.attach_fsdp(model)
        elif self.comm is not None:
            from torch.nn.parallel import DistributedDataParallel

            local = [torch.device(self.device).index] if self.device.startswith("cuda") else None
            model = DistributedDataParallel(model, device_ids=local)
            self.comm.attach(model)
        if c.compile:
            return torch.compile(model)
        return model

    def _check_recipe(self, state: dict[str, Any]) -> None:
        if state["config"].get("recipe") != self.recipe.name:
            raise UserError("resume: the checkpoint is of recipe "
                            f"{state['config'].get('recipe')!r}, "
                            f"not {self.recipe.name!r}", arguments="resume")

    def _restore(self, state: dict[str, Any]) -> None:
        """The training state beside the weights (loaded before the model was wrapped)."""
        try:
            if self.fsdp:
                from torch.distributed.checkpoint.state_dict import (
                    StateDictOptions,
                    set_optimizer_state_dict,
                )

                names = [n for n, _ in self.model.named_parameters()]
                set_optimizer_state_dict(self.model, self.optimizer,
                                         _optimizer_keys(state["optimizer"], names),
                                         options=StateDictOptions(full_state_dict=True))
            else:
                self.optimizer.load_state_dict(state["optimizer"])
            if self.scheduler is not None and state.get("scheduler"):
                self.scheduler.load_state_dict(state["scheduler"])
            if self.scaler is not None and state.get("scaler"):
                self.scaler.load_state_dict(state["scaler"])
            self.start_epoch, self.global_step = int(state["epoch"]), int(state["step"])
            self.history = list(state.get("history", []))
            ckpt.set_rng_state(state["rng"])
            if state.get("batch") and int(state.get("world_size", 1)) != self.world:
                # another world size splits the epoch differently: its batches cannot be skipped
                self.notes.append(f"resumed mid-epoch with {self.world} processes instead of "
                                  f"{state.get('world_size', 1)}: epoch "
                                  f"{self.start_epoch + 1} starts again from its first batch")
            elif state.get("batch"):
                # the epoch's running sums (over all ranks) continue on rank 0 alone
                self.skip_batches = state["batch"]
                self.partial = (dict(state["partial"]) if self.rank == 0 else
                                {"loss_sum": 0.0, "correct": 0, "seen": 0})
                self.resume_rng = state["rng"]
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise UserError(f"resume {self.config.resume}: the checkpoint's training state "
                            f"does not fit this run ({type(exc).__name__}: "
                            f"{(str(exc).strip().splitlines() or [''])[0]})",
                            arguments="resume") from exc
        if not self.config.out:
            self.run_dir = os.path.dirname(os.path.dirname(os.path.abspath(
                ckpt.resolve_checkpoint(self.config.resume))))

    def stage(self, what: str, done: int = 0, total: int | None = None) -> None:
        """Tell the caller's ``stages`` callback which phase of the run is under way."""
        if self.stages is not None:
            self.stages(what, done, total)

    def state(self, epoch: int, batch: int = 0,
              partial: dict[str, Any] | None = None) -> dict[str, Any]:
        """What ``--resume`` needs. ``epoch``: epochs finished; ``batch``: batches of the next
        epoch already done (a run stopped by --steps), with that epoch's running sums."""
        model, optimizer = self.model.state_dict(), self.optimizer.state_dict()
        if self.fsdp:  # consolidated: the full tensors (a collective: every rank calls it)
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
                get_optimizer_state_dict,
            )

            full = StateDictOptions(full_state_dict=True, cpu_offload=True)
            model = get_model_state_dict(self.model, options=full)
            names = {n: i for i, (n, _) in enumerate(self.model.named_parameters())}
            optimizer = _optimizer_keys(
                get_optimizer_state_dict(self.model, self.optimizer, options=full), names)
        return {"model": model, "optimizer": optimizer, "world_size": self.world,
                "scheduler": self.scheduler.state_dict() if self.scheduler else None,
                "scaler": self.scaler.state_dict() if self.scaler else None,
                "epoch": epoch, "step": self.global_step, "rng": ckpt.rng_state(),
                "batch": batch, "partial": partial,
                "config": _plain(self.config.to_dict()), "history": self.history,
                "classes": list(self.classes), "recipe": self.recipe.name}

    def loader(self, epoch: int, skip_batches: int = 0) -> DataLoader:
        gen = _seed_epoch(self.config.seed, epoch)
        c = self.config
        sampler: Sampler = RandomSampler(self.train_set, generator=gen)
        if self.env is not None:
            # each rank its share of one seeded permutation: the same order for the same seed
            # and world size; the batch size is per rank
            from torch.utils.data.distributed import DistributedSampler

            sampler = DistributedSampler(self.train_set, num_replicas=self.world, rank=self.rank,
                                         shuffle=True, seed=c.seed)
            sampler.set_epoch(epoch)
        if skip_batches:
            sampler = _Skip(sampler, skip_batches * self.batch_size)
        return DataLoader(self.train_set, batch_size=self.batch_size, sampler=sampler,
                          num_workers=c.num_workers, pin_memory=c.pin_memory and self.cuda,
                          persistent_workers=False, drop_last=False,
                          worker_init_fn=_worker_init, generator=gen)

    def val_loader(self) -> DataLoader:
        # a dry run validates one batch of the training batch size: a full evaluation batch
        # (1000 images of 224x224 through ResNet-50) took minutes and 13 GB
        size = self.batch_size if self.config.dry_run else self.recipe.eval_batch_size
        return DataLoader(self.val_set, batch_size=size, num_workers=self.config.num_workers)


def _optimizer_keys(state: dict[str, Any], keys: Any) -> dict[str, Any]:
    """An optimizer state dict with its parameters renamed: ``keys`` maps the current keys
    (parameter names, as FSDP's full state dict has them, or the indices a plain optimizer's
    has) to the others. Checkpoints keep the indices, so one process resumes FSDP's as well."""
    def key(k):
        return keys[k] if isinstance(keys, dict) else (keys[k] if isinstance(k, int) else k)

    return {"state": {key(k): v for k, v in state.get("state", {}).items()},
            "param_groups": [{**g, "params": [key(k) for k in g["params"]]}
                             for g in state.get("param_groups", [])]}


class _Skip(Sampler):
    """The epoch's own order (the same generator draws) without its first ``n`` indices."""

    def __init__(self, inner: Sampler, n: int):
        self.inner, self.n = inner, n

    def __iter__(self):
        it = iter(self.inner)
        for _ in range(self.n):
            next(it, None)
        return it

    def __len__(self) -> int:
        return max(len(self.inner) - self.n, 0)


def _worker_init(worker_id: int) -> None:
    s = torch.initial_seed() % 2**32
    random.seed(s)
    np.random.seed(s)


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def _profiler(kind: str | None, run_dir: str):
    """A context that profiles the training and writes its result into the run directory."""
    if kind is None:
        return nullcontext()
    if kind == "cprofile":
        import cProfile

        class _CProfile:
            def __enter__(self):
                self.p = cProfile.Profile()
                self.p.enable()

            def __exit__(self, *exc):
                self.p.disable()
                self.p.create_stats()  # what dump_stats writes, through core.io
                write_file(os.path.join(run_dir, "profile.prof"),
                           lambda f: marshal.dump(self.p.stats, f))
                return False

        return _CProfile()
    if kind == "torch":
        from torch.profiler import ProfilerActivity, profile

        from layerscope.analysis.op_profile import op_rows
        from layerscope.analysis.profiler_ranges import quiet_native_stderr

        class _Torch:
            def __enter__(self):
                # CUDA activities only where CUDA is: on the CPU kineto would print
                # "gpuGetDeviceCount failed"; its start/stop banners go to fd 2 as well
                self.cuda = torch.cuda.is_available()
                acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
                self.p = profile(activities=acts)
                with quiet_native_stderr():
                    self.p.__enter__()
                return self

            def __exit__(self, *exc):
                with quiet_native_stderr():
                    self.p.__exit__(*exc)
                    with temp_dir(near=os.path.join(run_dir, "trace.json")) as tmpdir:
                        raw = os.path.join(tmpdir, "trace.json")
                        self.p.export_chrome_trace(raw)
                        place(raw, os.path.join(run_dir, "trace.json"))
                return False

            @contextmanager
            def paused(self):
                """Work that is no training step (validation, the TensorBoard graph's trace)
                runs unrecorded, so the per-step table divides training steps' ops only."""
                acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
                with quiet_native_stderr():
                    self.p.toggle_collection_dynamic(False, acts)
                try:
                    yield
                finally:
                    with quiet_native_stderr():
                        self.p.toggle_collection_dynamic(True, acts)

            def table(self, report: TrainReport, steps: int) -> dict[str, Any]:
                """The top operators per training step (torch.profiler's key averages)."""
                from layerscope.core.optable import OpTable

                rows, total, n = op_rows(self.p, cuda=self.cuda, runs=max(steps, 1),
                                         top=OP_TABLE_TOP)
                return OpTable(model=f"{report.recipe} training", device=report.config["device"],
                               sort="self", runs=steps, rows=rows, total_self_s=total,
                               ops_total=n, trace=os.path.join(run_dir, "trace.json"),
                               settings={"unit": "step", "top": OP_TABLE_TOP,
                                         "includes": "training steps only (validation and "
                                                     "the TensorBoard graph left out)"}
                               ).to_dict()

        return _Torch()
    try:
        from pyinstrument import Profiler
    except ImportError:
        raise UserError("profile pyinstrument needs pyinstrument: "
                        "pip install pyinstrument", arguments="profile") from None

    class _Pyinstrument:
        def __enter__(self):
            self.p = Profiler()
            self.p.start()

        def __exit__(self, *exc):
            self.p.stop()
            write_file(os.path.join(run_dir, "profile.html"), self.p.output_html())
            return False

    return _Pyinstrument()


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
    config = dataclasses.replace(config or TrainConfig(), **overrides)
    if config.kernels and config.profile == "torch":
        raise UserError("kernels runs torch.profiler itself over three steps: leave out "
                        "profile torch", arguments=("kernels", "profile"))
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
    made: _Run | None = None  # the run, once made (its folder for the post-mortem)
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
        run = made = _Run(config, notes, env, device)
        if config.resume:
            _check_work_left(run)  # before anything in the run folder is written
        writes = run.rank == 0  # rank 0 writes the run folder; the others only measure
        if writes:
            make_dir(run.run_dir, "out")
            make_dir(os.path.join(run.run_dir, "checkpoints"), "checkpoint folder")
            _write_json(os.path.join(run.run_dir, "config.json"), _plain(config.to_dict()))
        first_step = run.global_step
        with _profiler(config.profile if writes else None, run.run_dir) as profiler:
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


def _report_before_training(config: TrainConfig, made: _Run | None,
                            post_mortem: dict[str, Any]) -> TrainReport:
    """The report of a run that ran out of memory before its first step: no step measured,
    the post-mortem."""
    notes = list(made.notes) if made is not None else []
    notes.append("training stopped out of memory before its first step (building the model, "
                 "its optimizer or its data under --memory-limit)")
    return TrainReport(
        recipe=config.recipe, config=_plain(config.to_dict()),
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


def _check_work_left(run: _Run) -> None:
    """``AlreadyFinished`` when a resumed run has no batch left: every epoch done (no epoch
    stopped part-way), or ``steps`` optimizer steps already taken."""
    steps = run.config.steps
    if steps is not None and run.global_step >= steps:
        raise AlreadyFinished(run.run_dir, run.global_step, steps, "steps")
    if run.start_epoch >= run.epochs and not run.skip_batches:
        raise AlreadyFinished(run.run_dir, run.start_epoch, run.epochs, "epochs")


def _tensorboard_sink(run: _Run) -> TensorBoardSink:
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


class _Checkpoints(Sink):
    """RUN_DIR/checkpoints: every ``checkpoint_every`` steps inside an epoch (step-NNNNNN.pt)
    and after each complete epoch (epoch-NNN.pt), each also as last.pt. Every rank takes part
    (FSDP's consolidated state dict is a collective); rank 0 writes."""

    def __init__(self, run: _Run):
        self.run = run

    def on_step(self, s: StepResult) -> None:
        every = self.run.config.checkpoint_every
        if every and s.step % every == 0 and s.batch < s.epoch_batches:
            _save_step(self.run, s.epoch, s.batch, s.sums)

    def on_epoch(self, e: EpochResult) -> None:
        if e.complete:
            state = self.run.state(e.epoch + 1)
            if self.run.rank == 0:
                for name in (f"epoch-{e.epoch + 1:03d}.pt", "last.pt"):
                    ckpt.save_atomic(state, os.path.join(self.run.run_dir, "checkpoints", name))


def _sinks(run: _Run, on_epoch: Callback | None, progress: Callback | None) -> list[Sink]:
    """The run's outputs, in the order each step and epoch reaches them: TensorBoard (rank 0,
    asked for), checkpoints (every rank), the metrics files (rank 0), the callbacks."""
    sinks: list[Sink] = []
    if run.config.tensorboard and run.rank == 0:
        sinks.append(_tensorboard_sink(run))
    sinks.append(_Checkpoints(run))
    if run.rank == 0:
        sinks.append(MetricsSink(run.run_dir))
    sinks.append(CallbackSink(progress, on_epoch))
    return sinks


def _save_step(run: _Run, epoch: int, batch: int, sums: list[float]) -> None:
    """A checkpoint to go on from exactly here: ``batch`` batches of epoch ``epoch`` done, with
    the epoch's running sums (over all ranks); every rank takes part, rank 0 writes."""
    if run.env is not None:
        sums = dist_run.sum_across(sums, run.device)
    state = run.state(epoch, batch, {"loss_sum": sums[0], "correct": int(sums[1]),
                                     "seen": int(sums[2])})
    if run.rank == 0:
        for name in (f"step-{run.global_step:06d}.pt", "last.pt"):
            ckpt.save_atomic(state, os.path.join(run.run_dir, "checkpoints", name))


@dataclass
class _Measured:
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


_STEP_ORDER = ("data", "h2d", "forward", "loss", "backward", "optimizer")  # _step's marks


class _NvtxPhases:
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
        self._push(_STEP_ORDER[0])

    def mark(self, phase: str) -> None:
        self.timer.mark(phase)
        if self.open == 2:
            self._pop()
        i = _STEP_ORDER.index(phase) + 1 if phase in _STEP_ORDER else len(_STEP_ORDER)
        if i < len(_STEP_ORDER) and self.open == 1:
            self._push(_STEP_ORDER[i])

    def stop(self) -> tuple[dict[str, float], float]:
        while self.open:
            self._pop()
        return self.timer.stop()


def _step(run: _Run, batches: Iterator[Any], timer: PhaseTimer, autocast: Any) -> StepResult:
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


def _epoch(run: _Run, epoch: int, m: _Measured, sinks: list[Sink], timer: PhaseTimer,
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
            s = _step(run, it, timer, autocast)
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
        _save_step(run, epoch, skip + n_batches, [loss_sum, correct, seen])
        stop = True
    result = _end_epoch(run, epoch, complete, [loss_sum, correct, seen], t_epoch, unprofiled)
    m.end_epoch()
    for sink in sinks:
        sink.on_epoch(result)
    return result, stop


def _end_epoch(run: _Run, epoch: int, complete: bool, sums: list[float], t_epoch: float,
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


def _train(run: _Run, on_epoch: Callback | None, progress: Callback | None,
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
        sinks = _sinks(run, on_epoch, progress)
    timer = PhaseTimer(cuda=run.cuda)
    m = _Measured(c.warmup_steps)
    from layerscope.analysis.nvtx import NO_CUDA_NOTE, available, nvtx_ranges

    if c.nvtx and not available():
        run.notes.append(NO_CUDA_NOTE)
    nvtx = c.nvtx and available()
    step_timer: Any = _NvtxPhases(timer) if nvtx else timer
    cpu0, wall0, load0 = time.process_time(), time.perf_counter(), read_machine().loadavg
    if run.cuda:
        torch.cuda.reset_peak_memory_stats()
    autocast = (torch.autocast(device_type=c.device, dtype=run.amp_dtype) if c.amp
                else nullcontext())
    rows = list(run.history)
    stopped: dict[str, Any] | None = None  # the post-mortem of the error that stopped it
    window = None
    if c.kernels:
        from layerscope.analysis.kernels import KernelWindow

        window = KernelWindow(run.model, "cuda" if run.cuda else "cpu", backward=True)
    try:
        with probing() as probe, nvtx_ranges(run.model, nvtx):  # probing: the data loaders
            try:
                for epoch in range(run.start_epoch, run.epochs):
                    result, stop = _epoch(run, epoch, m, sinks, step_timer, autocast,
                                          unprofiled, window)
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
    finally:
        if window is not None:
            window.finish()
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
            ckpt.save_atomic({"model": final, "config": _plain(c.to_dict()),
                              "classes": list(run.classes), "recipe": run.recipe.name},
                             os.path.join(run.run_dir, "model.pt"))
    wall = time.perf_counter() - wall0
    extra = _gather_ranks(run, m, efficiency) if run.env is not None and stopped is None \
        else {}
    extra["efficiency"] = efficiency
    if stopped is not None:
        extra["post_mortem"] = PostMortem.from_dict(stopped)
    return TrainReport(
        recipe=run.recipe.name, config=_plain(c.to_dict()), run_dir=run.run_dir, epochs=rows,
        breakdown=m.totals.to_dict(), epoch_breakdown=m.epoch_breakdown,
        step_seconds=m.step_seconds, step_phases=per_step(m.phases) if m.phases else None,
        cpu_utilisation=(time.process_time() - cpu0) / wall if wall else None,
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        peak_cuda_bytes=torch.cuda.max_memory_allocated() if run.cuda else None,
        notes=run.notes, environment=with_load(load0),
        data_loading=probe.result(h2d_s=m.totals.seconds.get("h2d", 0.0), cuda=run.cuda)
        if probe is not None else None,
        kernels=window.result() if window is not None else None, **extra)


def _efficiency(run: _Run, m: _Measured) -> Any:
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


def _gather_ranks(run: _Run, m: _Measured, efficiency: Any = None) -> dict[str, Any]:
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
