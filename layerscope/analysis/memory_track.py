"""Where the memory goes: every tensor storage one inference pass or one training step creates,
counted once, with when it was created and freed, the phase and the module that created it, and
what it is (its kind). ``layerscope memory`` (``analysis.memory_report``) builds its result from
a ``StorageLog``.

- What is seen and when (storages, their lifetime and creating module): ``memory_log``'s
  ``StorageLog``.
- Kinds are given at the end, from what each storage turned out to be: parameters, buffers and
  inputs are registered before the run; ``.grad`` of a parameter after backward and after the
  step is a gradient; a tensor in the optimizer's state is optimizer state; the forward's output
  tensors are outputs; in training what forward created and was still alive when forward
  returned is an activation (saved for backward); everything else is a temporary.

A training step is ``train_step.step``, the body ``layerscope train`` runs:
``optimizer.zero_grad(set_to_none=...)``, forward, the loss (a classifier's cross-entropy, or
negative log-likelihood after ``log_softmax``, against int64 labels; any other output's sum:
backward starts from ones shaped like it), backward, ``optimizer.step()``. One step runs
untracked before it, so the optimizer's state exists (it is created lazily by the first step)
and the tracked step is a steady-state one.

Nothing is left on the model: its tensors are swapped for fake ones (static) or private copies
(measured) only for the run (``capture.swapped``), the train/eval flags are put back, and the
hooks and the mode are removed on exit.

A memory limit for a whole run (``--memory-limit``) is ``memory_limit.LimitGuard``; reading
the out-of-memory errors a run ends with, ``memory_oom``. Their public names stay importable
from here.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
from torch.utils import _pytree as pytree

from layerscope.analysis import modes, train_step
from layerscope.analysis.capture import ModuleTracker, input_tensors, swapped
from layerscope.analysis.memory_limit import LimitGuard  # noqa: F401 - the old import path
from layerscope.analysis.memory_log import (  # noqa: F401 - the old import path
    INFERENCE_PHASES,
    KINDS,
    OUTSIDE,
    TRAINING_PHASES,
    Storage,
    StorageLog,
    live_rows,
)
from layerscope.analysis.memory_oom import (  # noqa: F401 - the old import path
    caught_note,
    dump_cuda_snapshot,
    is_out_of_memory,
    out_of_memory_in,
    untracked_post_mortem,
    where_failed,
)
from layerscope.core.errors import UserError

_NEXT = dict(zip(TRAINING_PHASES, TRAINING_PHASES[1:]))  # the phase after each
# optimizer name -> builder; the names of analyze --optimizer (static.OPTIMIZER_STATE_FACTOR)
OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01),
    "momentum": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
    "adam": lambda params: torch.optim.Adam(params),
    "adamw": lambda params: torch.optim.AdamW(params),
    "adadelta": lambda params: torch.optim.Adadelta(params),
}




def param_owners(model: nn.Module) -> dict[int, tuple[str, str]]:
    """id(tensor) -> (owning module's name, "parameters" or "buffers"); a shared tensor is
    charged to its first owner."""
    owners: dict[int, tuple[str, str]] = {}
    for name, m in model.named_modules(remove_duplicate=True):
        for table, kind in ((m._parameters, "parameters"), (m._buffers, "buffers")):
            for t in table.values():
                if t is not None:
                    owners.setdefault(id(t), (name, kind))
    return owners


@dataclass
class Run:
    """What one tracked run gives: the log and the names the tables show."""
    log: StorageLog
    phases: tuple[str, ...]
    notes: list[str] = field(default_factory=list)


def _outputs(out) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


class _Step:
    """One inference pass or training step of ``model`` on ``args``/``kwargs``, tracked or not."""

    def __init__(self, model: nn.Module, args, kwargs, training: bool,
                 optimizer: torch.optim.Optimizer | None, set_to_none: bool):
        self.model, self.args, self.kwargs = model, args, kwargs
        self.training, self.optimizer, self.set_to_none = training, optimizer, set_to_none
        self.owners = param_owners(model)
        self.loss_name: str | None = None  # train_step's loss, once the outputs are seen
        self.labels: torch.Tensor | None = None

    def run(self, log: StorageLog | None) -> None:
        def phase(name: str) -> None:
            if log is not None:
                log.enter_phase(name)

        if not self.training:
            phase("forward")
            with torch.no_grad():
                out = self.model(*self.args, **self.kwargs)
            if log is not None:
                log._purge()
                self._classify_forward(log, _outputs(out), activations=False)
                log.event()
            return

        def done(name: str, value) -> None:
            if log is None:
                return
            if name == "forward":
                log.enter_phase("loss")
                self._classify_forward(log, _outputs(value), activations=True)
            elif name == "optimizer":
                log._purge()
                self._classify_state(log)
                log.event()
            else:
                log.enter_phase(_NEXT[name])
                if name == "backward":
                    self._classify_state(log)

        phase("zero_grad")
        train_step.step(self.model, self.args, self.kwargs, self._loss, self.optimizer,
             set_to_none=self.set_to_none, done=done)

    def _loss(self, out):
        """The loss of ``train_step``: a classifier's against its labels (made in the first,
        untracked step and kept: they are the batch's, alive through the step), else a
        gradient of ones per output."""
        diff = [t for t in _outputs(out) if t.requires_grad]
        if not diff:
            raise UserError("no output of the model's forward requires a gradient: there is "
                            "no backward to track; use mode inference", arguments="mode")
        if self.loss_name is None:
            self.loss_name = train_step.classifier_loss(out) or ""
        if self.loss_name:
            if self.labels is None:
                self.labels = train_step.labels_for(out)
            return train_step.LOSSES[self.loss_name](out, self.labels)
        return diff, [torch.ones_like(t) for t in diff]

    def _classify_forward(self, log: StorageLog, outs: list[torch.Tensor],
                          activations: bool) -> None:
        for t in outs:
            s = log.known(t)
            if s is not None and s.kind is None:
                s.kind = "outputs"
        if activations:
            for s in log.live.values():
                if s.kind is None and s.phase == "forward":
                    s.kind = "activations"

    def _classify_state(self, log: StorageLog) -> None:
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                module = self.owners.get(id(p), ("", ""))[0]
                if p.grad is not None:
                    log.add(p.grad, module, "gradients")
                for v in self.optimizer.state.get(p, {}).values():
                    if isinstance(v, torch.Tensor):
                        log.add(v, module, "optimizer_state")


def _register_resident(log: StorageLog, step: _Step, in_tensors: list[torch.Tensor]) -> None:
    """What exists before the tracked step: parameters, buffers, inputs and, after the warm-up
    step, gradients and optimizer states."""
    for t in list(step.model.parameters()) + list(step.model.buffers()):
        module, kind = step.owners.get(id(t), ("", "parameters"))
        log.add(t, module, kind)
    for t in in_tensors + ([step.labels] if step.labels is not None else []):
        log.add(t, "", "inputs")
    if step.optimizer is not None:
        step._classify_state(log)


def make_optimizer(optimizer: str | Callable[[Any], torch.optim.Optimizer], params):
    """The optimizer ``optimizer`` names (``OPTIMIZERS``) or the user's factory's, over
    ``params``."""
    if callable(optimizer):
        made = optimizer(params)
        if not isinstance(made, torch.optim.Optimizer):
            raise UserError(f"optimizer must return a torch.optim.Optimizer given the "
                            f"parameters, got {type(made).__name__}", arguments="optimizer")
        return made
    return OPTIMIZERS[optimizer](params)


def track(model: nn.Module, args: list, kwargs: dict, *, training: bool,
          optimizer: str | Callable[[Any], torch.optim.Optimizer] = "adam",
          set_to_none: bool = True, replace: Callable[[torch.Tensor], torch.Tensor],
          make_input: Callable[[Any], Any], fake_mode=None, around=None) -> Run:
    """Track one pass (``training``: one steady-state step) of ``model`` with its tensors
    swapped by ``replace`` and its inputs made by ``make_input`` (``capture.map_inputs``'s
    leaf); ``fake_mode``: run inside this ``FakeTensorMode`` (static); ``around``: a function
    returning a context manager entered around the tracked step only."""
    from layerscope.analysis.capture import map_inputs

    inside = fake_mode if fake_mode is not None else contextlib.nullcontext()
    tracker = ModuleTracker(model, None, tag_autograd=training)
    log = StorageLog(tracker)
    flags = modes.set_mode(model, training)
    try:
        with swapped(model, replace):
            with inside:
                run_args, run_kwargs = map_inputs((tuple(args), kwargs), make_input)
                trained = [p for p in model.parameters() if p.requires_grad]
                if training and not trained:
                    raise UserError("no parameter of the model requires a gradient (all "
                                    "frozen?): a training step has nothing to train; use mode "
                                    "inference", arguments="mode")
                opt = make_optimizer(optimizer, trained) if training else None
                step = _Step(model, run_args, run_kwargs, training, opt, set_to_none)
                if training:
                    step.run(None)  # the optimizer's state exists after a first step
                _register_resident(log, step, input_tensors(run_args, run_kwargs))
                log.event()
                with around() if around else contextlib.nullcontext(), tracker, log:
                    step.run(log)
                log._purge()
                for s in log.storages:
                    if s.kind is None:
                        s.kind = "temporaries"
    finally:
        modes.restore(flags)
    if not training:
        return Run(log, INFERENCE_PHASES)
    return Run(log, TRAINING_PHASES, [
        f"the loss is {step.loss_name.replace('_', '-')} against int64 labels (one a sample, "
        "alive all step), as layerscope train computes a classifier's; the outputs and the "
        "loss stay alive to the step's end" if step.loss_name else
        "the loss is the outputs' sum: backward starts from ones shaped like each output "
        "(freed after backward); the outputs stay alive to the step's end"])
