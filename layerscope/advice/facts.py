"""The measured facts a saved result holds, as one flat dict the rules read (advice/rule.py):
phase shares, layer counts and type shares, roofline bounds, the settings it ran with, the
noise section, communication and memory. A fact a result does not measure is absent (None),
and a rule that needs it does not fire (or says it cannot judge).

The phase shares are those of the steady steps: a step at the start or the end of the run more
than ``TRANSIENT`` times the (lower) median step is a transient (compilation, a profiler's
start or stop, first-step allocations) and its phases are taken out of the sums
(``transient_steps``, ``transient_s``); when the result keeps no per-phase times of such a
step, ``transients_unseparated`` says so.
In a watched script's data-parallel run, backward holds the gradient all-reduce, which it does
not time (``communication_in_backward``): the compute share then counts backward as at most
``BACKWARD_PER_FORWARD`` times the forward (a contraction's backward does twice its forward's
FLOPs: the gradients of its input and of its weight).

Facts by kind:
- train (also ``layerscope run``): steady phase shares of the breakdown, its config (workers,
  pinning, AMP, channels-last, compile, batch), step times, CUDA peak, communication, MFU and
  model FLOPs (efficiency); the time share of the contraction layers (Linear, Conv, attention,
  recurrent) from the layer table (``--layers``) or the kernels window (``--kernels``); layer
  and contraction-layer counts from the recipe's model, built on the meta device (no weights,
  no data); the training loaders (those whose batches fed steps with gradients on: how many,
  the most batches one fed, their workers and pinning) and the data loader's verdict on them;
  for a watched script its record (path, arguments, working directory) and run's what-if
  settings;
- profile: shares by layer type, compute-bound contraction share (roofline), the contraction
  share of the counted FLOPs (2 x MACs / FLOPs), median layer time, layers under 10% of their
  roof, the end-to-end times and their count, the layers' coverage of them, noise;
- sweep: the fastest cell's settings and latency, noise;
- scaling: the largest world size's exposed communication share, buckets and phases;
- ablate: the baseline variant's phases and steps, noise.
"""
from __future__ import annotations

import statistics
from typing import Any

from layerscope.core.phases import BY_NAME as PHASES
from layerscope.core.records.train import RunConfig

CONTRACTIONS = ("Conv", "Linear", "Bilinear", "matmul", "bmm", "addmm", "mm", "einsum",
                "MultiheadAttention", "LSTM", "GRU", "RNN")
KINDS = ("train", "profile", "sweep", "scaling", "ablate")
LAUNCH_PCT = 0.1
FIXED_PHASES = ("data", "optimizer", "other")
# the phases whose ops run torch's intra-op (OpenMP) parallel regions
PARALLEL_PHASES = ("forward", "loss", "backward", "optimizer", "trainer")
TRANSIENT = 5.0  # a step this many times the lower median step is a transient
BACKWARD_PER_FORWARD = 2.0


def _shares(seconds: dict[str, float]) -> dict[str, float]:
    total = sum(v for p, v in seconds.items() if p in PHASES and v)
    return {p: v / total for p, v in seconds.items() if p in PHASES and total} if total else {}


def _is_contraction(layer_type: str) -> bool:
    return any(layer_type.startswith(c) or layer_type == c for c in CONTRACTIONS)


def _phase_facts(seconds: dict[str, float], comm_in_backward: bool = False) -> dict[str, Any]:
    shares = _shares(seconds)
    if not shares:
        return {}
    fwd, bwd = shares.get("forward", 0.0), shares.get("backward", 0.0)
    if comm_in_backward:  # backward's compute, the untimed all-reduce left out
        bwd = min(bwd, BACKWARD_PER_FORWARD * fwd)
    parallel = sum(shares.get(p, 0.0) for p in PARALLEL_PHASES) - shares.get("backward", 0.0)
    return {"shares": {p: round(v, 4) for p, v in shares.items()},
            "data_share": shares.get("data", 0.0), "h2d_share": shares.get("h2d", 0.0),
            "forward_share": fwd, "compute_share": fwd + bwd,
            "parallel_share": parallel + bwd,
            "fixed_share": sum(shares.get(p, 0.0) for p in FIXED_PHASES)}


