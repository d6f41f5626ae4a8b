"""``layerscope profile hf:config.json --decode N``: measured decode of a language model with
its KV cache, beside what ``layerscope llm`` counts for the same step.

The model is built from its Hugging Face config with transformers' random initialisation (the
values do not change the time of a dense model's step). One prefill of ``context`` tokens fills
the KV cache (transformers' ``past_key_values``); then every decode step feeds one token per
sequence, attending those ``context`` cached tokens: each step starts from a copy of the
prefill's cache (made outside the timed region), so all steps do the same work and their
median, p10 and p90 describe one thing. Warm-up steps are not kept.

The FLOPs and the bytes moved per step are ``layerscope llm``'s for a decode step at this
context and batch (analysis/llm.py): batch x its decode FLOPs per token; the weights a step
reads (one embedding row per sequence; a mixture of experts' expected experts) plus the KV
cache it attends. MBU and MFU divide them by the median step and by the measured ceilings
(``layerscope roofline``) and, on a GPU the datasheet table knows, its datasheet figures
(core/records/efficiency.py; a ratio above 100% is refused with its cause). llm's roofline
bound on decode against the same ceilings stands beside the measured tokens/s.
"""
from __future__ import annotations

import copy
import inspect
import time
from collections.abc import Callable
from typing import Any

import torch

from layerscope.core import values
from layerscope.core.environment import environment
from layerscope.core.errors import UserError, first_line
from layerscope.core.noise import noise_section, read_machine
from layerscope.core.records.decode import DecodeBound, DecodeProfile
from layerscope.core.records.efficiency import MEASURED
from layerscope.core.stats import TimingStats
from layerscope.core.units import si

