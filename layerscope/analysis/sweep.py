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
import dataclasses
import io
import itertools
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from layerscope.analysis import modes
from layerscope.core import options, values
from layerscope.core.environment import environment
from layerscope.core.errors import UserError, first_line
from layerscope.core.noise import noise_section, read_machine
from layerscope.core.settings import Settings, of_call, option
from layerscope.core.stats import TimingStats
from layerscope.core.sweep_records import SweepCell, SweepReport

if TYPE_CHECKING:
    import torch
    import torch.nn as nn

BACKENDS = ("eager", "compile", "torchscript", "onnxruntime")
DEVICES = ("cpu", "cuda")


def time_runs(fn: Callable[[], Any], runs: int, warmup: int, device: str,
              clock: Callable[[], float] = time.perf_counter) -> TimingStats:
    """Warm-up, then ``runs`` timed calls (one synchronisation per call on CUDA)."""
    import torch

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
    import torch

    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        try:
            torch.onnx.export(module, tuple(xs), path, dynamo=False, opset_version=17)
        except Exception:
            torch.onnx.export(module, tuple(xs), path, dynamo=True)


def _runner(backend: str, module: nn.Module, xs: list[torch.Tensor], device: str,
            threads: int | None, workdir: str) -> Callable[[], Any]:
    import torch

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
        session_options = ort.SessionOptions()
        if threads:
            session_options.intra_op_num_threads = threads
        providers = ["CUDAExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
        if device == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
            raise RuntimeError("onnxruntime has no CUDAExecutionProvider here")
        session = ort.InferenceSession(path, session_options, providers=providers)
        feeds = {i.name: x.detach().cpu().numpy() for i, x in zip(session.get_inputs(), xs)}
        return lambda: session.run(None, feeds)
    raise UserError(f"unknown backend {backend!r}: use {', '.join(BACKENDS)}")


@dataclasses.dataclass(kw_only=True, eq=False)
class SweepSettings(Settings):
    """Every setting of ``layerscope sweep`` and ``layerscope.sweep``: a new one is a field
    here (the CLI's option, the API's argument and the saved result's ``settings`` follow).
    Each list setting takes a comma-separated text (``1,16,64``) or a sequence."""

    model: Any = options.model()
    inputs: Any = options.inputs(metavar="SHAPE[:DTYPE]")
    batch_sizes: list[int] = option([1], "e.g. 1,16,64",
                                    parse=options.listed(values.positive_int, what="batch size"))
    threads: list[int | None] | None = option(
        None, "e.g. 1,2 (default: torch's setting)",
        parse=options.listed(values.thread_count, what="thread count"))
    devices: list[str] = option(["cpu"], "e.g. cpu,cuda",
                                parse=options.listed(None, DEVICES, "device"))
    backends: list[str] = option(["eager"], "from eager,compile,torchscript,onnxruntime",
                                 parse=options.listed(None, BACKENDS, "backend"))
    dtypes: list[str] = option(["float32"], "e.g. float32,bfloat16",
                               parse=options.listed(None, what="dtype"))
    runs: int = option(20, parse=values.positive_int)
    warmup: int = option(3, parse=values.non_negative_int)


def sweep(model: str | nn.Module | None = None, inputs: Any = None, *,
          settings: SweepSettings | None = None, progress=None, **overrides: Any) -> SweepReport:
    """Measure every cell of the grid (``batch_sizes`` x ``threads`` x ``devices`` x
    ``backends`` x ``dtypes``, each a list); failures are recorded in their cell.
    ``settings``: a ``SweepSettings``; keyword arguments override its fields (``runs=5``)."""
    import torch

    from layerscope.analysis.analyze_torch import load
    from layerscope.frontends.inputs import parse_dtype

    s = of_call(SweepSettings, settings, overrides, "sweep", model=model, inputs=inputs)
    dtype_objs = {d: _dtype(d, parse_dtype) for d in s.dtypes}
    machine = read_machine()  # before our own work adds to the load average
    loaded = load(s.model, s.inputs, None, meta=False)
    flags = modes.flags(loaded.module)
    old_threads = torch.get_num_threads()
    grid = list(itertools.product(s.devices, s.backends, s.dtypes, s.threads or [None],
                                  s.batch_sizes))
    cells: list[SweepCell] = []
    measured: list[tuple[TimingStats, int]] = []  # (latency, threads used) per cell that ran
    try:
        with tempfile.TemporaryDirectory(prefix="layerscope-sweep-") as workdir:
            for i, (device, backend, dtype, nthreads, batch) in enumerate(grid):
                cell = SweepCell(device, backend, dtype, nthreads, batch)
                cells.append(cell)
                torch.set_num_threads(nthreads or old_threads)
                stats = _measure(cell, loaded, dtype_objs[dtype], s, workdir)
                if stats is not None:
                    measured.append((stats, torch.get_num_threads()))
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
    recorded = {k: v for k, v in s.recorded().items() if k not in ("runs", "warmup")}
    return SweepReport(loaded.name, cells,
                       settings={"runs": s.runs, "warmup": s.warmup,
                                 "inputs": [list(getattr(x, "shape", ())) for x in loaded.inputs],
                                 **recorded},
                       environment=environment(), noise=noise)


def _dtype(name: str, parse_dtype: Callable[[str], Any]) -> Any:
    """One of ``dtypes`` as a torch.dtype (an unknown one refused naming the setting)."""
    try:
        return parse_dtype(name)
    except UserError as exc:
        raise UserError(str(exc).replace(f"{name!r}:", f"{name!r} in dtypes:", 1),
                        arguments="dtypes") from None


def _measure(cell: SweepCell, loaded: Any, dtype: torch.dtype, s: SweepSettings,
             workdir: str) -> TimingStats | None:
    """Time one cell (an eager one by ``profile``, which also gives its share per layer
    type); a cell that cannot run records why in itself and gives None."""
    import torch

    from layerscope.analysis.runtime import profile
    from layerscope.frontends.inputs import real_inputs
    from layerscope.frontends.torch_module import with_batch_size

    device, base = cell.device, loaded.module
    try:
        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("no CUDA GPU is available here")
        module = base if (device == "cpu" and cell.dtype == "float32") else \
            _moved(base, device, dtype)
        modes.set_mode(module, False)
        xs = real_inputs(with_batch_size(loaded.inputs, cell.batch_size), device, dtype)
        if cell.backend == "eager":
            rep = profile(module, xs, runs=s.runs, warmup=s.warmup, roofline=False,
                          device=device)
            stats = TimingStats(**{k: rep.end_to_end.get(k) for k in (
                "median_s", "p10_s", "p90_s", "mean_s", "std_s", "iqr_s", "n",
                "samples_s")})  # the runs kept: what layerscope diff ranks
            cell.by_type = [{"type": d["type"], "share": d["share"]} for d in rep.by_type]
        else:
            run = _runner(cell.backend, module, xs, device, cell.threads, workdir)
            with torch.no_grad():
                stats = time_runs(run, s.runs, s.warmup, device)
    except UserError as exc:
        cell.status, cell.error = "error", str(exc)
        return None
    except Exception as exc:  # a cell that cannot run says why; the sweep goes on
        cell.status, cell.error = "error", first_line(exc, with_type=True)
        return None
    cell.latency = stats.to_dict()
    cell.throughput_per_s = cell.batch_size / stats.median_s if stats.median_s else None
    return stats


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
