"""``layerscope scaling RECIPE --nproc 1,2,4``: data-parallel throughput per world size.

For each world size N the recipe trains for ``steps`` measured steps (after ``warmup``) under
DDP, launched by ``torch.distributed.run`` (``--standalone``: a rendezvous on a free local port),
each rank with the recipe's batch, so a step trains N x batch samples (weak scaling, DDP's
convention). Per world size:

- ``step_s``: median over steps of the slowest rank's step time (a DDP step ends together on every
  rank: the gradients are all-reduced before the optimizer runs);
- ``throughput_per_s`` = N x batch / ``step_s``;
- ``speedup`` = throughput / throughput of the first (smallest) world size; ``efficiency`` =
  ``speedup`` x N0 / N: 1.0 is linear scaling (with N0 = 1, throughput_N / (N x throughput_1));
- ``communication_share``: the time inside the gradient all-reduces (``CommRecorder``: DDP's
  communication hook) over the step time, median over steps, mean over ranks; ``exposed_share``
  the part of it backward did not hide.

Threads: each rank runs ``threads`` intra-op threads (default 1, what torchrun gives each of
several processes), at every world size, so what changes between world sizes is only the number
of ranks (giving one process all the cores instead mixes intra-op scaling into the baseline).
When N x threads exceeds the usable CPU cores the ranks share cores and the figures measure
oversubscription, which the report says.
"""
from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from layerscope.core import values
from layerscope.core.document import Record, ResultDocument
from layerscope.core.environment import environment
from layerscope.core.errors import UserError
from layerscope.core.io import temp_dir
from layerscope.core.noise import read_machine
from layerscope.core.report import SCHEMA_VERSION
from layerscope.core.stats import TimingStats
from layerscope.training.ablation import usable_cores

DEFAULT_STEPS = 20
DEFAULT_WARMUP = 3
NPROC_MAX = 1024  # a sanity bound on --nproc items: torchrun would start that many processes


@dataclass
class ScalingPoint(Record):
    """One world size of a scaling run: its step time, throughput, scaling against the first
    world size, and its communication."""

    world_size: int = field(metadata={"minimum": 1})
    threads_per_rank: int
    batch_per_rank: int
    steps: int
    step_s: float = field(metadata={"description": "median over steps of the slowest rank's "
                                                   "step time"})
    step_p10_s: float
    step_p90_s: float
    throughput_per_s: float = field(metadata={"description": "samples per second, all ranks"})
    speedup: float = field(metadata={"description": "throughput over the first world size's"})
    efficiency: float = field(metadata={"description": "speedup x N0 / N: 1.0 is linear"})
    communication_s: float = field(metadata={"description": "per step, inside all-reduces"})
    communication_share: float
    exposed_s: float = field(metadata={"description": "per step, communication after "
                                                      "backward's last gradient"})
    exposed_share: float
    buckets: int
    bytes_per_step: int
    theory_bytes_per_step: float
    oversubscribed: bool
    phases: dict[str, float] = field(default_factory=dict)  # rank-mean of median seconds


@dataclass
class ScalingReport(ResultDocument):
    recipe: str
    device: str
    points: list[ScalingPoint]
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    kind: str = "scaling"
    schema_version: str = SCHEMA_VERSION

    def __rich__(self):
        from layerscope.core import display

        return display.rich(self)


