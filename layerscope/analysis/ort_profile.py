"""``layerscope profile model.onnx``: onnxruntime's per-node latency joined with each node's
static cost.

Method (docs/design.md, "ONNX Runtime profiling"):
- two sessions on the same model: a bare one and one with ``enable_profiling``; after warm-up
  their runs alternate, so ``end_to_end`` comes from the bare session and ``overhead`` compares
  the two, as in ``layerscope profile`` for PyTorch;
- the profiled session's Chrome-trace events are split into runs by its ``model_run`` events;
  warm-up runs are dropped; a node's time per run is the sum of its ``*_kernel_time`` events;
- ``overhead``, ``coverage``, ``share``, ``by_type`` and ``noise`` follow ``layerscope profile``
  (analysis/runtime.py): overhead from the interleaved (bare, profiled) pairs, coverage and
  shares from each profiled run's node times over that run's wall time;
- ``session.disable_prepacking`` keeps weights visible; at ``--optimization disabled`` (the
  default) nodes keep their names and join the static rows one to one; at higher levels,
  nodes onnxruntime fused or created appear as rows of their own, marked "(fused)".
"""
from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from layerscope.core import values
from layerscope.core.errors import UserError, first_line
from layerscope.core.io import temp_dir
from layerscope.core.limits import check_input_bytes
from layerscope.core.noise import noise_section, read_machine
from layerscope.core.records import Achieved, EndToEnd
from layerscope.core.report import LayerRow, Report
from layerscope.core.stats import TimingStats, median_of_ratios, middle_runs

# onnxruntime's names of the levels of core.values.ORT_LEVELS (the one vocabulary)
_GRAPH_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                 "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
_NUMPY = {"float32": np.float32, "float16": np.float16, "float64": np.float64,
          "int64": np.int64, "int32": np.int32, "int8": np.int8, "uint8": np.uint8,
          "bool": np.bool_}


def graph_level(level: str):
    """onnxruntime's ``GraphOptimizationLevel`` for a level of ``core.values.ORT_LEVELS`` (or
    an alias of one), for every session layerscope creates (profile, verify)."""
    import onnxruntime as ort

    return getattr(ort.GraphOptimizationLevel,
                   _GRAPH_LEVELS[values.ort_level(level, "optimization")])


def _options(level: str, threads: int | None, profile_dir: str | None):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = graph_level(level)
    if threads:
        opts.intra_op_num_threads = threads
    opts.add_session_config_entry("session.disable_prepacking", "1")
    if profile_dir:
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(profile_dir, "ort")
    return opts


def _dtype(spec: dict) -> np.dtype:
    return np.dtype(_NUMPY.get(spec["dtype"], np.float32))


def _feeds(report: Report, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in report.inputs:
        dtype = _dtype(spec).type
        shape = spec["shape"]
        feeds[spec["name"]] = (rng.standard_normal(shape).astype(dtype)
                               if np.issubdtype(dtype, np.floating) else np.zeros(shape, dtype))
    return feeds


def _node_times(events: list[dict], warmup: int) -> list[dict[str, tuple[float, str, str]]]:
    """Per measured run: node name -> (seconds, op_name, provider)."""
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in runs][warmup:]
    per_run: list[dict[str, tuple[float, str, str]]] = [dict() for _ in windows]
    starts = [w[0] for w in windows]
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        i = int(np.searchsorted(starts, e["ts"], side="right")) - 1
        if i < 0 or e["ts"] > windows[i][1]:
            continue
        name = e["name"][: -len("_kernel_time")]
        args = e.get("args", {})
        seconds, op, provider = per_run[i].get(name, (0.0, args.get("op_name", "?"),
                                                       args.get("provider", "?")))
        per_run[i][name] = (seconds + e["dur"] / 1e6, op, provider)
    return per_run


