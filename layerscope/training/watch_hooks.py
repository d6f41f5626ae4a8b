"""The hooks ``training.watch.Watch`` installs, for its duration only, at the seams every PyTorch
training loop goes through (what each phase is, and why that seam: ``training.watch``).

Every hook and patched attribute is queued for its exact removal (``_installed``, undone in
reverse by ``Watch.stop``). ``WatchHooks`` is a part of ``Watch`` (its state is the Watch's, set
in ``Watch._reset``).
"""
from __future__ import annotations

import multiprocessing.process
import os
import sys
import threading
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
from torch.nn.modules import module as _module
from torch.nn.modules.loss import _Loss
from torch.optim import optimizer as _optim
from torch.utils.data import dataloader as _dataloader
from torch.utils.data._utils.worker import _worker_loop

from layerscope.training.dataloading import patch
from layerscope.training.watch_layers import FunctionMode
from layerscope.training.watch_steps import EVAL, quiet_step_limit

# torch.compile's OptimizedModule warns on every call while global module hooks exist
_COMPILE_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"
# the phase of an optimizer closure's own code (a trainer's work around forward and backward)
CLOSURE = "trainer"


def _batch_size(batch: Any) -> tuple[int, int]:
    """(samples, tokens) of a batch (a loader's, or a forward's arguments): the first
    dimension of its first tensor, and B x T where that tensor holds token ids (integers of
    shape [B, T], a language model's input); (0, 0) if there is no tensor."""
    for _ in range(4):  # tuple/list/dict nesting of (inputs, targets) batches
        if isinstance(batch, torch.Tensor):
            if not batch.dim():
                return 1, 0
            ids = batch.dim() == 2 and not (batch.is_floating_point() or batch.is_complex()
                                            or batch.dtype == torch.bool)
            return int(batch.shape[0]), int(batch.numel()) if ids else 0
        if isinstance(batch, (list, tuple)) and batch:
            batch = batch[0]
        elif isinstance(batch, dict) and batch:
            batch = next(iter(batch.values()))
        else:
            return 0, 0
    return 0, 0


