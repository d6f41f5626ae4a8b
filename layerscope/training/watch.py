"""Phase breakdown of anyone's training loop, through torch's own global hooks.

``Watch`` installs, for its duration only, hooks at the seams every PyTorch training loop goes
through, and splits the time between consecutive optimizer steps into the phases of
``training.phases.PHASES``:

- step boundaries and ``optimizer``: ``torch.optim.optimizer``'s global step pre/post hooks. A
  step ends at the (outermost) optimizer post-hook; the next one starts there. The first step
  starts at the first measured event (a batch, a forward, a copy) after ``start()``, so a
  script's own set-up (building the model, the loaders) is no step.
- ``forward``: the global module forward pre/post hooks; only the outermost module call counts
  (a depth counter: a nested call costs one attribute test and an increment). An outermost call
  of a loss module (``nn.modules.loss._Loss``) is ``loss``; a functional loss is ``other``.
- ``backward``: ``torch.autograd._engine_run_backward``, the one Python function that
  ``Tensor.backward``, ``torch.autograd.backward`` and ``torch.autograd.grad`` all call to
  enter the C++ engine (torch/autograd/__init__.py). Hooks on tensors or graph nodes would
  need the graph of every step; the engine has no global entry/exit hook; this function is the
  narrowest seam that sees every backward, and replacing one module global is undone exactly.
- ``data``: ``_BaseDataLoaderIter.__next__`` (the class attribute, restored afterwards); a new
  pass (``DataLoader.__iter__``, with gradients on) over a loader that gave training batches
  ends an epoch.
- ``h2d``: ``Tensor.to`` and ``Tensor.cuda`` of CPU tensors, wrapped only where CUDA is
  available (on a CPU-only machine there is no host-to-device copy and nothing is wrapped).
- ``other``: the step's wall time minus the phases, so the phases sum to the step exactly.

Phases nest (Lightning and closure optimizers run forward and backward *inside*
``optimizer.step``; a model may copy to the device inside its forward): a stack keeps
exclusive time, so ``optimizer`` is the time in ``step()`` minus what ran nested in it.

Evaluation is not training: a forward or a batch fetched while gradients are disabled
(``torch.no_grad``, ``inference_mode``: validation loops) is left out of the steps, as
``layerscope train`` leaves validation out; its total is reported in a note.

On CUDA (once the script has initialised it) the device phases are bounded by CUDA events
recorded at every phase change and read after one synchronisation per step, as
``training.phases.PhaseTimer`` does; ``data`` stays host time.
"""
from __future__ import annotations

import os
import resource
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as _module
from torch.nn.modules.loss import _Loss
from torch.optim import optimizer as _optim
from torch.utils.data import dataloader as _dataloader

from layerscope.analysis.capture import tag_graph
from layerscope.analysis.timing import BackwardTimer
from layerscope.core import values
from layerscope.core.environment import environment
from layerscope.core.errors import UserError
from layerscope.training.loop import TrainReport
from layerscope.training.phases import DEVICE_PHASES, PHASES, PhaseTotals

# torch.compile's OptimizedModule warns on every call while global module hooks exist
_COMPILE_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"
EVAL = "eval"  # the stack's name for no-grad forwards and batches: left out of the steps
_ACTIVE: list[Watch] = []  # the one Watch running now (global hooks: one owner at a time)


class StepLimit(BaseException):
    """Raised from the optimizer hook once ``steps`` steps are done (and no ``on_stop`` was
    given): a BaseException, so the script's ``except Exception`` does not swallow it. The
    ``with`` block of the Watch ends there (its exit swallows it), and a thread it ends
    ends quietly."""


def active() -> Watch | None:
    """The Watch measuring now, if any (callbacks reuse it rather than starting a second)."""
    return _ACTIVE[0] if _ACTIVE else None


