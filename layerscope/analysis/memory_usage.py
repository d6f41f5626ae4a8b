"""``layerscope.memory``: where the memory of one inference pass or one training step goes, as a
``MemoryReport``. Static by default (fake tensors: no memory used, any size); ``measure=True``
also runs the same step for real on the CPU and reconciles the two (``memory_track`` tracks
both)."""
from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

from layerscope.analysis.memory_settings import (
    DEFAULT_OPTIMIZER,
    MemorySettings,
    memory_settings,
)
from layerscope.analysis.profiling import recorded_in
from layerscope.core.errors import UserError, first_line
from layerscope.core.records.memory import (
    MemoryFit,
    MemoryFitSeq,
    MemoryReport,
    MemoryRow,
    Reconciliation,
    TimelinePoint,
)


def memory(model: str | nn.Module | None = None, inputs: Any = None, *,
           settings: MemorySettings | None = None, kwargs: dict[str, Any] | None = None,
           **overrides: Any) -> MemoryReport:
    """The live set of one inference pass (``mode="inference"``: eval mode, no grad) or one
    steady-state training step (``"training"``: ``train_step.step``, the step
    ``layerscope train`` runs: zero_grad, forward, a classifier's cross-entropy or nll against
    int64 labels (any other output's sum), backward, ``optimizer.step()``), by module and kind
    at its peak and over time. ``settings``: a ``MemorySettings``; keyword arguments override
    its fields (``mode="training"``).

    ``model``, ``inputs``, ``kwargs``, ``batch_size``, ``seq_len``: as ``layerscope.analyze``.
    ``optimizer``: sgd, momentum, adam, adamw or adadelta (default adam), or a function of the
    parameters returning your optimizer (``lambda ps: torch.optim.Adam(ps, lr=1e-3)``);
    ``set_to_none``: what your ``optimizer.zero_grad`` does (True, torch's default: gradients
    are freed each step; False: kept and zeroed). ``measure``: also run the step for real on
    the CPU (private copies of the weights; inputs given as shapes are zeros) and reconcile its
    peak with the static one. ``fit``: a memory budget (bytes, or '24GB', '24GiB'): also the
    largest batch size whose static peak fits it (``report.fit``; with ``measure``, confirmed
    by measured CPU steps there and one larger); ``fit_seq``: also the longest sequence length
    that fits it at this batch size (language models, ``report.fit_seq``). ``device``: where
    ``measure`` runs the step, cpu or cuda (on CUDA the caching allocator's and the driver's
    figures join the reconciliation, ``memory_cuda``). A forward that needs real values (fake
    tensors cannot run it) has its step run for real instead of statically; with ``measure``
    that one measured step gives both figures. The model is left as it was."""
    from layerscope.analysis.runtime import check_device
    from layerscope.core.environment import environment
    from layerscope.frontends.inputs import call_text

    s = memory_settings(settings, model, inputs, overrides)
    check_device(s.device)
    cap = _seq_cap(s.model) if s.fit_seq else None
    loaded, module, notes = _loaded(s, kwargs)
    optimizer = s.optimizer or DEFAULT_OPTIMIZER
    step = _Step(loaded, s.mode == "training",
                 _over_given(optimizer) if callable(optimizer) else optimizer, s.set_to_none)
    static, real, rss, cuda, ran_real = _runs(s, kwargs, loaded, module, step)
    report = report_of_run(static, loaded.name, s.mode, call_text(loaded.inputs, loaded.kwargs))
    report.batch_size = s.batch_size if s.batch_size is not None else _batch(loaded.inputs)
    report.optimizer = (optimizer if isinstance(optimizer, str) else "custom") \
        if step.training else None
    report.settings = {"mode": s.mode, "measure": s.measure,
                       **({"set_to_none": s.set_to_none} if step.training else {}),
                       **({"ran": "real"} if ran_real is not None else {})}
    report.notes = notes + _notes(step.training, s.set_to_none, ran_real, s.device) \
        + static.notes
    if real is not None:
        report.measured_peak_bytes = real.log.peak()[1]
        report.reconciliation = reconciliation_of(report.peak_bytes, real, rss)
        if cuda:
            from layerscope.analysis.memory_cuda import fill_cuda

            fill_cuda(report.reconciliation, cuda[0])
    if s.fit is not None:
        _fits(report, s, kwargs, cap)
    report.environment = environment()
    return recorded_in(report, s)


