"""``layerscope.profile``: measured per-layer latency joined with the static cost of each layer.

Method (docs/design.md, "Timing and noise"):
- warm-up runs, then bare and instrumented runs *alternate*, so drift and noise hit both alike;
- end-to-end statistics come from the bare runs only (no hooks installed);
- per-layer times come from the instrumented runs (``timing.ForwardTimer``), per run, then
  reduced to statistics; containers' rows get their own-code time (``tree.own_time``:
  inclusive minus the nearest descendants that were called, so the blocks in a never-called
  ``ModuleList`` are subtracted from the module whose code calls them);
- self-measurement, in every output, each from quantities measured side by side (a ratio of
  medians taken from different samples swung from 28% to 70% on a loaded machine):
  ``coverage`` = median over instrumented runs of (sum of the rows' times in that run / that
  run's wall time); the rows never overlap (leaves, depth-cut subtrees, containers' own ops), so
  their sum is the time attributed to some layer. ``overhead`` = median over the interleaved
  (bare, instrumented) pairs of instrumented / bare - 1: both runs of a pair see the same drift.
- ``share`` of a row = its time / the wall time of the same instrumented run, averaged over the
  middle runs by wall time (``core.stats.middle_runs``: a 10% trimmed mean, the same runs for
  every row). Means over the same runs add up, so a layer type's share (``by_type``: over the
  same rows, per-run sums) is exactly the sum of its rows' shares, and all shares sum to the
  attributed fraction of a typical run (close to ``coverage``).
- ``noise``: spread, load and threads vs CPUs (``core.noise``), read at the start.
"""
from __future__ import annotations

import copy
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn as nn
from torch.utils import _pytree as pytree

from layerscope.analysis import modes
from layerscope.analysis.timing import BackwardTimer, Clock, ForwardTimer
from layerscope.core import tree, values
from layerscope.core.errors import UserError, first_line
from layerscope.core.noise import MachineReading, noise_section, read_machine
from layerscope.core.records import Achieved, BackwardTiming, EndToEnd, TypeTiming
from layerscope.core.report import LayerRow, Report
from layerscope.core.stats import DRIFT_BLOCKS, TimingStats, median_of_ratios, middle_runs
from layerscope.frontends.inputs import real_inputs, real_kwargs

Progress = Callable[[int, int], None]


def check_device(device: str) -> None:
    values.device(device, "device")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("device cuda: no CUDA GPU is available here "
                        "(torch.cuda.is_available() is False); use cpu",
                        arguments="device")


@contextmanager
def intra_op_threads(threads: int | None) -> Iterator[int]:
    """torch's intra-op threads set to ``threads`` (validated by the caller with
    ``values.thread_count``; None leaves them as they are) inside the block and restored after
    it; yields the count before."""
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield old
    finally:
        torch.set_num_threads(old)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _tensors(obj) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(obj) if isinstance(t, torch.Tensor)]


def _row_key(name: str) -> str:
    return "" if name == "(root)" else name


def _row_samples(report: Report, per_run: list[dict[str, float]], kids: dict[str, list[str]],
                 called: list[set[str]] | None = None) -> list[list[float]]:
    """Per row, one sample per run: inclusive time, or own time for ``self_only`` rows
    (``tree.own_time``: minus the nearest descendants ``called`` in that run).

    ``called=None`` means ``per_run`` holds *exclusive* times per module (backward), which a
    row sums over the modules it stands for."""
    out = []
    for row in report.layers:
        fn = row.function()
        key = _row_key(row.name) if fn is None else tree.function_path(*fn)
        if called is not None:
            if row.self_only:
                out.append([tree.own_time(key, run, kids, ran)
                            for run, ran in zip(per_run, called)])
            else:
                out.append([run.get(key, 0.0) for run in per_run])
        else:
            members = [key] if row.self_only else tree.subtree(key, kids)
            out.append([sum(run.get(m, 0.0) for m in members) for run in per_run])
    return out


