"""``layerscope ablate``: each optimisation variant trained for N steps in a fresh process, with
the same seed and data order, warm-up steps excluded; one phase-breakdown row per variant,
speed-up over the baseline, and whether it is beyond the repeat-to-repeat noise."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from layerscope.core import options, values
from layerscope.core.environment import environment
from layerscope.core.errors import UserError
from layerscope.core.noise import noise_section, read_machine
from layerscope.core.records import Noise
from layerscope.core.records.ablate import (  # also imported from here
    AblationReport,
    RepeatBreakdown,
    VariantResult,
)
from layerscope.core.settings import REQUIRED, Settings, option
from layerscope.core.stats import TimingStats
from layerscope.training.config import TrainConfig
from layerscope.training.phases import PHASES

# variant -> the train settings it overrides (``TrainConfig.flags`` writes them as train's
# flags); CUDA_ONLY ones do not apply on the CPU
VARIANT_SETTINGS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "pin-memory": {"pin_memory": True},
    "compile": {"compile": True},
    "torchscript": {"torchscript": True},
    "cudnn-benchmark": {"cudnn_benchmark": True},
    "amp": {"amp": True},
    "channels-last": {"channels_last": True},
}
CUDA_ONLY = {"pin-memory", "cudnn-benchmark"}
# a traced TorchScript module cannot be torch.compiled: ``all`` keeps compile
EXCLUSIVE = [("compile", "torchscript")]
ALL_MAX_WORKERS = 4
DEFAULT_WARMUP_STEPS = 5
VARIANTS_HELP = ("comma-separated; each from baseline,pin-memory,workers=N,compile,torchscript,"
                 "cudnn-benchmark,amp,channels-last, or several joined with + "
                 "(torchscript+channels-last), or all (every variant that applies to the "
                 "device, workers at most the cores)")


def variant_list(value: Any, name: str | None = "variants") -> list[str]:
    """The variants of ``--variants a,b+c`` (a comma-separated text, or a list of names in the
    Python API); empty items are left out (the baseline is always run)."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) for v in items):
        raise UserError(f"{name} must be variant names (a list, or a comma-separated text), "
                        f"got {value!r}", arguments=name or ())
    return [v.strip() for v in items if v.strip()]


@dataclasses.dataclass(kw_only=True, eq=False)
class AblateSettings(Settings):
    """Every setting of ``layerscope ablate`` and ``layerscope.ablate``: a new one is a field
    here. The Python API keeps two defaults of its own (``API_DEFAULTS``: the baseline alone,
    generated data)."""

    recipe: str = option(REQUIRED, positional=True)
    steps: int = option(30, parse=values.positive_int)
    variants: list[str] = option(["baseline", "workers=2", "compile", "channels-last"],
                                 VARIANTS_HELP, parse=variant_list)
    repeats: int = option(1, parse=values.positive_int)
    warmup_steps: int | None = option(None, "steps left out of the breakdown (default 5, at "
                                            "most half of --steps)",
                                      parse=values.non_negative_int)
    device: str = options.device()
    batch_size: int | None = option(None, parse=values.positive_int)
    synthetic: bool = option(False, "generated data (no dataset needed)")
    data_dir: str | None = option(None)
    seed: int = option(0, parse=values.seed)
    threads: int | None = options.threads(help=None)

    def check(self) -> None:
        if self.warmup_steps is not None and self.warmup_steps >= self.steps:
            raise UserError(f"warmup_steps ({self.warmup_steps}) must be below steps "
                            f"({self.steps})", arguments=("warmup_steps", "steps"))
        for v in self.variants:  # an unknown or contradictory one: refused now, named
            try:
                variant_settings(v, self.device)
            except UserError as exc:
                raise UserError(f"variants: {exc}", arguments="variants") from None


API_DEFAULTS = {"variants": ["baseline"], "synthetic": True}


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
    parts += [v for v in VARIANT_SETTINGS if v != "baseline" and v not in dropped
              and (device == "cuda" or v not in CUDA_ONLY)]
    return parts


def _part_settings(part: str) -> dict[str, Any]:
    if part.startswith("workers="):
        n = values.non_negative_int(part.split("=", 1)[1], f"variant {part!r}: N of workers=N",
                                    maximum=values.WORKERS_MAX)
        return {"num_workers": n}
    if part not in VARIANT_SETTINGS:
        known = ", ".join(list(VARIANT_SETTINGS) + ["workers=N", "all"])
        raise UserError(f"unknown variant {part!r}: use {known}, combined with + "
                        "(e.g. torchscript+channels-last)")
    return VARIANT_SETTINGS[part]