@dataclasses.dataclass
class _Step:
    """What every run of the step takes besides the module."""
    loaded: Any
    training: bool
    optimizer: Any
    set_to_none: bool

    def run(self, module: nn.Module, *, real: bool, **how: Any):
        return _run(module, self.loaded, self.training, self.optimizer, self.set_to_none,
                    real=real, **how)


def _loaded(s: MemorySettings, kwargs: dict[str, Any] | None):
    """The loaded model, its PyTorch module and the notes unwrapping it made; a module memory
    cannot track is refused."""
    from layerscope.analysis.analyze_torch import load
    from layerscope.analysis.model_prep import has_forward, is_lazy, unwrap

    loaded = load(s.model, s.inputs, s.batch_size, kwargs=kwargs, seq_len=s.seq_len)
    module, notes = unwrap(loaded.module, loaded.name)
    if isinstance(module, torch.jit.ScriptModule) or not has_forward(module):
        raise UserError(f"{loaded.name}: memory needs a PyTorch module with a forward() "
                        "(not TorchScript, not a container of modules)")
    if is_lazy(module):
        raise UserError(f"{loaded.name} has lazy (uninitialised) parameters: run it once on an "
                        "example input before tracking its memory")
    return loaded, module, notes


def _runs(s: MemorySettings, kwargs: dict[str, Any] | None, loaded, module: nn.Module,
          step: _Step):
    """The static run (or, for a forward that needs real values, the step run for real in its
    place) and, with ``measure``, the measured one: (static, real, its RSS, its CUDA figures,
    why the step ran for real or None)."""
    def real_weights(m: nn.Module) -> nn.Module:
        return _real_weights(s.model, s.inputs, kwargs, s.batch_size, s.seq_len, m, loaded)

    needs_real = None  # the static run stopped: the forward needs real values
    static = None
    try:
        static = step.run(module, real=False)
    except NeedsRealValues as exc:
        needs_real = exc
    if needs_real is not None:
        if s.fit is not None:
            raise UserError(f"{needs_real}; fit traces the step at other batch sizes on fake "
                            "tensors, which this model cannot run on: leave it out for the "
                            "measured figures at this size", arguments="fit")
        # as analyze does: the step runs for real (with measure, as the measured step, which
        # then serves as both), on private copies of the weights and zero inputs, and the
        # same tracker counts its storages
        try:
            module = real_weights(module)
        except UserError:
            raise UserError(f"{needs_real}, and it is too large to run for real here") from None
        _refuse_weights_elsewhere(module, s.device, str(needs_real))
    elif s.measure:
        module = real_weights(module)
        _refuse_weights_elsewhere(
            module, s.device, f"{loaded.name}: measure runs the step on the "
                              f"{_where(s.device)}, and the model's weights are on another "
                              "device (or the meta device: a config without weights); leave "
                              "it out for the static figures", arguments="measure")
    real, rss, cuda = None, None, []
    if s.measure:  # one measured step: with the static run refused, it serves as both
        rss = PeakRss()
        real = step.run(module, real=True, device=s.device,
                        around=rss if s.device == "cpu" else _with_cuda(rss, cuda))
        static = real if needs_real is not None else static
    elif needs_real is not None:  # device is the CPU: a GPU is for measure only
        static = step.run(module, real=True)
    return static, real, rss, cuda, None if needs_real is None else needs_real.reason


def _fits(report: MemoryReport, s: MemorySettings, kwargs: dict[str, Any] | None,
          cap: int | None) -> None:
    """``report.fit`` (and with ``fit_seq``, ``report.fit_seq``): the same step at other sizes
    against the budget ``s.fit``."""
    def peak(**over) -> MemoryReport:  # the same step at another size (measured on the CPU
        # unless asked, with measure, on the device)
        over = {"fit": None, "fit_seq": False, "measure": False, **over}
        return memory(settings=MemorySettings.of(
            s, **over, device=s.device if over["measure"] else "cpu"), kwargs=kwargs)

    assert s.fit is not None
    report.fit = _fit_batch(report, s.fit, peak, s.measure)
    if s.fit_seq:
        report.fit_seq = _fit_seq(report, s.seq_len, s.fit, peak, cap)



