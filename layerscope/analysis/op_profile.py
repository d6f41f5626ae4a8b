"""``layerscope ops``: torch.profiler's operator table, and a Chrome/Perfetto trace in which every
module's forward is a named range.

The ranges come from global forward pre/post hooks that open and close a profiler
``record_function`` range; they are installed only inside the profiling context and removed
afterwards, so nothing stays on the model or in torch.
"""
from __future__ import annotations

import dataclasses
import gzip
import os
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from layerscope.analysis import modes
from layerscope.core import options, values
from layerscope.core.environment import environment
from layerscope.core.errors import UserError, first_line
from layerscope.core.noise import noise_section, read_machine
from layerscope.core.optable import OpRow, OpTable
from layerscope.core.settings import Settings, of_call, option
from layerscope.core.stats import TimingStats

if TYPE_CHECKING:
    import torch.nn as nn

SORTS = ("self", "total")


@dataclasses.dataclass(kw_only=True, eq=False)
class OpsSettings(Settings):
    """Every setting of ``layerscope ops`` and ``layerscope.ops``: a new one is a field here
    (the CLI's option, the API's argument and the saved result's ``settings`` follow)."""

    model: Any = options.model()
    inputs: list[Any] | None = options.inputs()
    batch_size: int | None = options.batch_size()
    device: str = options.device()
    threads: int | None = options.threads()
    top: int = option(10, "rows to show (default 10)", parse=values.positive_int)
    sort: str = option("self", choices=SORTS)
    group_by_shape: bool = option(False, "one row per op and input shapes")
    memory: bool = option(False, "add memory columns")
    trace: str | None = option(None, "write a Chrome/Perfetto trace with one range per module "
                                     "forward", metavar="OUT.json[.gz]", record=False)
    runs: int = option(5, "profiled runs (default 5)", parse=values.positive_int)
    warmup: int = option(2, parse=values.non_negative_int)


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
    from layerscope.analysis.profiler_ranges import RANGE_PREFIX

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


def ops(model: str | nn.Module | None = None, inputs: Any = None, *,
        settings: OpsSettings | None = None,
        clock: Callable[[], float] = time.perf_counter, **overrides: Any) -> OpTable:
    """Per-operator time over ``runs`` profiled inferences (per-run figures), with ``threads``
    intra-op threads (as ``profile``); the ``noise`` section (core.noise) comes from the wall
    time of each profiled run. ``settings``: an ``OpsSettings``; keyword arguments override
    its fields (``runs=3``)."""
    import torch

    from layerscope.analysis.runtime import check_device, intra_op_threads, prepare_model

    s = of_call(OpsSettings, settings, overrides, "profile", model=model, inputs=inputs)
    check_device(s.device)
    machine = read_machine()  # before our own work adds to the load average
    if s.trace:
        from layerscope.core.io import check_output

        check_output(s.trace, "trace")  # before the profiling, not after
    with intra_op_threads(s.threads):
        used = torch.get_num_threads()
        loaded, module, xs = prepare_model(s.model, s.inputs, s.batch_size, s.device, None)
        prof, walls = _profile_runs(loaded.name, module, xs, s.device, s.runs, s.warmup,
                                    s.group_by_shape, s.memory, clock)
    rows, all_self, n_events = op_rows(prof, cuda=s.device == "cuda", runs=s.runs, top=s.top,
                                       sort=s.sort, group_by_shape=s.group_by_shape,
                                       memory=s.memory)
    if s.trace:
        _write_trace(prof, s.trace)
    return OpTable(model=loaded.name, device=s.device, sort=s.sort, runs=s.runs, rows=rows,
                   total_self_s=all_self, ops_total=n_events, trace=s.trace,
                   settings={**s.recorded(), "threads": used,
                             "inputs": [list(x.shape) for x in xs]},
                   environment=environment(),
                   noise=noise_section(TimingStats.of(walls), machine, used))


def _profile_runs(name: str, module: nn.Module, xs, device: str, runs: int, warmup: int,
                  group_by_shape: bool, memory: bool, clock: Callable[[], float]):
    """(the finished profiler, the wall time of each profiled run); the model's flags are
    restored afterwards."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from layerscope.analysis.capture import untouched
    from layerscope.analysis.profiler_ranges import ModuleRanges, quiet_native_stderr

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