SPAN_S = 1.0  # the least wall time a fixed count of measured runs is spread over


class _Runs:
    """How many measured runs: a fixed count, or until a time budget is spent.

    A fixed count of at least two runs a block (``core.stats.DRIFT_BLOCKS`` blocks) is spread
    over at least ``SPAN_S`` seconds: measured run i starts no earlier than i / runs of the span
    after the first, and until then the caller runs unmeasured (``early``), so the machine is as
    busy between two measured runs as during them. The machine a profile runs on changes on a
    scale of a second (another program's time slice, the clock of a shared core): 30 runs of a
    small model back to back take 50 ms and see one state of it, so two profiles taken a few
    seconds apart differ by more than either run's spread shows. Spread over the span, each
    block of a profile's samples (``core.stats.block_drift``) sees a different part of it, and
    ``diff`` judges a change against how far they wander. A time budget (``min_time``) sets its
    own span."""

    def __init__(self, runs: int | None, min_time: float | None,
                 now: Callable[[], float] = time.perf_counter):
        if runs is not None:
            runs = values.positive_int(runs, "runs")
        if min_time is not None:
            min_time = values.finite_positive_float(min_time, "min_time",
                                                    maximum=values.MIN_TIME_MAX)
        self.runs = runs if runs is not None else (None if min_time else 30)
        self.min_time = min_time
        self.now = now
        self.started = now()
        self.spread = self.runs is not None and self.runs >= 2 * DRIFT_BLOCKS
        self.filler = 0  # unmeasured runs taken to spread the measured ones

    def start(self) -> None:
        """The measured runs begin (after warm-up)."""
        self.started = self.now()

    def more(self, done: int) -> bool:
        if self.runs is not None:
            return done < self.runs
        return done < 3 or self.now() - self.started < self.min_time

    def total(self, done: int) -> int:
        return self.runs if self.runs is not None else max(done + 1, 3)

    def early(self, done: int) -> bool:
        """Before measured run ``done``: True while its time in the span has not come (the
        caller then runs once unmeasured and asks again)."""
        if not self.spread or self.runs is None:
            return False
        if self.now() - self.started < done * SPAN_S / self.runs:
            self.filler += 1
            return True
        return False


def prepare_model(model: Any, inputs: Any, batch_size: int | None, device: str,
             dtype: torch.dtype | None, kwargs: dict[str, Any] | None = None):
    from layerscope.analysis.analyze_torch import load

    loaded = load(model, inputs, batch_size, meta=False, kwargs=kwargs)
    module = loaded.module
    meta = next((name for name, t in [*module.named_parameters(), *module.named_buffers()]
                 if t.is_meta), None)
    if meta is not None:  # moving it raises NotImplementedError; running it computes nothing
        raise UserError(f"{loaded.name}: {meta} is on the meta device (a shape without values), "
                        "so the model cannot run to be measured; load its weights first "
                        "(module.to_empty(device=...) then load_state_dict), or count it "
                        "without running: analyze")
    needs_move = any(t.device.type != device or (dtype is not None and t.is_floating_point()
                                                 and t.dtype != dtype)
                     for t in list(module.parameters()) + list(module.buffers()))
    if needs_move:
        if not isinstance(model, str):
            module = copy.deepcopy(module)  # never move or cast the caller's module
        module = module.to(device=device, dtype=dtype) if dtype else module.to(device)
    return loaded, module, real_inputs(loaded.inputs, device, dtype)


