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

A training step is ``train_step.step``, the body ``layerscope train`` runs:
``optimizer.zero_grad(set_to_none=...)``, forward, the loss (a classifier's cross-entropy, or
negative log-likelihood after ``log_softmax``, against int64 labels; any other output's sum:
backward starts from ones shaped like it), backward, ``optimizer.step()``. One step runs
untracked before it, so the optimizer's state exists (it is created lazily by the first step)
and the tracked step is a steady-state one.

Nothing is left on the model: its tensors are swapped for fake ones (static) or private copies
(measured) only for the run (``capture.swapped``), the train/eval flags are put back, and the
hooks and the mode are removed on exit.
"""
from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from layerscope.analysis import modes, train_step
from layerscope.analysis.capture import (
    AUTOGRAD_TAG,
    ModuleTracker,
    input_tensors,
    swapped,
    tag_graph,
)
from layerscope.analysis.capture.tensors import storage_key, tensors
from layerscope.core.errors import UserError

INFERENCE_PHASES = ("forward",)
TRAINING_PHASES = ("zero_grad", "forward", "loss", "backward", "optimizer")
# the kinds, in the order tables list them
KINDS = ("parameters", "buffers", "gradients", "optimizer_state", "activations", "inputs",
         "outputs", "temporaries")
# what ops outside any module are charged to, by phase (elsewhere: "", the top level)
OUTSIDE = {"zero_grad": "(zero_grad)", "loss": "(loss)", "optimizer": "(optimizer)"}
_NEXT = dict(zip(TRAINING_PHASES, TRAINING_PHASES[1:]))  # the phase after each
# optimizer name -> builder; the names of analyze --optimizer (static.OPTIMIZER_STATE_FACTOR)
OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01),
    "momentum": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
    "adam": lambda params: torch.optim.Adam(params),
    "adamw": lambda params: torch.optim.AdamW(params),
    "adadelta": lambda params: torch.optim.Adadelta(params),
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


def live_rows(log: StorageLog, t: int) -> dict[tuple[str, str], int]:
    """(module, kind) -> bytes of the storages alive at event ``t`` (sums to the live total)."""
    rows: dict[tuple[str, str], int] = {}
    for s in log.storages:
        if s.alive_at(t):
            key = (s.module, s.kind or "temporaries")
            rows[key] = rows.get(key, 0) + s.nbytes
    return rows


# ---------------------------------------------------------------- a memory limit for a whole run
_ASKED = ("tried to allocate", "Tried to allocate")
_CPU_OOM = "DefaultCPUAllocator: can't allocate memory"


def is_out_of_memory(exc: BaseException) -> bool:
    """A real allocation failure: ``torch.OutOfMemoryError`` (CUDA), ``MemoryError``, or the
    ``RuntimeError`` torch's CPU allocator raises."""
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(exc, RuntimeError) and _CPU_OOM in str(exc))


def _error_name(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}".replace("builtins.", "")


def out_of_memory_in(exc: BaseException | None) -> BaseException | None:
    """The real out-of-memory error ``exc`` is, or has in its cause/context chain; None."""
    for _ in range(32):
        if exc is None or is_out_of_memory(exc):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def where_failed(exc: BaseException) -> tuple[str, str]:
    """(phase, module) of an error, read from its traceback once it was raised (nothing is
    tracked before): the innermost of ``optimizer.step()`` ("optimizer"), the autograd
    engine ("backward") and a module's call ("forward", "loss" for a loss module; the
    module named from the outermost module called, "" for that one); "other" outside them."""
    from torch.nn.modules.loss import _Loss

    sep = os.sep
    optim = f"torch{sep}optim{sep}"
    autograd = (f"torch{sep}autograd{sep}__init__.py", f"torch{sep}autograd{sep}graph.py")
    module_py = f"torch{sep}nn{sep}modules{sep}module.py"
    phase, calls = "other", []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if optim in code.co_filename:
            phase, calls = "optimizer", []
        elif code.co_filename.endswith(autograd):
            phase, calls = "backward", []
        elif code.co_filename.endswith(module_py) and code.co_name == "_call_impl":
            called = tb.tb_frame.f_locals.get("self")
            if isinstance(called, nn.Module):
                calls.append(called)
                phase = "loss" if isinstance(called, _Loss) else "forward"
        tb = tb.tb_next
    if not calls:
        return phase, ""
    names = {id(m): name for name, m in calls[0].named_modules(remove_duplicate=False)}
    return phase, names.get(id(calls[-1]), type(calls[-1]).__name__)


