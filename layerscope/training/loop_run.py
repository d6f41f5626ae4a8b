"""One training run's state: the model, its optimizer, scheduler and scaler built from a config
(and a checkpoint to resume), the seeded data loaders of each epoch, and the state a checkpoint
keeps (``--resume``).

Determinism: every epoch starts by seeding all RNGs from (seed, epoch) and draws its batch order
from a generator seeded the same way (``seed_epoch``), so an epoch is a pure function of the
state at its start.
"""
from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, RandomSampler, Sampler

from layerscope.analysis import modes
from layerscope.core import values
from layerscope.core.errors import UserError
from layerscope.training import checkpoint as ckpt
from layerscope.training import distributed as dist_run
from layerscope.training.comm import gradient_bytes
from layerscope.training.config import TrainConfig
from layerscope.training.data import datasets
from layerscope.training.recipes import lookup, loss_function, make_optimizer, make_scheduler

DRY_RUN_BATCH = 8  # samples in a dry run's one batch unless --batch-size says otherwise
Stages = Callable[[str, int, "int | None"], None]  # (what, done, total): ``train``'s stages


def seed_epoch(seed: int, epoch: int) -> torch.Generator:
    s = values.derived_seed(seed, epoch)
    torch.manual_seed(s)
    random.seed(s)
    np.random.seed(s % 2**32)
    return torch.Generator().manual_seed(s)


class LoopRun:
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
                                         optimizer_keys(state["optimizer"], names),
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
            optimizer = optimizer_keys(
                get_optimizer_state_dict(self.model, self.optimizer, options=full), names)
        return {"model": model, "optimizer": optimizer, "world_size": self.world,
                "scheduler": self.scheduler.state_dict() if self.scheduler else None,
                "scaler": self.scaler.state_dict() if self.scaler else None,
                "epoch": epoch, "step": self.global_step, "rng": ckpt.rng_state(),
                "batch": batch, "partial": partial,
                "config": plain_value(self.config.to_dict()), "history": self.history,
                "classes": list(self.classes), "recipe": self.recipe.name}

    def loader(self, epoch: int, skip_batches: int = 0) -> DataLoader:
        gen = seed_epoch(self.config.seed, epoch)
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
            sampler = SkipBatch(sampler, skip_batches * self.batch_size)
        return DataLoader(self.train_set, batch_size=self.batch_size, sampler=sampler,
                          num_workers=c.num_workers, pin_memory=c.pin_memory and self.cuda,
                          persistent_workers=False, drop_last=False,
                          worker_init_fn=worker_init, generator=gen)

    def val_loader(self) -> DataLoader:
        # a dry run validates one batch of the training batch size: a full evaluation batch
        # (1000 images of 224x224 through ResNet-50) took minutes and 13 GB
        size = self.batch_size if self.config.dry_run else self.recipe.eval_batch_size
        return DataLoader(self.val_set, batch_size=size, num_workers=self.config.num_workers)


def optimizer_keys(state: dict[str, Any], keys: Any) -> dict[str, Any]:
    """An optimizer state dict with its parameters renamed: ``keys`` maps the current keys
    (parameter names, as FSDP's full state dict has them, or the indices a plain optimizer's
    has) to the others. Checkpoints keep the indices, so one process resumes FSDP's as well."""
    def key(k):
        return keys[k] if isinstance(keys, dict) else (keys[k] if isinstance(k, int) else k)

    return {"state": {key(k): v for k, v in state.get("state", {}).items()},
            "param_groups": [{**g, "params": [key(k) for k in g["params"]]}
                             for g in state.get("param_groups", [])]}


class SkipBatch(Sampler):
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


def worker_init(worker_id: int) -> None:
    s = torch.initial_seed() % 2**32
    random.seed(s)
    np.random.seed(s)


def plain_value(d: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