def profile(model: str | nn.Module, inputs: Any = None, *, kwargs: dict[str, Any] | None = None,
            batch_size: int | None = None,
            device: str = "cpu", threads: int | None = None, runs: int | None = None,
            min_time: float | None = None, warmup: int = 5, depth: int | None = None,
            backward: bool = False, dtype: str | torch.dtype | None = None,
            roofline: bool = True, clock: Clock = time.perf_counter,
            progress: Progress | None = None, functions: bool = False,
            kernels: bool = False, nvtx: bool = False) -> Report:
    """Measured latency per layer (median, p10, p90, mean, n), with the static columns.
    ``functions``: each container's own-code row is split into one row per torch function
    it calls (as ``analyze(functions=True)`` splits it), each timed; forward only.
    ``kernels``: afterwards, a short torch.profiler window joined to modules (the report's
    ``kernels`` section, analysis/kernels.py; with ``backward``, its steps include the backward
    pass). ``nvtx``: NVTX ranges named after the modules and phases (analysis/nvtx.py)."""
    from layerscope.analysis.analyze import analyze
    from layerscope.analysis.capture import untouched
    from layerscope.analysis.nvtx import NO_CUDA_NOTE, NVTX_NOTE, available, nvtx_ranges
    from layerscope.frontends.inputs import parse_dtype
    check_device(device)
    machine = read_machine()  # before our own work adds to the load average
    warmup = values.non_negative_int(warmup, "warmup")
    if threads is not None:
        threads = values.thread_count(threads, "threads")
    if isinstance(dtype, str):
        dtype = parse_dtype(dtype)
    if functions and backward:
        raise UserError("functions splits the forward pass only: leave out backward (time "
                        "the backward pass in a run of its own)",
                        arguments=("functions", "backward"))
    plan = _Runs(runs, min_time)
    with intra_op_threads(threads) as old_threads:
        loaded, module, xs = prepare_model(model, inputs, batch_size, device, dtype, kwargs)
        kw = real_kwargs(loaded.kwargs, device, dtype)
        flags = modes.flags(module)
        try:
            report = analyze(module, xs, kwargs=kw, depth=depth, dtype=dtype,
                             functions=functions)
            if functions:
                _add_own_rows(report, module)
            report.model, report.frontend = loaded.name, loaded.frontend
            modes.set_mode(module, False)
            # a forward caching into self leaves the caller's model as it was
            with untouched(module), nvtx_ranges(module, nvtx) as ranges:
                with ranges.phase("forward"):
                    _measure_forward(report, module, xs, device, depth, warmup, plan, clock,
                                     progress, machine, kw)
                if backward:
                    with ranges.phase("backward"):
                        _measure_backward(report, module, xs, device, warmup, plan, clock,
                                          progress, kw)
                if kernels:
                    from layerscope.analysis.kernels import kernel_window

                    with ranges.phase("kernels"):
                        report.kernels = kernel_window(report.model, module, xs, kw, device,
                                                       backward=backward)
            if nvtx:
                report.notes.append(NVTX_NOTE if available() else NO_CUDA_NOTE)
            if roofline:
                place_on_roofline(report, device, dtype or torch.float32,
                                   torch.get_num_threads())
        finally:
            modes.restore(flags)
    report.kind = "profile"
    report.settings.update({"device": device, "threads": threads or old_threads,
                            **({"functions": True} if functions else {}),
                            **({"kernels": True} if kernels else {}),
                            **({"nvtx": True} if nvtx else {}),
                            "warmup": warmup, "runs": report.end_to_end["n"],
                            "min_time": min_time, "backward": backward,
                            **({"spread_s": SPAN_S} if plan.spread else {}),
                            "batch_size": _batch_of(xs, kw)})
    return report


def _add_own_rows(report: Report, module: nn.Module) -> None:
    """``functions``: a container whose own ops all ran inside torch functions has no
    "(own ops)" row in the static table (nothing is left to count), but its own time is not
    nothing (its Python between the calls, its call itself): it gets a zero-cost own row after
    its function rows, so that the timed rows still tile the run. Its calls are measured."""
    mods = dict(module.named_modules())
    have = {_row_key(r.name) for r in report.layers if r.self_only and r.function() is None}
    rows = report.layers
    out = []
    for i, row in enumerate(rows):
        out.append(row)
        fn = row.function()
        nxt = rows[i + 1].function() if i + 1 < len(rows) else None
        if fn is None or (nxt is not None and nxt[0] == fn[0]) or fn[0] in have \
                or fn[0] not in mods:
            continue
        out.append(LayerRow(name=row.name[:-len(f" ({fn[1]})")], type=type(mods[fn[0]]).__name__,
                            depth=row.depth, self_only=True))
        have.add(fn[0])
    report.layers = out


