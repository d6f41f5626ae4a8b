"""How far a timed result can be trusted: the ``noise`` section every profile, sweep and ablation
carries (docs/design.md, "Timing and noise").

``noise_section`` is a pure function of timing statistics and environment readings, so its
thresholds are tested with fixed numbers; ``read_machine`` takes the readings (at the start of a
measurement, before our own work adds to the load).

Thresholds (decisions, stated for users in docs/profiling.md, "Noisy machines"):
- spread: p90/p10 of the end-to-end samples above ``SPREAD_LIMIT`` (1.5: the middle 80% of runs
  differ by more than half the fast ones) means the figures move more than most effects one
  wants to measure;
- oversubscription: ``threads`` + the CPUs other work keeps busy (floor of the 1-minute load
  average) above the CPUs this process may use. OpenMP threads then wait for each other at every
  parallel region, which gives the heavy tails (p90 tens of times the median) seen on a busy
  2-core machine;
- mean far above median: mean / median above ``MEAN_LIMIT`` (1.5) means a few runs were much
  slower than the typical one (outliers); the median describes the typical run, the mean what a
  long series of runs averages, and they are both shown. The same test is made for every layer
  row on its own (``mean_far_above_median``): a row that passes it is marked with ``ROW_MARK``
  in the per-layer tables, and the section counts such rows and warns about them even when the
  end-to-end runs were steady (a few slow layer calls can hide in a steady total).
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from layerscope.core.records import Noise
from layerscope.core.stats import TimingStats

SPREAD_LIMIT = 1.5
MEAN_LIMIT = 1.5
ROW_MARK = "*"  # beside a row's mean in the per-layer tables: mean far above its median


def mean_far_above_median(median_s: float | None, mean_s: float | None) -> bool:
    """Whether a mean is more than ``MEAN_LIMIT`` times its median (a few much slower runs)."""
    return (median_s is not None and mean_s is not None and median_s > 0
            and mean_s > MEAN_LIMIT * median_s)


@dataclass(frozen=True)
class MachineReading:
    """Environment readings taken at the start of a measurement."""

    loadavg: tuple[float, float, float] | None  # 1, 5, 15 minutes; None where unsupported
    cpu_count: int | None  # os.cpu_count()
    cpus_available: int | None  # len(os.sched_getaffinity(0)): the CPUs this process may use


def read_machine() -> MachineReading:
    try:
        load = tuple(round(x, 2) for x in os.getloadavg())
    except (OSError, AttributeError):  # not on every platform
        load = None
    available: int | None
    try:
        available = len(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        available = os.cpu_count()
    return MachineReading(load, os.cpu_count(), available)  # type: ignore[arg-type]


def noise_section(stats: TimingStats, machine: MachineReading, threads: int | None,
                  rows: Sequence[TimingStats] = (), *, repeats: str = "--runs") -> Noise:
    """The ``noise`` JSON section: spread of ``stats`` (end-to-end samples), the machine readings,
    the threads used, and one warning line per problem found (empty when none); ``repeats``:
    the option that sets the number of samples, named in the remedy."""
    spread = stats.p90_s / stats.p10_s if stats.p10_s > 0 else None
    mean_ratio = stats.mean_s / stats.median_s if stats.median_s > 0 else None
    load1 = machine.loadavg[0] if machine.loadavg else None
    cpus = machine.cpus_available or machine.cpu_count
    busy = math.floor(load1) if load1 is not None else None
    oversubscribed = (None if busy is None or not cpus or not threads
                      else threads + busy > cpus)
    far_rows = sum(1 for r in rows if mean_far_above_median(r.median_s, r.mean_s))
    warnings: list[str] = []
    noisy = spread is not None and spread > SPREAD_LIMIT
    if noisy or oversubscribed:
        warnings.append(_noise_line(spread, noisy, oversubscribed, threads, load1, cpus,
                                    repeats))
    rows_text = f"{far_rows} of {len(rows)} layers"
    marked = f"(marked {ROW_MARK} beside their mean)"
    if mean_far_above_median(stats.median_s, stats.mean_s):
        warnings.append(
            f"Mean {mean_ratio:.1f}x the median"
            f"{f'; {rows_text} likewise {marked}' if far_rows else ''}: "
            f"a few runs were much slower than the typical one (outliers, usually other work "
            f"on the machine). The median is the typical run; the mean is what a long series of "
            f"runs averages.")
    elif far_rows:
        warnings.append(
            f"{rows_text} {marked} have a mean above {MEAN_LIMIT:g}x their "
            f"median: a few of their calls were much slower than the typical one (outliers, "
            f"usually other work on the machine), though the end-to-end runs were not. Their "
            f"median is the typical call; read their mean with care.")
    return Noise(
        n=stats.n, p90_over_p10=spread, cv=stats.cv, mean_over_median=mean_ratio,
        loadavg=list(machine.loadavg) if machine.loadavg else None,
        cpu_count=machine.cpu_count, cpus_available=machine.cpus_available, threads=threads,
        busy_cpus=busy, oversubscribed=oversubscribed,
        rows_mean_far_above_median=far_rows if rows else None, warnings=warnings)


def _noise_line(spread: float | None, noisy: bool, oversubscribed: bool | None,
                threads: int | None, load1: float | None, cpus: int | None,
                repeats: str = "--runs") -> str:
    why = []
    if noisy:
        why.append(f"p90/p10 = {spread:.2f}")
    if oversubscribed:
        why.append(f"{threads} thread(s) + load {load1:.1f} on {cpus} CPUs")
    if oversubscribed and threads and threads > 1:
        cause = "the threads compete with other work for the cores, and OpenMP threads wait " \
                "for the slowest at every parallel region"
    elif oversubscribed:
        cause = "other processes take turns with this one on the cores"
    else:
        cause = "other work on the machine, or CPU frequency changes"
    idle = max(1, (cpus or 1) - math.floor(load1 or 0))
    remedy = [f"--threads {idle} (no more than the idle cores)"] if threads and idle < threads \
        else []
    remedy += ["a quiet machine", f"more {repeats}"]
    return (f"Noisy measurement ({'; '.join(why)}): likely {cause}. Remedy: "
            f"{', '.join(remedy[:-1])} or {remedy[-1]}.")
