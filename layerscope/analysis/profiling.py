"""``layerscope.profile``'s settings, declared once (``ProfileSettings``), and the profile of a
model's layers: measured latency per layer (PyTorch, ``runtime.py``) or per node (an ONNX file,
with onnxruntime: ``ort_profile.py``), routed by ``frontends.detect``, or the decode steps of a
language model (``decode.py``). Inference over a data set's loader (``loop``) needs the data
sets of the training layer: ``training/profiling.py`` is the entry point that routes all
three, for the API and the CLI alike."""
from __future__ import annotations

import dataclasses
from typing import Any

from layerscope.core import options, values
from layerscope.core.errors import UserError
from layerscope.core.settings import Settings, of_call, option
from layerscope.frontends.detect import detect

WARMUP_DEFAULT = 5  # runs
LOOP_WARMUP_DEFAULT = 1  # batches: a data set's split holds few of them
LOOP = "inference over a data loader (--loop)"
DECODE = "decode of a language model (--decode)"
DTYPES = ("float32", "float16", "bfloat16", "float64")
# the settings that only profiling a model's layers takes: loop and decode leave them out
LAYER_ONLY = ("inputs", "backward", "depth", "dtype", "min_time", "functions", "kernels",
              "nvtx")


@dataclasses.dataclass(kw_only=True, eq=False)
class ProfileSettings(Settings):
    """Every setting of ``layerscope profile`` and ``layerscope.profile``: a new one is a field
    here (the CLI's option, the API's argument and the saved result's ``settings`` follow)."""

    model: Any = options.model()
    inputs: list[Any] | None = options.inputs()
    batch_size: int | None = options.batch_size()
    device: str = options.device()
    threads: int | None = options.threads()
    runs: int | None = option(None, "measured runs (default 30)", parse=values.positive_int,
                              exclusive="runs")
    min_time: float | None = option(
        None, "measure for at least S seconds instead of a fixed count (at most "
              f"{values.MIN_TIME_MAX:g})", parse=values.finite_positive_float,
        maximum=values.MIN_TIME_MAX, metavar="S", exclusive="runs")
    warmup: int | None = option(None, "unmeasured runs first (default 5; with --loop, 1 batch)",
                                parse=values.non_negative_int)
    depth: int | None = option(None, "module depth (default: leaves)",
                               parse=values.non_negative_int)
    dtype: Any = option(None, choices=DTYPES)
    backward: bool = option(False, "also time the backward pass, charged to the module whose "
                                   "forward made it")
    functions: bool = option(False, "split each container's own-code row into one timed row "
                                    "per torch function it calls (F.relu, the residual add, "
                                    "torch.cat), as analyze --functions counts them; forward "
                                    "only")
    kernels: bool = options.kernels(
        "after the timed runs, profile 3 steps with torch.profiler and join its events to "
        "modules: CPU ops (backward ops to the module whose forward made them), device "
        "kernels, launch time, short kernels; per step, device busy and idle (CUDA)")
    nvtx: bool = options.nvtx("NVTX ranges named after layerscope's modules and phases, for "
                              "Nsight Systems (CUDA; a note and nothing else without it)")
    optimization: str = options.ort_level(
        "--optimization", note="; ONNX models (fused nodes are reported as such)")
    roofline: bool = option(True, "do not place layers on the measured roofline",
                            flag="--no-roofline")
    loop: str | None = option(
        None, "time inference over a data set's validation split, data loading and copies "
              "included: digits, mnist, cifar10 or cifar100; per phase (data wait, "
              "host-to-device, forward, other) and per layer; --runs is the number of timed "
              "batches (default: the rest of one pass), drawn from repeated passes over the "
              "data when it has fewer", metavar="DATASET", group=LOOP)
    synthetic: bool = option(False, "--loop: generated data of the data set's shapes",
                             group=LOOP)
    data_dir: str | None = option(None, "--loop: where the data set is", group=LOOP)
    num_workers: int = option(0, "--loop: loader workers", parse=values.non_negative_int,
                              maximum=values.WORKERS_MAX, group=LOOP)
    decode: int | None = option(
        None, "hf:PATH/config.json only: build the model with random weights, prefill "
              "--context tokens, then time N single-token decode steps with the KV cache "
              "(after --warmup more, default 3); tokens/s, bytes and FLOPs per step as "
              "layerscope llm counts them, MBU and MFU against the measured roofline and a "
              "GPU's datasheet, and llm's decode bound", parse=values.positive_int,
        metavar="N", group=DECODE)
    context: int | None = option(None, "--decode: tokens in the KV cache that every step "
                                       "attends (default 128)", parse=values.positive_int,
                                 metavar="L", group=DECODE)

    def check(self) -> None:
        if self.context is not None and self.decode is None:
            raise UserError("context sets the KV cache of decode N: give both",
                            arguments=("context", "decode"))
        if self.decode is not None:
            _none_given(self, "decode N times decode steps of a language model (its "
                              "sequences: batch size)", ("loop", *LAYER_ONLY, "runs", "roofline"))
        elif self.loop is not None:
            _none_given(self, "loop takes the model's input from the data set", LAYER_ONLY)
        else:
            given = [n for n in ("synthetic", "data_dir", "num_workers") if n in self.given()]
            if given:
                raise UserError(f"{_listed(given)} {'is' if len(given) == 1 else 'are'} "
                                "for loop DATASET: give loop with it", arguments=(*given, "loop"))
        if self.functions and self.backward:
            raise UserError("functions splits the forward pass only: leave out backward (time "
                            "the backward pass in a run of its own)",
                            arguments=("functions", "backward"))


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _none_given(s: Settings, what: str, names: tuple[str, ...]) -> None:
    """Refuse the settings of ``names`` that were given: ``what`` (which starts with the
    setting that rules them out) leaves them out."""
    asked = s.given()
    given = [n for n in names if n in asked]
    if given:
        verb = "does" if len(given) == 1 else "do"
        raise UserError(f"{what}: {_listed(given)} {verb} not apply",
                        arguments=(what.split()[0], *given))