def _batch_len(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor (0 if none)."""
    for _ in range(4):  # tuple/list/dict nesting of (inputs, targets) batches
        if isinstance(batch, torch.Tensor):
            return int(batch.shape[0]) if batch.dim() else 1
        if isinstance(batch, (list, tuple)) and batch:
            batch = batch[0]
        elif isinstance(batch, dict) and batch:
            batch = next(iter(batch.values()))
        else:
            return 0
    return 0


def _to_device(args: tuple, kwargs: dict) -> bool:
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


def _quiet_step_limit(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """``threading.excepthook`` that lets a thread the step limit ended end quietly (a
    training loop run in a thread): python would print its traceback."""
    def excepthook(args: Any) -> None:
        if not issubclass(args.exc_type, StepLimit):
            hook(args)
    excepthook.__wrapped__ = hook  # type: ignore[attr-defined]
    return excepthook


def _current_rss() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Watch:
    """Measure the training steps of any loop run inside it; see the module docstring.

    ``steps``: after that many steps (warm-up included) call ``on_stop(watch)``, or raise
    ``StepLimit`` when no ``on_stop`` is given. ``warmup_steps``: the first steps are left out
    of the breakdown. ``layers``: forward (and backward) time per module. ``memory``: peak RSS
    and CUDA memory per phase. ``trace``: keep every phase interval for a Chrome trace.
    """

    def __init__(self, model: torch.nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None, *, steps: int | None = None,
                 warmup_steps: int = 0, layers: bool = False, memory: bool = False,
                 name: str = "watch", argv: list[str] | None = None,
                 on_stop: Callable[[Watch], None] | None = None, trace: bool = False,
                 clock: Callable[[], float] = time.perf_counter):
        if model is not None and not isinstance(model, torch.nn.Module):
            raise UserError(f"watch(model=...) must be a torch.nn.Module, got "
                            f"{type(model).__name__}")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise UserError(f"watch(optimizer=...) must be a torch.optim.Optimizer, got "
                            f"{type(optimizer).__name__}")
        self.model, self.optimizer = model, optimizer
        self.limit = None if steps is None else values.positive_int(steps, "steps")
        self.warmup_steps = values.non_negative_int(warmup_steps, "warmup_steps")
        self.layers, self.memory, self.trace = layers, memory, trace
        self.name, self.argv = name, list(argv) if argv is not None else None
        self.on_stop, self.clock = on_stop, clock
        self._installed: list[Callable[[], None]] = []  # undo actions, run in reverse
        self._running = False
        self._nested = 0  # with blocks entered again while running (a script's own watch())
        self._reset()

    # ---- state ----------------------------------------------------------------------
    def _reset(self) -> None:
        self._count = 0  # steps completed, warm-up included
        # every measured step (warm-up left out): the totals are summed from these when
        # asked, so a step's end costs a few list appends
        self.step_seconds: list[float] = []
        self.step_phases: list[dict[str, float]] = []
        self.step_samples: list[int] = []
        self._epoch_ends: list[int] = []  # measured steps done when each epoch ended
        self._train_data: set[int] = set()  # id() of the datasets training batches came from
        self.intervals: list[tuple[str, float, float]] = []  # (phase, t0, t1): trace only
        self.step_spans: list[tuple[int, float, float]] = []
        self.eval_seconds = 0.0
        self.cuda_used = False
        self._depth = 0  # module call depth inside the outermost counted call
        self._fwd_phase = "forward"  # what the outermost call in progress counts as
        self._opt_depth = 0
        self._stack: list[list[Any]] = []  # [phase, start] of the phases in progress
        self._acc: dict[str, float] = {}
        self._t0: float | None = None  # current step's start (None: no step open)
        self._eval_in_step = 0.0
        self._samples = 0
        self._cuda = False
        self._cuda_here = False
        self._events: list[Any] = []
        self._marks: list[tuple[int, str]] = []  # (event index, phase from there on)
        self._mem: dict[str, dict[str, int]] = {}
        self._layer_fwd: dict[int, list[Any]] = {}  # id(module) -> [name, type, calls, s]
        self._layer_bwd: dict[str, float] = {}  # module name -> backward seconds
        self._layer_stack: list[tuple[float, str]] = []
        self._names: dict[int, str] = {}
        self._cpu0 = time.process_time()
        self._wall0 = self.clock()

    @property
    def steps(self) -> int:
        """Steps completed so far (warm-up steps included)."""
        return self._count

    # ---- install / remove ---------------------------------------------------------
    def __enter__(self) -> Watch:
        self.start()
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        self.stop()
        return isinstance(exc, StepLimit)  # the step limit ends the block, nothing more

    def start(self) -> None:
        """Install every hook (and start counting from here). Starting the Watch that is
        running already (``layerscope.watch()`` under ``layerscope run`` returns the run's)
        joins it: nothing is reset, and the matching ``stop`` leaves it running."""
        if self._running:
            self._nested += 1
            return
        if _ACTIVE:
            raise RuntimeError("a layerscope watch is already measuring this process; "
                               "stop it first (layerscope.training.watch.active())")
        _ACTIVE.append(self)
        self._reset()
        self._running = True
        self._cuda_here = torch.cuda.is_available()  # once: it asks the driver
        try:
            self._install()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Remove every hook and patched attribute (also after an exception); steps marked
        afterwards are not counted."""
        if self._nested:
            self._nested -= 1
            return
        self._running = False
        while self._installed:
            self._installed.pop()()
        if self._cuda and self._t0 is not None:
            torch.cuda.synchronize()  # no event left pending on the stream
        self._stack.clear()
        self._depth = self._opt_depth = 0
        if self in _ACTIVE:
            _ACTIVE.remove(self)

    def _install(self) -> None:
        handles = [_optim.register_optimizer_step_pre_hook(self._opt_pre),
                   _optim.register_optimizer_step_post_hook(self._opt_post),
                   _module.register_module_forward_pre_hook(self._fwd_pre),
                   _module.register_module_forward_hook(self._fwd_post, always_call=True)]
        if self.layers:
            handles += [_module.register_module_forward_pre_hook(self._layer_pre),
                        _module.register_module_forward_hook(self._layer_post, always_call=True)]
        for h in handles:
            self._installed.append(h.remove)
        engine = torch.autograd._engine_run_backward
        self._patch(torch.autograd, "_engine_run_backward",
                    self._layer_backward(engine) if self.layers
                    else self._timed("backward", engine))
        iter_cls = _dataloader._BaseDataLoaderIter
        self._patch(iter_cls, "__next__", self._data_next(iter_cls.__next__))
        loader_cls = _dataloader.DataLoader
        self._patch(loader_cls, "__iter__", self._new_epoch(loader_cls.__iter__))
        self._patch(threading, "excepthook", _quiet_step_limit(threading.excepthook))
        self._ignore_warning(_COMPILE_HOOKS_WARNING)

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
        had = attr in vars(owner)
        old = vars(owner).get(attr)
        setattr(owner, attr, replacement)

        def undo() -> None:
            if had:
                setattr(owner, attr, old)
            else:
                delattr(owner, attr)
        self._installed.append(undo)

    # ---- the phase stack ----------------------------------------------------------
    def _enter(self, phase: str) -> None:
        now = self.clock()
        stack = self._stack
        if phase != EVAL and self._t0 is None:
            self._begin(now)
        if stack:
            top = stack[-1]
            self._add(top[0], top[1], now)
        stack.append([phase, now])
        if self._cuda:
            self._mark(phase)

    def _exit(self, phase: str) -> None:
        now = self.clock()
        stack = self._stack
        while stack:  # a phase left open by an exception is closed with its parent
            top = stack.pop()
            self._add(top[0], top[1], now)
            if top[0] == phase:
                break
        if stack:
            stack[-1][1] = now
        if self._cuda:
            self._mark(stack[-1][0] if stack else "other")
        if self.memory:
            self._sample_memory(phase)

    def _add(self, phase: str, t0: float, t1: float) -> None:
        if phase == EVAL:
            self.eval_seconds += t1 - t0
            if self._t0 is not None:
                self._eval_in_step += t1 - t0
            return
        self._acc[phase] = self._acc.get(phase, 0.0) + (t1 - t0)
        if self.trace:
            self.intervals.append((phase, t0, t1))

    def _begin(self, now: float) -> None:
        self._t0 = now
        self._acc = {}
        self._eval_in_step = 0.0
        self._samples = 0
        # CUDA timing once the script has initialised CUDA itself (never initialise it here)
        self._cuda = self._cuda_here and torch.cuda.is_initialized()
        if self._cuda:
            self.cuda_used = True
            self._marks = []
            self._mark(self._stack[-1][0] if self._stack else "other")
        if self.memory and self._cuda:  # per phase peaks start from here
            torch.cuda.reset_peak_memory_stats()

    def _mark(self, phase: str) -> None:
        i = len(self._marks)
        if i == len(self._events):
            self._events.append(torch.cuda.Event(enable_timing=True))
        self._events[i].record()
        self._marks.append((i, phase))

    def _close_step(self) -> None:
        """End the step open now: its phases, wall time and the totals."""
        if self._t0 is None:
            return
        now = self.clock()
        stack = self._stack
        if stack:  # a step ended inside a phase (mark_step in a forward): count it up to now
            self._add(stack[-1][0], stack[-1][1], now)
            stack[-1][1] = now
        phases = dict.fromkeys(PHASES, 0.0)
        for k, v in self._acc.items():
            phases[k] = phases.get(k, 0.0) + v
        if self._cuda:
            self._mark(stack[-1][0] if stack else "other")
            torch.cuda.synchronize()
            now = self.clock()
            device = dict.fromkeys(DEVICE_PHASES, 0.0)
            for (i, phase), (j, _) in zip(self._marks, self._marks[1:]):
                if phase in device:
                    device[phase] += self._events[i].elapsed_time(self._events[j]) / 1e3
            phases.update(device)
        wall = now - self._t0 - self._eval_in_step
        named = 0.0
        for v in phases.values():
            named += v
        phases["other"] = wall - (named - phases["other"])
        self._count += 1
        if self.trace:
            self.step_spans.append((self._count, self._t0, now))
        if self._count > self.warmup_steps:
            self.step_seconds.append(wall)
            self.step_phases.append(phases)
            self.step_samples.append(self._samples)
        self._begin(now)

    def _close_epoch(self) -> None:
        done = len(self.step_seconds)
        if done > (self._epoch_ends[-1] if self._epoch_ends else 0):
            self._epoch_ends.append(done)

    def _sum(self, start: int, stop: int) -> PhaseTotals:
        totals = PhaseTotals()
        for i in range(start, stop):
            totals.add(self.step_phases[i], self.step_seconds[i], self.step_samples[i])
        return totals

    @property
    def totals(self) -> PhaseTotals:
        """The measured steps' phases summed."""
        return self._sum(0, len(self.step_seconds))

    def epoch_totals(self) -> list[PhaseTotals]:
        """The measured steps of each epoch (a training loader's end closes one; the steps
        after the last end are the epoch in progress)."""
        bounds = [0, *self._epoch_ends]
        if len(self.step_seconds) > bounds[-1]:
            bounds.append(len(self.step_seconds))
        return [self._sum(a, b) for a, b in zip(bounds, bounds[1:])]

    def _sample_memory(self, phase: str) -> None:
        row = self._mem.setdefault(phase, {"peak_rss_bytes": 0})
        row["peak_rss_bytes"] = max(row["peak_rss_bytes"], _current_rss())
        if self._cuda:
            row["peak_cuda_bytes"] = max(row.get("peak_cuda_bytes", 0),
                                         torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()

    # ---- the hooks (hot path first) -----------------------------------------------
    def _fwd_pre(self, module: torch.nn.Module, args: Any) -> None:
        if self._depth:  # a nested module call: the outermost one is being timed
            self._depth += 1
            return
        if self.model is not None and module is not self.model:
            return
        self._depth = 1
        if not torch.is_grad_enabled():
            self._fwd_phase = EVAL
        else:
            self._fwd_phase = "loss" if isinstance(module, _Loss) else "forward"
        self._enter(self._fwd_phase)

    def _fwd_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        depth = self._depth
        if depth > 1:
            self._depth = depth - 1
        elif depth == 1:
            self._depth = 0
            self._exit(self._fwd_phase)

    def _opt_pre(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.optimizer is not None and opt is not self.optimizer:
            return
        self._opt_depth += 1
        if self._opt_depth == 1:
            self._enter("optimizer")

    def _opt_post(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if (self.optimizer is not None and opt is not self.optimizer) or not self._opt_depth:
            return
        self._opt_depth -= 1
        if self._opt_depth:
            return
        self._exit("optimizer")
        self.mark_step()

    def mark_step(self) -> None:
        """End the current step here (loops without a ``torch.optim`` optimizer call this once
        per step; with one, the optimizer's step does it)."""
        if not self._running:  # the Watch has stopped: nothing more is measured
            return
        if self._t0 is None:
            self._begin(self.clock())
            return
        self._close_step()
        if self.limit is not None and self._count >= self.limit:
            if self.on_stop is not None:
                self.on_stop(self)
            else:
                raise StepLimit(f"{self._count} steps done")

    def _timed(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._enter(phase)
            try:
                return fn(*args, **kwargs)
            finally:
                self._exit(phase)
        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed

    def _data_next(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def __next__(it: Any) -> Any:
            phase = "data" if torch.is_grad_enabled() else EVAL
            self._enter(phase)
            try:
                batch = fn(it)
            finally:
                self._exit(phase)
            if phase == "data":
                self._samples += _batch_len(batch)
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
                self._close_epoch()
            return fn(loader)
        __iter__.__wrapped__ = fn  # type: ignore[attr-defined]
        return __iter__

    def _h2d(self, fn: Callable[..., Any], always: bool) -> Callable[..., Any]:
        """``Tensor.cuda`` (``always``) or ``Tensor.to`` timed as ``h2d`` when it moves a CPU
        tensor to a device; a dtype cast or a CPU tensor staying on the CPU is not a copy."""
        def copy(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if not tensor.is_cpu or not (always or _to_device(args, kwargs)):
                return fn(tensor, *args, **kwargs)
            self._enter("h2d")
            try:
                return fn(tensor, *args, **kwargs)
            finally:
                self._exit("h2d")
        copy.__wrapped__ = fn  # type: ignore[attr-defined]
        return copy

    # ---- per layer (--layers) -----------------------------------------------------
    def _layer_pre(self, module: torch.nn.Module, args: Any) -> None:
        stack = self._layer_stack
        if not stack and id(module) not in self._names:
            self._name_tree(module)  # an outermost call: name its modules from it
        if stack and torch.is_grad_enabled():
            # nodes not tagged yet were made by the enclosing module's own code
            tag_graph(args, stack[-1][1])
        stack.append((self.clock(), self._names.get(id(module), type(module).__name__)))

    def _layer_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self._layer_stack:
            return
        t0, name = self._layer_stack.pop()
        t = self.clock() - t0
        if not torch.is_grad_enabled():
            return  # evaluation, as for the phases
        tag_graph(output, name)  # its backward nodes are charged to it
        row = self._layer_fwd.get(id(module))
        if row is None:
            row = self._layer_fwd[id(module)] = [name, type(module).__name__, 0, 0.0]
        row[2] += 1
        row[3] += t

    def _layer_backward(self, engine: Callable[..., Any]) -> Callable[..., Any]:
        """The engine entry timed as ``backward``, and each autograd node's time charged to the
        module whose forward made it (``analysis.timing.BackwardTimer``, as ``profile
        --backward`` does); the node hooks live on this backward's graph only."""
        def backward(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
            self._enter("backward")
            timer = BackwardTimer(self.model, cuda=self._cuda, clock=self.clock)
            outs = [t for t in t_outputs if isinstance(t, torch.Tensor)]
            handles = timer.instrument(outs)
            timer.start()
            try:
                return engine(t_outputs, *args, **kwargs)
            finally:
                for h in handles:
                    h.remove()
                for name, seconds in timer.result().items():
                    if name:
                        self._layer_bwd[name] = self._layer_bwd.get(name, 0.0) + seconds
                self._exit("backward")
        backward.__wrapped__ = engine  # type: ignore[attr-defined]
        return backward

    def _name_tree(self, root: torch.nn.Module) -> None:
        """Qualified names of ``root``'s modules (the given model names its own)."""
        if self.model is not None and not self._names:
            self._names.update({id(m): n or type(self.model).__name__
                                for n, m in self.model.named_modules()})
        prefix = type(root).__name__
        for n, m in root.named_modules():
            self._names.setdefault(id(m), f"{prefix}.{n}" if n else prefix)

    def layer_rows(self) -> list[dict[str, Any]]:
        """Per module: forward calls and seconds (inclusive of the modules inside it) and the
        backward seconds of the autograd nodes its own code made, over every step seen."""
        steps = max(self._count, 1)
        rows = [{"name": name, "type": kind, "calls": calls, "forward_s": s,
                 "forward_s_per_step": s / steps,
                 "backward_s": self._layer_bwd.get(name, 0.0)}
                for name, kind, calls, s in self._layer_fwd.values()]
        return sorted(rows, key=lambda r: -r["forward_s"])

    # ---- the result ---------------------------------------------------------------
    def chrome_trace(self) -> dict[str, Any]:
        """The phases of every step as Chrome trace events (chrome://tracing, Perfetto):
        steps on one row, their phases on the next; host time (``trace=True`` keeps them)."""
        pid = int(os.environ.get("RANK", "0") or 0)
        t0 = self.step_spans[0][1] if self.step_spans else 0.0
        events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": self.name}},
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "steps"}},
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": "phases"}}]
        for step, a, b in self.step_spans:
            events.append({"name": f"step {step}", "ph": "X", "pid": pid, "tid": 0,
                           "ts": (a - t0) * 1e6, "dur": (b - a) * 1e6,
                           "args": {"warm-up": step <= self.warmup_steps}})
        for phase, a, b in self.intervals:
            if b > a:
                events.append({"name": phase, "cat": "phase", "ph": "X", "pid": pid, "tid": 1,
                               "ts": (a - t0) * 1e6, "dur": (b - a) * 1e6})
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def report(self) -> TrainReport:
        """The ``train`` report of the steps measured so far."""
        totals = self.totals
        epochs = [t.to_dict() for t in self.epoch_totals()]
        wall = self.clock() - self._wall0
        notes = []
        if self.eval_seconds:
            notes.append(f"{self.eval_seconds:.3f} s of evaluation (forward passes and batches "
                         "without gradients) left out of the training steps")
        if self._count and not totals.steps:
            notes.append(f"all {self._count} steps were warm-up: nothing measured")
        if not self._count:
            notes.append("no training step seen: no optimizer.step() and no mark_step()")
        rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
        argv = self.argv if self.argv is not None else list(sys.argv[1:])
        return TrainReport(
            recipe=self.name,
            config={"device": "cuda" if self.cuda_used else "cpu",
                    "warmup_steps": self.warmup_steps, "steps": self.limit,
                    "layers": self.layers, "memory": self.memory},
            run_dir="", epochs=[], breakdown=totals.to_dict(), epoch_breakdown=epochs,
            step_seconds=list(self.step_seconds),
            cpu_utilisation=(time.process_time() - self._cpu0) / wall if wall > 0 else None,
            peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            peak_cuda_bytes=torch.cuda.max_memory_allocated() if self.cuda_used else None,
            notes=notes, environment=environment(),
            script={"name": self.name, "argv": argv},
            rank=int(rank) if rank and rank.isdigit() else None,
            world_size=int(world) if world and world.isdigit() else None,
            layers=self.layer_rows() if self.layers else None,
            phase_memory={k: dict(v) for k, v in self._mem.items()} if self.memory else None)


def watch(model: torch.nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
          **kwargs: Any) -> Watch:
    """``with layerscope.watch() as w: <training loop>`` then ``w.report()``. One Watch
    measures a process: while one runs (under ``layerscope run``) this returns that one, and
    its ``with`` block joins it (the arguments given here then do not apply)."""
    running = active()
    if running is not None:
        return running
    return Watch(model, optimizer, **kwargs)