def variant_settings(name: str, device: str, cores: int | None = None
                     ) -> tuple[dict[str, Any] | None, list[str]]:
    """(the train settings it overrides, parts) of a variant such as
    ``torchscript+channels-last`` or ``all``.

    The settings are None when a part does not apply on ``device`` (a CUDA-only switch on the
    CPU). Raises UserError for unknown parts, parts that exclude each other, two worker
    counts."""
    parts = [p.strip() for p in name.split("+")]
    if any(not p for p in parts):
        raise UserError(f"variant {name!r}: an empty part between '+' signs")
    if "all" in parts:
        if len(parts) > 1:
            raise UserError(f"variant {name!r}: 'all' already holds every variant; use it alone")
        parts = expand_all(device, cores)
    overrides: dict[str, Any] = {}
    for p in parts:
        overrides.update(_part_settings(p))
    for a, b in EXCLUSIVE:
        if a in parts and b in parts:
            raise UserError(f"variant {name!r}: {a} and {b} exclude each other")
    if sum(p.startswith("workers=") for p in parts) > 1:
        raise UserError(f"variant {name!r}: give workers=N once")
    if len(set(parts)) != len(parts):
        raise UserError(f"variant {name!r}: a part is repeated")
    if device != "cuda" and any(p in CUDA_ONLY for p in parts):
        return None, parts
    return overrides, parts


def parse_variant(name: str, device: str, cores: int | None = None
                  ) -> tuple[list[str] | None, list[str]]:
    """(train flags, parts) of a variant (``variant_settings``): the flags are None when a
    part does not apply on ``device``."""
    overrides, parts = variant_settings(name, device, cores)
    return (None if overrides is None else TrainConfig.flags(**overrides)), parts


def _run_variant(recipe: str, settings: dict[str, Any], workdir: str, tag: str
                 ) -> dict[str, Any]:
    """One training run of a variant: ``layerscope train RECIPE`` with ``settings`` (train's
    flags written by ``TrainConfig.flags``), no validation, its JSON report read back."""
    out = os.path.join(workdir, f"{tag}.json")
    words = TrainConfig.flags(**settings, out=os.path.join(workdir, tag), evaluate=False)
    cmd = [sys.executable, "-m", "layerscope", "train", recipe, *words, "--quiet",
           "--format", "json", "-o", out]
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


def ablate(recipe: str | None = None, *, settings: AblateSettings | None = None,
           progress: Callable[[int, int], None] | None = None,
           **overrides: Any) -> AblationReport:
    """Each variant of ``recipe`` trained ``steps`` steps in a fresh process (``repeats``
    times), the baseline first; ``settings``: an ``AblateSettings``, keyword arguments
    override its fields (without ``settings``, over ``API_DEFAULTS``: the baseline alone, on
    generated data). ``progress(done, total)`` after each run."""
    from layerscope.training.recipes import lookup

    if recipe is not None:
        overrides["recipe"] = recipe
    if settings is None and "recipe" not in overrides:
        raise UserError("give the recipe to ablate", arguments="recipe")
    s = AblateSettings.of(settings, **({**API_DEFAULTS, **overrides} if settings is None
                                       else overrides))
    lookup(s.recipe)
    machine = read_machine()  # before our own work adds to the load average
    warmup_steps = default_warmup_steps(s.steps) if s.warmup_steps is None else s.warmup_steps
    plan = _plan(s.variants, s.device)
    common = {"steps": s.steps, "warmup_steps": warmup_steps, "device": s.device,
              "synthetic": s.synthetic, "data_dir": s.data_dir or None,
              "batch_size": s.batch_size, "threads": s.threads, "seed": s.seed}
    results = []
    step_samples: dict[str, list[float]] = {}  # variant -> step times of all its repeats
    total, done = sum(s.repeats for _, o, _, _ in plan if o is not None), 0
    with tempfile.TemporaryDirectory(prefix="layerscope-ablate-") as workdir:
        for name, overrides_of, expanded, reason in plan:
            res = VariantResult(name, TrainConfig.flags(**(overrides_of or {})),
                                expanded=expanded)
            results.append(res)
            if overrides_of is None:
                res.status, res.reason = "n/a", reason
                continue
            for r in range(s.repeats):
                try:
                    rep = _run_variant(s.recipe, {**common, **overrides_of}, workdir,
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
    return AblationReport(s.recipe, s.device, s.steps, warmup_steps, s.repeats, results,
                          environment=environment(),
                          noise=_noise(step_samples.get("baseline"), machine, s.threads))


def _plan(variants: list[str], device: str
          ) -> list[tuple[str, dict[str, Any] | None, str | None, str | None]]:
    """(variant, the train settings it overrides or None when it does not apply on
    ``device``, what ``all`` stood for, why it is not run), the baseline first."""
    plan = []
    for v in variants:
        overrides, parts = variant_settings(v, device)
        reason = None
        if overrides is None:
            cuda_parts = [p for p in parts if p in CUDA_ONLY]
            verb = "needs" if len(cuda_parts) == 1 else "need"
            reason = f"n/a on {device}: {' and '.join(cuda_parts)} {verb} a CUDA device"
        plan.append((v, overrides, "+".join(parts) if v == "all" else None, reason))
    if "baseline" not in [v for v, *_ in plan]:
        plan.insert(0, ("baseline", {}, None, None))
    return plan


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