DEFAULT_CONTEXT = 128
DEFAULT_WARMUP = 3
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def available_memory(device: str) -> int:
    """Bytes free for new tensors: CUDA's free memory, else the OS's MemAvailable (or free
    pages where there is no /proc/meminfo)."""
    if device == "cuda":
        return int(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _check_model(model: Any) -> str:
    """``model`` as an ``hf:`` spec, or one line saying why it cannot be decoded."""
    from layerscope.frontends.detect import detect
    from layerscope.frontends.llm_configs import HF_PREFIX, PRESETS

    if isinstance(model, str) and model.strip().startswith(HF_PREFIX):
        return model.strip()
    name = model if isinstance(model, str) else type(model).__name__
    if isinstance(model, str) and model.strip().lower() in PRESETS:
        raise UserError(f"decode: {name} is a preset built without a KV cache; give the model's "
                        "Hugging Face config as hf:PATH/config.json (transformers keeps the "
                        "cache)", arguments="decode")
    ref = detect(model)
    if ref.kind == "unknown":  # an unknown name or a missing file says so in its own words
        raise UserError(ref.problem or f"unknown model {name!r}")
    raise UserError(f"decode needs a language model given as hf:PATH/config.json, not {name}; "
                    "time other models without it", arguments="decode")


def _gpu(source: str, peak: float, bandwidth: float, memory: int):
    from layerscope.analysis.llm import GPU

    # the measured peak is for the dtype the steps run in, whichever peak llm picks
    return GPU(source, peak, bandwidth, max(memory, 1), fp32_flops=peak)


def _bound(report, config, gpu) -> DecodeBound:
    from layerscope.analysis.llm import report_bound

    roof, _ = report_bound(report, config, gpu)
    return DecodeBound(source=gpu.name, peak_flops_per_s=roof.peak_flops,
                       bandwidth_bytes_per_s=roof.bandwidth_bytes_per_s,
                       tokens_per_s=roof.decode_tokens_per_s, bound=roof.decode_bound)


def _cache_argument(module: torch.nn.Module) -> str:
    """The name under which the model's forward takes and returns its KV cache: ``cache``
    (transformers 5.2x), ``past_key_values`` before."""
    return ("cache" if "cache" in inspect.signature(module.forward).parameters
            else "past_key_values")


def _last_logits(module: torch.nn.Module) -> dict[str, int]:
    """``logits_to_keep=1`` where forward takes it: the prefill computes the last position's
    logits only (what generation uses), not a batch x context x vocab tensor."""
    return ({"logits_to_keep": 1}
            if "logits_to_keep" in inspect.signature(module.forward).parameters else {})


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def profile_decode(model: str, *, steps: int, context: int = DEFAULT_CONTEXT,
                   batch_size: int = 1, device: str = "cpu", dtype: str | None = None,
                   threads: int | None = None, warmup: int = DEFAULT_WARMUP,
                   clock: Callable[[], float] = time.perf_counter,
                   progress: Callable[[int, int], None] | None = None) -> DecodeProfile:
    """Time ``steps`` single-token decode steps (after ``warmup`` more) of ``batch_size``
    sequences with ``context`` tokens in the KV cache, of the model of an ``hf:`` config built
    with random weights on ``device`` in ``dtype`` (float32, bfloat16 or float16; default
    float32); ``threads``: torch's intra-op threads while it runs."""
    from layerscope.analysis import llm as llm_mod
    from layerscope.analysis import llm_structure, modes, roofline
    from layerscope.analysis.efficiency import datasheet_peak, of_inference
    from layerscope.analysis.runtime import check_device, intra_op_threads
    from layerscope.frontends import llm_models, zoo

    check_device(device)
    machine = read_machine()  # before our own work adds to the load average
    steps, context, batch_size, warmup, threads = _counts_checked(steps, context, batch_size,
                                                                  warmup, threads)
    dtype_text = _dtype_checked(dtype)
    torch_dtype = _DTYPES[dtype_text]
    spec = _check_model(model)
    source = llm_mod.resolve_llm(spec)
    counted = llm_mod.llm(source, seq_len=1, context=context, batch_size=batch_size,
                          dtype=dtype_text)
    config = source.config
    d = counted.settings["dtype"]
    weights = llm_mod.nbytes(counted.params_total, d)
    cache = llm_mod.nbytes(batch_size * llm_structure.kv_elements(
        source.layer_attention(), context + 1), d)
    free = available_memory(device)
    if weights + cache > free:
        raise UserError(f"{spec}: its weights need {si(weights)}B in {dtype_text} "
                        f"(+ {si(cache)}B of KV cache), more than the {si(free)}B of memory "
                        f"available on {device}; give a smaller dtype, batch_size or "
                        "context, or another device", arguments=("dtype", "batch_size", "context"))
    kv_bytes = counted.kv_cache.bytes_total
    weight_bytes = llm_mod.decode_weight_bytes(config, counted.params_total,
                                               counted.params_active, batch_size, d)
    flops = batch_size * counted.decode.flops_per_token
    with intra_op_threads(threads) as old_threads:
        used_threads = torch.get_num_threads()
        with zoo.seeded():
            module, _, _ = llm_models.from_hf(spec, device=device, dtype=torch_dtype)
            ids = torch.randint(config.vocab_size, (batch_size, context + 1)).to(device)
        modes.set_mode(module, False)
        seconds, prefill_s = _time_steps(module, ids, spec, context, warmup + steps, device,
                                         clock, progress)
        seconds = seconds[warmup:]
        ceilings = roofline.ceilings(device, torch_dtype, used_threads)
    stats = TimingStats.of(seconds)
    sheet = datasheet_peak(device, torch_dtype)
    efficiency = of_inference(flops, weight_bytes + kv_bytes, stats.median_s, device,
                              torch_dtype, ceilings.peak_flops, ceilings.bandwidth)
    bounds = [_bound(counted, config, _gpu(MEASURED, ceilings.peak_flops, ceilings.bandwidth,
                                           free))]
    if sheet is not None:
        bounds.append(_bound(counted, config, _gpu(*sheet, free)))
    return DecodeProfile(
        model=source.name, device=device, dtype=dtype_text, batch_size=batch_size,
        context=context, steps=steps, warmup=warmup, step_time=stats, prefill_s=prefill_s,
        tokens_per_s=batch_size / stats.median_s if stats.median_s > 0 else 0.0,
        flops_per_step=flops, bytes_per_step=weight_bytes + kv_bytes,
        weight_bytes=weight_bytes, kv_bytes=kv_bytes, bounds=bounds, efficiency=efficiency,
        notes=list(source.notes),
        settings={"threads": threads or old_threads, "llm_attention": counted.attention_count},
        environment=environment(),
        noise=noise_section(stats, machine, used_threads, repeats="--decode steps"))


def _counts_checked(steps: Any, context: Any, batch_size: Any, warmup: Any,
                    threads: Any) -> tuple[int, int, int, int, int | None]:
    """profile_decode's counts, each checked in its argument's name."""
    return (values.positive_int(steps, "steps"), values.positive_int(context, "context"),
            values.positive_int(batch_size, "batch_size"),
            values.non_negative_int(warmup, "warmup"),
            None if threads is None else values.thread_count(threads, "threads"))


def _dtype_checked(dtype: Any) -> str:
    """float32 (None), bfloat16 or float16 (a torch.dtype or its name)."""
    text = "float32" if dtype is None else str(dtype).removeprefix("torch.")
    if text not in _DTYPES:
        raise UserError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}",
                        arguments="dtype")
    return text


def _time_steps(module, ids, spec: str, context: int, runs: int, device: str,
                clock: Callable[[], float],
                progress: Callable[[int, int], None] | None) -> tuple[list[float], float]:
    """The prefill of ``context`` tokens, timed, then ``runs`` decode steps from a copy of its
    KV cache, each timed (seconds, in order: the caller drops its warm-up ones)."""
    seconds, prefill_s = [], 0.0
    try:
        with torch.no_grad():
            _sync(device)
            start = clock()
            out = module(input_ids=ids[:, :context], use_cache=True, **_last_logits(module))
            _sync(device)
            prefill_s = clock() - start
            name = _cache_argument(module)
            filled = getattr(out, name, None)
            if filled is None:
                raise UserError(f"{spec}: the model returned no KV cache from its prefill "
                                "(use_cache=True), so its decode steps cannot be timed")
            token = ids[:, context:]
            for i in range(runs):
                kv = copy.deepcopy(filled)
                _sync(device)
                start = clock()
                module(input_ids=token, use_cache=True, **{name: kv})
                _sync(device)
                seconds.append(clock() - start)
                if progress:
                    progress(i + 1, runs)
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"{spec}: the decode step failed: "
                        f"{first_line(exc, with_type=True)}") from exc
    return seconds, prefill_s
