"""``layerscope ablate``: each optimisation variant trained for N steps in a fresh process, with
the same seed and data order, warm-up steps excluded; one phase-breakdown row per variant,
speed-up over the baseline, and whether it is beyond the repeat-to-repeat noise."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from layerscope.core import values
from layerscope.core.environment import environment
from layerscope.core.errors import UserError
from layerscope.core.noise import noise_section, read_machine
from layerscope.core.records import Noise
from layerscope.core.records.ablate import (  # also imported from here
    AblationReport,
    RepeatBreakdown,
    VariantResult,
)
from layerscope.core.stats import TimingStats
from layerscope.training.phases import PHASES

# variant -> train flags; CUDA_ONLY ones do not apply on the CPU
VARIANT_FLAGS: dict[str, list[str]] = {
    "baseline": [],
    "pin-memory": ["--pin-memory"],
    "compile": ["--compile"],
    "torchscript": ["--torchscript"],
    "cudnn-benchmark": ["--cudnn-benchmark"],
    "amp": ["--amp"],
    "channels-last": ["--channels-last"],
}
CUDA_ONLY = {"pin-memory", "cudnn-benchmark"}
# a traced TorchScript module cannot be torch.compiled: ``all`` keeps compile
EXCLUSIVE = [("compile", "torchscript")]
ALL_MAX_WORKERS = 4
DEFAULT_WARMUP_STEPS = 5


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def expand_all(device: str, cores: int | None = None) -> list[str]:
    """The parts ``all`` stands for on ``device``: every variant that applies there (compile
    rather than torchscript, which excludes it), and as many loader workers as there are
    cores, at most ALL_MAX_WORKERS (none on one core)."""
    cores = usable_cores() if cores is None else cores
    workers = min(ALL_MAX_WORKERS, cores)
    parts = [f"workers={workers}"] if workers > 1 else []
    dropped = {b for _, b in EXCLUSIVE}
    parts += [v for v in VARIANT_FLAGS if v != "baseline" and v not in dropped
              and (device == "cuda" or v not in CUDA_ONLY)]
    return parts


def _part_flags(part: str) -> list[str]:
    if part.startswith("workers="):
        n = values.non_negative_int(part.split("=", 1)[1], f"variant {part!r}: N of workers=N",
                                    maximum=values.WORKERS_MAX)
        return ["--num-workers", str(n)]
    if part not in VARIANT_FLAGS:
        known = ", ".join(list(VARIANT_FLAGS) + ["workers=N", "all"])
        raise UserError(f"unknown variant {part!r}: use {known}, combined with + "
                        "(e.g. torchscript+channels-last)")
    return VARIANT_FLAGS[part]


def parse_variant(name: str, device: str, cores: int | None = None
                  ) -> tuple[list[str] | None, list[str]]:
    """(train flags, parts) of a variant such as ``torchscript+channels-last`` or ``all``.

    Flags are None when a part does not apply on ``device`` (a CUDA-only switch on the CPU).
    Raises UserError for unknown parts, parts that exclude each other, two worker counts."""
    parts = [p.strip() for p in name.split("+")]
    if any(not p for p in parts):
        raise UserError(f"variant {name!r}: an empty part between '+' signs")
    if "all" in parts:
        if len(parts) > 1:
            raise UserError(f"variant {name!r}: 'all' already holds every variant; use it alone")
        parts = expand_all(device, cores)
    flags: list[str] = []
    for p in parts:
        flags += _part_flags(p)
    for a, b in EXCLUSIVE:
        if a in parts and b in parts:
            raise UserError(f"variant {name!r}: {a} and {b} exclude each other")
    if sum(p.startswith("workers=") for p in parts) > 1:
        raise UserError(f"variant {name!r}: give workers=N once")
    if len(set(parts)) != len(parts):
        raise UserError(f"variant {name!r}: a part is repeated")
    if device != "cuda" and any(p in CUDA_ONLY for p in parts):
        return None, parts
    return flags, parts


def _run_variant(recipe: str, flags: list[str], common: list[str], seed: int,
                 workdir: str, tag: str) -> dict[str, Any]:
    out = os.path.join(workdir, f"{tag}.json")
    cmd = [sys.executable, "-m", "layerscope", "train", recipe, *common, "--seed", str(seed),
           "--out", os.path.join(workdir, tag), "--no-eval", "--quiet", "--format", "json",
           "-o", out,
           *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
        raise RuntimeError(lines[-1] if lines else f"exit code {proc.returncode}")
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def default_warmup_steps(steps: int) -> int:
    """Warm-up steps of a comparison run: 5, but never more than half the steps."""
    return min(DEFAULT_WARMUP_STEPS, steps // 2)


def repeat_of(rep: dict[str, Any]) -> RepeatBreakdown:
    """One run's breakdown (a train or run result's JSON) with its steps' p10-p90 spread."""
    spread = TimingStats.of(rep["step_seconds"] or [0.0])
    return RepeatBreakdown.from_dict({**rep["breakdown"], "step_p10_s": spread.p10_s,
                                      "step_p90_s": spread.p90_s,
                                      "step_seconds": list(rep["step_seconds"] or []) or None})


