"""Phase breakdown of anyone's training loop, through torch's own global hooks.

``Watch`` installs, for its duration only, hooks at the seams every PyTorch training loop goes
through, and splits the time between consecutive optimizer steps into the phases of
``training.phases.PHASES``:

- step boundaries and ``optimizer``: ``torch.optim.optimizer``'s global step pre/post hooks. A
  step ends at the (outermost) optimizer post-hook; the next one starts there. The first step
  starts at the first measured event (a batch, a forward, a copy) after ``start()``, so a
  script's own set-up (building the model, the loaders) is no step.
  With several optimizers, every optimizer step is in exactly one step (``_group_step``):
  interleaved ones are one step per iteration, ones that step one after another a step each.
- one-time costs: a step in which torch._dynamo compiled (its own counters) or a first step
  far above the others is left out of the measured steps (``training.phases.transient_steps``),
  and the profiler's start and stop (``kernels``) are in no step; each is named in the
  report's ``transients``.
- ``forward``: the global module forward pre/post hooks; only the outermost module call counts
  (a depth counter: a nested call costs one attribute test and an increment). An outermost call
  of a loss module (``nn.modules.loss._Loss``) is ``loss``; a functional loss is ``other``. A
  module called while a batch is loading (a torchvision transform in ``Dataset.__getitem__``)
  is part of ``data``, and no layer.
- ``backward``: ``torch.autograd._engine_run_backward``, the one Python function that
  ``Tensor.backward``, ``torch.autograd.backward`` and ``torch.autograd.grad`` all call to
  enter the C++ engine (torch/autograd/__init__.py). Hooks on tensors or graph nodes would
  need the graph of every step; the engine has no global entry/exit hook; this function is the
  narrowest seam that sees every backward, and replacing one module global is undone exactly.
- ``data``: ``_BaseDataLoaderIter.__next__`` (the class attribute, restored afterwards); a new
  pass (``DataLoader.__iter__``, with gradients on) over a loader that gave training batches
  ends an epoch.
- samples (and tokens): a training batch counts in the step whose forward takes it (the
  model's outermost forward takes the oldest batch fetched and not yet taken), so a batch a
  loader fetched ahead and no step took is not counted; with no DataLoader at all, the batch
  is the forward's first tensor argument. Tokens are B x T of a batch of token ids (an
  integer tensor [B, T]).
- ``h2d``: ``Tensor.to`` and ``Tensor.cuda`` of CPU tensors, wrapped only where CUDA is
  available (on a CPU-only machine there is no host-to-device copy and nothing is wrapped).
- ``trainer``: the code of the closure given to ``optimizer.step(closure)`` (Lightning's
  automatic optimisation, LBFGS) outside the phases nested in it: the trainer's own work.
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

The Watch is the facade of one module per concern: the hooks it installs
(``training.watch_hooks``), the phase stack and step boundaries (``training.watch_steps``),
the step ledger of completed steps (``training.step_ledger``, plain Python), the per-layer clock
(``training.watch_layers``), the memory guard (``training.watch_memory``), the profiler ranges
(``training.watch_ranges``) and the report (``training.watch_report``).
"""
from __future__ import annotations

import collections
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from layerscope.core import values
from layerscope.core.errors import UserError
from layerscope.core.noise import read_machine
from layerscope.core.records.train import TrainReport
from layerscope.training.dataloading import LoaderProbe
from layerscope.training.model_seen import ModelSeen
from layerscope.training.phases import PhaseTotals
from layerscope.training.script_runner import STEP_ON
from layerscope.training.step_ledger import (
    LayerKey,
    StepLedger,
    optimizer_groups,
    transient_text,
    transients_note,
)
from layerscope.training.watch_hooks import CLOSURE, WatchHooks, to_device
from layerscope.training.watch_layers import LayerClock
from layerscope.training.watch_memory import MemoryGuard
from layerscope.training.watch_ranges import ProfilerRanges
from layerscope.training.watch_report import WatchReport, process_group_note
from layerscope.training.watch_steps import EVAL, StepClock, StepLimit, quiet_step_limit
from layerscope.training.whatif import WhatIf