def _batch_of(xs, kw) -> int | None:
    """The first dimension of the first tensor input (positional, then keyword)."""
    for x in list(xs) + list((kw or {}).values()):
        if isinstance(x, torch.Tensor):
            return x.shape[0] if x.dim() else None
    return None


def _timed_modules(module: nn.Module, depth: int | None) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in module.named_modules()
            if depth is None or tree.depth(n) <= depth]


def _measure_forward(report, module, xs, device, depth, warmup, plan, clock, progress,
                     machine: MachineReading, kw=None) -> None:
    timed = _timed_modules(module, depth)
    pairs = [fn for fn in (row.function() for row in report.layers) if fn is not None]
    timer = ForwardTimer(timed, cuda=(device == "cuda"), clock=clock, functions=pairs)

    def run() -> float:
        t0 = clock()
        with torch.no_grad():
            module(*xs, **(kw or {}))
        _sync(device)
        return clock() - t0

    try:
        for _ in range(warmup):
            run()
    except Exception as exc:
        raise UserError(f"{report.model} failed to run: {first_line(exc, with_type=True)}") \
            from exc
    bare, instrumented, per_run, called = [], [], [], []
    done = 0
    plan.start()
    while plan.more(done):
        while plan.early(done):
            run()  # not measured: spreads the measured runs over the span
        # alternate which kind goes first, so neither always follows the other's clean-up
        if done % 2 == 0:
            bare.append(run())
        with timer:
            instrumented.append(run())
        per_run.append(timer.result())
        called.append(timer.called())
        if done % 2 == 1:
            bare.append(run())
        done += 1
        if progress:
            progress(done, plan.total(done))

    e2e = TimingStats.of(bare, keep=True)
    inst = TimingStats.of(instrumented)
    counts = timer.calls()  # of the last run: the own rows _add_own_rows made have none yet
    for row in report.layers:
        if row.self_only and not row.calls:
            row.calls = counts.get(_row_key(row.name), 0)
    kids = tree.children_map(timer.names)  # functions timed: children of their modules
    samples = _row_samples(report, per_run, kids, called)
    keep = middle_runs(instrumented)
    row_stats = []
    for row, xs_row in zip(report.layers, samples):
        stats = TimingStats.of(xs_row, keep=True)
        row_stats.append(stats)
        row.time = stats
        row.share = share_of(xs_row, instrumented, keep)
        row.achieved = Achieved.at(row.macs, row.flops, row.bytes_read + row.bytes_written,
                                   stats.median_s)
    order = sorted(range(len(row_stats)), key=lambda i: -row_stats[i].median_s)
    for rank, i in enumerate(order, 1):
        report.layers[i].rank = rank
    batch = _batch_of(xs, kw) or 1
    report.end_to_end = EndToEnd.of_runs(e2e, batch, inst)
    ratio = median_of_ratios(instrumented, bare)  # bare[i], instrumented[i]: one pair
    report.overhead = None if ratio is None else ratio - 1
    report.coverage = coverage_of(samples, instrumented)
    report.by_type = type_timings(report, samples, instrumented, keep)
    report.noise = noise_section(e2e, machine, torch.get_num_threads(), row_stats)


def share_of(per_run: list[float], walls: list[float], keep: list[int]) -> float | None:
    """Mean over the kept runs of (time in that run / that run's wall time)."""
    fractions = [per_run[r] / walls[r] for r in keep if walls[r] > 0]
    return sum(fractions) / len(fractions) if fractions else None


def coverage_of(samples: list[list[float]], walls: list[float]) -> float | None:
    """Median over runs of (sum of the rows' times in the run / the run's wall time)."""
    attributed = [sum(row[r] for row in samples) for r in range(len(walls))]
    return median_of_ratios(attributed, walls)


