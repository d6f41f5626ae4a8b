"""``layerscope scaling RECIPE --nproc 1,2,4``: data-parallel throughput per world size.

For each world size N, ``layerscope train RECIPE --nproc-per-node N`` (distributed train: DDP,
ranks launched by ``torch.distributed.run``) runs ``steps`` measured steps after ``warmup``, each
rank with the recipe's batch, so a step trains N x batch samples (weak scaling, DDP's
convention). N = 1 is the same program with one rank. Per world size:

- ``step_s``: median over steps of rank 0's step time (a step of distributed train ends on every
  rank together: the gradients are all-reduced and the step ends at a barrier);
- ``throughput_per_s`` = N x rank 0's samples / rank 0's time over the measured steps (every
  sample counted: an epoch's last batch may be short);
- ``speedup`` = throughput / throughput of the first (smallest) world size; ``efficiency`` =
  ``speedup`` x N0 / N: 1.0 is linear scaling (with N0 = 1, throughput_N / (N x throughput_1));
- ``communication_share``: the time inside the gradient all-reduces (``CommRecorder``: DDP's
  communication hook) per step over the step time, mean over ranks; ``exposed_share`` the part of
  it backward did not hide.

Threads: each rank runs ``threads`` intra-op threads (default 1, what torchrun gives each of
several processes), at every world size, so what changes between world sizes is only the number
of ranks (giving one process all the cores instead mixes intra-op scaling into the baseline).
When N x threads exceeds the usable CPU cores the ranks share cores and the figures measure
oversubscription, which the report says.
"""
from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from layerscope.core import options, values
from layerscope.core.environment import environment
from layerscope.core.errors import UserError
from layerscope.core.io import temp_dir
from layerscope.core.noise import read_machine
from layerscope.core.records.efficiency import Efficiency
from layerscope.core.records.scaling import ScalingPoint, ScalingReport  # also imported from here
from layerscope.core.settings import REQUIRED, Settings, of_call, option
from layerscope.core.stats import TimingStats
from layerscope.training.ablation import usable_cores

DEFAULT_STEPS = 20
DEFAULT_WARMUP = 3
NPROC_MAX = 1024  # a sanity bound on --nproc items: torchrun would start that many processes


def _world_size(value: Any, name: str | None = None) -> int:
    return values.positive_int(value, name, maximum=NPROC_MAX)


@dataclasses.dataclass(kw_only=True, eq=False)
class ScalingSettings(Settings):
    """Every setting of ``layerscope scaling`` and ``layerscope.scaling``: a new one is a field
    here (the CLI's option, the API's argument and the saved result's ``settings`` follow)."""

    recipe: str = option(REQUIRED, "a training recipe (digits-cnn, mnist-cnn, ...)",
                         positional=True, record=False)
    nproc: list[int] = option([1, 2], "world sizes, e.g. 1,2,4 (default 1,2); each is launched "
                                      "with torch.distributed.run",
                              parse=options.listed(_world_size, what="world size"))
    steps: int = option(DEFAULT_STEPS, "measured steps per world size (default 20)",
                        parse=values.positive_int)
    warmup: int = option(DEFAULT_WARMUP, "steps before them, left out (default 3)",
                         parse=values.non_negative_int)
    batch_size: int | None = options.batch_size("per rank (default: the recipe's)")
    threads: int = options.threads("intra-op threads per rank (default 1)", default=1)
    device: str = options.device()  # gloo on cpu, NCCL with one GPU per rank on cuda
    synthetic: bool = option(False, "generated data (no dataset needed)")
    data_dir: str | None = option(None)
    seed: int = option(0, parse=values.seed)


def _train_at(recipe: str, nproc: int, flags: list[str], workdir: str) -> dict[str, Any]:
    """``layerscope train RECIPE --nproc-per-node N`` (which launches its ranks through
    torch.distributed.run) in a fresh process; its JSON report."""
    out = os.path.join(workdir, f"n{nproc}.json")
    cmd = [sys.executable, "-m", "layerscope", "train", recipe, "--nproc-per-node", str(nproc),
           *flags, "--out", os.path.join(workdir, f"run{nproc}"), "--no-eval", "--quiet",
           "--format", "json", "-o", out]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not os.path.exists(out):
        raise UserError(f"scaling {recipe} at {nproc} processes: {_failure(proc)}")
    with open(out, encoding="utf-8") as f:
        report: dict[str, Any] = json.load(f)
    return report


def _failure(proc: subprocess.CompletedProcess) -> str:
    """The one line the failed run ended with (distributed train names the failed rank)."""
    lines = [ln.strip() for ln in (proc.stderr or "").splitlines() if ln.strip()]
    if not lines:
        return f"exit code {proc.returncode}"
    return lines[-1].removeprefix("layerscope: ").removeprefix("error: ")


