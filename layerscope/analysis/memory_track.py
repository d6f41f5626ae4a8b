"""Where the memory goes: every tensor storage one inference pass or one training step creates,
counted once, with when it was created and freed, the phase and the module that created it, and
what it is (its kind). ``layerscope memory`` (``analysis.memory_report``) builds its result from
a ``StorageLog``.

How it is seen:

- A ``TorchDispatchMode`` sees every aten op's outputs; each output's storage (views share their
  base's storage: free) is counted once, by its identity (``untyped_storage()``'s handle, for
  fake and real tensors alike), with a ``StorageWeakRef`` telling when Python freed it. Frees are
  collected before each op, so the live set is exact at op granularity: event ``t`` is the
  ``t``-th op (or phase boundary) and the live bytes after it. A storage an op resized in place
  (``resize_``, an ``out=`` tensor) ends at its old size and starts again at the new one.
- The creating module: the innermost module whose forward is running (global forward hooks,
  ``capture.ModuleTracker``); in backward the module whose forward made the autograd node (the
  node's tag). Gradients and optimizer states are charged to the module owning their
  parameter; ops outside any module to "(loss)", "(optimizer)" or "(zero_grad)" in those
  phases, else to "" (the top level: the root module's own ops, the inputs).
- Kinds are given at the end, from what each storage turned out to be: parameters, buffers and
  inputs are registered before the run; ``.grad`` of a parameter after backward and after the
  step is a gradient; a tensor in the optimizer's state is optimizer state; the forward's output
  tensors are outputs; in training what forward created and was still alive when forward
  returned is an activation (saved for backward); everything else is a temporary.

A training step is the loop's body: ``optimizer.zero_grad(set_to_none=...)``, forward, the
loss (the outputs' sum: backward starts from ones shaped like each output), backward,
``optimizer.step()``. One step runs untracked before it, so the optimizer's state exists (it is
created lazily by the first step) and the tracked step is a steady-state one.

Nothing is left on the model: its tensors are swapped for fake ones (static) or private copies
(measured) only for the run (``capture.swapped``), the train/eval flags are put back, and the
hooks and the mode are removed on exit.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from layerscope.analysis.capture import AUTOGRAD_TAG, ModuleTracker, input_tensors, swapped
from layerscope.analysis.capture.tensors import storage_key, tensors
from layerscope.core.errors import UserError

INFERENCE_PHASES = ("forward",)
TRAINING_PHASES = ("zero_grad", "forward", "loss", "backward", "optimizer")
# the kinds, in the order tables list them
KINDS = ("parameters", "buffers", "gradients", "optimizer_state", "activations", "inputs",
         "outputs", "temporaries")
# what ops outside any module are charged to, by phase (elsewhere: "", the top level)
OUTSIDE = {"zero_grad": "(zero_grad)", "loss": "(loss)", "optimizer": "(optimizer)"}
# optimizer name -> builder; the names of analyze --optimizer (static.OPTIMIZER_STATE_FACTOR)
OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01),
    "momentum": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
    "adam": lambda params: torch.optim.Adam(params),
    "adamw": lambda params: torch.optim.AdamW(params),
}


@dataclass
class Storage:
    """One storage: its bytes, lifetime in events (alive at ``t`` when born <= t < died) and
    what created it."""
    nbytes: int
    born: int
    phase: str
    module: str
    ref: Any  # StorageWeakRef
    kind: str | None = None
    died: int | None = None

    def alive_at(self, t: int) -> bool:
        return self.born <= t and (self.died is None or self.died > t)


class StorageLog(TorchDispatchMode):
    """The storages of a run and the live total after every event (see the module's doc)."""

    def __init__(self, modules: ModuleTracker) -> None:
        super().__init__()
        self.modules = modules
        self.live: dict[int, Storage] = {}
        self.storages: list[Storage] = []
        self.timeline: list[tuple[int, str]] = []  # (live bytes, phase) after each event
        self.phase = "start"
        self.total = 0

    @property
    def t(self) -> int:
        return len(self.timeline)

    def _purge(self) -> None:
        dead = [k for k, s in self.live.items() if s.ref.expired()]
        for k in dead:
            s = self.live.pop(k)
            s.died = self.t
            self.total -= s.nbytes

    def add(self, t: torch.Tensor, module: str, kind: str | None = None) -> Storage | None:
        """Count ``t``'s storage if it is new (returns it), else give an unclassified known one
        ``kind`` (returns None)."""
        storage = t.untyped_storage()
        key = storage._cdata
        known = self.live.get(key)
        if known is not None and known.nbytes != storage.nbytes():
            # resized in place (resize_, an op's out= tensor): the old size ends here and the
            # new one starts, so that every event's live set keeps the sizes it had
            known.died = self.t
            self.total -= known.nbytes
            del self.live[key]
            kind, module = known.kind or kind, known.module
            known = None
        if known is not None:
            if kind is not None and known.kind is None:
                known.kind, known.module = kind, module
            return None
        s = Storage(storage.nbytes(), self.t, self.phase, module, StorageWeakRef(storage), kind)
        self.live[key] = s
        self.storages.append(s)
        self.total += s.nbytes
        return s

    def known(self, t: torch.Tensor) -> Storage | None:
        return self.live.get(storage_key(t))

    def event(self) -> None:
        """Close event ``t``: the live total after it, in the current phase."""
        self.timeline.append((self.total, self.phase))

    def enter_phase(self, phase: str) -> None:
        self._purge()
        self.event()
        self.phase = phase

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._purge()
        node = torch._C._current_autograd_node()
        module = node.metadata.get(AUTOGRAD_TAG, "") if node is not None \
            else self.modules.current() or OUTSIDE.get(self.phase, "")
        for t in tensors(out):
            self.add(t, module)
        self.event()
        return out

    def peak(self) -> tuple[int, int]:
        """(event, bytes) of the first event at the highest live total."""
        best_t, best = 0, -1
        for t, (nbytes, _) in enumerate(self.timeline):
            if nbytes > best:
                best_t, best = t, nbytes
        return best_t, max(best, 0)


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


def _flags(model: nn.Module) -> list[tuple[nn.Module, bool]]:
    return [(m, m.training) for m in model.modules() if hasattr(m, "training")]


def _outputs(out) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


class _Step:
    """One inference pass or training step of ``model`` on ``args``/``kwargs``, tracked or not."""

    def __init__(self, model: nn.Module, args, kwargs, training: bool,
                 optimizer: torch.optim.Optimizer | None, set_to_none: bool):
        self.model, self.args, self.kwargs = model, args, kwargs
        self.training, self.optimizer, self.set_to_none = training, optimizer, set_to_none
        self.owners = param_owners(model)

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
        phase("zero_grad")
        self.optimizer.zero_grad(set_to_none=self.set_to_none)
        phase("forward")
        out = self.model(*self.args, **self.kwargs)
        outs = _outputs(out)
        phase("loss")
        if log is not None:
            self._classify_forward(log, outs, activations=True)
        diff = [t for t in outs if t.requires_grad]
        if not diff:
            raise UserError("no output of the model's forward requires a gradient: there is "
                            "no backward to track; use mode inference", arguments="mode")
        grads = [torch.ones_like(t) for t in diff]
        phase("backward")
        torch.autograd.backward(diff, grads)
        del grads
        phase("optimizer")
        if log is not None:
            self._classify_state(log)
        self.optimizer.step()
        if log is not None:
            log._purge()
            self._classify_state(log)
            log.event()

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
    for t in in_tensors:
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
    flags = _flags(model)
    tracker = ModuleTracker(model, None, tag_autograd=training)
    log = StorageLog(tracker)
    try:
        model.train(training)
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
        for m, flag in flags:
            m.training = flag
    return Run(log, TRAINING_PHASES if training else INFERENCE_PHASES)


def live_rows(log: StorageLog, t: int) -> dict[tuple[str, str], int]:
    """(module, kind) -> bytes of the storages alive at event ``t`` (sums to the live total)."""
    rows: dict[tuple[str, str], int] = {}
    for s in log.storages:
        if s.alive_at(t):
            key = (s.module, s.kind or "temporaries")
            rows[key] = rows.get(key, 0) + s.nbytes
    return rows