def transients(steps: list[float]) -> list[int]:
    """The indices of the transient steps: those at the start or the end of the run (each in
    an unbroken run of such steps from the first or the last) more than ``TRANSIENT`` times
    the lower median step (the lower median: of two steps, the shorter). A slow step in the
    middle is the machine's (another process took the core), and stays."""
    if len(steps) < 2:
        return []
    ref = sorted(steps)[(len(steps) - 1) // 2]
    far = [ref > 0 and s > TRANSIENT * ref for s in steps]
    first = next((i for i, f in enumerate(far) if not f), len(steps))
    last = next((i for i in range(len(steps) - 1, -1, -1) if not far[i]), -1)
    return list(range(first)) + list(range(max(last + 1, first), len(steps)))


def _phases_of_step(step_phases: dict[str, list[float]], i: int, n: int
                    ) -> dict[str, float] | None:
    """Step ``i``'s (of ``n``) seconds per phase from a result's ``step_phases`` (every step,
    or evenly spaced samples of them: sample j is step j x n // m), None when not kept."""
    out: dict[str, float] = {}
    for phase, xs in step_phases.items():
        m = len(xs)
        j = i if m == n else next((j for j in range(m) if j * n // m == i), None)
        if not m or j is None or j >= m:
            return None
        out[phase] = xs[j]
    return out or None


def steady(seconds: dict[str, float], steps: list[float] | None,
           step_phases: dict[str, list[float]] | None
           ) -> tuple[dict[str, float], dict[str, Any]]:
    """The breakdown's seconds without the transient steps' phases, and the facts that name
    them (their 1-based numbers, their seconds, and whether they could be taken out)."""
    found = transients(list(steps or []))
    if not found:
        return seconds, {}
    steps = list(steps or [])
    info: dict[str, Any] = {"transient_steps": [i + 1 for i in found],
                            "transient_s": sum(steps[i] for i in found)}
    out = dict(seconds)
    for i in found:
        row = _phases_of_step(step_phases or {}, i, len(steps))
        if row is None:
            info["transients_unseparated"] = True
            return seconds, info
        for phase, v in row.items():
            if phase in out:
                out[phase] = max(0.0, out[phase] - v)
    return out, info


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
            "step_p10_s": ordered[int(0.1 * (len(ordered) - 1))], "step_samples": len(steps)}


def _model_layers(recipe: str) -> dict[str, Any]:
    """Leaf-module, convolution and contraction-layer counts of a recipe's model, built on
    the meta device."""
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
    nn = torch.nn
    contraction = (nn.Linear, nn.Bilinear, nn.modules.conv._ConvNd, nn.MultiheadAttention,
                   nn.RNNBase)
    return {"layers": len(leaves),
            "conv_layers": sum(isinstance(m, nn.modules.conv._ConvNd) for m in leaves),
            "contraction_layers": sum(isinstance(m, contraction) for m in model.modules())}


def _contraction_time(d: dict[str, Any], total_s: float) -> dict[str, Any]:
    """The share of the measured steps' time in the contraction layers (Linear, Conv,
    attention, recurrent; their forward and backward), from the layer table (``--layers``),
    else from the kernels window (``--kernels``: their ops' device time on CUDA, CPU self time
    otherwise, over the window's wall time)."""
    rows = [r for r in d.get("layers") or [] if isinstance(r, dict)]
    if rows and total_s > 0:
        mine = [r for r in rows if _is_contraction(r.get("type") or "")]
        spent = sum((r.get("own_s") if r.get("own_s") is not None else r.get("forward_s") or 0.0)
                    + (r.get("backward_s") or 0.0) for r in mine)
        return {"contraction_share": min(1.0, spent / total_s), "contraction_layers": len(mine),
                "contraction_source": "layer table"}
    kernels = d.get("kernels") or {}
    wall = sum(s.get("wall_s") or 0.0 for s in kernels.get("per_step") or [])
    if kernels.get("rows") and wall > 0:
        cuda = kernels.get("device") == "cuda"
        mine = [r for r in kernels["rows"] if _is_contraction(r.get("type") or "")]
        spent = sum((r.get("kernel_s") if cuda else r.get("cpu_self_s")) or 0.0 for r in mine)
        return {"contraction_share": min(1.0, spent / wall),
                "contraction_layers": len({r.get("module") for r in mine}),
                "contraction_source": "kernels window"}
    return {}


def _loader_facts(d: dict[str, Any], config: RunConfig, out: dict[str, Any]
                  ) -> dict[str, Any]:
    """The training loaders (those that gave batches with gradients on: a validation or test
    loader is not one), the most batches one of them fed, and the data loader's verdict on
    them (its first finding; a verdict on other loaders is not read). A recipe's result
    without a data_loading section: its one loader fed every measured step."""
    loading = d.get("data_loading")
    if not isinstance(loading, dict):
        if d.get("script") is None and out.get("recipe"):
            steps = (d.get("breakdown") or {}).get("steps")
            return {"training_loaders": 1, "loader_batches": steps} if steps else {}
        return {}
    loaders = [lo for lo in loading.get("loaders") or [] if isinstance(lo, dict)]
    training = [lo for lo in loaders if lo.get("training")]
    facts: dict[str, Any] = {"training_loaders": len(training)}
    if not training:
        return facts
    facts["loader_batches"] = max(lo.get("batches") or 0 for lo in training) \
        if all("batches" in lo for lo in training) else None
    if "num_workers" not in config.recorded:
        # a watched script: the loaders it built (its own settings, or run's what-if ones)
        facts["workers"] = max(lo.get("num_workers") or 0 for lo in training)
        facts["pin_memory"] = all(lo.get("pin_memory") for lo in training)
    findings = loading.get("findings") or []
    if findings and isinstance(findings[0], dict) and findings[0].get("kind"):
        # the data loader's verdict (its first finding) and the worker count it suggests
        facts["data_verdict"] = findings[0]["kind"]
        if findings[0].get("knob") == "num_workers":
            facts["data_suggested_workers"] = findings[0].get("value")
        facts["data_work_per_batch_s"] = (findings[0].get("figures") or {}).get(
            "work_per_batch_s")
    return facts


def _train(d: dict[str, Any]) -> dict[str, Any]:
    config = RunConfig.of(d.get("config"))
    out = {"subject": d.get("recipe"), "recipe": d.get("recipe"),
           "device": config.device, "workers": config.num_workers or 0,
           "pin_memory": config.pin_memory, "amp": config.amp,
           "channels_last": config.channels_last, "compile": config.compile,
           "batch_size": config.batch_size, "steps": config.steps, "seed": config.seed,
           "synthetic": config.synthetic, "threads": config.threads,
           "data_dir": config.data_dir, "peak_cuda_bytes": d.get("peak_cuda_bytes")}
    breakdown = d.get("breakdown") or {}
    seconds = breakdown.get("seconds") or {}
    group = d.get("process_group") or {}
    # a watched script's data-parallel run: its backward holds the all-reduce, untimed
    comm_in_backward = bool(d.get("script") is not None
                            and ((group.get("world_size") or 1) > 1
                                 or (d.get("world_size") or 1) > 1)
                            and not seconds.get("exposed_communication"))
    kept, transient = steady(seconds, d.get("step_seconds"), d.get("step_phases"))
    out.update(transient)
    out.update(_phase_facts(kept, comm_in_backward))
    if comm_in_backward:
        out["communication_in_backward"] = True
    out.update(_step_facts(d.get("step_seconds")))
    out.update(_loader_facts(d, config, out))
    script = d.get("script") or {}
    if script:  # a watched script: what it ran (advise reruns it) and in how many processes
        out["script"] = script
        out["world_size"] = d.get("world_size")
        if config.what_if:  # run's what-if settings: the run to compare against
            out["what_if"] = dict(config.what_if)
    comm = d.get("communication") or {}
    if comm.get("exposed_s") is not None and out.get("step_median_s"):
        out.update(exposed_share=comm["exposed_s"] / out["step_median_s"],
                   buckets=len(comm.get("buckets") or []) or None,
                   bytes_per_step=comm.get("bytes_per_step"), world_size=comm.get("world_size"))
    if d.get("script") is None and out["recipe"]:
        out.update(_model_layers(out["recipe"]))
    out.update(_contraction_time(d, sum(v for p, v in seconds.items() if p in PHASES)))
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
        out["contraction_layers"] = sum(_is_contraction(t) for t in types)
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
    totals = d.get("totals") or {}
    if totals.get("flops"):  # MACs are contractions only: 2 x MACs of the FLOPs are theirs
        out["contraction_flop_share"] = min(1.0, 2 * (totals.get("macs") or 0) / totals["flops"])
    end = d.get("end_to_end") or {}
    if end.get("median_s"):
        out.update(step_median_s=end["median_s"], step_p10_s=end.get("p10_s"),
                   step_samples=end.get("n"))
        # a forward pass is the model's ops: all of it but the code between the layers
        coverage = d.get("coverage")
        out["parallel_share"] = min(1.0, coverage) if isinstance(coverage, (int, float)) \
            and coverage > 0 else 1.0
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
           "step_median_s": latency.get("median_s"), "step_p10_s": latency.get("p10_s"),
           "step_samples": latency.get("n"),
           # a cell's batch is the model's forward: all of it runs the model's ops
           "parallel_share": 1.0 if latency.get("median_s") else None}
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
        if last.get("steps"):  # the recipe's loader fed each measured step
            out.update(training_loaders=1, loader_batches=last["steps"])
    if out["recipe"]:  # the contractions the AMP rule needs counted
        out["contraction_layers"] = _model_layers(out["recipe"]).get("contraction_layers")
    return out


def _ablate(d: dict[str, Any]) -> dict[str, Any]:
    base = next((v for v in d.get("variants") or [] if v.get("variant") == "baseline"), {})
    out: dict[str, Any] = {"subject": d.get("recipe"), "recipe": d.get("recipe"),
                           "device": d.get("device") or "cpu", "steps": d.get("steps")}
    out.update(_phase_facts({p: v / 1e3 for p, v in (base.get("phases_ms") or {}).items()}))
    step = base.get("step") or {}
    if step.get("median_s"):
        out.update(step_median_s=step["median_s"], step_p10_s=step.get("p10_s"),
                   step_samples=step.get("n"))
    if d.get("steps"):  # the recipe's loader fed each step
        out.update(training_loaders=1, loader_batches=d["steps"])
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
    if isinstance(efficiency, dict) and efficiency.get("model_flops_per_step") is not None:
        out["model_flops_per_step"] = efficiency["model_flops_per_step"]
    out["kind"] = d["kind"]
    return {k: v for k, v in out.items() if v is not None}