def untracked_post_mortem(exc: BaseException | None) -> dict[str, Any] | None:
    """The post-mortem of a real out-of-memory error in a run without ``--memory-limit``
    (None for any other end): the error, the bytes its message names and where it was raised
    (``where_failed``); nothing was tracked, so no live set (``live_bytes`` None)."""
    found = out_of_memory_in(exc)
    if found is None:
        return None
    phase, module = where_failed(found)
    return {"error": _error_name(found), "limit_bytes": None,
            "asked_bytes": _asked_bytes(str(found)), "op": None, "module": module,
            "phase": phase, "live_bytes": None, "by_module_kind": []}


def _asked_bytes(message: str) -> int | None:
    """The bytes an allocator's message says were asked: CUDA's "Tried to allocate 20.00 MiB",
    the CPU allocator's "you tried to allocate 4096 bytes"."""
    import re

    found = re.search(r"[Tt]ried to allocate (\d+(?:\.\d+)?) ?(bytes|[KMGT]iB)", message)
    if found is None:
        return None
    scale = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}[found.group(2)]
    return round(float(found.group(1)) * scale)


def _signature(x: Any) -> Any:
    """What an op's output sizes depend on, of one argument: a tensor's layout, or the value."""
    if isinstance(x, torch.Tensor):
        return (x.shape, x.stride(), x.dtype, x.device.type)
    return x