def point(report: dict[str, Any], threads: int, cores: int, device: str) -> ScalingPoint:
    """A world size's figures from its distributed train report (speed-up and efficiency are
    filled in by ``relative_to_first``)."""
    n = int(report.get("world_size") or 1)
    ranks = report.get("ranks") or []
    b = report["breakdown"]
    from layerscope.training.recipes import lookup

    batch = (report.get("config") or {}).get("batch_size") or lookup(report["recipe"]).batch_size
    stats = TimingStats.of(report["step_seconds"], keep=True)

    def mean_phase(name: str) -> float:
        return statistics.fmean(r["phases"].get(name, 0.0) for r in ranks) if ranks else 0.0

    comm_s, exposed_s = mean_phase("communication"), mean_phase("exposed_communication")
    c = report.get("communication") or {}
    phases = {p: mean_phase(p) for p in (ranks[0]["phases"] if ranks else {})}
    return ScalingPoint(
        world_size=n, threads_per_rank=threads, batch_per_rank=batch, steps=stats.n,
        step_s=stats.median_s, step_p10_s=stats.p10_s, step_p90_s=stats.p90_s,
        step_samples_s=stats.samples_s,
        throughput_per_s=n * b["samples"] / b["wall_s"], speedup=1.0, efficiency=1.0,
        communication_s=comm_s, communication_share=comm_s / stats.median_s,
        exposed_s=exposed_s, exposed_share=exposed_s / stats.median_s,
        buckets=len(c.get("buckets", [])), bytes_per_step=int(c.get("bytes_per_step", 0)),
        theory_bytes_per_step=float(c.get("theory_bytes_per_step", 0.0)),
        oversubscribed=device == "cpu" and n * threads > cores, phases=phases,
        utilisation=(Efficiency.from_dict(report["efficiency"]) if report.get("efficiency")
                     else None))


def relative_to_first(points: list[ScalingPoint]) -> None:
    """Fill in speed-up and efficiency against the first (smallest) world size N0:
    speed-up = throughput / throughput_N0; efficiency = speed-up x N0 / N."""
    base = points[0]
    for p in points:
        p.speedup = p.throughput_per_s / base.throughput_per_s
        p.efficiency = p.speedup * base.world_size / p.world_size


def scaling(recipe: str | None = None, nproc: Any = None, *,
            settings: ScalingSettings | None = None,
            progress: Callable[[int, int], None] | None = None,
            **overrides: Any) -> ScalingReport:
    """Train ``recipe`` at each world size in ``nproc``; returns the ScalingReport.
    ``settings``: a ``ScalingSettings``; keyword arguments override its fields (``steps=5``)."""
    import torch

    from layerscope.training.recipes import lookup

    s = of_call(ScalingSettings, settings, overrides, "scaling", recipe=recipe,
                        nproc=nproc)
    lookup(s.recipe)
    machine = read_machine()  # before our own processes add to the load average
    recipe, steps, warmup, seed, threads = s.recipe, s.steps, s.warmup, s.seed, s.threads
    batch_size, synthetic, data_dir, device = s.batch_size, s.synthetic, s.data_dir, s.device
    sizes = sorted(set(s.nproc))
    if device == "cuda" and sizes[-1] > torch.cuda.device_count():
        raise UserError(f"nproc {sizes[-1]}: {torch.cuda.device_count()} CUDA GPUs here; one "
                        f"process per GPU", arguments="nproc")
    cores = usable_cores()
    # train counts warm-up steps in --steps and leaves them out of its step times
    flags = ["--steps", str(steps + warmup), "--warmup-steps", str(warmup), "--device", device,
             "--seed", str(seed), "--threads", str(threads)]
    if batch_size:
        flags += ["--batch-size", str(batch_size)]
    if synthetic:
        flags.append("--synthetic")
    if data_dir:
        flags += ["--data-dir", data_dir]
    points = []
    with temp_dir() as workdir:
        for i, n in enumerate(sizes):
            points.append(point(_train_at(recipe, n, flags, workdir), threads, cores, device))
            if progress:
                progress(i + 1, len(sizes))
    relative_to_first(points)
    base = points[0]
    notes = []
    over = [p.world_size for p in points if p.oversubscribed]
    if over:
        per = "" if threads == 1 else f" x {threads} threads"
        notes.append(f"{', '.join(map(str, over))} processes{per} exceed the {cores} CPU cores "
                     f"here: those figures measure oversubscription (ranks sharing cores), not "
                     f"scaling")
    load = machine.loadavg[0] if machine.loadavg else None
    if device == "cpu" and load is not None and load >= cores:
        notes.append(f"the machine was busy before the run (load average {load:.1f} on {cores} "
                     f"cores): other processes share these cores, so the figures are noisy")
    if base.world_size != 1:
        notes.append(f"speed-up and efficiency are against {base.world_size} processes, the "
                     f"smallest world size measured")
    return ScalingReport(recipe=recipe, device=device, points=points,
                         settings={**s.recorded(), "nproc": sizes, "steps": steps, "warmup": warmup,
                                   "batch_size": batch_size, "synthetic": synthetic,
                                   "seed": seed, "cores": cores, "threads_per_rank": threads,
                                   "launcher": "layerscope train --nproc-per-node "
                                               "(torch.distributed.run)",
                                   "backend": "nccl" if device == "cuda" else "gloo"},
                         notes=notes, environment=environment())