# the names the Watch's modules declare, importable from here as before
__all__ = ["CLOSURE", "EVAL", "STEP_ON", "LayerKey", "StepLimit", "Watch", "active",
           "dynamo_compile_seconds", "optimizer_groups", "process_group_note",
           "quiet_step_limit", "to_device", "transient_text", "transients_note", "watch"]

_ACTIVE: list[Watch] = []  # the one Watch running now (global hooks: one owner at a time)
_to_device = to_device  # its name here before the hooks had a module of their own


def active() -> Watch | None:
    """The Watch measuring now, if any (callbacks reuse it rather than starting a second)."""
    return _ACTIVE[0] if _ACTIVE else None


def dynamo_compile_seconds() -> float:
    """Seconds torch._dynamo has spent compiling in this process so far (its frames, and the
    backward graphs AOT autograd compiles at the first backward), from its own counters; 0
    while torch._dynamo was never imported (nothing was compiled)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return 0.0
    spent = getattr(utils, "cumulative_time_spent_ns", None)
    if isinstance(spent, dict):
        return (spent.get("entire_frame_compile", 0.0)
                + spent.get("entire_backward_compile", 0.0)) / 1e9
    metrics = getattr(utils, "compilation_time_metrics", None) or {}
    return float(sum(metrics.get("_compile.compile_inner", ())))


def _check_arguments(model: Any, optimizer: Any, step_on: str) -> None:
    """One clear line for an argument of the wrong kind."""
    if model is not None and not isinstance(model, torch.nn.Module):
        raise UserError(f"watch(model=...) must be a torch.nn.Module, got "
                        f"{type(model).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise UserError(f"watch(optimizer=...) must be a torch.optim.Optimizer, got "
                        f"{type(optimizer).__name__}")
    if step_on not in STEP_ON:
        raise UserError(f"watch(step_on=...) must be one of {', '.join(STEP_ON)}, got "
                        f"{step_on!r}")


class Watch(WatchHooks, StepClock, WatchReport):
    """Measure the training steps of any loop run inside it; see the module docstring.

    ``steps``: after that many steps (warm-up included) call ``on_stop(watch)``, or raise
    ``StepLimit`` when no ``on_stop`` is given. ``warmup_steps``: the first steps are left out
    of the breakdown. ``layers``: forward (and backward) time per module; ``functions``: also
    per torch function a container's own code calls (``F.relu``, the residual add), each a
    row "MODULE (FUNCTION)" (forward only: its backward stays the module's). ``memory``: peak RSS
    and CUDA memory per phase. ``trace``: keep every phase interval for a Chrome trace.
    ``kernels``: profile three steps after the warm-up (after the first when there is none)
    and join their CPU ops and device kernels to the model's modules (the report's
    ``kernels``). ``nvtx``: NVTX ranges around each step, phase and module call (with CUDA).
    ``memory_limit``: bytes (or a size such as "512MB"): an allocation that would take the live
    tensor bytes above it raises ``torch.OutOfMemoryError``, and the report's ``post_mortem``
    says what was alive (``analysis.memory_limit.LimitGuard``).
    ``compile_clock``: the seconds spent compiling so far (default: torch._dynamo's own
    counters, ``dynamo_compile_seconds``); a step in which it grew is a compilation step, kept
    out of the measured steps as a one-time cost (``training.phases.transient_steps``).
    """

    def __init__(self, model: torch.nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None, *, steps: int | None = None,
                 warmup_steps: int = 0, layers: bool = False, memory: bool = False,
                 functions: bool = False, name: str = "watch", argv: list[str] | None = None,
                 on_stop: Callable[[Watch], None] | None = None, trace: bool = False,
                 step_on: str = "auto", what_if: WhatIf | None = None,
                 script_path: str | None = None, module: bool = False,
                 memory_limit: int | str | None = None, kernels: bool = False,
                 nvtx: bool = False, clock: Callable[[], float] = time.perf_counter,
                 compile_clock: Callable[[], float] = dynamo_compile_seconds):
        _check_arguments(model, optimizer, step_on)
        # "auto" is "optimizer" with the fallback: steps end at backward passes (provisional
        # ones, merged into the first optimizer step if one comes) while no optimizer stepped
        self.fallback = step_on == "auto"
        self.model, self.optimizer = model, optimizer
        self.step_on = "optimizer" if step_on == "auto" else step_on
        self.limit = None if steps is None else values.positive_int(steps, "steps")
        self.warmup_steps = values.non_negative_int(warmup_steps, "warmup_steps")
        if functions and not layers:
            raise UserError("watch(functions=True) splits the layers' rows: set layers=True "
                            "too")
        self.layers, self.memory, self.trace = layers, memory, trace
        self.functions = functions
        # kernels: torch.profiler over three steps after the warm-up (at least one), joined to
        # the model's modules; nvtx: NVTX ranges per step, phase and (once the model is known)
        # module, as train --nvtx names them (training.watch_ranges)
        self.kernels, self.nvtx = kernels, nvtx
        # --memory-limit: every tensor storage of the run against a limit, and the post-mortem
        # of the out-of-memory error the run ended with (training.watch_memory)
        self.memory_limit = (None if memory_limit is None
                             else values.byte_size(memory_limit, "memory_limit"))
        self.post_mortem: dict[str, Any] | None = None
        self.name, self.argv = name, list(argv) if argv is not None else None
        # layerscope run: the script as given and where it started (to run it again)
        self.started = ({"path": script_path, "module": module, "cwd": os.getcwd()}
                        if script_path is not None else {})
        self.on_stop, self.clock = on_stop, clock
        # the seconds spent compiling so far (torch._dynamo's counters): a step that compiled
        # is a one-time cost, kept out of the measured steps
        self.compile_clock = compile_clock
        if what_if is not None and not isinstance(what_if, WhatIf):
            raise UserError(f"watch(what_if=...) must be a layerscope.training.whatif.WhatIf, "
                            f"got {type(what_if).__name__}")
        self.what_if = what_if if what_if is not None and what_if.given() else None
        self._installed: list[Callable[[], None]] = []  # undo actions, run in reverse
        self._probe: LoaderProbe | None = None  # inside the data loaders (training.dataloading)
        self._running = False
        self._nested = 0  # with blocks entered again while running (a script's own watch())
        self._reset()

    # ---- state ----------------------------------------------------------------------
    def _reset(self) -> None:
        self.load_at_start: tuple[float, float, float] | None = None  # set by start()
        self._seen = ModelSeen()  # the model and each step's inputs: its FLOPs per step (MFU)
        # every completed step, warm-up included (training.step_ledger)
        self.ledger = StepLedger(self.warmup_steps, trace=self.trace, follower=self._seen)
        self._layers = LayerClock(self.model, self.clock, self._loading)  # --layers
        self._memory = MemoryGuard(self.memory_limit)  # --memory, --memory-limit
        self._ranges = ProfilerRanges(self.kernels, self.nvtx, skip=max(self.warmup_steps, 1))
        self._reset_batches()
        self._reset_steps()
        self.children = 0  # processes the script started (not DataLoader workers)
        # the process group the script formed (torch.distributed), seen at a step's end
        self.process_group: dict[str, Any] | None = None
        self.intervals: list[tuple[str, float, float]] = []  # (phase, t0, t1): trace only
        self.eval_seconds = 0.0
        # torch's intra-op threads as the last step ended: what the steps ran with (a what-if
        # --threads or the script's own set_num_threads, both undone or changed by the time
        # the report is made)
        self.step_threads: int | None = None
        self.cuda_used = False
        self._cpu0 = time.process_time()
        self._wall0 = self.clock()

    def _reset_batches(self) -> None:
        # training batches fetched and not yet taken by a forward, (samples, tokens) each: a
        # batch counts in the step whose forward takes it, so one a loader fetched ahead and
        # no step took (accelerate's loaders fetch one batch ahead) is not counted
        self._fetched: collections.deque[tuple[int, int]] = collections.deque()
        self._loader_seen = False  # a training batch came from a DataLoader
        # the module whose training forwards take the batches: the first called (the model)
        self._sample_module: tuple[int, str] | None = None
        self._sample_model: torch.nn.Module | None = None
        self._samples_from_forward = False  # no loader: counted from its arguments
        self._train_data: set[int] = set()  # id() of the datasets training batches came from

    def _reset_steps(self) -> None:
        """The step in progress and the hooks' counters (training.watch_steps)."""
        self._backwards = 0  # outermost backward() calls that filled .grad
        self._marked = False  # the loop called mark_step() itself
        self._bwd_depth = 0
        self._opt_now = 0  # index of the optimizer stepping now
        self._opt_mark = (0, 0.0)  # (step generation, optimizer seconds) at its step's start
        self._gen = 0  # steps begun: tells whether a step ended inside an optimizer step
        self._opt_step: dict[int, float] = {}  # optimizer index -> its seconds this step
        self._opt_in: list[int] = []  # the optimizers that stepped in the step open now
        self._compile0 = 0.0  # compile_clock at the open step's start
        self._depth = 0  # module call depth inside the outermost counted call
        # what the outermost call in progress counts as (None: part of a batch's loading)
        self._fwd_phase: str | None = "forward"
        self._opt_depth = 0
        self._stack: list[list[Any]] = []  # [phase, start] of the phases in progress
        self._acc: dict[str, float] = {}
        self._t0: float | None = None  # current step's start (None: no step open)
        self._eval_in_step = 0.0
        self._samples = self._tokens = 0
        self._cuda = False
        self._cuda_here = False
        self._events: list[Any] = []
        self._marks: list[tuple[int, str]] = []  # (event index, phase from there on)

    def _loading(self) -> bool:
        """A batch is loading now (the phase in progress is ``data``)."""
        return bool(self._stack and self._stack[-1][0] == "data")

    # ---- the steps ------------------------------------------------------------------
    @property
    def steps(self) -> int:
        """Steps completed so far (warm-up steps included): the parts closed so far, less those
        that wait for the optimizer step that ends them (the backward passes before it, once
        an optimizer has started stepping)."""
        return self.ledger.steps

    @property
    def measured_steps(self) -> list[int]:
        """The number (from 1, warm-up included) of each measured step."""
        return [i + 1 for i in self.ledger.measured()]

    @property
    def step_optimizers(self) -> list[tuple[int, ...]]:
        """The optimizers (numbered from 1 in first-step order) that stepped in each completed
        step, warm-up included, in the order they stepped."""
        return [tuple(i + 1 for i in step) for step in self.ledger.opts_of[:self.steps]]

    @property
    def step_seconds(self) -> list[float]:
        """Wall time of each measured step (the warm-up and transient steps left out)."""
        return [self.ledger.seconds[i] for i in self.ledger.measured()]

    @property
    def step_phases(self) -> list[dict[str, float]]:
        """Seconds per phase of each measured step."""
        return [self.ledger.phases[i] for i in self.ledger.measured()]

    @property
    def step_samples(self) -> list[int]:
        """Samples (training batches' first dimension) of each measured step."""
        return [self.ledger.samples_of[i] for i in self.ledger.measured()]

    @property
    def step_tokens(self) -> list[int]:
        """Tokens (B x T of token-id batches; 0 for other models) of each measured step."""
        return [self.ledger.tokens_of[i] for i in self.ledger.measured()]

    @property
    def step_spans(self) -> list[tuple[int, float, float]]:
        """(step, start, end) of each completed step on the clock (``trace`` only)."""
        return self.ledger.step_spans

    @property
    def totals(self) -> PhaseTotals:
        """The measured steps' phases summed."""
        return self.ledger.sum(self.ledger.measured())

    def epoch_totals(self) -> list[PhaseTotals]:
        """The measured steps of each epoch (a training loader's end closes one; the steps
        after the last end are the epoch in progress; an epoch all warm-up is left out)."""
        return self.ledger.epoch_totals()

    def transient_rows(self) -> list[dict[str, Any]]:
        """The one-time costs kept out of the measured steps (``TransientCost`` records)."""
        return self.ledger.transient_rows()

    def layer_rows(self) -> list[dict[str, Any]]:
        """Per module: forward calls and seconds (inclusive of the modules inside it), its own
        forward seconds (without the modules it called) and the backward seconds of the
        autograd nodes its own code made, over the measured steps (the phases' steps: warm-up
        and a step left open are not counted)."""
        return self._layers.rows(self.ledger)

    def report(self) -> TrainReport:
        """The ``train`` report of the steps measured so far (``training.watch_report``)."""
        return self._build_report()

    # the figures under their former private names (tests read them)
    @property
    def _seconds(self) -> list[float]:
        return self.ledger.seconds

    @property
    def _opt_counts(self) -> list[int]:
        return self.ledger.opt_counts

    @property
    def _mem(self) -> dict[str, dict[str, int]]:
        return self._memory.rows

    # ---- install / remove ---------------------------------------------------------
    def __enter__(self) -> Watch:
        self.start()
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if not self._nested:
            # --memory-limit: the live set by module and kind; without it, a real
            # out-of-memory error still says what failed and where (nothing was tracked)
            self.post_mortem = self._memory.post_mortem(exc)
            if self.post_mortem is not None:
                self.post_mortem["step"] = self.steps + 1
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
        self.load_at_start = read_machine().loadavg
        self._running = True
        self._cuda_here = torch.cuda.is_available()  # once: it asks the driver
        try:
            # first: the Watch's own DataLoader patches wrap the probe's (its times are the
            # loader's alone)
            self._probe = LoaderProbe(clock=self.clock)
            self._probe.start()
            self._installed.append(self._probe.stop)
            self._install()
            self._ranges.start()
            self._memory.start(self._installed.append)
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
        self._seen.close()
        self.ledger.settle()
        self._ranges.stop(len(self._stack))
        while self._installed:
            self._installed.pop()()
        if self._cuda and self._t0 is not None:
            torch.cuda.synchronize()  # no event left pending on the stream
        self._stack.clear()
        self._depth = self._opt_depth = self._bwd_depth = 0
        if self in _ACTIVE:
            _ACTIVE.remove(self)


def _forked_child() -> None:
    """A forked child (a hogwild worker, a DataLoader worker) runs with the hooks off: its
    steps are not this process's, and a step limit must not stop it. CUDA is not touched."""
    for w in list(_ACTIVE):
        w._cuda = False
        w.stop()


os.register_at_fork(after_in_child=_forked_child)


def watch(model: torch.nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
          **kwargs: Any) -> Watch:
    """``with layerscope.watch() as w: <training loop>`` then ``w.report()``. One Watch
    measures a process: under ``layerscope run`` this returns the run's, and its ``with``
    block joins it (the arguments given here then do not apply); a ``watch()`` inside another
    ``watch()`` of the script's own is refused when it starts (RuntimeError), as a second Watch
    is."""
    running = active()
    if running is not None and running.started:
        return running  # under layerscope run: the script's own watch() joins the run's
    return Watch(model, optimizer, **kwargs)  # a second one in a process: refused at start