def _launch(recipe: str, nproc: int, flags: list[str], workdir: str) -> list[dict[str, Any]]:
    """Run one world size through torch.distributed.run; the ranks' measurements."""
    out = os.path.join(workdir, f"n{nproc}")
    os.makedirs(out)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={nproc}", "-m", "layerscope.training.scaling_worker", recipe,
           *flags, "--out", out]
    env = dict(os.environ, LOGLEVEL="ERROR")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    ranks = []
    for r in range(nproc):
        path = os.path.join(out, f"rank{r}.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                ranks.append(json.load(f))
    if proc.returncode != 0 or len(ranks) != nproc:
        raise UserError(f"scaling {recipe} at {nproc} processes: {_failure(proc, out)}")
    return ranks


def _failure(proc: subprocess.CompletedProcess, out: str | None = None) -> str:
    """One line saying which rank failed and why: the rank's own error (each rank writes
    ``rank<R>.error`` when it raises), else torchrun's "Root Cause" block (a rank killed by a
    signal writes nothing), else the last line of its output."""
    if out is not None:
        errors = sorted((int(name[4:-6]), name) for name in os.listdir(out)
                        if name.startswith("rank") and name.endswith(".error"))
        if errors:
            rank, name = errors[0]
            with open(os.path.join(out, name), encoding="utf-8") as f:
                return f"rank {rank}: {f.read().strip()}"
    text = proc.stderr or ""
    cause = text.split("Root Cause", 1)[-1] if "Root Cause" in text else ""
    rank = re.search(r"^\s*rank\s*:\s*(\d+)", cause, re.M)
    code = re.search(r"^\s*exitcode\s*:\s*(-?\d+)", cause, re.M)
    if rank and code:
        n = int(code.group(1))
        how = (f"killed by {signal.Signals(-n).name}" if n < 0 and -n in signal.valid_signals()
               else f"exit code {n}")
        return f"rank {rank.group(1)} ended ({how})"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {proc.returncode}"


def point(ranks: list[dict[str, Any]], threads: int, cores: int, device: str) -> ScalingPoint:
    """A world size's figures from its ranks' measurements (the first world size's speed-up
    and efficiency are filled in by ``scaling``)."""
    n = len(ranks)
    per_step = [max(r["step_s"][i] for r in ranks) for i in range(min(len(r["step_s"])
                                                                        for r in ranks))]
    stats = TimingStats.of(per_step)
    batch = ranks[0]["batch_size"]
    comm_s = statistics.fmean(r["communication"]["communication_s"] for r in ranks)
    exposed_s = statistics.fmean(r["communication"]["exposed_s"] for r in ranks)
    c = ranks[0]["communication"]
    phases = {p: statistics.fmean(r["phases"].get(p, 0.0) for r in ranks)
              for p in ranks[0]["phases"]}
    return ScalingPoint(
        world_size=n, threads_per_rank=threads, batch_per_rank=batch, steps=len(per_step),
        step_s=stats.median_s, step_p10_s=stats.p10_s, step_p90_s=stats.p90_s,
        throughput_per_s=n * batch / stats.median_s, speedup=1.0, efficiency=1.0,
        communication_s=comm_s, communication_share=comm_s / stats.median_s,
        exposed_s=exposed_s, exposed_share=exposed_s / stats.median_s,
        buckets=len(c["buckets"]), bytes_per_step=c["bytes_per_step"],
        theory_bytes_per_step=c["theory_bytes_per_step"],
        oversubscribed=device == "cpu" and n * threads > cores, phases=phases)


def relative_to_first(points: list[ScalingPoint]) -> None:
    """Fill in speed-up and efficiency against the first (smallest) world size N0:
    speed-up = throughput / throughput_N0; efficiency = speed-up x N0 / N."""
    base = points[0]
    for p in points:
        p.speedup = p.throughput_per_s / base.throughput_per_s
        p.efficiency = p.speedup * base.world_size / p.world_size


def scaling(recipe: str, nproc: list[int] | tuple[int, ...] = (1, 2), *,
            steps: int = DEFAULT_STEPS, warmup: int = DEFAULT_WARMUP, device: str = "cpu",
            batch_size: int | None = None, synthetic: bool = False, data_dir: str | None = None,
            seed: int = 0, threads: int = 1,
            progress: Callable[[int, int], None] | None = None) -> ScalingReport:
    """Train ``recipe`` at each world size in ``nproc``; returns the ScalingReport."""
    import torch

    from layerscope.training.recipes import lookup

    lookup(recipe)
    machine = read_machine()  # before our own processes add to the load average
    steps = values.positive_int(steps, "--steps")
    warmup = values.non_negative_int(warmup, "--warmup")
    seed = values.seed(seed, "--seed")
    threads = values.thread_count(threads, "--threads")
    if batch_size is not None:
        batch_size = values.positive_int(batch_size, "--batch-size")
    sizes = sorted({values.positive_int(n, "--nproc", maximum=NPROC_MAX) for n in nproc})
    if not sizes:
        raise UserError("--nproc: give at least one world size, e.g. 1,2")
    if device not in ("cpu", "cuda"):
        raise UserError(f"unknown --device {device!r}: use cpu or cuda")
    if device == "cuda" and sizes[-1] > torch.cuda.device_count():
        raise UserError(f"--nproc {sizes[-1]}: {torch.cuda.device_count()} CUDA GPUs here; one "
                        f"process per GPU")
    cores = usable_cores()
    flags = ["--steps", str(steps), "--warmup", str(warmup), "--device", device,
             "--seed", str(seed)]
    if batch_size:
        flags += ["--batch-size", str(batch_size)]
    if synthetic:
        flags.append("--synthetic")
    if data_dir:
        flags += ["--data-dir", data_dir]
    points = []
    with temp_dir() as workdir:
        for i, n in enumerate(sizes):
            ranks = _launch(recipe, n, [*flags, "--threads", str(threads)], workdir)
            points.append(point(ranks, threads, cores, device))
            if progress:
                progress(i + 1, len(sizes))
    relative_to_first(points)
    base = points[0]
    notes = []
    over = [p.world_size for p in points if p.oversubscribed]
    if over:
        notes.append(f"{', '.join(map(str, over))} processes exceed the {cores} CPU cores here: "
                     f"those figures measure oversubscription (ranks sharing cores), not "
                     f"scaling")
    load = machine.loadavg[0] if machine.loadavg else None
    if device == "cpu" and load is not None and load >= cores:
        notes.append(f"the machine was busy before the run (load average {load:.1f} on {cores} "
                     f"cores): other processes share these cores, so the figures are noisy")
    if base.world_size != 1:
        notes.append(f"speed-up and efficiency are against {base.world_size} processes, the "
                     f"smallest world size measured")
    return ScalingReport(recipe=recipe, device=device, points=points,
                         settings={"nproc": sizes, "steps": steps, "warmup": warmup,
                                   "batch_size": batch_size, "synthetic": synthetic,
                                   "seed": seed, "cores": cores, "threads_per_rank": threads,
                                   "launcher": "torch.distributed.run --standalone",
                                   "backend": "nccl" if device == "cuda" else "gloo"},
                         notes=notes, environment=environment())