def to_device(args: tuple, kwargs: dict) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` names a device other than the CPU (a device, a
    device string or index, or a tensor on a device)."""
    for a in (*args, kwargs.get("device")):
        if isinstance(a, torch.device):
            return a.type != "cpu"
        if isinstance(a, str):
            return not a.startswith("cpu")
        if isinstance(a, int) and not isinstance(a, bool):
            return True
        if isinstance(a, torch.Tensor):
            return not a.is_cpu
    return False


def _script_frame() -> FrameType | None:
    """The innermost frame of code that is neither torch's nor layerscope's: the script's code
    that called into torch (``optimizer.step()``)."""
    skip = (os.path.dirname(torch.__file__) + os.sep,
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep)
    frame: FrameType | None = sys._getframe(1)
    for _ in range(30):
        if frame is None or not frame.f_code.co_filename.startswith(skip):
            return frame
        frame = frame.f_back
    return None


def _optimizer_name(opt: torch.optim.Optimizer, number: int,
                    frame: FrameType | None) -> tuple[str, str]:
    """(the variable the code that called ``step()`` (``frame``) holds the optimizer in, its
    locals then its module's globals, else "", and ``Class #number``: first-step order)."""
    if frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for name, value in scope.items():
                if value is opt and not name.startswith("_"):
                    return name, f"{type(opt).__name__} #{number}"
    return "", f"{type(opt).__name__} #{number}"


class WatchHooks:
    """The hooks and patched attributes of a Watch (a part of ``Watch``)."""

    # ---- install --------------------------------------------------------------------
    def _install(self) -> None:
        handles = [_optim.register_optimizer_step_pre_hook(self._opt_pre),
                   _optim.register_optimizer_step_post_hook(self._opt_post),
                   _module.register_module_forward_pre_hook(self._fwd_pre)]
        # global hooks run in the order registered: a layer's time starts after its phase's and
        # ends before it, so a layer's time is within the phase's (never above 100% of it)
        if self.layers:
            handles += [_module.register_module_forward_pre_hook(self._layers.pre),
                        _module.register_module_forward_hook(self._layers.post,
                                                             always_call=True)]
        if self.functions:
            mode = FunctionMode(self._layers)
            mode.__enter__()
            self._installed.append(lambda: mode.__exit__(None, None, None))
        handles.append(_module.register_module_forward_hook(self._fwd_post, always_call=True))
        for h in handles:
            self._installed.append(h.remove)
        self._patch(torch.autograd, "_engine_run_backward",
                    self._backward(torch.autograd._engine_run_backward))
        iter_cls = _dataloader._BaseDataLoaderIter
        self._patch(iter_cls, "__next__", self._data_next(iter_cls.__next__))
        loader_cls = _dataloader.DataLoader
        self._patch(loader_cls, "__iter__", self._new_epoch(loader_cls.__iter__))
        process_cls = multiprocessing.process.BaseProcess
        self._patch(process_cls, "start", self._child_start(process_cls.start))
        self._patch(threading, "excepthook", quiet_step_limit(threading.excepthook))
        self._ignore_warning(_COMPILE_HOOKS_WARNING)
        if self.what_if is not None:
            self.what_if.seen.clear()
            self.what_if.install(self._patch, self._installed.append)

    def _ignore_warning(self, message: str) -> None:
        """Ignore torch's warning ``message`` (a regular expression) while the hooks are
        installed: it is about our hooks, not the script's code."""
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
        entry = warnings.filters[0]

        def undo() -> None:
            if entry in warnings.filters:
                warnings.filters.remove(entry)
                mutated = getattr(warnings, "_filters_mutated", None)
                if mutated is not None:  # cached "ignore" decisions are forgotten
                    mutated()
        self._installed.append(undo)
        if torch.cuda.is_available():
            self._patch(torch.Tensor, "to", self._h2d(torch.Tensor.to, always=False))
            self._patch(torch.Tensor, "cuda", self._h2d(torch.Tensor.cuda, always=True))

    def _patch(self, owner: Any, attr: str, replacement: Any) -> None:
        """Set ``owner.attr`` and queue its exact restoration (deleted again when it was only
        inherited, so the class dict ends as it began)."""
        self._installed.append(patch(owner, attr, replacement))

    # ---- module forwards (hot path first) -------------------------------------------
    def _fwd_pre(self, module: torch.nn.Module, args: Any) -> None:
        if self._depth:  # a nested module call: the outermost one is being timed
            self._depth += 1
            return
        if self.model is not None and module is not self.model:
            return
        self._depth = 1
        if self._stack and self._stack[-1][0] == "data":
            self._fwd_phase = None  # a transform in Dataset.__getitem__: the batch's own time
            return
        if self._bwd_depth:  # torch.utils.checkpoint recomputing a segment: backward's time
            self._fwd_phase = None
            return
        if not torch.is_grad_enabled():
            self._fwd_phase = EVAL
        else:
            self._fwd_phase = "loss" if isinstance(module, _Loss) else "forward"
        self._enter(self._fwd_phase)
        if self._fwd_phase == "forward":
            self._take_batch(module, args)

    def _take_batch(self, module: torch.nn.Module, args: Any) -> None:
        """A training forward of the model (the first module called outermost) takes one
        batch: the oldest training batch fetched and not taken yet. A forward that finds none
        (a second call on the same batch) takes nothing; with no DataLoader batch seen at all
        (batches made by the script: nanoGPT's ``get_batch``), its batch is its first tensor
        argument's."""
        if self._sample_module is None:
            self._sample_module = (id(module), type(module).__name__)
            self._sample_model = module
        self._seen.forward(module, args)  # every module called outermost: which is the model
        if self._sample_module[0] != id(module):
            return
        if self._fetched:
            samples, tokens = self._fetched.popleft()
        elif self._loader_seen:
            return
        else:
            samples, tokens = _batch_size(args)
            self._samples_from_forward = self._samples_from_forward or bool(samples)
        self._samples += samples
        self._tokens += tokens

    def _fwd_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        depth = self._depth
        if depth > 1:
            self._depth = depth - 1
        elif depth == 1:
            self._depth = 0
            if self._fwd_phase is not None:
                self._exit(self._fwd_phase)

    # ---- optimizer steps ------------------------------------------------------------
    def _opt_pre(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> Any:
        if self.optimizer is not None and opt is not self.optimizer:
            return None
        ledger = self.ledger
        ledger.opt_seen = True  # (before a closure's backward can end a step)
        self._opt_depth += 1
        new = None
        if self._opt_depth == 1:
            key = id(opt)
            if key not in ledger.opt_ids:
                frame = _script_frame()
                ledger.add_optimizer(key, _optimizer_name(opt, len(ledger.opt_ids) + 1, frame))
                self._seen.optimizer_step(opt, frame)
                del frame
            self._opt_now = ledger.opt_ids.index(key)
            self._enter("optimizer")
            self._opt_mark = (self._gen, self._acc.get("optimizer", 0.0))
            if len(args) > 1 and callable(args[1]):  # (the optimizer, its closure)
                new = (args[0], self._closure(args[1]), *args[2:]), kwargs
            elif callable(kwargs.get("closure")):
                new = args, {**kwargs, "closure": self._closure(kwargs["closure"])}
        return new

    def _closure(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The closure given to ``optimizer.step``, its own code timed apart (forward, loss and
        backward inside it stay theirs): a trainer's work, not the optimizer's."""
        def closure(*args: Any, **kwargs: Any) -> Any:
            self._enter(CLOSURE)
            try:
                return fn(*args, **kwargs)
            finally:
                self._exit(CLOSURE)
        closure.__wrapped__ = fn  # type: ignore[attr-defined]
        return closure

    def _opt_post(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if (self.optimizer is not None and opt is not self.optimizer) or not self._opt_depth:
            return
        self._opt_depth -= 1
        if self._opt_depth:
            return
        self._exit("optimizer")
        gen, before = self._opt_mark
        spent = self._acc.get("optimizer", 0.0) - (before if gen == self._gen else 0.0)
        i = self._opt_now
        self._opt_step[i] = self._opt_step.get(i, 0.0) + spent
        self._opt_in.append(i)
        self.ledger.opt_counts[i] += 1
        if self.step_on == "backward":
            return
        self._group_step(i)

    # ---- data, processes, copies ----------------------------------------------------
    def _data_next(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def __next__(it: Any) -> Any:
            phase = "data" if torch.is_grad_enabled() else EVAL
            self._enter(phase)
            try:
                batch = fn(it)
            finally:
                self._exit(phase)
            if phase == "data":
                self._loader_seen = True
                self._fetched.append(_batch_size(batch))
                self._train_data.add(id(it._dataset))
            return batch
        __next__.__wrapped__ = fn  # type: ignore[attr-defined]
        return __next__

    def _new_epoch(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """A new pass over a loader that gave training batches before ends an epoch. (Not its
        ``StopIteration``: loaders that fetch one batch ahead, as accelerate's do, reach it one
        step before the epoch's last.)"""
        def __iter__(loader: Any) -> Any:
            if torch.is_grad_enabled() and id(loader.dataset) in self._train_data:
                self.ledger.close_epoch()
            return fn(loader)
        __iter__.__wrapped__ = fn  # type: ignore[attr-defined]
        return __iter__

    def _child_start(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``multiprocessing`` processes the script starts (``Process.start``; also what
        ``torch.multiprocessing.spawn`` calls) are counted: their training is not measured
        here. DataLoader workers are the loader's, not the script's."""
        def start(process: Any) -> Any:
            if getattr(process, "_target", None) is not _worker_loop:
                self.children += 1
            return fn(process)
        start.__wrapped__ = fn  # type: ignore[attr-defined]
        return start

    def _h2d(self, fn: Callable[..., Any], always: bool) -> Callable[..., Any]:
        """``Tensor.cuda`` (``always``) or ``Tensor.to`` timed as ``h2d`` when it moves a CPU
        tensor to a device; a dtype cast or a CPU tensor staying on the CPU is not a copy."""
        def copy(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if not tensor.is_cpu or not (always or to_device(args, kwargs)):
                return fn(tensor, *args, **kwargs)
            self._enter("h2d")
            try:
                return fn(tensor, *args, **kwargs)
            finally:
                self._exit("h2d")
        copy.__wrapped__ = fn  # type: ignore[attr-defined]
        return copy

    # ---- backward -------------------------------------------------------------------
    def _backward(self, engine: Callable[..., Any]) -> Callable[..., Any]:
        """The engine entry timed as ``backward``. With ``layers``, each autograd node's time is
        charged to the module whose forward made it (``LayerClock.backward_start``; the node
        hooks live on this backward's graph only). An outermost call that fills ``.grad``
        (``backward()``; not ``torch.autograd.grad``, which returns the gradients) may end a
        step (``_backward_done``)."""
        def backward(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
            self._bwd_depth += 1
            self._enter("backward")
            timed = self._layers.backward_start(t_outputs, self._cuda) if self.layers else None
            try:
                result = engine(t_outputs, *args, **kwargs)
            finally:
                if timed is not None:
                    self._layers.backward_end(*timed)
                self._exit("backward")
                self._bwd_depth -= 1
            if not self._bwd_depth and kwargs.get("accumulate_grad", True):
                self._backward_done()
            return result
        backward.__wrapped__ = engine  # type: ignore[attr-defined]
        return backward