class LimitGuard(TorchDispatchMode):
    """``--memory-limit``: every tensor storage a whole run (a user's script, a recipe's
    training) creates, counted once while it lives, against ``limit`` bytes. An op whose new
    storages would take the live total above the limit raises ``torch.OutOfMemoryError`` (what
    a CUDA allocation failure raises, a ``RuntimeError``; torch's CPU allocator raises a plain
    ``RuntimeError``), so a script that catches out-of-memory errors behaves as on a GPU,
    before it runs: its new bytes are what the op's meta kernel
    gives for the same arguments (nothing is allocated for them); an op without a meta kernel
    (data-dependent shapes: ``nonzero``) runs, and is refused right after, its outputs dropped.
    Each refusal, and a real out-of-memory error (``post_mortem_of``), leaves a post-mortem:
    the live set at that moment by module and kind (``live_rows``'s rows), the op, module and
    phase that asked, and the bytes asked.

    What is counted: storages made by aten ops while the guard is on (tensors made before it,
    and memory outside torch's tensors, are not). The module is the innermost one whose
    forward is running (global forward hooks; in backward, the module whose forward made the
    autograd node); the phase is ``optimizer`` inside ``optimizer.step()``, ``backward`` in the
    autograd engine, ``forward`` inside a module's forward, else ``other``. Kinds are given at
    the failure: parameters and buffers of the modules called, their gradients, the state of
    the optimizers that stepped, the outermost forward's inputs and outputs, what a forward
    made with gradients on (activations), everything else temporaries."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.live: dict[int, Storage] = {}
        self.total = 0
        self.stack: list[str] = []
        self.names: dict[int, str] = {}
        self.roots: dict[int, Any] = {}  # id -> weakref of each outermost module called
        self.optimizers: list[Any] = []  # weakrefs
        self.inputs: set[int] = set()  # storages of the last outermost forward's inputs
        self.outputs: set[int] = set()
        self.opt_depth = 0
        self.post_mortems: list[dict[str, Any]] = []  # every refusal, in order
        # weak references: an exception holds its traceback's frames, and with them the
        # script's tensors; keeping it would keep them alive after the script caught it
        self._raised: list[tuple[Any, dict[str, Any]]] = []
        self._schemas: dict[Any, bool] = {}
        self._aliases: dict[Any, str] = {}  # op -> "view", "write" or "new" (its schema)
        self._purge_at = 1024  # dead entries are dropped when the table grows past this
        self._predicted: dict[tuple[Any, ...], int | None] = {}  # (op, signature) -> bytes
        self._undo: list[Callable[[], None]] = []

    # ---- install / remove --------------------------------------------------------
    def __enter__(self):
        from torch.nn.modules import module as _module
        from torch.optim import optimizer as _optim

        handles = [_module.register_module_forward_pre_hook(self._pre),
                   _module.register_module_forward_hook(self._post, always_call=True),
                   _optim.register_optimizer_step_pre_hook(self._opt_pre),
                   _optim.register_optimizer_step_post_hook(self._opt_post)]
        self._undo = [h.remove for h in handles]
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            while self._undo:
                self._undo.pop()()
            self.stack.clear()

    # ---- where the run is ----------------------------------------------------------
    def _pre(self, module, args):
        if not self.stack and id(module) not in self.names:
            self.roots[id(module)] = weakref.ref(module)
            for name, m in module.named_modules():
                self.names.setdefault(id(m), name)
        if not self.stack:
            self.inputs = {storage_key(t) for t in tensors(args)}
        self.stack.append(self.names.get(id(module), type(module).__name__))

    def _post(self, module, args, output):
        if not self.stack:
            return
        name = self.stack.pop()
        if torch.is_grad_enabled():
            tag_graph(output, name)
        if not self.stack:
            self.outputs = {storage_key(t) for t in tensors(output)}

    def _opt_pre(self, opt, args, kwargs):
        if not any(r() is opt for r in self.optimizers):
            self.optimizers.append(weakref.ref(opt))
        self.opt_depth += 1

    def _opt_post(self, opt, args, kwargs):
        self.opt_depth = max(self.opt_depth - 1, 0)

    def where(self) -> tuple[str, str]:
        """(phase, module) of the op running now."""
        node = torch._C._current_autograd_node()
        if self.opt_depth:
            return "optimizer", self.stack[-1] if self.stack else "(optimizer)"
        if node is not None:
            return "backward", node.metadata.get(AUTOGRAD_TAG, "")
        if self.stack:
            return "forward", self.stack[-1]
        return "other", ""

    # ---- counting --------------------------------------------------------------------
    def _purge(self) -> None:
        dead = [k for k, s in self.live.items() if s.ref.expired()]
        for k in dead:
            self.total -= self.live.pop(k).nbytes

    def _has_device(self, func) -> bool:
        known = self._schemas.get(func)
        if known is None:
            known = self._schemas[func] = any(a.name == "device"
                                              for a in func._schema.arguments)
        return known

    def _alias(self, func) -> str:
        """"view": every output is a view of an input (no new memory); "write": an output is
        an input written in place (an ``out=`` tensor may grow: checked after the op); "new"."""
        known = self._aliases.get(func)
        if known is None:
            infos = [r.alias_info for r in func._schema.returns]
            known = ("write" if any(i is not None and i.is_write for i in infos) else
                     "view" if infos and all(i is not None for i in infos) else "new")
            self._aliases[func] = known
        return known

    def _predict(self, func, args, kwargs) -> int | None:
        """The bytes of the new storages ``func`` would make (its meta kernel), or None."""
        alias = self._alias(func)
        if alias != "new":
            return 0 if alias == "view" else None
        # a training loop repeats its ops on the same shapes: the meta kernel (often Python
        # reference code) runs once per op and signature
        key = (func, *map(_signature, pytree.tree_leaves((args, kwargs))))
        try:
            return self._predicted[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable argument: no cache
            return self._meta_bytes(func, args, kwargs)
        if len(self._predicted) > 100_000:
            self._predicted.clear()
        found = self._predicted[key] = self._meta_bytes(func, args, kwargs)
        return found

    def _meta_bytes(self, func, args, kwargs) -> int | None:
        sizes: dict[int, int] = {}
        meta_in = False  # an op on the meta device (a model built there): no memory

        def meta(t: torch.Tensor) -> torch.Tensor:
            nonlocal meta_in
            meta_in = meta_in or t.is_meta
            m = t.to("meta")
            sizes[m.untyped_storage()._cdata] = m.untyped_storage().nbytes()
            return m

        try:
            margs, mkwargs = pytree.tree_map_only(torch.Tensor, meta, (args, kwargs))
            if self._has_device(func):
                meta_in = meta_in or str(kwargs.get("device")).startswith("meta")
                mkwargs = {**mkwargs, "device": torch.device("meta")}
            out = func(*margs, **mkwargs)
        except Exception:  # no meta kernel, data-dependent shapes: checked after the op
            return None
        new, seen = 0, set()
        for t in tensors(out) if not meta_in else ():
            s = t.untyped_storage()
            if s._cdata in seen:
                continue
            seen.add(s._cdata)
            new += max(s.nbytes() - sizes[s._cdata], 0) if s._cdata in sizes else s.nbytes()
        return new

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(isinstance(t, FakeTensor) for t in tensors((args, kwargs))):
            # fake tensors (a static count the run makes, such as train's FLOPs of its
            # step) hold no memory; their meta sizes are not asked for (a fake tensor moved
            # to the meta device outside its mode hangs)
            return func(*args, **kwargs)
        # the total counts storages freed since the last purge: exact once purged, so a
        # purge comes before any refusal (and when the table has grown)
        if len(self.live) > self._purge_at:
            self._purge()
            self._purge_at = max(1024, 2 * len(self.live))
        need = self._predict(func, args, kwargs)
        if need and self.total + need > self.limit:
            self._purge()
            if self.total + need > self.limit:
                self._refuse(func, need)
        out = func(*args, **kwargs)
        added = self._count(out)
        if need is None and self.total > self.limit:
            self._purge()
            if self.total > self.limit:
                del out  # the only reference: its storages are freed before the post-mortem
                self._purge()
                self._refuse(func, added)
        return out

    def _count(self, out: Any) -> int:
        """Count ``out``'s new storages; returns their bytes."""
        phase, module = self.where()
        added = 0
        for t in tensors(out):
            if t.is_meta:  # no memory behind it
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            known = self.live.get(key)
            if known is not None and known.nbytes == storage.nbytes() \
                    and not known.ref.expired():
                continue
            if known is not None:  # resized in place, or a freed storage's address reused
                self.total -= known.nbytes
            s = Storage(storage.nbytes(), 0, phase, module, StorageWeakRef(storage),
                        "activations" if phase == "forward" and torch.is_grad_enabled()
                        else None)
            self.live[key] = s
            self.total += s.nbytes
            added += s.nbytes
        return added

    # ---- the post-mortem ----------------------------------------------------------
    def _kinds(self) -> dict[int, tuple[str, str]]:
        """storage key -> (module, kind) of the storages whose kind the run's objects say."""
        found: dict[int, tuple[str, str]] = {}
        owner: dict[int, str] = {}
        for ref in self.roots.values():
            root = ref()
            if root is None:
                continue
            for m in root.modules():
                name = self.names.get(id(m), "")
                for table, kind in ((m._parameters, "parameters"), (m._buffers, "buffers")):
                    for t in table.values():
                        if t is None:
                            continue
                        owner[id(t)] = name
                        found.setdefault(storage_key(t), (name, kind))
                        if kind == "parameters" and t.grad is not None:
                            found.setdefault(storage_key(t.grad), (name, "gradients"))
        for ref in self.optimizers:
            opt = ref()
            if opt is None:
                continue
            for p, state in opt.state.items():
                for v in state.values():
                    if isinstance(v, torch.Tensor) and v.dim():
                        found.setdefault(storage_key(v), (owner.get(id(p), "(optimizer)"),
                                                          "optimizer_state"))
        return found

    def snapshot(self) -> list[tuple[str, str, int]]:
        """(module, kind, bytes) of the live set now, largest first (sums to ``total``)."""
        self._purge()
        kinds = self._kinds()
        rows: dict[tuple[str, str], int] = {}
        for key, s in self.live.items():
            if key in kinds:
                module, kind = kinds[key]
            elif key in self.inputs:
                module, kind = "", "inputs"
            elif key in self.outputs:
                module, kind = s.module, "outputs"
            else:
                module, kind = s.module, s.kind or "temporaries"
            rows[(module, kind)] = rows.get((module, kind), 0) + s.nbytes
        return sorted(((m, k, b) for (m, k), b in rows.items()), key=lambda r: (-r[2], r[0]))

    def _post_mortem(self, op: str | None, asked: int | None, error: str) -> dict[str, Any]:
        phase, module = self.where()
        rows = self.snapshot()
        return {"error": error, "limit_bytes": self.limit, "asked_bytes": asked,
                "op": op, "module": module, "phase": phase,
                "live_bytes": sum(b for _, _, b in rows),
                "by_module_kind": [{"module": m, "kind": k, "bytes": b} for m, k, b in rows]}

    def _refuse(self, func, need: int) -> None:
        op = str(func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else func)
        phase, module = self.where()
        message = (f"layerscope --memory-limit: tried to allocate {need} bytes in "
                   f"{module or 'the top level'} ({op}, {phase}) with {self.total} bytes live; "
                   f"the limit is {self.limit} bytes")
        pm = self._post_mortem(op, need, "torch.OutOfMemoryError")
        exc = torch.OutOfMemoryError(message)
        self.post_mortems.append(pm)
        self._raised.append((weakref.ref(exc), pm))
        try:
            raise exc
        finally:  # no cycle exception -> traceback -> this frame -> exception: the script's
            del exc  # tensors in the traceback's frames go when the script drops the error

    def post_mortem_of(self, exc: BaseException | None) -> dict[str, Any] | None:
        """The post-mortem of the error a run ended with: the guard's own refusal (found in
        the exception's cause/context chain too), or a real out-of-memory error (the live set
        now; the bytes asked read from its message); None for any other end."""
        seen = 0
        e = exc
        while e is not None and seen < 32:
            for mine, pm in self._raised:
                if e is mine():
                    return pm
            if is_out_of_memory(e):
                pm = self._post_mortem(None, _asked_bytes(str(e)), _error_name(e))
                pm["phase"], pm["module"] = where_failed(e)
                return pm
            e = e.__cause__ or e.__context__
            seen += 1
        return None

    def caught(self, final: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The refusals the run caught and went on from (every one but the one it ended
        with)."""
        return [pm for pm in self.post_mortems if pm is not final]


def dump_cuda_snapshot(path: str) -> bool:
    """On CUDA (with allocation history recorded) torch's allocator snapshot for
    https://pytorch.org/memory_viz; False, and nothing written, on a machine without CUDA."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return False
    try:
        torch.cuda.memory._dump_snapshot(path)
    except Exception:  # history not recorded, an old torch: no snapshot
        return False
    return True


def caught_note(pm: dict[str, Any]) -> str:
    """The note for a refusal the run caught and went on from."""
    where = pm["module"] or "the top level"
    return (f"an out-of-memory error (--memory-limit {pm['limit_bytes']} bytes) was raised "
            f"in {where} ({pm['phase']}, {pm['op']} asking {pm['asked_bytes']} bytes with "
            f"{pm['live_bytes']} live) and caught by the script, which went on")
