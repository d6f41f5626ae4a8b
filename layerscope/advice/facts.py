"""The measured facts a saved result holds, as one flat dict the rules read (advice/rule.py):
phase shares, layer counts and type shares, roofline bounds, the settings it ran with, the
noise section, communication and memory. A fact a result does not measure is absent (None),
and a rule that needs it does not fire.

Facts by kind:
- train (also ``layerscope run``): phase shares of the breakdown, its config (workers,
  pinning, AMP, channels-last, compile, batch), step times, CUDA peak, communication; layer
  counts from the recipe's model, built on the meta device (no weights, no data); for a
  watched script its record (path, arguments, working directory), run's what-if settings and
  the workers and pinning of the loaders it built;
- profile: shares by layer type, compute-bound contraction share (roofline), median layer
  time, layers under 10% of their roof, the end-to-end times, noise;
- sweep: the fastest cell's settings, noise;
- scaling: the largest world size's exposed communication share, buckets and phases;
- ablate: the baseline variant's phases, noise.
"""
from __future__ import annotations

import statistics
from typing import Any

from layerscope.core.phases import BY_NAME as PHASES

CONTRACTIONS = ("Conv", "Linear", "Bilinear", "matmul", "bmm", "addmm", "mm", "einsum",
                "MultiheadAttention", "LSTM", "GRU", "RNN")
KINDS = ("train", "profile", "sweep", "scaling", "ablate")
LAUNCH_PCT = 0.1
FIXED_PHASES = ("data", "optimizer", "other")


def _shares(seconds: dict[str, float]) -> dict[str, float]:
    total = sum(v for p, v in seconds.items() if p in PHASES and v)
    return {p: v / total for p, v in seconds.items() if p in PHASES and total} if total else {}


def _is_contraction(layer_type: str) -> bool:
    return any(layer_type.startswith(c) or layer_type == c for c in CONTRACTIONS)


def _phase_facts(seconds: dict[str, float]) -> dict[str, Any]:
    shares = _shares(seconds)
    if not shares:
        return {}
    return {"shares": {p: round(v, 4) for p, v in shares.items()},
            "data_share": shares.get("data", 0.0), "h2d_share": shares.get("h2d", 0.0),
            "forward_share": shares.get("forward", 0.0),
            "compute_share": shares.get("forward", 0.0) + shares.get("backward", 0.0),
            "fixed_share": sum(shares.get(p, 0.0) for p in FIXED_PHASES)}


def _noise_facts(noise: dict[str, Any] | None) -> dict[str, Any]:
    if not noise:
        return {}
    return {"oversubscribed": noise.get("oversubscribed"), "threads": noise.get("threads"),
            "cpus_available": noise.get("cpus_available") or noise.get("cpu_count"),
            "busy_cpus": noise.get("busy_cpus")}


def _step_facts(steps: list[float] | None) -> dict[str, Any]:
    if not steps:
        return {}
    ordered = sorted(steps)
    return {"step_median_s": statistics.median(ordered),
            "step_p10_s": ordered[int(0.1 * (len(ordered) - 1))]}


def _model_layers(recipe: str) -> dict[str, Any]:
    """Leaf-module and convolution counts of a recipe's model, built on the meta device."""
    import torch

    from layerscope.training.recipes import RECIPES

    found = RECIPES.get(recipe)
    if found is None:
        return {}
    try:
        with torch.device("meta"):
            model = found.build()
    except Exception:  # noqa: BLE001 - a model that cannot be built there: no layer facts
        return {}
    leaves = [m for m in model.modules() if not list(m.children())]
    return {"layers": len(leaves),
            "conv_layers": sum(isinstance(m, torch.nn.modules.conv._ConvNd) for m in leaves)}


def _train(d: dict[str, Any]) -> dict[str, Any]:
    config = d.get("config") or {}
    out = {"subject": d.get("recipe"), "recipe": d.get("recipe"),
           "device": config.get("device") or "cpu", "workers": config.get("num_workers") or 0,
           "pin_memory": bool(config.get("pin_memory")), "amp": bool(config.get("amp")),
           "channels_last": bool(config.get("channels_last")),
           "compile": bool(config.get("compile")), "batch_size": config.get("batch_size"),
           "steps": config.get("steps"), "seed": config.get("seed"),
           "synthetic": bool(config.get("synthetic")), "threads": config.get("threads"),
           "data_dir": config.get("data_dir"),
           "peak_cuda_bytes": d.get("peak_cuda_bytes")}
    out.update(_phase_facts((d.get("breakdown") or {}).get("seconds") or {}))
    out.update(_step_facts(d.get("step_seconds")))
    loading = d.get("data_loading") or {}
    findings = loading.get("findings") or []
    if findings and isinstance(findings[0], dict) and findings[0].get("kind"):
        # the data loader's verdict (its first finding) and the worker count it suggests
        out["data_verdict"] = findings[0]["kind"]
        if findings[0].get("knob") == "num_workers":
            out["data_suggested_workers"] = findings[0].get("value")
        out["data_work_per_batch_s"] = (findings[0].get("figures") or {}).get(
            "work_per_batch_s")
    loaders = [lo for lo in loading.get("loaders") or [] if isinstance(lo, dict)]
    training = [lo for lo in loaders if lo.get("training")] or loaders
    if training and "num_workers" not in config:
        # a watched script: the loaders it built (its own settings, or run's what-if ones)
        out["workers"] = max(lo.get("num_workers") or 0 for lo in training)
        out["pin_memory"] = all(lo.get("pin_memory") for lo in training)
    script = d.get("script") or {}
    if script:  # a watched script: what it ran (advise reruns it) and in how many processes
        out["script"] = script
        out["world_size"] = d.get("world_size")
        if config.get("what_if"):  # run's what-if settings: the run to compare against
            out["what_if"] = {k: config[k] for k in ("num_workers", "pin_memory", "threads")
                              if config.get(k) is not None}
    comm = d.get("communication") or {}
    if comm.get("exposed_s") is not None and out.get("step_median_s"):
        out.update(exposed_share=comm["exposed_s"] / out["step_median_s"],
                   buckets=len(comm.get("buckets") or []) or None,
                   bytes_per_step=comm.get("bytes_per_step"), world_size=comm.get("world_size"))
    if d.get("script") is None and out["recipe"]:
        out.update(_model_layers(out["recipe"]))
    return out


