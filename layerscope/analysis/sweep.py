"""``layerscope.sweep``: latency over a grid of batch sizes, threads, devices, backends and dtypes.

Every cell is measured the same way (warm-up, then ``runs`` timed runs, median/p10/p90), gets a
throughput, and for the eager backend the share of time per layer type (from ``profile``). A
cell that cannot run records why and the sweep goes on. Speed-up is the throughput ratio over
the first cell that ran; a difference is "within noise" when the per-sample p10-p90 ranges
overlap. The sweep's ``noise`` section (core.noise) comes from its noisiest cell (largest
p90/p10) and the most threads any cell used, with the machine read before the first cell.
"""
from __future__ import annotations

import contextlib
import io
import itertools
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from layerscope.analysis import modes
from layerscope.core import values
from layerscope.core.environment import environment
from layerscope.core.errors import UserError, first_line
from layerscope.core.noise import noise_section, read_machine
from layerscope.core.stats import TimingStats
from layerscope.core.sweep_records import SweepCell, SweepReport

BACKENDS = ("eager", "compile", "torchscript", "onnxruntime")
DEVICES = ("cpu", "cuda")


def time_runs(fn: Callable[[], Any], runs: int, warmup: int, device: str,
              clock: Callable[[], float] = time.perf_counter) -> TimingStats:
    """Warm-up, then ``runs`` timed calls (one synchronisation per call on CUDA)."""
    for _ in range(warmup):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    samples = []
    for _ in range(runs):
        t0 = clock()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        samples.append(clock() - t0)
    return TimingStats.of(samples, keep=True)


def _export_onnx(module: nn.Module, xs: list[torch.Tensor], path: str) -> None:
    """The TorchScript-based exporter is fast; the dynamo exporter is the fallback."""
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        try:
            torch.onnx.export(module, tuple(xs), path, dynamo=False, opset_version=17)
        except Exception:
            torch.onnx.export(module, tuple(xs), path, dynamo=True)


