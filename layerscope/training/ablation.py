"""``layerscope ablate``: each optimisation variant trained for N steps in a fresh process, with
the same seed and data order, warm-up steps excluded; one phase-breakdown row per variant,
speed-up over the baseline, and whether it is beyond the repeat-to-repeat noise."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from layerscope.core.document import ResultDocument
from layerscope.core.noise import noise_section, read_machine
from layerscope.core.report import SCHEMA_VERSION
from layerscope.core.stats import TimingStats
from layerscope.environment import environment
from layerscope.errors import UserError
from layerscope.core import values
from layerscope.training.phases import PHASES

# variant -> train flags; None marks "needs CUDA"
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


@dataclass
class VariantResult:
    variant: str
    flags: list[str]
    status: str = "ok"  # ok | n/a | error
    reason: str | None = None
    repeats: list[dict[str, Any]] = field(default_factory=list)  # per repeat: breakdown dicts
    step: dict[str, Any] | None = None  # TimingStats of mean step time across repeats
    phases_ms: dict[str, float] | None = None  # median over repeats of ms per step per phase
    speedup: float | None = None
    beyond_noise: bool | None = None


@dataclass
class AblationReport(ResultDocument):
    recipe: str
    device: str
    steps: int
    warmup_steps: int
    repeats: int
    variants: list[VariantResult]
    environment: dict[str, Any] = field(default_factory=dict)
    # core.noise section from the baseline's step times (every speed-up is relative to it)
    noise: dict[str, Any] | None = None
    kind: str = "ablate"
    schema_version: str = SCHEMA_VERSION

    _row_types: ClassVar[dict[str, type]] = {"variants": VariantResult}

    def __rich__(self):
        from layerscope.renderers.training import render_ablation

        return render_ablation(self)


def variant_flags(name: str, device: str) -> list[str] | None:
    """Train flags of a variant; None when it does not apply on ``device``."""
    if name.startswith("workers="):
        n = values.non_negative_int(name.split("=", 1)[1], f"variant {name!r}: N of workers=N",
                                    maximum=values.WORKERS_MAX)
        return ["--num-workers", str(n)]
    if name == "all":
        flags = ["--num-workers", "4"]
        for v, f in VARIANT_FLAGS.items():
            if v in ("baseline", "torchscript"):  # torchscript and compile exclude each other
                continue
            if v in CUDA_ONLY and device != "cuda":
                continue
            flags += f
        return flags
    if name not in VARIANT_FLAGS:
        known = ", ".join(list(VARIANT_FLAGS) + ["workers=N", "all"])
        raise UserError(f"unknown variant {name!r}: use {known}")
    if name in CUDA_ONLY and device != "cuda":
        return None
    return VARIANT_FLAGS[name]


def _run_variant(recipe: str, flags: list[str], common: list[str], seed: int,
                 workdir: str, tag: str) -> dict[str, Any]:
    out = os.path.join(workdir, f"{tag}.json")
    cmd = [sys.executable, "-m", "layerscope", "train", recipe, *common, "--seed", str(seed),
           "--out", os.path.join(workdir, tag), "--no-eval", "--format", "json", "-o", out,
           *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
        raise RuntimeError(lines[-1] if lines else f"exit code {proc.returncode}")
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def ablate(recipe: str, *, steps: int = 30, variants=("baseline",), repeats: int = 1,
           warmup_steps: int = 5, device: str = "cpu", batch_size: int | None = None,
           synthetic: bool = True, data_dir: str | None = None, seed: int = 0,
           threads: int | None = None,
           progress: Callable[[int, int], None] | None = None) -> AblationReport:
    from layerscope.training.recipes import lookup

    lookup(recipe)
    machine = read_machine()  # before our own work adds to the load average
    steps = values.positive_int(steps, "--steps")
    repeats = values.positive_int(repeats, "--repeats")
    warmup_steps = values.non_negative_int(warmup_steps, "--warmup-steps")
    seed = values.seed(seed, "--seed")
    if batch_size is not None:
        batch_size = values.positive_int(batch_size, "--batch-size")
    if threads is not None:
        threads = values.thread_count(threads, "--threads")
    if warmup_steps >= steps:
        raise UserError(f"--warmup-steps ({warmup_steps}) must be below --steps ({steps})")
    plan = [(v, variant_flags(v, device)) for v in variants]
    if "baseline" not in [v for v, _ in plan]:
        plan.insert(0, ("baseline", []))
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
    total, done = sum(repeats for _, f in plan if f is not None), 0
    with tempfile.TemporaryDirectory(prefix="layerscope-ablate-") as workdir:
        for name, flags in plan:
            res = VariantResult(name, flags or [])
            results.append(res)
            if flags is None:
                res.status, res.reason = "n/a", f"n/a on {device}"
                continue
            for r in range(repeats):
                try:
                    rep = _run_variant(recipe, flags, common, seed, workdir,
                                       f"{name.replace('=', '-')}-{r}")
                    breakdown = rep["breakdown"]
                    spread = TimingStats.of(rep["step_seconds"] or [0.0])
                    breakdown["step_p10_s"], breakdown["step_p90_s"] = spread.p10_s, spread.p90_s
                    res.repeats.append(breakdown)
                    step_samples.setdefault(name, []).extend(rep["step_seconds"] or [])
                except Exception as exc:
                    res.status, res.reason = "error", str(exc)
                    break
                finally:
                    done += 1
                    if progress:
                        progress(done, total)
    _summarise(results)
    return AblationReport(recipe, device, steps, warmup_steps, repeats, results,
                          environment=environment(),
                          noise=_noise(step_samples.get("baseline"), machine, threads))


def _noise(steps: list[float] | None, machine, threads: int | None) -> dict[str, Any] | None:
    import torch

    if not steps:
        return None
    # the training runs use --threads, or torch's default, which is this process's default
    return noise_section(TimingStats.of(steps), machine, threads or torch.get_num_threads())


def _summarise(results: list[VariantResult]) -> None:
    for res in results:
        if res.status != "ok" or not res.repeats:
            continue
        per_step = [b["wall_s"] / b["steps"] for b in res.repeats if b["steps"]]
        res.step = TimingStats.of(per_step).to_dict()
        res.phases_ms = {p: TimingStats.of([b["seconds"][p] / b["steps"] * 1e3
                                            for b in res.repeats]).median_s for p in PHASES}
    base = next((r for r in results if r.variant == "baseline" and r.step), None)
    if base is None:
        return
    for res in results:
        if not res.step:
            continue
        res.speedup = base.step["median_s"] / res.step["median_s"]
        # beyond noise: the repeats' ranges (min..max) do not overlap the baseline's
        lo, hi = _range(res)
        blo, bhi = _range(base)
        res.beyond_noise = None if res is base else (hi < blo or lo > bhi)


def _range(res: VariantResult) -> tuple[float, float]:
    per_step = [b["wall_s"] / b["steps"] for b in res.repeats]
    if len(per_step) > 1:
        return min(per_step), max(per_step)
    # one repeat: use the step-to-step spread (p10-p90) of that run
    return res.repeats[0]["step_p10_s"], res.repeats[0]["step_p90_s"]
