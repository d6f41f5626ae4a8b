"""``layerscope.llm``: what a decoder-only language model costs to serve, without its weights.

Parameters, MACs and FLOPs come from the static analysis (``analyze``) of the model built on the
meta device; the KV cache, weight bytes and roofline bound are arithmetic on its configuration
(frontends/llm_configs.py). Nothing is printed here; views/llm.py shows the result.

Layers grouped by structure: any count is the sum of what lies outside the blocks and each
block's own, and blocks of the same structure (the same modules and shapes in the model built on
the meta device, and the same attention) cost the same. So the model of its first n layers costs
outside + blocks 0..n-1, a block's own cost is the difference of two such models, and the whole
model is the model of its first layer plus, for each group of identical layers after it, its
size times one member's block (analysis/llm_structure.py ``prefix_terms``). Dense layers before
the mixture-of-experts ones (``first_k_dense_replace``, ``mlp_only_layers``,
``decoder_sparse_step``, ``interleave_moe_layer_step``) and local/global attention patterns are
groups of their own; a model whose blocks are all alike needs the models of one and two blocks,
and ``llm llama-3.1-405b`` (126 blocks) costs traces of those instead of 126 blocks. Tests check
the parameters and MACs against the analysis of full models.

Attention: each layer's score and value products are counted from the layer's attention as the
model's configuration defines it (causal, a sliding window, multi-head latent attention;
frontends/llm_attention.py), not from the kernel flags of a weightless trace: prefill of s
tokens counts, per head, the keys each query attends (s(s+1)/2 causal; a window W sums min(i+1,
W)); decode at context L counts one query against min(L + 1, W) keys, plus one token's
projections, MLP, norms and head (analysis/llm_structure.py).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from layerscope.analysis import llm_counts, llm_structure
from layerscope.analysis.capture.nodynamo import without_dynamo
from layerscope.analysis.llm_gpus import (
    GPU,
    GPUS,
    WEIGHT_DTYPES,
    T,
    dtype_name,
    gpu_spec,
    nbytes,
    peak_flops,
)
from layerscope.analysis.llm_settings import LLMSettings
from layerscope.analysis.llm_source import (
    LLMSource,
    check_tokens,
    meta_builder,
    resolve_llm,
    with_layer_count,
    with_layers,
)
from layerscope.core.environment import environment
from layerscope.core.errors import UserError
from layerscope.core.llm_records import (
    AttentionLayers,
    DecodeCost,
    KVCache,
    LLMReport,
    LLMRoofline,
    PrefillCost,
)
from layerscope.core.settings import of_call
from layerscope.frontends import llm_attention
from layerscope.frontends.llm_attention import LayerAttention
from layerscope.frontends.llm_configs import LLMConfig

# with the dtypes, GPUs and model sources, declared in their own modules and importable from
# here as before (tests build sources with meta_builder and with_layer_count)
__all__ = ["GPU", "GPUS", "T", "WEIGHT_DTYPES", "Counts", "LLMSource", "attention_records",
           "check_tokens", "counts", "decode_embedding_saving", "decode_weight_bytes",
           "decode_weight_params", "dtype_name", "first_layers", "gpu_spec", "layer_terms", "llm",
           "nbytes", "param_count", "param_counts", "peak_flops", "recurrent_notes",
           "report_bound", "resolve_llm", "roofline_bound", "source_layer_keys",
           "structured_counts", "traced_counts", "with_layers", "meta_builder", "with_layer_count"]


@dataclass(frozen=True)
class Counts:
    params: int
    params_active: int
    macs: int
    flops: int


def _count(module: nn.Module, batch: int, seq: int, attention: str) -> Counts:
    from layerscope.analysis.analyze import analyze

    ids = torch.empty(batch, seq, dtype=torch.long, device="meta")
    t = analyze(module, [ids], attention=attention).totals
    active = t.params if t.params_active is None else t.params_active
    return Counts(t.params, active, t.macs, t.flops)


def source_layer_keys(source: LLMSource) -> tuple[list[object], list[str]]:
    """One key per layer, equal for layers of the same structure (the blocks' modules and
    shapes in the model built on the meta device, and each layer's attention), and a note when
    the blocks could not be found (then they are taken as alike)."""
    n = source.config.num_layers
    keys = llm_structure.layer_keys(source.build(source.config), source.layer_attention())
    notes = []
    if keys is None:
        keys = [0] * n
        notes.append(f"the model's {n} decoder blocks were not found (no list of {n} modules): "
                     "they are counted as alike, from its first one and two blocks")
    return keys, notes


def layer_terms(source: LLMSource) -> tuple[dict[int, int], list[str]]:
    """How the whole model's counts follow from models of its first n layers
    (``llm_structure.prefix_terms``) of its layers grouped by structure
    (``source_layer_keys``), and the notes on the grouping."""
    keys, notes = source_layer_keys(source)
    return llm_structure.prefix_terms(keys, first_layers(source)), notes


def first_layers(source: LLMSource) -> int:
    """The fewest first layers a model of ``source`` is built with: 1, or a hybrid's layers up
    to its first attention layer (``llm_attention.first_attending``: a hybrid's model of
    state-space layers alone is not one transformers runs)."""
    first = llm_attention.first_attending(source.layer_attention())
    return 1 if first is None else first + 1


def _combined(source: LLMSource, terms: dict[int, int],
              measure: Callable[[nn.Module, int], tuple[int, ...] | None]
              ) -> tuple[int, ...] | None:
    """sum of c_n x measure(model of the first n layers, n); None when a measure is None."""
    total: list[int] | None = None
    for n, c in terms.items():
        got = measure(source.build(with_layers(source.config, n)), n)
        if got is None:
            return None
        total = [c * g for g in got] if total is None else [t + c * g
                                                            for t, g in zip(total, got)]
    assert total is not None  # terms always has the first layer's model
    return tuple(total)


def param_counts(source: LLMSource) -> tuple[int, int]:
    """(parameters, active per token) of the whole model (shared tensors once; a mixture of
    experts: k/E of the expert parameters plus all others, as ``analyze`` counts them), from
    models of its first layers, one per group of identical layers (plan needs no MACs: no
    trace)."""
    def measure(m: nn.Module, n: int) -> tuple[int, int]:
        total = sum(p.numel() for p in m.parameters())
        route = llm_counts.routing(m, None)
        return total, total if route is None else llm_counts.active_params(m, total, route)

    terms, _ = layer_terms(source)
    got = _combined(source, terms, measure)
    assert got is not None
    return got[0], got[1]


def param_count(source: LLMSource) -> int:
    """Parameters of the whole model (see ``param_counts``)."""
    return param_counts(source)[0]


def counts(source: LLMSource, batch: int, seq: int, attention: str,
           terms: dict[int, int] | None = None) -> Counts:
    """Parameters (all, active per token), MACs, FLOPs of the whole model for a (batch, seq)
    forward, from models of its first layers, one per group of identical layers."""
    terms = layer_terms(source)[0] if terms is None else terms

    def measure(model: nn.Module, n: int) -> tuple[int, ...]:
        c = _count(model, batch, seq, attention)
        return c.params, c.params_active, c.macs, c.flops

    got = _combined(source, terms, measure)
    assert got is not None
    return Counts(*got)


def structured_counts(source: LLMSource, layers: tuple[LayerAttention, ...], batch: int,
                      seq: int, context: int, attention: str, terms: dict[int, int]
                      ) -> tuple[Counts, int, int] | None:
    """(prefill counts, decode MACs, decode FLOPs per token) with each layer's attention counted
    from its description, the rest from traces of models of the model's first layers, one per
    group of identical layers (analysis/llm_structure.py), or None when the traced attention is
    not the one the descriptions say."""
    def measure(model: nn.Module, n: int) -> tuple[int, ...] | None:
        traced = {(b, s): llm_structure.trace(model, b, s)
                  for b, s in {(batch, seq), *((b, s) for b in {batch, 1} for s in (1, 2, 3))}}
        fits = {b: llm_structure.quadratic([traced[b, s] for s in (1, 2, 3)])
                for b in {batch, 1}}
        if not all(llm_structure.matches(layers[:n], fits[b], b) for b in fits):
            return None

        def other(b: int, s: int) -> tuple[int, int]:  # less the whole score matrices
            macs, flops = llm_structure.whole_matrix_cost(layers[:n], b)
            t = traced[b, s]
            return t.macs - macs * s * s, t.flops - flops * s * s

        (m1, f1), (m2, f2) = other(1, 1), other(1, 2)
        t = traced[batch, seq]
        return (t.params, t.params_active, *other(batch, seq), m2 - m1, f2 - f1)

    got = _combined(source, terms, measure)
    if got is None:
        return None
    params, active, macs, flops, token_macs, token_flops = got
    a_macs, a_flops = llm_structure.prefill_attention(layers, batch, seq, attention)
    d_macs, d_flops = llm_structure.decode_attention(layers, context)
    return (Counts(params, active, macs + a_macs, flops + a_flops), token_macs + d_macs,
            token_flops + d_flops)


def traced_counts(source: LLMSource, batch: int, seq: int, context: int, attention: str,
                  terms: dict[int, int]) -> tuple[Counts, int, int]:
    """(prefill counts, decode MACs, decode FLOPs per token) as the traces count them: decode
    is prefill(L + 1) - prefill(L) at batch 1."""
    prefill = counts(source, batch, seq, attention, terms)
    at = prefill if (batch, seq) == (1, context) else counts(source, 1, context, attention,
                                                             terms)
    after = counts(source, 1, context + 1, attention, terms)
    return prefill, after.macs - at.macs, after.flops - at.flops


def recurrent_notes(layers: tuple[LayerAttention, ...]) -> list[str]:
    """What the count of a hybrid's layers without softmax attention (state-space,
    linear-attention or convolution mixers, an MLP alone) or with a state-space mixer beside it
    (Falcon-H1's ``hybrid`` layers) rests on."""
    recurrent = sum(not a.attends for a in layers)
    beside = sum(a.mixer == llm_attention.HYBRID for a in layers)
    if not recurrent and not beside:
        return []
    what = (f"{recurrent} of {len(layers)} layers have no softmax attention (state-space, "
            "linear-attention or convolution mixers, or an MLP alone: transformers' layer "
            "types): no scores and no KV cache; their" if recurrent else
            f"{beside} of {len(layers)} layers run a state-space mixer beside their attention "
            "(transformers' layer type hybrid): the mixer has no scores and no KV cache; its")
    return [f"{what} prefill is counted as transformers' PyTorch implementation computes it "
            "(each aten op by its rule), decode per token as what one more token adds to that "
            "implementation's 1-token trace (its prefill path, not its recurrent step); the "
            "fixed-size recurrent state is not in the KV cache"]


def attention_records(layers: tuple[LayerAttention, ...], kv_dtype: str, batch: int,
                      context: int, attention: str) -> list[AttentionLayers]:
    """One record per distinct layer description: how many layers, how their scores were
    counted (``attention`` "as traced": as the trace met them, whatever the description),
    their KV cache per token and for the batch at ``context``."""
    out = []
    for g in llm_structure.groups(layers):
        a = g.attention
        counted = "no attention" if not a.attends else \
            attention if attention == "as traced" else "full" if (
            attention == "full" or a.kind == llm_attention.UNKNOWN) else (
            f"causal, window {a.window}" if a.window is not None else
            f"causal, chunks of {a.chunk}" if a.chunk is not None else "causal")
        out.append(AttentionLayers(
            kind=a.kind, layers=g.layers, heads=a.heads, kv_heads=a.kv_heads,
            qk_head_dim=a.qk_head_dim, v_head_dim=a.v_head_dim, window=a.window, chunk=a.chunk,
            counted=counted,
            kv_bytes_per_token=nbytes(g.layers * a.cache_elements, kv_dtype),
            kv_bytes_total=nbytes(batch * g.layers * a.cache_elements
                                  * a.cached_tokens(context), kv_dtype)))
    return out


# ---------------------------------------------------------------- arithmetic on the config
def decode_weight_params(config: LLMConfig, total: int, active: int, tokens: int) -> int:
    """Parameters read from memory for one decode step of ``tokens`` sequences: dense models read
    all; a mixture of experts reads the experts at least one token was routed to, E(1 - (1 -
    k/E)^tokens) per layer in expectation under uniform independent routing. The expert
    parameters X follow from active = total - X + X k/E."""
    if not config.is_moe:
        return total
    e, k = config.num_experts, config.experts_per_token
    experts = (total - active) * e / (e - k)
    used = 1 - (1 - k / e) ** tokens
    return round(total - experts + experts * used)


def decode_embedding_saving(config: LLMConfig, tokens: int) -> int:
    """Parameters of the input-embedding table a decode step of ``tokens`` sequences does not
    read: it looks up one row per token, not the table (vocab x hidden). A tied head reads the
    whole table for the logits, so nothing is saved then."""
    if config.tied_embeddings:
        return 0
    return (config.vocab_size - min(tokens, config.vocab_size)) * config.hidden_size


def decode_weight_bytes(config: LLMConfig, total: int, active: int, tokens: int,
                        dtype: str) -> int:
    """Weight bytes one decode step of ``tokens`` sequences reads: the parameters in use
    (``decode_weight_params``) less the embedding rows it does not look up
    (``decode_embedding_saving``), stored as ``dtype``. A decode step moves these plus the KV
    cache it attends (``KVCache.bytes_total``); ``profile --decode`` divides the same sum by
    the measured step time."""
    return nbytes(decode_weight_params(config, total, active, tokens)
                  - decode_embedding_saving(config, tokens), dtype)


def roofline_bound(gpu: GPU, dtype: str, prefill_flops: int, prefill_tokens: int,
                   decode_flops_per_token: int, weight_read_bytes: int, decode_weight_bytes: int,
                   kv_per_token: int, batch: int, context: int, tp: int = 1,
                   kv_heads: int | None = None,
                   kv_step_bytes: int | None = None) -> tuple[LLMRoofline, list[str]]:
    """Tokens/s upper bounds on ``tp`` GPUs, each holding 1/tp of the weights and of the KV
    cache. A phase takes at least max(FLOPs / (tp peak), bytes / (tp bandwidth)): prefill reads
    the weights once and writes the KV cache of its tokens; a decode step reads the weights (the
    experts in use, one embedding row per token) and the batch's KV cache (``kv_step_bytes``;
    default batch x context x kv_per_token: less where window layers hold fewer tokens), and
    computes ``batch`` tokens. The weights (all of them) and that KV cache must fit the GPUs'
    memory; communication between the GPUs is not counted.
    ``kv_heads``: with fewer key/value heads than GPUs, each GPU keeps a whole head (the heads
    are replicated, Megatron-style), so its share of the cache is ceil(kv_heads/tp)/kv_heads,
    not 1/tp (multi-query attention: all of it on every GPU)."""
    peak, note = peak_flops(gpu, dtype)
    notes = [note] if note else []
    heads = kv_heads or tp
    share = -(-heads // tp) / heads  # a GPU's part of the KV cache
    if kv_step_bytes is None:
        kv_step_bytes = batch * context * kv_per_token
    p_compute = prefill_flops / (tp * peak)
    p_memory = (weight_read_bytes / tp + prefill_tokens * kv_per_token * share) / gpu.bandwidth
    step_bytes = decode_weight_bytes + kv_step_bytes
    d_compute = batch * decode_flops_per_token / (tp * peak)
    d_memory = (decode_weight_bytes / tp + kv_step_bytes * share) / gpu.bandwidth
    weights, kv = math.ceil(weight_read_bytes / tp), math.ceil(kv_step_bytes * share)
    fits = weights + kv <= gpu.memory
    if not fits:
        need = math.ceil((weight_read_bytes + kv_step_bytes) / gpu.memory)
        if need <= tp:  # the cache replicated over more GPUs than key/value heads: more will not do
            need = 0
        notes.append(f"does not fit: {weights / 1e9:,.2f} GB of weights + {kv / 1e9:,.2f} GB of "
                     f"KV cache per GPU = {(weights + kv) / 1e9:,.2f} GB, more than {gpu.name}'s "
                     f"{gpu.memory / 1e9:,.2f} GB (tp {tp}); the bounds assume it fits: "
                     + (f"split it over at least {need} GPUs (--tp), or use " if need else "use ")
                     + "a smaller dtype, batch or context")
    if tp > 1:
        frac = f"1/{tp}" if heads % tp == 0 else f"{-(-heads // tp)}/{heads}"
        notes.append(f"tensor parallel over {tp} GPUs: each reads 1/{tp} of the weights and "
                     f"{frac} of the KV cache; the all-reduces between them are not counted")
    roof = LLMRoofline(
        gpu=gpu.name, peak_flops=peak, bandwidth_bytes_per_s=gpu.bandwidth,
        memory_bytes=gpu.memory,
        prefill_tokens_per_s=prefill_tokens / max(p_compute, p_memory),
        prefill_bound="compute" if p_compute >= p_memory else "memory",
        decode_tokens_per_s=batch / max(d_compute, d_memory),
        decode_bound="compute" if d_compute >= d_memory else "memory",
        decode_bytes_per_step=step_bytes, tp=tp, weights_bytes_per_gpu=weights,
        kv_bytes_per_gpu=kv, fits=fits)
    return roof, notes


# ---------------------------------------------------------------- the public function
@without_dynamo()  # the meta builds and the counting compile nothing
def llm(model: str | LLMSource | None = None, *, settings: LLMSettings | None = None,
        **overrides: Any) -> LLMReport:
    """Parameters (total and active), weight bytes per dtype, prefill MACs/FLOPs for
    ``batch_size`` x ``seq_len`` tokens, decode MACs/FLOPs per token at ``context`` cached
    tokens, KV-cache bytes and, with ``gpu``, a roofline bound on tokens/s. ``settings``: an
    ``LLMSettings``; keyword arguments override its fields (``seq_len=4096``).

    ``model``: an LLM preset (``llama-3-8b``), ``hf:PATH/config.json`` or an ``LLMSource``.
    ``attention``: ``causal`` counts s(s+1)/2 scores per head (what causal kernels execute),
    ``full`` the whole s x s matrix (what the masked math fallback executes); decode always
    attends the whole cache.
    ``tp``: GPUs the weights and the KV cache are split across for the ``gpu`` bound.
    """
    s = of_call(LLMSettings, settings, overrides, "llm", model=model)
    kv_dtype = s.kv_dtype or s.dtype
    gpu_obj = None if s.gpu is None else gpu_spec(s.gpu)  # a bad gpu fails first
    source = resolve_llm(s.model)
    config = source.config
    if config.num_heads % s.tp:
        raise UserError(f"tp {s.tp} does not divide {source.name}'s {config.num_heads} "
                        "attention heads", arguments="tp")
    seq_len, context, notes = _positions(s, source)
    layers = source.layer_attention()
    prefill, decode_macs, decode_flops, attention_count, more = _counts(
        s, source, layers, seq_len, context)
    notes += more + recurrent_notes(layers)
    total, active = prefill.params, prefill.params_active
    kv_token = nbytes(llm_structure.kv_elements(layers), kv_dtype)
    kv_total = nbytes(s.batch_size * llm_structure.kv_elements(layers, context), kv_dtype)
    if config.is_moe:
        notes.append(f"mixture of experts: {config.experts_per_token} of {config.num_experts} "
                     "experts per token; active parameters and MACs count the expected routing "
                     f"(k/E = {config.experts_per_token}/{config.num_experts} of each expert's "
                     "work per token)")
    report = LLMReport(
        model=source.name,
        params_total=total,
        params_active=active,
        weight_bytes={d: nbytes(total, d) for d in WEIGHT_DTYPES},
        prefill=PrefillCost(macs=prefill.macs, flops=prefill.flops,
                            tokens=s.batch_size * seq_len),
        decode=DecodeCost(macs_per_token=decode_macs, flops_per_token=decode_flops,
                          context=context),
        kv_cache=KVCache(bytes_per_token=kv_token, bytes_total=kv_total,
                         dtype=kv_dtype, batch_size=s.batch_size, context=context),
        attention_count=attention_count,
        attention_layers=attention_records(
            layers, kv_dtype, s.batch_size, context,
            attention_count if attention_count == "as traced" else s.attention),
        config=config.to_dict(),
        settings={"seq_len": seq_len, "context": context, "batch_size": s.batch_size,
                  "dtype": s.dtype, "kv_dtype": kv_dtype, "attention": s.attention,
                  "gpu": gpu_obj.name if gpu_obj else None, "tp": s.tp},
        environment=environment(),
        notes=notes,
    )
    if gpu_obj is not None:
        report.roofline, more = report_bound(report, config, gpu_obj, s.tp)
        report.notes += more
    return report


def _positions(s: LLMSettings, source: LLMSource) -> tuple[int, int, list[str]]:
    """The prompt's length and the decode's context (defaults filled in: a position table caps
    the context, decode at context L running position L + 1), once they are known to fit the
    model's positions, and the notes so far."""
    config = source.config
    seq_len = config.default_seq_len if s.seq_len is None else s.seq_len
    table = source.position_cap()
    context = s.context if s.context is not None else (
        min(seq_len, config.max_position - 1) if table else seq_len)
    check_tokens(config, s.batch_size, seq_len, "batch_size x seq_len")
    check_tokens(config, 1, context + 1, "context")
    notes = [*source.config_notes, *source.notes]
    for what, value, n in (("seq_len", seq_len, seq_len), ("context", context, context + 1)):
        if table and n > config.max_position:
            raise UserError(f"{what} {value} needs {n} positions, more than {source.name}'s "
                            f"{table} ({config.max_position} positions)", arguments=what)
        if n > config.max_position:
            notes.append(f"{what} {value} needs {n:,} positions, beyond {source.name}'s "
                         f"trained context ({config.max_position:,} tokens); counted anyway")
    return seq_len, context, notes


def _counts(s: LLMSettings, source: LLMSource, layers, seq_len: int, context: int):
    """Prefill's counts, decode's MACs and FLOPs per token, how attention was counted and the
    notes saying so: from the structure the config describes, or as traced when the model's
    kernels are not those."""
    terms, notes = layer_terms(source)
    shaped = structured_counts(source, layers, s.batch_size, seq_len, context, s.attention,
                               terms)
    if shaped is None:  # the kernels are not those the config describes: as traced
        prefill, decode_macs, decode_flops = traced_counts(source, s.batch_size, seq_len,
                                                           context, s.attention, terms)
        notes.append("attention counted as the trace met it: the model's attention kernels are "
                     "not those its configuration describes (attention written out as matmuls, "
                     "or other heads or widths), so masked kernels count the whole score matrix "
                     "(a Hugging Face model's masked kernel call: the scores its decoder "
                     "layer's mask lets each query see, as analyze counts it) and decode is "
                     "prefill(L + 1) - prefill(L)")
        return prefill, decode_macs, decode_flops, "as traced", notes
    prefill, decode_macs, decode_flops = shaped
    attention_count = s.attention
    unknown = sum(a.kind == llm_attention.UNKNOWN for a in layers)
    if unknown:
        attention_count = "full" if unknown == len(layers) else f"{s.attention}, some full"
        notes.append(f"{unknown} of {len(layers)} layers have an attention type layerscope "
                     "does not know (its mask's structure): their scores are counted as the "
                     "whole matrix")
    return prefill, decode_macs, decode_flops, attention_count, notes


def report_bound(report: LLMReport, config: LLMConfig, gpu: GPU, tp: int = 1
                 ) -> tuple[LLMRoofline, list[str]]:
    """``roofline_bound`` of the prefill and decode that ``report`` counts, on ``gpu`` (its
    weight dtype, batch and context are the report's); ``llm(gpu=...)`` and ``profile
    --decode`` (the bound beside the measured step) both take it from here."""
    s, kv = report.settings, report.kv_cache
    dtype, batch = s["dtype"], kv.batch_size
    return roofline_bound(
        gpu, dtype, report.prefill.flops, report.prefill.tokens, report.decode.flops_per_token,
        nbytes(report.params_total, dtype),
        decode_weight_bytes(config, report.params_total, report.params_active, batch, dtype),
        kv.bytes_per_token, batch, kv.context, tp, config.num_kv_heads,
        kv_step_bytes=kv.bytes_total)