def profile_onnx(path: str, inputs: Any = None, *, batch_size: int | None = None,
                 runs: int | None = None, warmup: int = 5, threads: int | None = None,
                 optimization: str = "disabled", roofline: bool = True, seed: int = 0,
                 progress: Callable[[int, int], None] | None = None) -> Report:
    import onnxruntime as ort

    from layerscope.analysis.analyze import analyze

    optimization = values.ort_level(optimization, "optimization")
    runs = 30 if runs is None else values.positive_int(runs, "runs")
    warmup = values.non_negative_int(warmup, "warmup")
    if threads is not None:
        threads = values.thread_count(threads, "threads")
    machine = read_machine()  # before our own work adds to the load average
    report = analyze(path, inputs, batch_size=batch_size)
    check_input_bytes(f"profile {path}", [(spec["shape"], _dtype(spec).itemsize)
                                          for spec in report.inputs],
                      "--input NAME=SHAPE, --batch-size")
    feeds = _feeds(report, seed)
    with temp_dir() as tmp:  # onnxruntime's trace lands here; gone on SIGTERM too
        try:
            bare = ort.InferenceSession(path, _options(optimization, threads, None),
                                        providers=["CPUExecutionProvider"])
            profiled = ort.InferenceSession(path, _options(optimization, threads, tmp),
                                            providers=["CPUExecutionProvider"])
            for _ in range(warmup):
                bare.run(None, feeds)
                profiled.run(None, feeds)
            bare_s, prof_s = [], []
            for i in range(runs):
                order = (bare, profiled) if i % 2 == 0 else (profiled, bare)
                for session in order:
                    t0 = time.perf_counter()
                    session.run(None, feeds)
                    (bare_s if session is bare else prof_s).append(time.perf_counter() - t0)
                if progress:
                    progress(i + 1, runs)
            trace_path = profiled.end_profiling()
        except Exception as exc:
            raise UserError(f"{path}: onnxruntime could not run the model: "
                            f"{first_line(exc)}") from exc
        with open(trace_path, encoding="utf-8") as f:
            events = json.load(f)
    per_run = _node_times(events, warmup)
    _join(report, per_run, bare_s, prof_s)
    # onnxruntime's default intra-op pool has one thread per core it may use
    report.noise = noise_section(TimingStats.of(bare_s), machine,
                                 threads or machine.cpus_available or machine.cpu_count)
    report.kind = "profile"
    report.settings.update({"device": "cpu", "backend": "onnxruntime",
                            "optimization": optimization, "warmup": warmup, "runs": runs,
                            "threads": threads or "onnxruntime default",
                            "batch_size": report.inputs[0]["shape"][0]
                            if report.inputs and report.inputs[0]["shape"] else None})
    if roofline:
        import torch

        from layerscope.analysis.runtime import place_on_roofline

        place_on_roofline(report, "cpu", torch.float32, threads or torch.get_num_threads())
    return report


def _join(report: Report, per_run: list[dict], bare_s: list[float],
          prof_s: list[float]) -> None:
    """Attach per-node statistics to the static rows; unknown (fused) nodes get rows.
    ``bare_s[i]`` and ``prof_s[i]`` are the wall times of the i-th interleaved pair."""
    from layerscope.analysis.runtime import coverage_of, share_of, type_timings

    e2e, inst = TimingStats.of(bare_s, keep=True), TimingStats.of(prof_s)
    samples: dict[str, list[float]] = defaultdict(list)
    meta: dict[str, tuple[str, str]] = {}
    for run in per_run:
        for name, (seconds, op, provider) in run.items():
            samples[name].append(seconds)
            meta[name] = (op, provider)
    n = len(per_run)
    walls = prof_s[:n]  # the profiled runs the trace's measured runs come from, in order
    keep = middle_runs(walls)
    known = {row.name for row in report.layers}
    fused = [name for name in samples if name not in known]
    for name in fused:
        op, provider = meta[name]
        report.layers.append(LayerRow(name=name, type=f"{op} (fused)", depth=1, calls=1))
    medians, row_samples = [], []
    for row in report.layers:
        xs = samples.get(row.name, [])
        xs = xs + [0.0] * (n - len(xs))  # a node that did not run (folded away) took no time
        row_samples.append(xs or [0.0])
        stats = TimingStats.of(row_samples[-1], keep=True)
        row.time = stats
        row.share = share_of(row_samples[-1], walls, keep) if n else None
        medians.append(stats.median_s)
        row.achieved = Achieved.at(row.macs, row.flops, row.bytes_read + row.bytes_written,
                                   stats.median_s)
    for rank, i in enumerate(sorted(range(len(medians)), key=lambda i: -medians[i]), 1):
        report.layers[i].rank = rank
    batch = report.inputs[0]["shape"][0] if report.inputs and report.inputs[0]["shape"] else 1
    report.end_to_end = EndToEnd.of_runs(e2e, batch, inst)
    ratio = median_of_ratios(prof_s, bare_s)
    report.overhead = None if ratio is None else ratio - 1
    report.coverage = coverage_of(row_samples, walls) if n else None
    if fused:
        report.notes.append(f"{len(fused)} node(s) onnxruntime created by fusing or rewriting the "
                            "graph are rows marked '(fused)': their static cost is that of the "
                            "nodes they replaced, which show no time of their own")
    report.by_type = type_timings(report, row_samples, walls, keep) if n else []
