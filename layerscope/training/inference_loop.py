"""``layerscope profile MODEL --loop DATASET``: a model's inference over a data loader, timed as
a real evaluation loop is: the wait for each batch, its copy to the device, the forward, and the
rest of the step (reading results), per batch; and each layer's forward time over the batches.

The phases come from the training loop's ``PhaseTimer`` (same boundaries, same CUDA handling);
the per-layer times from ``analysis.timing.ForwardTimer`` in the same batches, so the layer
times and the forward phase are measured together (their coverage is reported).
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader

from layerscope.analysis import modes
from layerscope.core import values
from layerscope.core.environment import environment
from layerscope.core.errors import UserError
from layerscope.core.noise import noise_section, read_machine
from layerscope.core.phases import per_step
from layerscope.core.records.loop import LoopLayer, LoopProfile  # also imported from here
from layerscope.core.stats import TimingStats
from layerscope.training.data import DATASETS, datasets
from layerscope.training.phases import PhaseTimer, PhaseTotals

LOOP_PHASES = ("data", "h2d", "forward", "other")
DEFAULT_BATCH = 64


def _leaves(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    return [(n, m) for n, m in module.named_modules() if n and not any(True for _ in m.children())]


# a forward that kept less than this many cores busy per wall second was waiting (for a core:
# a forward on the CPU reads no file)
WAITING_CORES = 0.9


def uncovered_cause(forward_cpu_cores: float | None, load1: float | None,
                    cpus: int | None) -> str:
    """What the forward phase holds besides the layers (the coverage's rest), from the facts:
    ``forward_cpu_cores`` (the process's CPU seconds per wall second over the forwards; None
    on CUDA, where the forward is device time), the 1-minute load and the cores. Below
    ``WAITING_CORES`` the forwards were not computing all the time: part of the rest is this
    process waiting for a core, said with the figures (the per-layer medians leave out the
    waits a layer's slower calls held, the forward's median keeps a typical batch's)."""
    own = "the model's own code between layers"
    if forward_cpu_cores is None:
        return own
    if forward_cpu_cores < WAITING_CORES:
        machine = (f", load {load1:.1f} on {cpus} cores" if load1 is not None and cpus
                   else "")
        return (f"{own} and waiting for a core: the forwards ran on the CPU "
                f"{forward_cpu_cores:.0%} of their wall time{machine}")
    return f"{own} (the forwards kept {forward_cpu_cores:.2f} cores busy: not waiting)"


def _batch_size(samples: int, wanted: int) -> tuple[int, list[str]]:
    """The batch size the loop runs with: ``wanted``, or the whole data set when it is smaller
    than one batch (said in a note)."""
    if samples < 1:
        raise UserError("the data set has no samples")
    if samples >= wanted:
        return wanted, []
    return samples, [f"the data set has {samples} samples, fewer than --batch-size {wanted}: "
                     f"every batch holds all {samples}"]


def profile_loop(model: Any, dataset: str, *, synthetic: bool = False,
                 data_dir: str | None = None, batch_size: int | None = None,
                 batches: int | None = None, warmup: int = 1, device: str = "cpu",
                 num_workers: int = 0, threads: int | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 progress: Callable[[int, int], None] | None = None) -> LoopProfile:
    """Inference over ``dataset``'s validation split, phases per batch and forward time per
    leaf layer; the model's flags are restored afterwards. ``warmup`` batches, then ``batches``
    timed ones (default: the rest of one pass); when the data set has fewer, the loader is
    iterated again, as a server keeps receiving requests, and the result's notes say so."""
    from layerscope.analysis.runtime import check_device, prepare_model
    from layerscope.analysis.timing import ForwardTimer

    check_device(device)
    machine = read_machine()  # before our own work adds to the load average
    _check_arguments(dataset, batch_size, batches, warmup, num_workers)
    _, val_set, _ = datasets(dataset, synthetic=synthetic, data_dir=data_dir, download=False,
                             augment=False, seed=0)
    cuda = device == "cuda"
    loader, batch_size, batches, notes = _loader(val_set, batch_size, batches, warmup,
                                                 num_workers, cuda)
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    used_threads = torch.get_num_threads()
    sample_shape = "x".join(str(d) for d in val_set[0][0].shape)
    loaded, module, _ = prepare_model(model, [f"1x{sample_shape}"], None, device, None)
    flags = modes.flags(module)
    leaves = _leaves(module) or [("(root)", module)]
    timer = PhaseTimer(cuda=cuda, clock=clock)
    layer_timer = ForwardTimer(leaves, cuda=cuda, clock=clock)
    try:
        modes.set_mode(module, False)
        timed = _time_batches(module, loader, device, timer, layer_timer, warmup, batches,
                              progress)
    except UserError:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{loaded.name} failed on {dataset} batches: {type(exc).__name__}: "
                        f"{first}") from exc
    finally:
        modes.restore(flags)
        torch.set_num_threads(old_threads)
    walls, forwards = timed.walls, timed.forwards
    forward_median = TimingStats.of(forwards).median_s
    layers, layer_stats = _layers(leaves, timed.per_batch, forward_median)
    phases = timed.totals.to_dict()
    phases["seconds"] = {p: phases["seconds"][p] for p in LOOP_PHASES}
    from layerscope.analysis.efficiency import of_batches

    efficiency = of_batches(module, [f"{batch_size}x{sample_shape}"], walls, device)
    cores = timed.forward_cpu / sum(forwards) if not cuda and sum(forwards) > 0 else None
    return LoopProfile(
        model=loaded.name, dataset=dataset + (" (synthetic)" if synthetic else ""),
        device=device, batch_size=batch_size, batches=batches, warmup=warmup, phases=phases,
        batch_time=TimingStats.of(walls, keep=True).to_dict(), layers=layers,
        coverage=(sum(r.time["median_s"] for r in layers) / forward_median
                  if forward_median else None), notes=notes,
        forward_cpu_cores=cores,
        coverage_rest=uncovered_cause(cores, machine.loadavg[0] if machine.loadavg else None,
                                      machine.cpus_available or machine.cpu_count),
        step_phases=per_step(timed.batch_phases) if timed.batch_phases else None,
        settings={"threads": threads or old_threads, "num_workers": num_workers,
                  "synthetic": synthetic},
        environment=environment(),
        noise=noise_section(TimingStats.of(walls), machine, used_threads, layer_stats),
        efficiency=efficiency)


def _check_arguments(dataset: str, batch_size: Any, batches: Any, warmup: Any,
                     num_workers: Any) -> None:
    """profile_loop's arguments, each refused in its own name."""
    if dataset not in DATASETS:
        raise UserError(f"unknown dataset {dataset!r}: use {', '.join(DATASETS)}",
                        arguments="dataset")
    for name, value in (("batch_size", batch_size), ("batches", batches)):
        if value is not None:
            values.positive_int(value, name)
    values.non_negative_int(warmup, "warmup")
    values.non_negative_int(num_workers, "num_workers")


def _loader(val_set, batch_size: int | None, batches: int | None, warmup: int,
            num_workers: int, cuda: bool) -> tuple[DataLoader, int, int, list[str]]:
    """The loader of full batches over ``val_set``, its batch size, the timed batches (default:
    the rest of one pass) and the notes saying what the data set's size made of them."""
    batch_size, notes = _batch_size(len(val_set), batch_size or DEFAULT_BATCH)
    # full batches only: every timed batch holds batch_size samples
    loader = DataLoader(val_set, batch_size=batch_size, num_workers=num_workers,
                        pin_memory=cuda, drop_last=True, persistent_workers=num_workers > 0)
    available = len(loader)
    if len(val_set) % batch_size:
        notes.append(f"each pass over the {len(val_set)} samples leaves out the last "
                     f"{len(val_set) % batch_size} (fewer than a batch)")
    if batches is None:
        batches = max(available - warmup, 1)
    epochs = -(-(warmup + batches) // available)
    if epochs > 1:  # as a server keeps receiving requests: the loader is iterated again
        notes.append(f"{warmup} warm-up + {batches} timed batches need {epochs} passes over the "
                     f"data set's {available} batches of {batch_size}: the loader was iterated "
                     "again (a new epoch) when it ran out, so later batches repeat earlier data")
    return loader, batch_size, batches, notes


@dataclasses.dataclass
class _Timed:
    """What the timed batches measured: phases, wall and forward seconds, per-layer times, and
    the process's CPU seconds in the measured forwards."""
    totals: PhaseTotals = dataclasses.field(default_factory=PhaseTotals)
    walls: list[float] = dataclasses.field(default_factory=list)
    forwards: list[float] = dataclasses.field(default_factory=list)
    per_batch: list[dict[str, float]] = dataclasses.field(default_factory=list)
    batch_phases: list[dict[str, float]] = dataclasses.field(default_factory=list)
    forward_cpu: float = 0.0


def _time_batches(module: torch.nn.Module, loader: DataLoader, device: str, timer: PhaseTimer,
                  layer_timer: Any, warmup: int, batches: int,
                  progress: Callable[[int, int], None] | None) -> _Timed:
    """``warmup`` batches, then ``batches`` timed ones, iterating the loader again when it runs
    out (the new epoch's start timed as the wait for its first batch)."""
    cuda = device == "cuda"
    timed = _Timed()
    it = iter(loader)
    with torch.no_grad():
        for i in range(warmup + batches):
            timer.start()
            try:
                x, y = next(it)
            except StopIteration:  # a new epoch, timed as the wait for this batch
                it = iter(loader)
                x, y = next(it)
            timer.mark("data")
            x = x.to(device, non_blocking=cuda)
            y = y.to(device, non_blocking=cuda)
            timer.mark("h2d")
            cpu0 = time.process_time()
            with layer_timer:
                out = module(x)
            timer.mark("forward")
            cpu = time.process_time() - cpu0
            # "other": what an evaluation loop does with the output (one read back)
            int((out.argmax(1) == y).sum())
            phases, wall = timer.stop()
            if i >= warmup:
                timed.totals.add(phases, wall, len(y))
                timed.walls.append(wall)
                timed.batch_phases.append({p: phases[p] for p in LOOP_PHASES if p in phases})
                timed.forwards.append(phases["forward"])
                timed.forward_cpu += cpu
                timed.per_batch.append(layer_timer.result())
            if progress:
                progress(i + 1, warmup + batches)
    del it
    return timed


def _layers(leaves: list[tuple[str, torch.nn.Module]], per_batch: list[dict[str, float]],
            forward_median: float) -> tuple[list[LoopLayer], list[TimingStats]]:
    """One row per leaf layer, slowest first, and each layer's timing statistics."""
    layers, layer_stats = [], []
    for name, m in leaves:
        stats = TimingStats.of([run.get(name, 0.0) for run in per_batch], keep=True)
        layer_stats.append(stats)
        layers.append(LoopLayer(name, type(m).__name__, stats.to_dict(),
                                stats.median_s / forward_median if forward_median else None))
    layers.sort(key=lambda r: -r.time["median_s"])
    return layers, layer_stats