def _profile(d: dict[str, Any]) -> dict[str, Any]:
    settings = d.get("settings") or {}
    rows = [r for r in d.get("layers") or [] if r.get("share") is not None]
    out: dict[str, Any] = {"subject": d.get("model"), "recipe": None,
                           "device": settings.get("device") or "cpu",
                           "dtype": settings.get("dtype") or "float32",
                           "batch_size": settings.get("batch_size")}
    if rows:
        types = [r.get("type") or "" for r in rows]
        out["layers"] = len(rows)
        out["conv_layers"] = sum(t.startswith("Conv") for t in types)
        out["conv_share"] = sum(r["share"] for r, t in zip(rows, types) if t.startswith("Conv"))
        out["elementwise_share"] = sum(r["share"] for r, t in zip(rows, types)
                                       if not _is_contraction(t))
        times = [(r.get("time") or {}).get("median_s") for r in rows]
        times = [t for t in times if t is not None]
        if times:
            out["median_layer_s"] = statistics.median(times)
        placed = [r for r in rows if r.get("roofline")]
        if placed:
            out["matmul_share"] = sum(r["share"] for r in placed
                                      if _is_contraction(r.get("type") or "")
                                      and r["roofline"].get("bound") == "compute")
            out["launch_bound_share"] = sum(
                r["share"] for r in placed
                if (r["roofline"].get("pct_of_roof") or 0.0) < LAUNCH_PCT)
    end = d.get("end_to_end") or {}
    if end.get("median_s"):
        out.update(step_median_s=end["median_s"], step_p10_s=end.get("p10_s"))
    out.update(_noise_facts(d.get("noise")))
    threads = settings.get("threads")  # onnxruntime's own choice is a text, not a count
    out["threads"] = threads if isinstance(threads, int) and threads else out.get("threads")
    return out


def _sweep(d: dict[str, Any]) -> dict[str, Any]:
    cells = [c for c in d.get("cells") or [] if c.get("status") == "ok"]
    best = max(cells, key=lambda c: c.get("throughput_per_s") or 0.0, default={})
    latency = best.get("latency") or {}
    out = {"subject": d.get("model"), "recipe": None, "device": best.get("device") or "cpu",
           "dtype": best.get("dtype"), "batch_size": best.get("batch_size"),
           "step_median_s": latency.get("median_s"), "step_p10_s": latency.get("p10_s")}
    out.update(_noise_facts(d.get("noise")))
    return out


def _scaling(d: dict[str, Any]) -> dict[str, Any]:
    points = d.get("points") or []
    out: dict[str, Any] = {"subject": d.get("recipe"), "recipe": d.get("recipe"),
                           "device": d.get("device") or "cpu"}
    if points:
        last = points[-1]
        out.update(exposed_share=last.get("exposed_share"), buckets=last.get("buckets"),
                   bytes_per_step=last.get("bytes_per_step"), world_size=last.get("world_size"),
                   oversubscribed=last.get("oversubscribed"))
        out.update(_phase_facts({p: v for p, v in (last.get("phases") or {}).items()
                                 if p != "communication"}))
    return out


def _ablate(d: dict[str, Any]) -> dict[str, Any]:
    base = next((v for v in d.get("variants") or [] if v.get("variant") == "baseline"), {})
    out: dict[str, Any] = {"subject": d.get("recipe"), "recipe": d.get("recipe"),
                           "device": d.get("device") or "cpu", "steps": d.get("steps")}
    out.update(_phase_facts({p: v / 1e3 for p, v in (base.get("phases_ms") or {}).items()}))
    step = base.get("step") or {}
    if step.get("median_s"):
        out.update(step_median_s=step["median_s"], step_p10_s=step.get("p10_s"))
    out.update(_noise_facts(d.get("noise")))
    if out["recipe"]:
        out.update(_model_layers(out["recipe"]))
    return out


READERS = {"train": _train, "profile": _profile, "sweep": _sweep, "scaling": _scaling,
           "ablate": _ablate}


def facts_of(d: dict[str, Any]) -> dict[str, Any]:
    """The facts of a result's JSON (``to_dict()``); its kind must be one of ``KINDS``."""
    out = READERS[d["kind"]](d)
    env = d.get("environment") or {}
    out.setdefault("cores", env.get("cores"))
    if out.get("cpus_available") is None:
        out["cpus_available"] = env.get("cores")
    if out.get("threads") is None:
        out["threads"] = env.get("torch_threads")
    out["gpu_memory_bytes"] = env.get("gpu_memory_bytes")
    efficiency = d.get("efficiency")  # MFU, when the result carries it
    if isinstance(efficiency, dict) and efficiency.get("mfu") is not None:
        out["mfu"] = efficiency["mfu"]
    out["kind"] = d["kind"]
    return {k: v for k, v in out.items() if v is not None}