def profile(model: Any = None, inputs: Any = None, *, settings: ProfileSettings | None = None,
            kwargs: dict[str, Any] | None = None, progress: Any = None, clock: Any = None,
            **overrides: Any):
    """The profile of a model's layers (``runtime.profile``; an ONNX file on the CPU with
    onnxruntime: ``optimization`` is its graph optimisation level, a fixed count of runs, no
    ``min_time``) or, with ``decode``, of a language model's decode steps. ``settings``: a
    ``ProfileSettings``; keyword arguments override its fields (``runs=10``). Inference over a
    data set (``loop``) is ``layerscope.profile`` (training/profiling.py)."""
    s = of_profile_call(settings, model, inputs, overrides)
    if s.loop is not None:
        raise UserError("loop profiles inference over a data set: call layerscope.profile",
                        arguments="loop")
    return profile_model(s, kwargs=kwargs, progress=progress, clock=clock)


def of_profile_call(settings: ProfileSettings | None, model: Any, inputs: Any,
                    overrides: dict[str, Any]) -> ProfileSettings:
    """The settings of a ``profile`` call (``core.settings.of_call``)."""
    return of_call(ProfileSettings, settings, overrides, "profile", model=model, inputs=inputs)


def profile_model(s: ProfileSettings, *, kwargs: dict[str, Any] | None = None,
                  progress: Any = None, clock: Any = None):
    """A model's layers or its decode steps, as ``s`` says (not ``loop``); the result's
    ``settings`` keep every recorded setting, below what the run itself found (the threads it
    used, the runs it made)."""
    testing = {} if clock is None else {"clock": clock}
    if s.decode is not None:
        from layerscope.analysis.decode import DEFAULT_CONTEXT, DEFAULT_WARMUP, profile_decode

        s = dataclasses.replace(s, context=s.context or DEFAULT_CONTEXT,
                                batch_size=s.batch_size or 1,
                                warmup=DEFAULT_WARMUP if s.warmup is None else s.warmup)
        return recorded_in(profile_decode(
            s.model, steps=s.decode, context=s.context, batch_size=s.batch_size,
            device=s.device, dtype=s.dtype, threads=s.threads, warmup=s.warmup,
            progress=progress, **testing), s)
    s = dataclasses.replace(s, warmup=WARMUP_DEFAULT if s.warmup is None else s.warmup)
    warmup = s.warmup
    ref = detect(s.model)
    if ref.is_onnx:
        from layerscope.analysis.ort_profile import profile_onnx

        asked = s.given()
        given = [n for n in ("device", "backward", "depth", "dtype", "functions", "kernels",
                             "nvtx") if n in asked]
        if given or kwargs:
            raise UserError("ONNX models are profiled with onnxruntime on the CPU: device, "
                            "backward, depth, dtype, functions, kernels and nvtx do not apply",
                            arguments=("device", "backward", "depth", "dtype", "functions",
                                       "kernels", "nvtx"))
        return recorded_in(profile_onnx(ref.spec, s.inputs, batch_size=s.batch_size, runs=s.runs,
                                      warmup=warmup, threads=s.threads,
                                      optimization=s.optimization, roofline=s.roofline,
                                      progress=progress), s)
    from layerscope.analysis.runtime import profile as profile_torch

    return recorded_in(profile_torch(
        s.model, s.inputs, kwargs=kwargs, batch_size=s.batch_size, device=s.device,
        threads=s.threads, runs=s.runs, min_time=s.min_time, warmup=warmup, depth=s.depth,
        backward=s.backward, dtype=s.dtype, roofline=s.roofline, progress=progress,
        functions=s.functions, kernels=s.kernels, nvtx=s.nvtx, **testing), s)


def recorded_in(result: Any, s: Settings) -> Any:
    """``result`` with ``s.recorded()`` under its settings; what the run found wins."""
    result.settings = {**_plain(s.recorded()), **result.settings}
    return result


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    """Settings as JSON values (a torch.dtype as its name)."""
    return {k: v if v is None or isinstance(v, (bool, int, float, str, list, dict))
            else str(v).removeprefix("torch.") for k, v in d.items()}