def ablate(recipe: str, *, steps: int = 30, variants=("baseline",), repeats: int = 1,
           warmup_steps: int | None = None, device: str = "cpu", batch_size: int | None = None,
           synthetic: bool = True, data_dir: str | None = None, seed: int = 0,
           threads: int | None = None,
           progress: Callable[[int, int], None] | None = None) -> AblationReport:
    from layerscope.training.recipes import lookup

    lookup(recipe)
    machine = read_machine()  # before our own work adds to the load average
    steps = values.positive_int(steps, "steps")
    repeats = values.positive_int(repeats, "repeats")
    if warmup_steps is None:
        warmup_steps = default_warmup_steps(steps)
    warmup_steps = values.non_negative_int(warmup_steps, "warmup_steps")
    seed = values.seed(seed, "seed")
    device = values.device(device, "device")
    if batch_size is not None:
        batch_size = values.positive_int(batch_size, "batch_size")
    if threads is not None:
        threads = values.thread_count(threads, "threads")
    if warmup_steps >= steps:
        raise UserError(f"warmup_steps ({warmup_steps}) must be below steps ({steps})",
                        arguments=("warmup_steps", "steps"))
    plan = []
    reasons = {}  # variant -> why it is not run
    for v in variants:
        flags, parts = parse_variant(v, device)
        plan.append((v, flags, "+".join(parts) if v == "all" else None))
        if flags is None:
            cuda_parts = [p for p in parts if p in CUDA_ONLY]
            verb = "needs" if len(cuda_parts) == 1 else "need"
            reasons[v] = f"n/a on {device}: {' and '.join(cuda_parts)} {verb} a CUDA device"
    if "baseline" not in [v for v, _, _ in plan]:
        plan.insert(0, ("baseline", [], None))
    common = ["--steps", str(steps), "--warmup-steps", str(warmup_steps), "--device", device]
    if synthetic:
        common.append("--synthetic")
    if data_dir:
        common += ["--data-dir", data_dir]
    if batch_size:
        common += ["--batch-size", str(batch_size)]
    if threads:
        common += ["--threads", str(threads)]
    results = []
    step_samples: dict[str, list[float]] = {}  # variant -> step times of all its repeats
    total, done = sum(repeats for _, f, _ in plan if f is not None), 0
    with tempfile.TemporaryDirectory(prefix="layerscope-ablate-") as workdir:
        for name, flags, expanded in plan:
            res = VariantResult(name, flags or [], expanded=expanded)
            results.append(res)
            if flags is None:
                res.status, res.reason = "n/a", reasons[name]
                continue
            for r in range(repeats):
                try:
                    rep = _run_variant(recipe, flags, common, seed, workdir,
                                       f"{_tag(name)}-{r}")
                    res.repeats.append(repeat_of(rep))
                    step_samples.setdefault(name, []).extend(rep["step_seconds"] or [])
                except Exception as exc:
                    res.status, res.reason = "error", str(exc)
                    break
                finally:
                    done += 1
                    if progress:
                        progress(done, total)
    summarise(results)
    return AblationReport(recipe, device, steps, warmup_steps, repeats, results,
                          environment=environment(),
                          noise=_noise(step_samples.get("baseline"), machine, threads))


def _noise(steps: list[float] | None, machine, threads: int | None) -> Noise | None:
    import torch

    if not steps:
        return None
    # the training runs use --threads, or torch's default, which is this process's default
    return noise_section(TimingStats.of(steps), machine, threads or torch.get_num_threads())


def _tag(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in name)


def summarise(results: list[VariantResult]) -> None:
    """Each variant's step time (the median over its repeats of wall time per step), phases
    (ms per step), speed-up over the baseline and whether it is beyond the noise."""
    for res in results:
        if res.status != "ok" or not res.repeats:
            continue
        per_step = [b["wall_s"] / b["steps"] for b in res.repeats if b["steps"]]
        res.step = TimingStats.of(per_step).to_dict()
        res.phases_ms = {p: TimingStats.of([b["seconds"].get(p, 0.0) / b["steps"] * 1e3
                                            for b in res.repeats]).median_s
                         for p in PHASES if any(p in b["seconds"] for b in res.repeats)}
    base = next((r for r in results if r.variant == "baseline" and r.step), None)
    if base is None:
        return
    for res in results:
        if not res.step:
            continue
        res.speedup = base.step["median_s"] / res.step["median_s"]
        res.beyond_noise = None if res is base else beyond_noise(res, base)


def beyond_noise(res: VariantResult, base: VariantResult) -> bool:
    """Whether a variant's step time differs from the baseline's beyond the noise: the
    repeats' ranges (min..max; with one repeat, its steps' p10..p90) do not overlap."""
    lo, hi = _range(res)
    blo, bhi = _range(base)
    return hi < blo or lo > bhi


def _range(res: VariantResult) -> tuple[float, float]:
    per_step = [b["wall_s"] / b["steps"] for b in res.repeats]
    if len(per_step) > 1:
        return min(per_step), max(per_step)
    # one repeat: use the step-to-step spread (p10-p90) of that run
    return res.repeats[0]["step_p10_s"], res.repeats[0]["step_p90_s"]
