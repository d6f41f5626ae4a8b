"""``layerscope memory SCRIPT.py``: the memory of one training step of the user's own script, as
the script runs it (its model, optimizer, loss, data), with real tensors.

``StepMemory`` is a context manager the script runs inside (``training.script_runner.execute``,
as ``layerscope run`` runs it). Through global hooks (and, during the tracked step, a forward
pre-hook on the model, to see keyword arguments; removed after it), nothing of the script
changed:

- the optimizer is the first whose ``step()`` runs; the model is the first module called
  (outermost, gradients enabled) that holds a parameter it steps (not a transform the loader
  calls, nor a loss module);
- the first optimizer step is the warm-up (the optimizer's state exists after it); from its end
  to the end of the next step of the same optimizer, every tensor storage is tracked by
  ``analysis.memory_log.StorageLog`` (a dispatch mode: each storage counted once, with its
  module and phase); the script is then stopped cleanly (``watch.StepLimit``, as
  ``run --steps`` stops it);
- phases: ``data`` (the loop's code before the forward: the batch, ``zero_grad``, copies to the
  device), ``forward`` (the model's outermost call), ``loss`` (from its return to backward),
  ``backward`` (``torch.autograd``'s engine entry, and what follows it until the optimizer
  steps: gradient clipping), ``optimizer``;
- kinds: parameters, buffers, gradients and optimizer state known before the step are
  resident; what the ``data`` phase made and is alive when the forward starts, and the
  forward's tensor arguments, are inputs; the forward's outputs are outputs; what forward made
  and is alive when it returns is activations; gradients and optimizer states are read from
  the optimizer before and after its step; the rest is temporaries.

On CUDA (the model's parameters there), ``torch.cuda``'s own statistics are read around the
step too (``cuda_figures``): allocated and reserved peaks, fragmentation (reserved minus
allocated) and what the driver reports in use.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as _module
from torch.optim import optimizer as _optim

from layerscope.analysis.capture import ModuleTracker
from layerscope.analysis.capture.tensors import storage_key, tensors
from layerscope.analysis.memory_cuda import cuda_figures, fill_cuda
from layerscope.analysis.memory_log import StorageLog
from layerscope.analysis.memory_track import Run, param_owners
from layerscope.core.records.memory import MemoryReport, Reconciliation

PHASES = ("data", "forward", "loss", "backward", "optimizer")


_FRESH = (torch.ops.aten.lift_fresh.default, torch.ops.aten.lift_fresh_copy.default)


class _StepLog(StorageLog):
    """``StorageLog`` for a step in the middle of a script: an op's output that shares the
    storage of an argument made before the step and never counted (a batch sliced from a
    dataset tensor, an in-place op on it) is that older storage, not a new one the step made,
    and is not counted; a tensor made from Python data during the step is."""

    _older: frozenset[int] = frozenset()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # lift_fresh: a tensor just made from Python data (torch.tensor, from_numpy, a
        # collated batch of labels) enters here, new
        if func not in _FRESH:
            self._older = frozenset(k for k in map(storage_key, tensors((args, kwargs or {})))
                                    if k not in self.live)
        try:
            return super().__torch_dispatch__(func, types, args, kwargs)
        finally:
            self._older = frozenset()

    def add(self, t: torch.Tensor, module: str, kind: str | None = None):
        if storage_key(t) in self._older:
            return None
        return super().add(t, module, kind)


class StepMemory:
    """Track the script's second training step (see the module docstring); ``report()`` once
    the script has stopped. Steps are those of the first optimizer that steps."""

    def __init__(self, name: str) -> None:
        from layerscope.analysis.memory_usage import PeakRss

        self.name = name
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.steps = 0  # the first optimizer's completed steps
        self.log: StorageLog | None = None
        self.done = False
        self.why: str | None = None  # why no step is tracked, where the script goes on
        self.inputs: list[torch.Tensor] = []
        self.cuda: dict[str, int] | None = None
        self.cuda_device: torch.device | None = None
        self._tracking = contextlib.ExitStack()
        self._undo: list[Callable[[], None]] = []
        self._depth = 0  # module calls in progress
        self._seen: dict[int, torch.nn.Module] = {}
        self._rss = PeakRss()
        self._owners: dict[int, tuple[str, str]] = {}

    # ---- the hooks ------------------------------------------------------------------
    def __enter__(self) -> StepMemory:
        handles = [_module.register_module_forward_pre_hook(self._pre),
                   _module.register_module_forward_hook(self._post, always_call=True),
                   _optim.register_optimizer_step_pre_hook(self._opt_pre),
                   _optim.register_optimizer_step_post_hook(self._opt_post)]
        self._undo += [h.remove for h in handles]
        engine = torch.autograd._engine_run_backward

        def backward(*args, **kwargs):
            if self.log is not None and not self.done and self.log.phase != "backward":
                self.log.enter_phase("backward")
            return engine(*args, **kwargs)

        torch.autograd._engine_run_backward = backward
        self._undo.append(lambda: setattr(torch.autograd, "_engine_run_backward", engine))
        # a training loop run in a thread: the StepLimit that stops the script after the
        # tracked step ends that thread quietly, as under layerscope run (python would print
        # its traceback as the thread's uncaught exception)
        import threading

        from layerscope.training.watch import quiet_step_limit

        hook = threading.excepthook
        threading.excepthook = quiet_step_limit(hook)
        self._undo.append(lambda: setattr(threading, "excepthook", hook))
        return self

    def __exit__(self, *exc) -> bool:
        from layerscope.training.watch import StepLimit

        self._stop()
        for undo in reversed(self._undo):
            undo()
        self._undo = []
        return exc[0] is not None and issubclass(exc[0], StepLimit)

    def _pre(self, module: torch.nn.Module, args: tuple) -> None:
        self._depth += 1
        if self._depth > 1 or not torch.is_grad_enabled():
            return
        if self.model is None:  # the candidates: outermost training calls before a step
            if len(self._seen) < 64 and id(module) not in self._seen:
                self._seen[id(module)] = module
            return
        log = self.log
        if module is not self.model or log is None or self.done:
            return
        log._purge()
        for s in log.live.values():  # the batch and its labels, as loaded and moved
            if s.kind is None and s.phase == "data":
                s.kind, s.module = "inputs", ""
        log.enter_phase("forward")

    def _model_pre(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        """The model's own pre-hook (a global one sees no keyword arguments): its tensor
        arguments are inputs, in the outermost training call being tracked."""
        log = self.log
        if self._depth != 1 or log is None or self.done or not torch.is_grad_enabled():
            return
        for t in tensors((args, kwargs)):
            log.add(t, "", "inputs")
            self.inputs.append(t)

    def _post(self, module: torch.nn.Module, args: tuple, out: Any) -> None:
        self._depth -= 1
        log = self.log
        if self._depth or module is not self.model or log is None or log.phase != "forward" \
                or self.done:
            return
        log._purge()
        for t in tensors(out if isinstance(out, (tuple, list)) else [out]):
            s = log.known(t)
            if s is not None and s.kind is None:
                s.kind = "outputs"
        for s in log.live.values():
            if s.kind is None and s.phase == "forward":
                s.kind = "activations"
        log.enter_phase("loss")

    def _opt_pre(self, opt: torch.optim.Optimizer, args, kwargs) -> None:
        if self.optimizer is None:
            self.optimizer = opt
        if opt is self.optimizer and self.log is not None:
            self.log.enter_phase("optimizer")
            self._classify_state()

    def _opt_post(self, opt: torch.optim.Optimizer, args, kwargs) -> None:
        from layerscope.training.watch import StepLimit

        if opt is not self.optimizer or self.done:
            return
        self.steps += 1
        if self.steps == 1:
            self._start()
            return
        log = self.log
        assert log is not None
        log._purge()
        self._classify_state()
        log.event()
        self._stop()
        raise StepLimit

    # ---- tracking -------------------------------------------------------------------
    def _start(self) -> None:
        """After the warm-up step: the resident set, then every op until the next step ends."""
        self.model = _model_of(self.optimizer, self._seen.values())
        self._seen = {}
        if self.model is None:  # no forward of the optimizer's parameters: nothing to track
            self.done = True
            self.why = ("no module called (outermost, with gradients on) holds a parameter of "
                        "the first optimizer that stepped: the model's forward ran outside "
                        "module calls (a forward() called directly, or functional code), so "
                        "its step has no module to charge memory to")
            return
        tracker = ModuleTracker(self.model, None, tag_autograd=True)
        log = _StepLog(tracker)
        self._owners = param_owners(self.model)
        for t in list(self.model.parameters()) + list(self.model.buffers()):
            module, kind = self._owners.get(id(t), ("", "parameters"))
            log.add(t, module, kind)
        self.log = log
        handle = self.model.register_forward_pre_hook(self._model_pre, with_kwargs=True)
        self._tracking.callback(handle.remove)
        self._classify_state()
        log.event()
        log.phase = "data"
        self.cuda_device = _cuda_device(self.model)
        self._tracking.enter_context(self._rss())
        if self.cuda_device is not None:
            self._tracking.enter_context(cuda_figures(self.cuda_device, self._cuda_done))
        self._tracking.enter_context(tracker)
        self._tracking.enter_context(log)

    def _cuda_done(self, figures: dict[str, int]) -> None:
        self.cuda = figures

    def _stop(self) -> None:
        if self.done:
            return
        self.done = True
        self._tracking.close()
        if self.log is not None:
            self.log._purge()
            for s in self.log.storages:
                if s.kind is None:
                    s.kind = "temporaries"

    def _classify_state(self) -> None:
        log, opt = self.log, self.optimizer
        if log is None or opt is None:
            return
        for group in opt.param_groups:
            for p in group["params"]:
                module = self._owners.get(id(p), ("", ""))[0]
                if p.grad is not None:
                    log.add(p.grad, module, "gradients")
                for v in opt.state.get(p, {}).values():
                    if isinstance(v, torch.Tensor):
                        log.add(v, module, "optimizer_state")

    # ---- the result -----------------------------------------------------------------
    def tracked(self) -> bool:
        """Whether a whole step was tracked."""
        return self.log is not None and self.steps >= 2

    def report(self) -> MemoryReport:
        from layerscope.analysis.memory_usage import report_of_run
        from layerscope.core.environment import environment

        assert self.log is not None and self.optimizer is not None
        inputs = ", ".join(f"{'x'.join(map(str, t.shape))}:{str(t.dtype).removeprefix('torch.')}"
                           for t in self.inputs[:4])
        run = Run(self.log, PHASES)
        report = report_of_run(run, self.name, "training", inputs)
        report.measured_peak_bytes = report.peak_bytes
        report.batch_size = int(self.inputs[0].shape[0]) if self.inputs and \
            self.inputs[0].dim() else None
        report.optimizer = type(self.optimizer).__name__
        report.settings = {"mode": "training", "measure": True, "script": self.name}
        report.reconciliation = reconcile(run, self._rss, self.cuda)
        report.notes = [
            "measured: the script's second training step (the first optimizer step is the "
            "warm-up, so the optimizer's state exists), with its own model, optimizer, loss "
            "and data and real tensors; the script was stopped after it",
            "phases: data is the loop's code before the forward (the batch, zero_grad, copies "
            "to the device); backward runs until the optimizer steps (gradient clipping)",
            "inputs: what the data phase made that is alive when the forward starts, and the "
            "forward's tensor arguments (a slice of a tensor made before the step counts its "
            "whole storage)"]
        report.environment = environment()
        return report


def reconcile(run: Run, rss, cuda: dict[str, int] | None) -> Reconciliation:
    """The tracked peak beside what the process and, on CUDA, the caching allocator and the
    driver report, with the part no tracked storage explains named."""
    from layerscope.analysis.memory_usage import reconciliation_of

    rec = reconciliation_of(None, run, rss)
    if cuda is not None:
        fill_cuda(rec, cuda)
    return rec


def _model_of(opt: torch.optim.Optimizer | None, seen) -> torch.nn.Module | None:
    """The first module called (outermost, gradients on) that holds a parameter ``opt``
    steps: the model (a torchvision transform called by the loader, a loss module, are not)."""
    if opt is None:
        return None
    stepped = {id(p) for g in opt.param_groups for p in g["params"]}
    for module in seen:
        if any(id(p) in stepped for p in module.parameters()):
            return module
    return None


def _cuda_device(model: torch.nn.Module) -> torch.device | None:
    for p in model.parameters():
        if p.device.type == "cuda":
            return p.device
    return None
