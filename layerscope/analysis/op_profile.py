"""``layerscope ops``: torch.profiler's operator table, and a Chrome/Perfetto trace in which every
module's forward is a named range.

The ranges come from global forward pre/post hooks that open and close a profiler
``record_function`` range; they are installed only inside the profiling context and removed
afterwards, so nothing stays on the model or in torch.
"""
from __future__ import annotations

import gzip
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from layerscope.analysis import modes
from layerscope.analysis.profiler_ranges import (
    RANGE_PREFIX,
    ModuleRanges,
    quiet_native_stderr,
)
from layerscope.core import values
from layerscope.core.environment import environment
from layerscope.core.errors import UserError, first_line
from layerscope.core.noise import noise_section, read_machine
from layerscope.core.optable import OpRow, OpTable
from layerscope.core.stats import TimingStats

SORTS = ("self", "total")


def _write_trace(prof, path: str) -> None:
    """Export, gzip if asked, and write through core.io: never a half-written trace."""
    from layerscope.core.io import check_output, temp_dir, write_file

    check_output(path, "trace")
    with temp_dir() as tmpdir:  # torch writes the trace to a path of its own choosing
        raw = os.path.join(tmpdir, "trace.json")
        prof.export_chrome_trace(raw)

        def copy(f):
            with open(raw, "rb") as src:
                if path.endswith(".gz"):
                    with gzip.GzipFile(filename="", mode="wb", fileobj=f) as dst:
                        shutil.copyfileobj(src, dst)
                else:
                    shutil.copyfileobj(src, f)

        write_file(path, copy)


def op_rows(prof, *, cuda: bool, runs: int, top: int, sort: str = "self",
            group_by_shape: bool = False, memory: bool = False) -> tuple[list[OpRow], float, int]:
    """(the ``top`` operator rows, summed self seconds of all ops, distinct ops) per run, from
    a finished torch.profiler session; module ranges and profiler steps are left out."""
    events = [e for e in prof.key_averages(group_by_input_shape=group_by_shape)
              if not e.key.startswith(RANGE_PREFIX) and not e.key.startswith("ProfilerStep")]

    def self_us(e) -> float:
        return e.self_device_time_total if cuda else e.self_cpu_time_total

    def total_us(e) -> float:
        return e.device_time_total if cuda else e.cpu_time_total

    all_self = sum(self_us(e) for e in events) / 1e6 / runs
    key = self_us if sort == "self" else total_us
    chosen = sorted(events, key=key, reverse=True)[:top]
    rows = []
    for e in chosen:
        calls = e.count / runs
        total = total_us(e) / 1e6 / runs
        rows.append(OpRow(
            name=e.key, calls=int(round(calls)), self_s=self_us(e) / 1e6 / runs, total_s=total,
            mean_s=total / calls if calls else 0.0,
            share=(self_us(e) / 1e6 / runs) / all_self if all_self else 0.0,
            input_shapes=str(e.input_shapes) if group_by_shape else None,
            self_memory_bytes=int(e.self_cpu_memory_usage / runs) if memory else None,
            memory_bytes=int(e.cpu_memory_usage / runs) if memory else None))
    return rows, all_self, len(events)


def ops(model: str | nn.Module, inputs: Any = None, *, batch_size: int | None = None,
        device: str = "cpu", top: int = 10, sort: str = "self", group_by_shape: bool = False,
        memory: bool = False, trace: str | None = None, runs: int = 5,
        warmup: int = 2, threads: int | None = None,
        clock: Callable[[], float] = time.perf_counter) -> OpTable:
    """Per-operator time over ``runs`` profiled inferences (per-run figures), with ``threads``
    intra-op threads (as ``profile``); the ``noise`` section (core.noise) comes from the wall
    time of each profiled run."""
    from layerscope.analysis.runtime import check_device, intra_op_threads, prepare_model

    check_device(device)
    machine = read_machine()  # before our own work adds to the load average
    if sort not in SORTS:
        raise UserError(f"unknown sort {sort!r}: use self or total", arguments="sort")
    top = values.positive_int(top, "top")
    runs = values.positive_int(runs, "runs")
    warmup = values.non_negative_int(warmup, "warmup")
    if threads is not None:
        threads = values.thread_count(threads, "threads")
    if trace:
        from layerscope.core.io import check_output

        check_output(trace, "trace")  # before the profiling, not after
    with intra_op_threads(threads):
        used = torch.get_num_threads()
        loaded, module, xs = prepare_model(model, inputs, batch_size, device, None)
        prof, walls = _profile_runs(loaded.name, module, xs, device, runs, warmup,
                                    group_by_shape, memory, clock)
    rows, all_self, n_events = op_rows(prof, cuda=device == "cuda", runs=runs, top=top,
                                       sort=sort, group_by_shape=group_by_shape, memory=memory)
    if trace:
        _write_trace(prof, trace)
    return OpTable(model=loaded.name, device=device, sort=sort, runs=runs, rows=rows,
                   total_self_s=all_self, ops_total=n_events, trace=trace,
                   settings={"group_by_shape": group_by_shape, "memory": memory, "top": top,
                             "warmup": warmup, "threads": used,
                             "inputs": [list(x.shape) for x in xs]},
                   environment=environment(),
                   noise=noise_section(TimingStats.of(walls), machine, used))


def _profile_runs(name: str, module: nn.Module, xs, device: str, runs: int, warmup: int,
                  group_by_shape: bool, memory: bool, clock: Callable[[], float]):
    """(the finished profiler, the wall time of each profiled run); the model's flags are
    restored afterwards."""
    from torch.profiler import ProfilerActivity, profile

    from layerscope.analysis.capture import untouched

    flags = modes.flags(module)
    cuda = device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    walls = []
    try:
        modes.set_mode(module, False)
        with untouched(module), torch.no_grad():
            for _ in range(warmup):
                module(*xs)
            with quiet_native_stderr(), profile(activities=activities,
                                                 record_shapes=group_by_shape,
                                                 profile_memory=memory) as prof:
                with ModuleRanges(module):
                    for _ in range(runs):
                        t0 = clock()
                        module(*xs)
                        if cuda:
                            torch.cuda.synchronize()
                        walls.append(clock() - t0)
    except Exception as exc:
        raise UserError(f"{name} failed to run: {first_line(exc, with_type=True)}") from exc
    finally:
        modes.restore(flags)
    return prof, walls