def type_timings(report, samples, walls, keep) -> list[TypeTiming]:
    """Per type over the rows (never overlapping): a container type appears as its own-ops rows
    ("BasicBlock (own ops)") or as depth-cut subtrees, never on top of its leaves. Built from the
    same per-run times as the rows, so a type's share is the sum of its rows' shares."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(report.layers):
        own = row.self_only and row.function() is None
        groups[row.type + (" (own ops)" if own else "")].append(i)
    out = []
    for type_name, idx in groups.items():
        per_run = [sum(samples[i][r] for i in idx) for r in range(len(walls))]
        out.append(TypeTiming(type=type_name, layers=len(idx),
                              macs=sum(report.layers[i].macs for i in idx),
                              time=TimingStats.of(per_run, keep=True),
                              share=share_of(per_run, walls, keep)))
    out.sort(key=lambda d: -d.time.median_s)
    return out


def _measure_backward(report, module, xs, device, warmup, plan, clock, progress,
                      kw=None) -> None:
    """Backward of the summed outputs w.r.t. the trainable parameters (``autograd.grad``: the
    model's ``.grad`` fields are never touched). The model stays in eval mode, so BatchNorm
    statistics are not updated."""
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise UserError(f"backward: {report.model} has no parameter that requires grad",
                        arguments="backward")
    timer = BackwardTimer(module, cuda=(device == "cuda"), clock=clock)

    def forward():
        with torch.enable_grad():
            outs = [t for t in _tensors(module(*xs, **(kw or {}))) if t.requires_grad]
        return outs

    def backward(outs, timed: BackwardTimer | None = None) -> float:
        grads = [torch.ones_like(t) for t in outs]
        t0 = clock()
        if timed is not None:
            timed.start()
        torch.autograd.grad(outs, params, grads, allow_unused=True)
        _sync(device)
        return clock() - t0

    for _ in range(warmup):
        backward(forward())
    bare, instrumented, per_run = [], [], []
    done = 0
    plan.start()
    while plan.more(done):
        while plan.early(done):
            backward(forward())  # not measured: spreads the measured runs over the span
        bare.append(backward(forward()))
        with timer.tagging():
            outs = forward()
        handles = timer.instrument(outs)
        try:
            instrumented.append(backward(outs, timer))
        finally:
            for h in handles:
                h.remove()
        per_run.append(timer.result())
        done += 1
        if progress:
            progress(done, plan.total(done))
    e2e = TimingStats.of(bare, keep=True)  # kept: diff judges the backward pass on them
    inst = TimingStats.of(instrumented)
    kids = tree.children_map([n for n, _ in module.named_modules()])
    samples = _row_samples(report, per_run, kids)
    for row, xs_row in zip(report.layers, samples):
        row.backward_time = TimingStats.of(xs_row)
    ratio = median_of_ratios(instrumented, bare)
    report.backward = BackwardTiming(end_to_end=e2e, instrumented=inst,
                                     overhead=None if ratio is None else ratio - 1,
                                     coverage=coverage_of(samples, instrumented))


def place_on_roofline(report, device: str, dtype: torch.dtype, threads: int) -> None:
    from layerscope.analysis import roofline as rl

    ceil = rl.ceilings(device, dtype, threads)
    report.roofline = ceil
    for row in report.layers:
        if row.time:
            row.roofline = rl.place(row.flops, row.bytes_read + row.bytes_written,
                                    row.time["median_s"], ceil)
    report.above_roof = rl.above_roof((row.roofline for row in report.layers if row.roofline),
                                      ceil)
    if report.end_to_end is not None:
        from layerscope.analysis.efficiency import of_inference

        t = report.totals
        report.efficiency = of_inference(t.flops, t.bytes_read + t.bytes_written,
                                         report.end_to_end["median_s"], device, dtype,
                                         ceil.peak_flops, ceil.bandwidth)