def _over_given(factory: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``factory``, refusing an optimizer over other tensors than the parameters it is given
    (the user's own optimizer, over the user's own model): the step runs on private copies, so
    such an optimizer would step nothing the run tracks and clear the user's gradients."""
    def made(params):
        out = factory(params)
        given = {id(p) for p in params}
        if isinstance(out, torch.optim.Optimizer) and any(
                id(p) not in given for group in out.param_groups for p in group["params"]):
            raise UserError("optimizer must build a new optimizer over the parameters it is "
                            "given (lambda ps: torch.optim.Adam(ps)); it returned one over "
                            "other tensors (an optimizer you already made?)",
                            arguments="optimizer")
        return out

    return made


def _fit_batch(report: MemoryReport, budget: int, peak, measure: bool) -> MemoryFit:
    """The largest batch size that fits ``budget`` (``memory_fit.largest_batch``), confirmed
    with measured CPU steps there and one larger where ``measure`` asks for it."""
    from layerscope.analysis.memory_fit import largest_batch

    known = {report.batch_size: report.peak_bytes} if report.batch_size else {}
    solved = largest_batch(lambda n: peak(batch_size=n).peak_bytes, budget, known)
    notes, confirmed = list(solved.notes), False
    if not measure:
        notes.append("not confirmed: static figures only (--measure runs measured CPU steps "
                      "at the answer and one larger)")
    else:
        try:
            at, after = (peak(batch_size=n, measure=True).measured_peak_bytes
                         for n in (solved.size, solved.size + 1))
        except UserError as exc:
            notes.append(f"not confirmed: the measured step could not run ({exc})")
        else:
            confirmed = at <= budget < after
            notes.append(f"measured on the CPU: {at:,} bytes at {solved.size:,}, {after:,} at "
                         f"{solved.size + 1:,}" + ("" if confirmed else
                                                    ": the measured steps disagree with the "
                                                    "static answer"))
    return MemoryFit(budget_bytes=budget, max_batch_size=solved.size,
                     bytes_at_max=solved.bytes_at_max, bytes_at_next=solved.bytes_at_next,
                     confirmed=confirmed, method=solved.method, notes=notes)


def _seq_cap(model) -> int | None:
    """The longest sequence ``model`` (a language model: a preset or an hf: config) takes: its
    position table's length, or None where nothing caps it (rotary positions)."""
    from layerscope.analysis.llm import resolve_llm

    if not isinstance(model, str):
        raise UserError("fit_seq needs a language model given by name (a preset or "
                        "hf:CONFIG.json), not a module", arguments="fit_seq")
    source = resolve_llm(model)
    return source.config.max_position if source.position_cap() else None


def _fit_seq(report: MemoryReport, seq_len: int | None, budget: int, peak,
             cap: int | None) -> MemoryFitSeq:
    """The longest sequence length that fits ``budget`` at the report's batch size (the report
    traced at ``seq_len``), up to ``cap`` (``_seq_cap``)."""
    from layerscope.analysis.memory_fit import largest_seq

    known = {seq_len: report.peak_bytes} if seq_len is not None else {}
    solved = largest_seq(lambda n: peak(seq_len=n).peak_bytes, budget, cap, known)
    return MemoryFitSeq(budget_bytes=budget, batch_size=report.batch_size or 1,
                        max_seq_len=solved.size, bytes_at_max=solved.bytes_at_max,
                        bytes_at_next=solved.bytes_at_next, method=solved.method,
                        notes=solved.notes)


def _real_weights(model, inputs, kwargs, batch_size, seq_len, module: nn.Module,
                  loaded) -> nn.Module:
    """The module to measure: ``module`` itself, or for a built-in model (built on the meta
    device for the static run) the same model built again with real random weights, once its
    weights and inputs are known to fit the real run's bounds (``capture.real``)."""
    from layerscope.analysis.analyze_torch import load
    from layerscope.analysis.capture import REAL_INPUT_LIMIT, REAL_WEIGHT_LIMIT, slots
    from layerscope.analysis.capture.inputs import inputs_nbytes
    from layerscope.analysis.capture.tensors import tensor_nbytes
    from layerscope.analysis.model_prep import unwrap
    from layerscope.core.units import megabytes as mb

    need = inputs_nbytes(loaded.inputs, loaded.kwargs, None)
    weights = sum(tensor_nbytes(t) for _, _, t in slots(module))
    if need > REAL_INPUT_LIMIT or weights > REAL_WEIGHT_LIMIT:
        raise UserError(f"{loaded.name}: measure would allocate {mb(need)} MB of inputs and "
                        f"{mb(weights)} MB of weights (limits {mb(REAL_INPUT_LIMIT)} MB and "
                        f"{mb(REAL_WEIGHT_LIMIT)} MB); leave it out: the static figures need "
                        "no memory", arguments="measure")
    if not isinstance(model, str) or not any(t.device.type == "meta"
                                             for t in module.parameters()):
        return module
    again = load(model, inputs, batch_size, meta=False, kwargs=kwargs, seq_len=seq_len)
    return unwrap(again.module, again.name)[0]


def _refuse_weights_elsewhere(module: nn.Module, device: str, message: str,
                              arguments: str | tuple[str, ...] = ()) -> None:
    """A step that runs for real runs on the CPU or ``device``: ``message`` (one line) refuses
    a module with a parameter or buffer anywhere else (the meta device of a config without
    weights, another GPU)."""
    if any(t.device.type not in ("cpu", device)
           for t in list(module.parameters()) + list(module.buffers())):
        raise UserError(message, arguments=arguments)


def _where(device: str) -> str:
    """Where a step on ``device`` (cpu or cuda) runs, in words."""
    return "CPU" if device == "cpu" else "CUDA GPU"


def _batch(inputs: list[Any]) -> int | None:
    first = inputs[0] if inputs else None
    shape = getattr(first, "shape", None)
    return int(shape[0]) if shape else None


def _with_cuda(rss: PeakRss, into: list[dict[str, int]]):
    """``around`` for a measured step on CUDA: the resident set and the allocator's figures
    (``memory_cuda.cuda_figures``, appended to ``into``)."""
    from layerscope.analysis.memory_cuda import cuda_figures

    @contextlib.contextmanager
    def both():
        with rss(), cuda_figures(torch.device("cuda", torch.cuda.current_device()),
                                 into.append):
            yield
    return both


class NeedsRealValues(UserError):
    """The static run stopped: the forward needs real values (``reason``), so the step can
    only be tracked running for real."""

    def __init__(self, name: str, reason: str):
        super().__init__(f"{name}: the static run cannot track this model: {reason}")
        self.reason = reason


def _run(module: nn.Module, loaded, training: bool, optimizer, set_to_none: bool, *,
         real: bool, around=None, device: str = "cpu"):
    from layerscope.analysis.capture.nodynamo import without_dynamo

    with without_dynamo():  # the step compiles nothing
        return _run_step(module, loaded, training, optimizer, set_to_none, real=real,
                         around=around, device=device)


def _run_step(module: nn.Module, loaded, training: bool, optimizer, set_to_none: bool, *,
              real: bool, around=None, device: str = "cpu"):
    from layerscope.analysis.capture import InputSpec, ModelRunError, fake_like
    from layerscope.analysis.capture.fake import real_run_reason
    from layerscope.analysis.capture.inputs import zeros_for
    from layerscope.analysis.capture.real import private_copy
    from layerscope.analysis.memory_track import track
    from layerscope.frontends.inputs import call_text

    fake_mode = None
    if real:
        def replace(t):
            if device == "cpu":
                return private_copy(t, None)
            moved = t.detach().to(device, copy=True)
            return nn.Parameter(moved, requires_grad=t.requires_grad) \
                if isinstance(t, nn.Parameter) else moved

        def make_input(x):
            return zeros_for(x, None, device) if isinstance(x, InputSpec) else \
                x.detach().to(device, copy=True)
    else:
        from torch._subclasses.fake_tensor import FakeTensorMode

        fake_mode = FakeTensorMode()
        around = _UnknownSizes(loaded.name)

        def replace(t):
            return fake_like(t, None, training and isinstance(t, nn.Parameter)
                             and t.requires_grad, fake_mode)

        def make_input(x):
            return zeros_for(x, None, "cpu") if isinstance(x, InputSpec) else \
                fake_like(x, None, False)
    try:
        return track(module, loaded.inputs, loaded.kwargs, training=training,
                     optimizer=optimizer, set_to_none=set_to_none, replace=replace,
                     make_input=make_input, fake_mode=fake_mode, around=around)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - the model's own error, one line
        reason = None if real else real_run_reason(exc)
        if reason is not None:
            raise NeedsRealValues(loaded.name, reason) from exc
        if isinstance(exc, ModelRunError):
            raise UserError(f"{loaded.name}: {exc}") from exc
        raise UserError(f"{loaded.name} rejected input {call_text(loaded.inputs, loaded.kwargs)}"
                        f": {first_line(exc, with_type=True)}") from exc


# ops whose fake (meta) kernel gives an output a size the real kernel does not, when called
# with the argument at this index true: op name -> (argument index, why, in one phrase)
_FAKE_SIZE_UNKNOWN = {
    "aten::mkldnn_rnn_layer": (15, "an LSTM's CPU kernel (oneDNN) keeps a workspace for "
                                   "backward whose size fake tensors do not know"),
}


class _UnknownSizes(TorchDispatchMode):
    """Refuses, in one line, a static run reaching an op in ``_FAKE_SIZE_UNKNOWN``: its figure
    would be silently wrong. Entered around the tracked step (``track``'s ``around``)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def __call__(self):
        return self

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        known = _FAKE_SIZE_UNKNOWN.get(func._schema.name)
        if known is not None and len(args) > known[0] and args[known[0]]:
            raise UserError(f"{self.name}: the static run cannot track this model: {known[1]}; "
                            "use mode inference (a training step's figure would be wrong)",
                            arguments="mode")
        return func(*args, **(kwargs or {}))


def report_of_run(run, name: str, mode: str, inputs: str) -> MemoryReport:
    from layerscope.analysis.memory_log import live_rows

    log = run.log
    peak_t, peak = log.peak()
    rows = [MemoryRow(module, kind, nbytes)
            for (module, kind), nbytes in live_rows(log, peak_t).items() if nbytes]
    rows.sort(key=lambda r: (-r.bytes, r.module, r.kind))
    assert sum(r.bytes for r in rows) == peak, "the live rows must sum to the peak"
    return MemoryReport(model=name, mode=mode, peak_bytes=peak, peak_phase=log.timeline[peak_t][1],
                        peak_t=peak_t, by_module_kind=rows,
                        timeline=[TimelinePoint(t, nbytes, phase)
                                  for t, (nbytes, phase) in enumerate(log.timeline)],
                        inputs=[inputs])


def _notes(training: bool, set_to_none: bool, ran_real: str | None = None,
           device: str = "cpu") -> list[str]:
    out = ["static: the step ran on fake tensors (no memory used); a kernel's internal "
           "workspace (oneDNN, cuDNN) and the allocator's rounding and caching are not counted"
           if ran_real is None else
           f"measured, not static: {ran_real}, so the step ran for real on the "
           f"{_where(device)} (private copies of the weights, zero inputs) and these figures "
           "are its tracked tensor storages; a kernel's internal workspace and the "
           "allocator's rounding and caching are not counted"]
    if training:
        out += ["one untracked step ran first, so the optimizer's state exists (it is created "
                "by the first step); the tracked step is a steady-state one",
                "zero_grad(set_to_none=True): gradients are freed at each step's start"
                if set_to_none else
                "zero_grad(set_to_none=False): gradients are kept (zeroed) between steps"]
    return out


class PeakRss:
    """The growth of the process's peak resident set over a block (Linux: /proc/self; the peak is
    reset on entry by writing 5 to clear_refs). ``grown`` is None where it cannot be read."""

    def __init__(self) -> None:
        self.grown: int | None = None
        self.why = ""

    @contextlib.contextmanager
    def __call__(self):
        start = _status("VmRSS")
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError as exc:
            start = None
            self.why = f"the peak resident set cannot be reset here ({exc.strerror})"
        yield
        end = _status("VmHWM")
        if start is not None and end is not None:
            self.grown = end - start


def _status(key: str) -> int | None:
    """A field of /proc/self/status in bytes (None off Linux)."""
    if not os.path.exists("/proc/self/status"):
        return None
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return None


def reconciliation_of(static_peak: int | None, real, rss: PeakRss) -> Reconciliation:
    """The measured run ``real`` beside ``static_peak`` (None: there was no static run, as for
    a script's own step) and the growth of the resident set ``rss`` saw."""
    measured = real.log.peak()[1]
    start = real.log.timeline[0][0]
    notes = []
    unexplained = None
    if rss.grown is not None:
        unexplained = rss.grown - (measured - start)
        notes.append("rss_bytes: the process's peak resident set grew by this during the "
                     "measured step; the tracked storages grew by "
                     f"{measured - start:,} bytes (peak - live at the start); the rest is the "
                     "allocator's and kernels' own (negative: the allocator reused memory "
                     "it kept from before the step" + (", such as the untracked first step's"
                                                       if real.phases != ("forward",) else "")
                     + ")")
    else:
        notes.append(rss.why or "the resident set is read on Linux only")
    return Reconciliation(static_peak_bytes=static_peak, measured_peak_bytes=measured,
                          difference=None if static_peak is None else measured - static_peak,
                          rss_bytes=rss.grown,
                          unexplained_bytes=unexplained, notes=notes)
