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
"""
from __future__ import annotations

import collections
import multiprocessing.process
import os
import resource
import sys
import threading
import time
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
from torch.nn.modules import module as _module
from torch.nn.modules.loss import _Loss
from torch.optim import optimizer as _optim
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils.data import dataloader as _dataloader
from torch.utils.data._utils.worker import _worker_loop

from layerscope.analysis.capture import tag_graph
from layerscope.analysis.capture.functions import function_name
from layerscope.analysis.memory_track import LimitGuard, caught_note, untracked_post_mortem
from layerscope.analysis.timing import BackwardTimer
from layerscope.core import tree, values
from layerscope.core.environment import with_load
from layerscope.core.errors import UserError
from layerscope.core.noise import read_machine
from layerscope.core.phases import per_step
from layerscope.core.records.memory import PostMortem
from layerscope.core.records.train import TrainReport, TransientCost
from layerscope.core.stats import kept_samples
from layerscope.training import chrome_trace
from layerscope.training.dataloading import LoaderProbe, patch
from layerscope.training.distributed import process_group
from layerscope.training.model_seen import ModelSeen
from layerscope.training.phases import DEVICE_PHASES, PHASES, PhaseTotals, transient_steps
from layerscope.training.whatif import WhatIf

# what ends a step (see ``Watch``): "auto" (the default) is optimizer steps, or backward
# passes when no optimizer ever steps; "optimizer" and "backward" are those alone
STEP_ON = ("auto", "optimizer", "backward")
# torch.compile's OptimizedModule warns on every call while global module hooks exist
_COMPILE_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"
EVAL = "eval"  # the stack's name for no-grad forwards and batches: left out of the steps
# the phase of an optimizer closure's own code (a trainer's work around forward and backward)
CLOSURE = "trainer"
_ACTIVE: list[Watch] = []  # the one Watch running now (global hooks: one owner at a time)


# a layer row's key: id(module), or (id(module), function) for a function's row (``functions``)
LayerKey = int | tuple[int, str]


class StepLimit(BaseException):
    """Raised from the optimizer hook once ``steps`` steps are done (and no ``on_stop`` was
    given): a BaseException, so the script's ``except Exception`` does not swallow it. The
    ``with`` block of the Watch ends there (its exit swallows it), and a thread it ends
    ends quietly."""


def active() -> Watch | None:
    """The Watch measuring now, if any (callbacks reuse it rather than starting a second)."""
    return _ACTIVE[0] if _ACTIVE else None


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


def quiet_step_limit(hook: Callable[[Any], None]) -> Callable[[Any], None]:
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


class Watch:
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
    says what was alive (``analysis.memory_track.LimitGuard``).
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
        if model is not None and not isinstance(model, torch.nn.Module):
            raise UserError(f"watch(model=...) must be a torch.nn.Module, got "
                            f"{type(model).__name__}")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise UserError(f"watch(optimizer=...) must be a torch.optim.Optimizer, got "
                            f"{type(optimizer).__name__}")
        if step_on not in STEP_ON:
            raise UserError(f"watch(step_on=...) must be one of {', '.join(STEP_ON)}, got "
                            f"{step_on!r}")
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
        # the model's modules (analysis.kernels.BoundaryWindow); nvtx: NVTX ranges per step,
        # phase and (once the model is known) module, as train --nvtx names them
        self.kernels, self.nvtx = kernels, nvtx
        # --memory-limit: every tensor storage of the run against a limit (LimitGuard), and the
        # post-mortem of the out-of-memory error the run ended with
        self.memory_limit = (None if memory_limit is None
                             else values.byte_size(memory_limit, "memory_limit"))
        self._guard: LimitGuard | None = None
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
        # every completed step, warm-up included (the measured ones are those after the
        # warm-up): the totals are summed from these when asked, so a step's end costs a few
        # list appends, and steps found to be parts of one step are merged afterwards
        self._seconds: list[float] = []
        self._phases: list[dict[str, float]] = []
        self.load_at_start: tuple[float, float, float] | None = None  # set by start()
        self._samples_of: list[int] = []
        self._tokens_of: list[int] = []
        # training batches fetched and not yet taken by a forward, (samples, tokens) each: a
        # batch counts in the step whose forward takes it, so one a loader fetched ahead and
        # no step took (accelerate's loaders fetch one batch ahead) is not counted
        self._fetched: collections.deque[tuple[int, int]] = collections.deque()
        self._loader_seen = False  # a training batch came from a DataLoader
        # the module whose training forwards take the batches: the first called (the model)
        self._sample_module: tuple[int, str] | None = None
        self._sample_model: torch.nn.Module | None = None
        self._window: Any = None  # kernels: the BoundaryWindow
        self._nvtx_on = False  # nvtx and CUDA here
        self._nvtx_modules: Any = None  # nvtx: the model's module ranges, once it is known
        self._nvtx_step: int | None = None  # the open step range
        self._samples_from_forward = False  # no loader: counted from its arguments
        self._seen = ModelSeen()  # the model and each step's inputs: its FLOPs per step (MFU)
        self._epoch_ends: list[int] = []  # steps done (warm-up included) when each epoch ended
        self._opt_seen = False  # an optimizer step has started
        self._backwards = 0  # outermost backward() calls that filled .grad
        self._marked = False  # the loop called mark_step() itself
        self._provisional = 0  # trailing steps that ended at a backward, before any optimizer
        self._bwd_depth = 0
        self.children = 0  # processes the script started (not DataLoader workers)
        # the process group the script formed (torch.distributed), seen at a step's end
        self.process_group: dict[str, Any] | None = None
        # the optimizers, in the order they first stepped, their names and step counts;
        # ``_cycle``: the optimizers of one iteration in step order, its last one ending a
        # step (None until one optimizer steps again: learnt from the step before);
        # ``_pending``: the optimizer of each part closed since the last step ended (parts
        # that end no step yet: ``_group_step``)
        self._opt_ids: list[int] = []
        self._opt_names: list[tuple[str, str]] = []  # (by variable or "", by class)
        self._opt_counts: list[int] = []
        self._cycle: list[int] | None = None
        self._pending: list[int] = []
        self._opt_now = 0  # index of the optimizer stepping now
        self._opt_mark = (0, 0.0)  # (step generation, optimizer seconds) at its step's start
        self._gen = 0  # steps begun: tells whether a step ended inside an optimizer step
        self._opt_step: dict[int, float] = {}  # optimizer index -> its seconds this step
        self._opt_of: list[dict[int, float]] = []  # the same, per completed step
        self._opt_in: list[int] = []  # the optimizers that stepped in the step open now
        self._opts_of: list[tuple[int, ...]] = []  # the same, per completed step
        # one-time costs: dynamo's compile seconds in each completed step (``compile_clock``
        # read at each step's start and end), and the profiler's start and stop (kernels),
        # timed and kept out of the step they fell in (``transient_rows``)
        self._compile_of: list[float] = []
        self._compile0 = 0.0
        self._profiler_rows: list[dict[str, Any]] = []
        self._train_data: set[int] = set()  # id() of the datasets training batches came from
        self.intervals: list[tuple[str, float, float]] = []  # (phase, t0, t1): trace only
        self.step_spans: list[tuple[int, float, float]] = []
        self.eval_seconds = 0.0
        # torch's intra-op threads as the last step ended: what the steps ran with (a what-if
        # --threads or the script's own set_num_threads, both undone or changed by the time
        # the report is made)
        self.step_threads: int | None = None
        self.cuda_used = False
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
        self._mem: dict[str, dict[str, int]] = {}
        self._cuda_peak = 0  # the run's CUDA peak across the per-phase resets
        # per layer: the step in progress collects forward rows (id(module) -> [name, type,
        # calls, s]) and backward seconds (module name -> s) into _step_fwd/_step_bwd; a closed
        # step's go to _fwd_of/_bwd_of beside _seconds (merged with it, warm-up left out when
        # read, as for the phases, so a layer's time per step and the phases' are over the same
        # steps)
        self._step_fwd: dict[LayerKey, list[Any]] = {}
        self._step_bwd: dict[str, float] = {}
        self._fwd_of: list[dict[LayerKey, list[Any]]] = []
        self._bwd_of: list[dict[str, float]] = []
        # (start, name, module) of the module calls in progress, innermost last
        self._layer_stack: list[tuple[float, str | None, torch.nn.Module]] = []
        self._containers: dict[int, bool] = {}  # id(module) -> it has children
        self._names: dict[int, str] = {}
        # id(module) -> (id(root), its path under that root); id(root) -> every path under it
        # (the never-called containers included): own time walks this tree
        self._paths: dict[LayerKey, tuple[int, str]] = {}
        self._trees: dict[int, list[str]] = {}
        self._cpu0 = time.process_time()
        self._wall0 = self.clock()

    @property
    def steps(self) -> int:
        """Steps completed so far (warm-up steps included): the parts closed so far, less those
        that wait for the optimizer step that ends them (``_pending``; the backward passes
        before it, once an optimizer has started stepping)."""
        return len(self._seconds) - len(self._pending) - (self._provisional if self._opt_seen
                                                          else 0)

    def _measured(self) -> list[int]:
        """The completed steps measured: after the warm-up, less the one-time costs (a
        compilation step: ``_transient``)."""
        done = self.steps
        left_out = self._transient(done)
        return [i for i in range(min(self.warmup_steps, done), done) if i not in left_out]

    def _transient(self, done: int) -> dict[int, str]:
        """The completed steps after the warm-up kept out as one-time costs, with the cause
        (``training.phases.transient_steps``)."""
        compute = [p.get("forward", 0.0) + p.get("backward", 0.0) for p in self._phases[:done]]
        return transient_steps(self._compile_of[:done], compute, self.warmup_steps)

    @property
    def measured_steps(self) -> list[int]:
        """The number (from 1, warm-up included) of each measured step."""
        return [i + 1 for i in self._measured()]

    @property
    def step_optimizers(self) -> list[tuple[int, ...]]:
        """The optimizers (numbered from 1 in first-step order) that stepped in each completed
        step, warm-up included, in the order they stepped."""
        return [tuple(i + 1 for i in step) for step in self._opts_of[:self.steps]]

    @property
    def step_seconds(self) -> list[float]:
        """Wall time of each measured step (the warm-up and transient steps left out)."""
        return [self._seconds[i] for i in self._measured()]

    @property
    def step_phases(self) -> list[dict[str, float]]:
        """Seconds per phase of each measured step."""
        return [self._phases[i] for i in self._measured()]

    @property
    def step_samples(self) -> list[int]:
        """Samples (training batches' first dimension) of each measured step."""
        return [self._samples_of[i] for i in self._measured()]

    @property
    def step_tokens(self) -> list[int]:
        """Tokens (B x T of token-id batches; 0 for other models) of each measured step."""
        return [self._tokens_of[i] for i in self._measured()]

    # ---- install / remove ---------------------------------------------------------
    def __enter__(self) -> Watch:
        self.start()
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if not self._nested:
            # --memory-limit: the live set by module and kind; without it, a real
            # out-of-memory error still says what failed and where (nothing was tracked)
            self.post_mortem = (self._guard.post_mortem_of(exc) if self._guard is not None
                                else untracked_post_mortem(exc))
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
            self._start_ranges()
            if self.memory_limit is not None:
                self._guard = LimitGuard(self.memory_limit)
                self._guard.__enter__()
                self._installed.append(lambda: self._guard.__exit__(None, None, None))
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
        self._settle()
        if self._window is not None:
            self._window.finish()
        self._stop_ranges()
        while self._installed:
            self._installed.pop()()
        if self._cuda and self._t0 is not None:
            torch.cuda.synchronize()  # no event left pending on the stream
        self._stack.clear()
        self._depth = self._opt_depth = self._bwd_depth = 0
        if self in _ACTIVE:
            _ACTIVE.remove(self)

    def _settle(self) -> None:
        """The parts left waiting when the run stops: optimizer steps waiting for the
        iteration's last optimizer are one last step (each is a whole optimizer step); the
        backward passes of a first step whose optimizer step never returned (the run failed
        inside it) are dropped, as the step still open is."""
        if self._pending:
            self._merge_last(len(self._pending))
            self._pending = []
        elif self._provisional and self._opt_seen:
            self._drop_last(self._provisional)
            self._provisional = 0

    def _start_ranges(self) -> None:
        from layerscope.analysis.nvtx import available

        if self.kernels:
            from layerscope.analysis.kernels import BoundaryWindow

            self._window = BoundaryWindow(skip=max(self.warmup_steps, 1))
        self._nvtx_on = self.nvtx and available()

    def _stop_ranges(self) -> None:
        """Close every NVTX range left open (the step and phases in progress at the stop)."""
        if not self._nvtx_on:
            return
        for _ in self._stack:
            torch.cuda.nvtx.range_pop()
        if self._nvtx_step is not None:
            torch.cuda.nvtx.range_end(self._nvtx_step)
            self._nvtx_step = None
        if self._nvtx_modules is not None:
            self._nvtx_modules.__exit__(None, None, None)
            self._nvtx_modules = None
        self._nvtx_on = False

    def _at_step_end(self) -> None:
        """kernels/nvtx at a step's end: the window moves on; the module ranges start once the
        model is known (hooks are added here, never inside a module call's hooks). The
        window's own work (the profiler's start, its stop and the processing of its events)
        is no step's: the step that just began starts after it, and its start and stop are
        rows of their own (``transient_rows``)."""
        window = self._window
        model = (self._seen.model() or self._sample_model
                 if window is not None or self._nvtx_on else None)
        if window is not None:
            t0 = self.clock()
            was_open, done = window.window is not None, window.done
            window.boundary(self.steps, model)
            spent = self.clock() - t0
            if self._t0 is not None:  # the step open now starts after the window's work
                self._t0 += spent
                if self._stack:
                    self._stack[-1][1] += spent
            if window.window is not None and not was_open:
                self._profiler_rows.append({"what": "profiler start", "seconds": spent,
                                            "step": self.steps})
            elif window.done == window.steps and done < window.steps:
                self._profiler_rows.append({"what": "profiler stop and export",
                                            "seconds": spent, "step": self.steps})
        if self._nvtx_on and self._nvtx_modules is None and model is not None:
            from layerscope.analysis.nvtx import NvtxRanges

            self._nvtx_modules = NvtxRanges(model)
            self._nvtx_modules.__enter__()

    def _install(self) -> None:
        handles = [_optim.register_optimizer_step_pre_hook(self._opt_pre),
                   _optim.register_optimizer_step_post_hook(self._opt_post),
                   _module.register_module_forward_pre_hook(self._fwd_pre)]
        # global hooks run in the order registered: a layer's time starts after its phase's and
        # ends before it, so a layer's time is within the phase's (never above 100% of it)
        if self.layers:
            handles += [_module.register_module_forward_pre_hook(self._layer_pre),
                        _module.register_module_forward_hook(self._layer_post, always_call=True)]
        if self.functions:
            mode = _FunctionMode(self)
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
        if self._nvtx_on:
            torch.cuda.nvtx.range_push(f"layerscope::{phase}")
        if self._cuda:
            self._mark(phase)

    def _exit(self, phase: str) -> None:
        now = self.clock()
        stack = self._stack
        while stack:  # a phase left open by an exception is closed with its parent
            top = stack.pop()
            if self._nvtx_on:
                torch.cuda.nvtx.range_pop()
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
        if self._nvtx_on:  # a start/end range: steps end inside phases (it need not nest)
            self._nvtx_step = torch.cuda.nvtx.range_start("layerscope::step")
        self._gen += 1
        self._opt_step = {}
        self._opt_in = []
        self._compile0 = self.compile_clock()
        self._acc = {}
        self._eval_in_step = 0.0
        self._samples = self._tokens = 0
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
        self._seconds.append(wall)
        self.step_threads = torch.get_num_threads()
        self._seen.end_step()
        self._phases.append(phases)
        if self._sample_module is None:  # no module forward seen: the batches fetched count
            while self._fetched:
                samples, tokens = self._fetched.popleft()
                self._samples += samples
                self._tokens += tokens
        self._samples_of.append(self._samples)
        self._tokens_of.append(self._tokens)
        self._opt_of.append(self._opt_step)
        self._opts_of.append(tuple(self._opt_in))
        self._compile_of.append(max(self.compile_clock() - self._compile0, 0.0))
        if self.trace:
            self.step_spans.append((len(self._seconds), self._t0, now))
        self._fwd_of.append(self._step_fwd)
        self._bwd_of.append(self._step_bwd)
        self._step_fwd, self._step_bwd = {}, {}
        if self.process_group is None:
            self.process_group = process_group()
        if self._nvtx_step is not None:
            torch.cuda.nvtx.range_end(self._nvtx_step)
            self._nvtx_step = None
        self._begin(now)

    def _merge_last(self, k: int) -> None:
        """The last ``k`` completed steps become one step (they were parts of it: the steps
        ended at backward passes before the first optimizer step)."""
        first = len(self._seconds) - k
        if k < 2 or first < 0:
            return
        phases = dict.fromkeys(PHASES, 0.0)
        for row in self._phases[first:]:
            for name, v in row.items():
                phases[name] += v
        self._seconds[first:] = [sum(self._seconds[first:])]
        self._seen.merge_last(k)
        self._phases[first:] = [phases]
        self._samples_of[first:] = [sum(self._samples_of[first:])]
        self._tokens_of[first:] = [sum(self._tokens_of[first:])]
        by_opt: dict[int, float] = {}
        for row in self._opt_of[first:]:
            for i, v in row.items():
                by_opt[i] = by_opt.get(i, 0.0) + v
        self._opt_of[first:] = [by_opt]
        self._opts_of[first:] = [tuple(i for row in self._opts_of[first:] for i in row)]
        self._compile_of[first:] = [sum(self._compile_of[first:])]
        fwd, bwd = _sum_layers(self._fwd_of[first:], self._bwd_of[first:])
        self._fwd_of[first:], self._bwd_of[first:] = [fwd], [bwd]
        if self.trace:
            self.step_spans[first:] = [(first + 1, self.step_spans[first][1],
                                        self.step_spans[-1][2])]
        ends = [min(e, first + 1) for e in self._epoch_ends]
        self._epoch_ends = sorted(set(ends))

    def _drop_last(self, k: int) -> None:
        """The last ``k`` completed parts belong to a step that never ended (the run stopped
        inside it): they are dropped, as the step still open is."""
        if k <= 0:
            return
        keep = len(self._seconds) - k
        for parts in (self._seconds, self._phases, self._samples_of, self._tokens_of,
                      self._opt_of, self._opts_of, self._compile_of, self._fwd_of,
                      self._bwd_of):
            del parts[keep:]
        self._seen.drop_last(k)
        if self.trace:
            self.step_spans = [span for span in self.step_spans if span[0] <= keep]
        self._epoch_ends = sorted({min(e, keep) for e in self._epoch_ends if e})

    def _close_epoch(self) -> None:
        done = self.steps  # (parts waiting for their step's end belong to the next one)
        if done > (self._epoch_ends[-1] if self._epoch_ends else 0):
            self._epoch_ends.append(done)

    def _sum(self, steps: list[int]) -> PhaseTotals:
        totals = PhaseTotals()
        for i in steps:
            totals.add(self._phases[i], self._seconds[i], self._samples_of[i],
                       self._tokens_of[i])
        return totals

    @property
    def totals(self) -> PhaseTotals:
        """The measured steps' phases summed."""
        return self._sum(self._measured())

    def epoch_totals(self) -> list[PhaseTotals]:
        """The measured steps of each epoch (a training loader's end closes one; the steps
        after the last end are the epoch in progress; an epoch all warm-up is left out)."""
        first, done, measured = self.warmup_steps, self.steps, self._measured()
        bounds = [first, *(e for e in self._epoch_ends if first < e <= done)]
        if done > bounds[-1]:
            bounds.append(done)
        return [self._sum([i for i in measured if a <= i < b]) for a, b in zip(bounds, bounds[1:])]

    def _sample_memory(self, phase: str) -> None:
        row = self._mem.setdefault(phase, {"peak_rss_bytes": 0})
        row["peak_rss_bytes"] = max(row["peak_rss_bytes"], _current_rss())
        if self._cuda:
            peak = torch.cuda.max_memory_allocated()
            row["peak_cuda_bytes"] = max(row.get("peak_cuda_bytes", 0), peak)
            # the per-phase peaks reset the device's statistic: the run's peak is kept here
            self._cuda_peak = max(self._cuda_peak, peak)
            torch.cuda.reset_peak_memory_stats()

    # ---- the hooks (hot path first) -----------------------------------------------
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

    def _opt_pre(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> Any:
        if self.optimizer is not None and opt is not self.optimizer:
            return None
        self._opt_seen = True  # (before a closure's backward can end a step)
        self._opt_depth += 1
        new = None
        if self._opt_depth == 1:
            key = id(opt)
            if key not in self._opt_ids:
                self._opt_ids.append(key)
                self._opt_counts.append(0)
                frame = _script_frame()
                self._opt_names.append(_optimizer_name(opt, len(self._opt_ids), frame))
                self._seen.optimizer_step(opt, frame)
                del frame
            self._opt_now = self._opt_ids.index(key)
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
        self._opt_counts[i] += 1
        if self.step_on == "backward":
            return
        self._group_step(i)

    def _group_step(self, i: int) -> None:
        """Where optimizer ``i``'s step (just returned) falls among the steps. Each optimizer
        step closes a part; the parts are grouped into steps:

        - in the first iteration each optimizer's step ends the step at once (one optimizer:
          every step ends there) and a different one merges into it (a GAN's D, then G); the
          first one again fixes the iteration (``_cycle``: the optimizers of the step before);
        - then the iteration's last optimizer ends a step, merging the parts closed since the
          last step ended; any other one (the iteration's others, one outside it stepping
          between iterations) closes a part that waits for it (``_pending``);
        - an optimizer that steps again before the others end a step ends its own: the parts
          closed since the last step ended are one step. One outside the iteration that steps
          again alone becomes the iteration (optimizers that train one after another: layer
          0's Adam 30 times, then layer 1's)."""
        if i in self._pending:  # steps again before the others ended the step
            if self._pending == [i] and self._cycle is not None and i not in self._cycle:
                self._cycle = [i]
            self._end_parts()
        ended = self.steps
        self._close_step()
        self._pending.append(i)
        cycle = self._cycle
        if cycle is None:  # the first iteration (no part waits: each ended or merged)
            before = self._opts_of[ended - 1] if ended else ()
            if before and i not in before:  # another optimizer of the first iteration
                self._pending = []
                self._merge_last(2)
                return
            if not before:  # the first optimizer step of all
                self._end_parts()
                return
            cycle = self._cycle = list(before)
        if i == cycle[-1]:
            self._end_parts()

    def _end_parts(self) -> None:
        """The parts closed since the last step ended (and the backward passes before the
        first optimizer step) are one step, which ends here."""
        parts = len(self._pending) + self._provisional
        self._pending, self._provisional = [], 0
        self._merge_last(parts)
        self._at_step_end()
        self._check_limit()

    def _backward_done(self) -> None:
        """An outermost ``backward()`` returned: the end of a step when steps are on backward
        passes, and, until an optimizer step is seen, the end of a provisional one (merged
        into the first optimizer step if one comes)."""
        self._backwards += 1
        if self.step_on == "backward":
            self.mark_step()
        elif self.fallback and not (self._opt_seen or self._marked) and self._t0 is not None:
            self._close_step()
            self._provisional += 1

    def mark_step(self) -> None:
        """End the current step here (loops without a ``torch.optim`` optimizer call this once
        per step; with one, the optimizer's step does it)."""
        if not self._running:  # the Watch has stopped: nothing more is measured
            return
        self._marked = True
        if self._t0 is None:
            self._begin(self.clock())
            return
        self._end_step()

    def _end_step(self) -> None:
        """``mark_step()`` ends the step open now. The parts closed before it that ended no
        step (backward passes before the first optimizer step: gradient accumulation) were
        parts of this one: one step from the first event to here."""
        self._close_step()
        self._provisional += 1
        self._end_parts()

    def _optimizers_note(self) -> str:
        """Which optimizers stepped, how their steps were grouped into steps, and the
        optimizer phase by optimizer over the measured steps."""
        by_var = [v for v, _ in self._opt_names]
        # a variable name that two optimizers share (a loop's variable) names neither
        names = [f"{v} ({c.split(' #')[0]})" if v and by_var.count(v) == 1 else c
                 for v, c in self._opt_names]
        seconds = [0.0] * len(names)
        for i in self._measured():
            for k, v in self._opt_of[i].items():
                seconds[k] += v
        split = ", ".join(
            f"{n} {s:.3g} s" if s or not count else
            f"{n} none in the measured steps (its {count} step{'s' if count != 1 else ''} "
            "fell in warm-up or left-out steps)"
            for n, s, count in zip(names, seconds, self._opt_counts))
        groups = optimizer_groups(self._opts_of[:self.steps])
        kinds = "; ".join(f"{'+'.join(names[k] for k in group)}: {n} step{'s' if n != 1 else ''}"
                          for group, n in groups)
        if self.step_on == "backward":
            where = "steps end at backward passes"
        elif groups and all(len(g) == 1 for g, _ in groups):
            where = ("they stepped one after another, and an optimizer that steps again before "
                     "the others end a step ends its own: each optimizer step is a step ("
                     + kinds + ")")
        else:
            cycle = self._cycle or [0]
            where = (f"a step is one iteration, ending where {names[cycle[-1]]} steps"
                     if len(cycle) > 1 else f"a step ends where {names[cycle[0]]} steps")
            if len(groups) > 1:
                where += ("; an optimizer that steps again before the others end a step ends "
                          f"its own (steps by the optimizers in them: {kinds})")
        return (f"{len(names)} optimizers stepped ({', '.join(names)}): {where}; the optimizer "
                f"phase by optimizer{' (host time)' if self.cuda_used else ''}: {split}")

    def _check_limit(self) -> None:
        done = self.steps
        if self.limit is not None and done >= self.limit:
            if self.on_stop is not None:
                self.on_stop(self)
            else:
                raise StepLimit(f"{done} steps done")

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
                self._close_epoch()
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
        if (stack[-1][1] is None if stack else self._stack and self._stack[-1][0] == "data"):
            stack.append((0.0, None, module))  # a transform loading a batch: no layer
            return
        if not stack and id(module) not in self._names:
            self._name_tree(module)  # an outermost call: name its modules from it
        if stack and torch.is_grad_enabled():
            # nodes not tagged yet were made by the enclosing module's own code
            tag_graph(args, stack[-1][1])
        stack.append((self.clock(), self._names.get(id(module), type(module).__name__), module))

    def _layer_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self._layer_stack:
            return
        t0, name, _ = self._layer_stack.pop()
        t = self.clock() - t0
        if name is None or not torch.is_grad_enabled():
            return  # evaluation, as for the phases
        tag_graph(output, name)  # its backward nodes are charged to it
        row = self._step_fwd.get(id(module))
        if row is None:
            row = self._step_fwd[id(module)] = [name, type(module).__name__, 0, 0.0]
        row[2] += 1
        row[3] += t

    def _function_call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``functions``: a torch function call, timed as a row "MODULE (FUNCTION)" when a
        container's own forward code makes it (with gradients on, as for the layers) and it
        returns tensors (``x.size()``, ``x.shape``, ``t.grad_fn`` compute nothing: no row, as
        ``analyze --functions`` has none for them): a child of the module in the tree, so the
        module's own time leaves it out."""
        stack = self._layer_stack
        if (not stack or stack[-1][1] is None or not torch.is_grad_enabled()
                or getattr(func, "__name__", None) == "__get__"):
            return func(*args, **kwargs)
        _, name, module = stack[-1]
        container = self._containers.get(id(module))
        if container is None:
            container = self._containers[id(module)] = next(module.children(), None) is not None
        if not container:
            return func(*args, **kwargs)
        t0 = self.clock()
        out = func(*args, **kwargs)
        t = self.clock() - t0
        if not any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves(out)):
            return out
        fn = function_name(func)
        key = (id(module), fn)
        row = self._step_fwd.get(key)
        if row is None:
            row = self._step_fwd[key] = [f"{name} ({fn})", fn, 0, 0.0]
            if key not in self._paths and id(module) in self._paths:
                root, path = self._paths[id(module)]
                self._paths[key] = (root, tree.function_path(path, fn))
                self._trees[root].append(self._paths[key][1])
        row[2] += 1
        row[3] += t
        return out

    def _backward(self, engine: Callable[..., Any]) -> Callable[..., Any]:
        """The engine entry timed as ``backward``. With ``layers``, each autograd node's time is
        charged to the module whose forward made it (``analysis.timing.BackwardTimer``, as
        ``profile --backward`` does; the node hooks live on this backward's graph only). An
        outermost call that fills ``.grad`` (``backward()``; not ``torch.autograd.grad``, which
        returns the gradients) may end a step (``_backward_done``)."""
        def backward(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
            self._bwd_depth += 1
            self._enter("backward")
            timer, handles = None, []
            if self.layers:
                timer = BackwardTimer(self.model, cuda=self._cuda, clock=self.clock)
                handles = timer.instrument([t for t in t_outputs if isinstance(t, torch.Tensor)])
                timer.start()
            try:
                result = engine(t_outputs, *args, **kwargs)
            finally:
                for h in handles:
                    h.remove()
                if timer is not None:
                    for name, seconds in timer.result().items():
                        if name:
                            self._step_bwd[name] = self._step_bwd.get(name, 0.0) + seconds
                self._exit("backward")
                self._bwd_depth -= 1
            if not self._bwd_depth and kwargs.get("accumulate_grad", True):
                self._backward_done()
            return result
        backward.__wrapped__ = engine  # type: ignore[attr-defined]
        return backward

    def _name_tree(self, root: torch.nn.Module) -> None:
        """Qualified names of ``root``'s modules (the given model names its own)."""
        if self.model is not None and not self._names:
            self._names.update({id(m): n or type(self.model).__name__
                                for n, m in self.model.named_modules()})
            self._remember_tree(self.model)
        prefix = type(root).__name__
        for n, m in root.named_modules():
            self._names.setdefault(id(m), f"{prefix}.{n}" if n else prefix)
        self._remember_tree(root)

    def _remember_tree(self, root: torch.nn.Module) -> None:
        if id(root) in self._trees:
            return
        paths = []
        for n, m in root.named_modules():
            paths.append(n)
            self._paths.setdefault(id(m), (id(root), n))
        self._trees[id(root)] = paths

    def _layer_totals(self) -> tuple[dict[LayerKey, list[Any]], dict[str, float]]:
        """The per-layer forward rows and backward seconds summed over the measured steps."""
        measured = self._measured()
        return _sum_layers([self._fwd_of[i] for i in measured],
                           [self._bwd_of[i] for i in measured])

    def _own_seconds(self, fwd: dict[LayerKey, list[Any]]) -> dict[LayerKey, float]:
        """id(module) -> its forward own time in ``fwd`` (``tree.own_time``: inclusive minus
        the nearest descendants that ran, through never-called containers)."""
        inclusive: dict[int, dict[str, float]] = {}  # per root: path -> seconds
        for key, (_, _, _, s) in fwd.items():
            if key in self._paths:
                root, path = self._paths[key]
                inclusive.setdefault(root, {})[path] = s
        kids = {root: tree.children_map(self._trees[root]) for root in inclusive}
        out = {}
        for key in fwd:
            if key in self._paths:
                root, path = self._paths[key]
                out[key] = tree.own_time(path, inclusive[root], kids[root], inclusive[root])
        return out

    def layer_rows(self) -> list[dict[str, Any]]:
        """Per module: forward calls and seconds (inclusive of the modules inside it), its own
        forward seconds (without the modules it called) and the backward seconds of the
        autograd nodes its own code made, over the measured steps (the phases' steps: warm-up
        and a step left open are not counted)."""
        steps = max(len(self.step_seconds), 1)
        fwd, bwd = self._layer_totals()
        own = self._own_seconds(fwd)
        # each measured step's forward seconds per module (0 in a step that did not call it):
        # what layerscope diff ranks, as it ranks the phases' per-step seconds
        per_step: dict[LayerKey, list[float]] = {key: [] for key in fwd}
        for step in (self._fwd_of[i] for i in self._measured()):
            for key, xs in per_step.items():
                xs.append(step[key][3] if key in step else 0.0)
        rows = [{"name": name, "type": kind, "calls": calls, "forward_s": s,
                 "forward_s_per_step": s / steps,
                 "forward_samples_s": kept_samples(per_step[key]), "own_s": own.get(key, s),
                 "backward_s": bwd.get(name, 0.0)}
                for key, (name, kind, calls, s) in fwd.items()]
        return sorted(rows, key=lambda r: -r["forward_s"])

    # ---- the result ---------------------------------------------------------------
    def _range_notes(self, done: int) -> list[str]:
        """What kernels and nvtx did not cover: a window the script ended before filling (or
        before it opened), NVTX without CUDA."""
        from layerscope.analysis.nvtx import NO_CUDA_NOTE, available

        notes = []
        window = self._window
        if window is not None:
            result = window.result()
            if result is None and done > window.skip and not self._opt_seen \
                    and self.step_on == "optimizer":
                # the window moves at the step ends an optimizer step (or mark_step) makes;
                # steps that end at backward passes only while no optimizer is seen are
                # provisional (an accumulation's micro-steps until the first optimizer step)
                notes.append("--kernels: no optimizer.step() was seen, and the kernel window "
                             "opens at the step ends an optimizer step marks: no kernels "
                             "section; use --step-on backward (steps end where a backward() "
                             "returns)")
            elif result is None:
                notes.append(f"--kernels: the script ended after {done} step"
                             f"{'s' if done != 1 else ''}, before the kernel window opened (it "
                             f"opens at the end of step {window.skip}): no kernels section")
            elif result.steps < window.steps:
                notes.append(f"--kernels: the script ended {result.steps} step"
                             f"{'s' if result.steps != 1 else ''} into the kernel window: the "
                             f"kernels section covers {result.steps} of {window.steps} steps")
        if self.nvtx and not available():
            notes.append(NO_CUDA_NOTE)
        return notes

    def transient_rows(self) -> list[dict[str, Any]]:
        """The one-time costs kept out of the measured steps (``TransientCost`` records): each
        step left out (a compilation step, with dynamo's compile seconds in it; a first step
        far above the others), each warm-up step that compiled, and the profiler's start and
        stop (kernels), which no step holds."""
        done = self.steps
        left_out = self._transient(done)
        rows = []
        for i in range(done):
            why = left_out.get(i) or ("compile" if i < self.warmup_steps and self._compile_of[i]
                                      else None)
            if why is not None:
                rows.append({"kind": why, "step": i + 1, "seconds": self._seconds[i],
                             "compile_s": self._compile_of[i] or None,
                             "warmup": i < self.warmup_steps or None})
        for row in self._profiler_rows:
            kind = "profiler start" if row["what"] == "profiler start" else "profiler stop"
            rows.append({"kind": kind, "step": row["step"], "seconds": row["seconds"]})
        return [{k: v for k, v in row.items() if v is not None} for row in rows]

    def chrome_trace(self) -> dict[str, Any]:
        """The phases of every step as a Chrome trace (chrome://tracing, Perfetto), in the
        layout of ``train``'s distributed trace (training.chrome_trace): steps on one row,
        their phases on the next; host time (``trace=True`` keeps them)."""
        pid = int(os.environ.get("RANK", "0") or 0)
        t0 = self.step_spans[0][1] if self.step_spans else 0.0
        steps = [(f"step {step}", a - t0, b - a, {"warm-up": step <= self.warmup_steps})
                 for step, a, b in self.step_spans]
        phases = [(phase, a - t0, b - a, None) for phase, a, b in self.intervals if b > a]
        return chrome_trace.trace(chrome_trace.process_events(pid, self.name, steps, phases))

    def _environment(self) -> dict[str, Any]:
        """The environment, its torch threads those the steps ran with (when a step ended)."""
        env = with_load(self.load_at_start)  # a copy: environment() is cached
        if self.step_threads is not None:
            env["torch_threads"] = self.step_threads
        return env

    def step_on_used(self) -> str:
        """What ended the steps: "optimizer", or "backward" (given, or the fallback of the
        default when no optimizer stepped)."""
        fell_back = self.fallback and self._provisional and not self._opt_seen
        return "backward" if self.step_on == "backward" or fell_back else "optimizer"

    def report(self) -> TrainReport:
        """The ``train`` report of the steps measured so far."""
        totals = self.totals
        breakdown = totals.to_dict()
        epochs = [t.to_dict() for t in self.epoch_totals()]
        if not self.cuda_used:  # no device in use: no host-to-device phase to report
            for b in (breakdown, *epochs):
                b["seconds"].pop("h2d", None)
        wall = self.clock() - self._wall0
        notes = []
        if self.eval_seconds:
            notes.append(f"{self.eval_seconds:.3f} s of evaluation (forward passes and batches "
                         "without gradients) left out of the training steps")
        done = len(self._seconds)
        if done and not totals.steps:
            notes.append(f"all {done} steps were warm-up: nothing measured")
        if done and self._provisional and not self._opt_seen and self.step_on == "optimizer":
            notes.append("no optimizer.step() seen: each step ends where a backward() returns "
                         "(steps on backward passes)")
            if self.limit is not None:
                notes.append(f"the step limit ({self.limit}) did not act: it counts optimizer "
                             "steps and none was seen (with steps on backward passes it counts "
                             "those)")
        if totals.steps and not totals.samples:
            notes.append("samples not seen: no training batch came from a DataLoader, and the "
                         "training forwards had no tensor argument to read a batch size from "
                         "(keyword arguments only, or no module forward): no throughput")
        empty = sum(1 for n in self.step_samples if not n)
        if totals.samples and empty:
            notes.append(f"{empty} of {totals.steps} measured steps took no batch: a batch counts "
                         "in the step whose training forward of "
                         f"{self._sample_module[1] if self._sample_module else 'the model'} "
                         "takes it, so a batch used over several steps counts once; samples and "
                         "throughput are the other steps'")
        if self._samples_from_forward and not self._loader_seen and totals.samples:
            notes.append(f"no DataLoader batch seen: samples are the batch dimension (dim 0) of "
                         f"the first tensor argument of each training forward of "
                         f"{self._sample_module[1] if self._sample_module else 'the model'}"
                         + (", tokens its B x T token ids" if totals.tokens else ""))
        if len(self._opt_names) > 1:
            notes.append(self._optimizers_note())
        if self.children:
            notes.append(f"training ran in {self.children} child process"
                         f"{'es' if self.children > 1 else ''}, which "
                         f"{'are' if self.children > 1 else 'is'} not measured"
                         if not done else
                         f"{self.children} child process{'es' if self.children > 1 else ''} "
                         "started by the script (multiprocessing) not measured")
        elif not done and self._opt_seen and self.step_on == "optimizer":
            notes.append("no training step completed: the run ended inside the first step, in "
                         "or before its first optimizer.step()")
        elif not done and self._backwards and self.step_on == "optimizer" \
                and not self.fallback:
            notes.append(f"no training step seen: --step-on optimizer ends steps only at "
                         f"optimizer.step(), and none ran ({self._backwards} backward() "
                         "call(s) did): for a loop without a torch.optim optimizer, use "
                         "--step-on auto (the default: steps end at backward passes when no "
                         "optimizer steps) or backward (watch(step_on=...))")
        elif not done:
            notes.append("no training step seen: no optimizer.step(), no backward() and no "
                         "mark_step()" if self.step_on == "optimizer" else
                         "no training step seen: no backward() and no mark_step()")
            if self.limit is not None:
                notes.append(f"the step limit ({self.limit}) did not act: no step ended")
        group = self.process_group
        if group and group["world_size"] > 1:
            notes.append(process_group_note(group))
        rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
        if group and not (rank and world):  # a group a trainer formed (no launcher's env)
            rank, world = str(group["rank"]), str(group["world_size"])
        argv = self.argv if self.argv is not None else list(sys.argv[1:])
        # counted once the hooks are gone (the count runs the model's forward once more)
        efficiency, why = (None, None) if self._running else self._seen.efficiency(
            self._measured(), self.step_seconds, "cuda" if self.cuda_used else "cpu",
            int(world) if world and world.isdigit() else 1,
            outside=f"Other, {totals.seconds.get('other', 0.0) / totals.wall:.0%} of the "
                    "measured steps" if totals.wall else "")
        notes += [why] if why else []
        transients = self.transient_rows()
        if transients:
            notes.append(transients_note(transients))
        if self._guard is not None:
            notes += [caught_note(pm) for pm in self._guard.caught(self.post_mortem)]
        notes += self._range_notes(done)
        given = self.what_if.given() if self.what_if is not None else {}
        if given:
            notes.insert(0, self.what_if.note())
        return TrainReport(
            recipe=self.name,
            config={"device": "cuda" if self.cuda_used else "cpu",
                    "warmup_steps": self.warmup_steps, "steps": self.limit,
                    "layers": self.layers, "memory": self.memory,
                    "step_on": self.step_on_used(),
                    **({"memory_limit": self.memory_limit} if self.memory_limit else {}),
                    **({"functions": True} if self.functions else {}),
                    **({"kernels": True} if self.kernels else {}),
                    **({"nvtx": True} if self.nvtx else {}),
                    **given, **({"what_if": self.what_if.flags()} if given else {})},
            run_dir="", epochs=[], breakdown=breakdown, epoch_breakdown=epochs,
            step_seconds=list(self.step_seconds),
            step_phases=per_step(self.step_phases) if self.step_phases else None,
            cpu_utilisation=(time.process_time() - self._cpu0) / wall if wall > 0 else None,
            peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            peak_cuda_bytes=max(self._cuda_peak, torch.cuda.max_memory_allocated())
            if self.cuda_used else None,
            notes=notes, environment=self._environment(),
            script={"name": self.name, "argv": argv, **self.started},
            rank=int(rank) if rank and rank.isdigit() else None,
            world_size=int(world) if world and world.isdigit() else None,
            layers=self.layer_rows() if self.layers else None,
            phase_memory={k: dict(v) for k, v in self._mem.items()} if self.memory else None,
            process_group=group, efficiency=efficiency,
            transients=[TransientCost.from_dict(t) for t in transients] or None,
            kernels=self._window.result() if self._window is not None else None,
            # the record, as a report read back from JSON holds it (the views read its fields)
            post_mortem=None if self.post_mortem is None
            else PostMortem.from_dict(self.post_mortem),
            data_loading=self._probe.result(h2d_s=totals.seconds.get("h2d", 0.0),
                                            cuda=self.cuda_used)
            if self._probe is not None else None)


def optimizer_groups(steps: list[tuple[int, ...]]) -> list[tuple[tuple[int, ...], int]]:
    """How many steps each set of optimizers made (each step's optimizers, in first-step
    order within it, once each), the sets in the order they first appear."""
    counts: dict[tuple[int, ...], int] = {}
    for step in steps:
        if step:
            key = tuple(dict.fromkeys(step))
            counts[key] = counts.get(key, 0) + 1
    return list(counts.items())


def transient_text(row: dict[str, Any]) -> str:
    """One one-time cost in words: "compile 167 s in step 1", "profiler stop and export 6.9 s
    after step 4"."""
    seconds = row["seconds"]
    text = f"{seconds:.3g} s" if seconds >= 0.01 else f"{seconds * 1e3:.3g} ms"
    kind, step = row["kind"], row.get("step")
    if kind == "compile":
        compiled = row.get("compile_s")
        return (f"compile {text} in step {step}"
                + (f" ({compiled:.3g} s of it compiling)" if compiled else "")
                + (" (a warm-up step)" if row.get("warmup") else ""))
    if kind == "first step":
        return f"first step {text} (step {step}: far above the others, a one-time cost)"
    if kind == "profiler start":
        return f"profiler start {text} after step {step}"
    return f"profiler stop and export {text} after step {step}"


def transients_note(rows: list[dict[str, Any]]) -> str:
    """The note that names the one-time costs the measured steps leave out."""
    return ("one-time costs kept out of the measured steps (their phases, MFU and advice): "
            + "; ".join(transient_text(r) for r in rows))


def process_group_note(group: dict[str, Any]) -> str:
    """What a watched step of a process in a group of several holds: the hooks see backward
    and the optimizer, not the collectives DDP runs inside backward."""
    return (f"the script formed a process group (rank {group['rank']} of "
            f"{group['world_size']}, {group['backend']}): backward includes the gradient "
            "all-reduce that DDP overlaps with it; communication is not timed separately, and "
            "the ranks' waits for each other are not measured")


def _sum_layers(fwd_of: list[dict[LayerKey, list[Any]]], bwd_of: list[dict[str, float]]
                ) -> tuple[dict[LayerKey, list[Any]], dict[str, float]]:
    """Per-step layer rows (id(module) -> [name, type, calls, s]) and backward seconds (module
    name -> s) added up over the steps given."""
    fwd: dict[LayerKey, list[Any]] = {}
    for step in fwd_of:
        for key, (name, kind, calls, s) in step.items():
            row = fwd.setdefault(key, [name, kind, 0, 0.0])
            row[2] += calls
            row[3] += s
    bwd: dict[str, float] = {}
    for step in bwd_of:
        for name, s in step.items():
            bwd[name] = bwd.get(name, 0.0) + s
    return fwd, bwd


class _FunctionMode(TorchFunctionMode):
    """Sees the outermost torch function calls (``F.relu``, ``Tensor.__add__``, ``torch.cat``;
    while it runs the mode is off, so nested calls are not seen) for ``Watch._function_call``."""

    def __init__(self, watch: Watch):
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        return self.watch._function_call(func, args, kwargs or {})


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