def _runner(backend: str, module: nn.Module, xs: list[torch.Tensor], device: str,
            threads: int | None, workdir: str) -> Callable[[], Any]:
    if backend == "eager":
        return lambda: module(*xs)
    if backend == "compile":
        compiled = torch.compile(module)
        return lambda: compiled(*xs)
    if backend == "torchscript":
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # TorchScript's deprecation notice
            traced = torch.jit.trace(module, tuple(xs), check_trace=False)
            modes.set_mode(traced, False)
            traced = torch.jit.freeze(traced)
        return lambda: traced(*xs)
    if backend == "onnxruntime":
        import onnxruntime as ort

        path = os.path.join(workdir, f"model_{xs[0].shape[0]}.onnx")
        _export_onnx(module, xs, path)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        providers = ["CUDAExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
        if device == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
            raise RuntimeError("onnxruntime has no CUDAExecutionProvider here")
        session = ort.InferenceSession(path, options, providers=providers)
        feeds = {i.name: x.detach().cpu().numpy() for i, x in zip(session.get_inputs(), xs)}
        return lambda: session.run(None, feeds)
    raise UserError(f"unknown backend {backend!r}: use {', '.join(BACKENDS)}")


def _parse_list(values, kind: str, allowed=None) -> list:
    if allowed is not None:
        bad = [v for v in values if v not in allowed]
        if bad:
            raise UserError(f"unknown {kind} {bad[0]!r}: use {', '.join(allowed)}")
    if not values:
        raise UserError(f"give at least one {kind}")
    return list(values)


def sweep(model: str | nn.Module, inputs: Any = None, *, batch_sizes=(1,), threads=(None,),
          devices=("cpu",), backends=("eager",), dtypes=("float32",), runs: int = 20,
          warmup: int = 3, progress=None) -> SweepReport:
    """Measure every cell of the grid; failures are recorded in their cell."""
    from layerscope.analysis.analyze_torch import load
    from layerscope.analysis.runtime import profile
    from layerscope.frontends.inputs import parse_dtype, real_inputs
    from layerscope.frontends.torch_module import with_batch_size

    backends = _parse_list(backends, "backend", BACKENDS)
    devices = _parse_list(devices, "device", DEVICES)
    dtypes = _parse_list(dtypes, "dtype")
    dtype_objs = {d: parse_dtype(d) for d in dtypes}
    batch_sizes = _parse_list(batch_sizes, "batch size")
    threads = _parse_list(threads, "thread count")
    batch_sizes = [values.positive_int(b, "batch_sizes item") for b in batch_sizes]
    threads = [None if t is None else values.thread_count(t, "threads item") for t in threads]
    runs = values.positive_int(runs, "runs")
    warmup = values.non_negative_int(warmup, "warmup")
    machine = read_machine()  # before our own work adds to the load average
    loaded = load(model, inputs, None, meta=False)
    base = loaded.module
    flags = modes.flags(base)
    old_threads = torch.get_num_threads()
    grid = list(itertools.product(devices, backends, dtypes, threads, batch_sizes))
    cells: list[SweepCell] = []
    measured: list[tuple[TimingStats, int]] = []  # (latency, threads used) per cell that ran
    try:
        with tempfile.TemporaryDirectory(prefix="layerscope-sweep-") as workdir:
            for i, (device, backend, dtype, nthreads, batch) in enumerate(grid):
                cell = SweepCell(device, backend, dtype, nthreads, batch)
                cells.append(cell)
                try:
                    if device == "cuda" and not torch.cuda.is_available():
                        raise RuntimeError("no CUDA GPU is available here")
                    torch.set_num_threads(nthreads or old_threads)
                    module = base if (device == "cpu" and dtype == "float32") else \
                        _moved(base, device, dtype_objs[dtype])
                    modes.set_mode(module, False)
                    xs = real_inputs(with_batch_size(loaded.inputs, batch), device,
                                     dtype_objs[dtype])
                    if backend == "eager":
                        rep = profile(module, xs, runs=runs, warmup=warmup, roofline=False,
                                      device=device)
                        stats = TimingStats(**{k: rep.end_to_end.get(k) for k in (
                            "median_s", "p10_s", "p90_s", "mean_s", "std_s", "iqr_s", "n",
                            "samples_s")})  # the runs kept: what layerscope diff ranks
                        cell.by_type = [{"type": d["type"], "share": d["share"]}
                                        for d in rep.by_type]
                    else:
                        run = _runner(backend, module, xs, device, nthreads, workdir)
                        with torch.no_grad():
                            stats = time_runs(run, runs, warmup, device)
                    cell.latency = stats.to_dict()
                    measured.append((stats, torch.get_num_threads()))
                    cell.throughput_per_s = batch / stats.median_s if stats.median_s else None
                except UserError as exc:
                    cell.status, cell.error = "error", str(exc)
                except Exception as exc:  # a cell that cannot run says why; the sweep goes on
                    cell.status, cell.error = "error", first_line(exc, with_type=True)
                if progress:
                    progress(i + 1, len(grid))
    finally:
        torch.set_num_threads(old_threads)
        modes.restore(flags)
    _compare(cells)
    noise = None
    if measured:
        worst = max(measured, key=lambda m: m[0].p90_s / m[0].p10_s if m[0].p10_s > 0 else 0)
        noise = noise_section(worst[0], machine, max(t for _, t in measured))
    return SweepReport(loaded.name, cells,
                       settings={"runs": runs, "warmup": warmup,
                                 "inputs": [list(getattr(x, "shape", ())) for x in loaded.inputs]},
                       environment=environment(), noise=noise)


def _moved(module: nn.Module, device: str, dtype: torch.dtype) -> nn.Module:
    import copy

    return copy.deepcopy(module).to(device=device, dtype=dtype)


def _compare(cells: list[SweepCell]) -> None:
    """Speed-up over the first cell that ran, and whether it is within the noise."""
    ok = [c for c in cells if c.status == "ok" and c.throughput_per_s]
    if not ok:
        return
    base = ok[0]
    b = base.latency
    for c in ok:
        c.speedup = c.throughput_per_s / base.throughput_per_s
        lo, hi = c.latency["p10_s"] / c.batch_size, c.latency["p90_s"] / c.batch_size
        blo, bhi = b["p10_s"] / base.batch_size, b["p90_s"] / base.batch_size
        c.within_noise = lo <= bhi and blo <= hi
