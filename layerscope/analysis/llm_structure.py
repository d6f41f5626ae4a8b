"""``llm``'s counts with attention as the model defines it (frontends/llm_attention.py).

A weightless trace cannot count attention as the model computes it: a mask tensor has no values
(the kernel or the matmuls of the math path count the whole matrix), and a trace of a prefill is
not a decode step with a KV cache. So the attention scores are counted here from each layer's
description, and the trace counts the rest:

- prefill of s tokens: per head, sum over i < s of the keys query i attends: s(s+1)/2 causal,
  W(W+1)/2 + (s - W) W with a sliding window W < s (``--attention full``: s^2, what the math
  fallback executes);
- decode with L tokens cached: one query against min(L + 1, W) keys (the cached ones inside the
  window and its own), per layer;
- MACs per score: the q.k dot product and the value sum, ``qk_head_dim + v_head_dim``; FLOPs: 2 x
  MACs plus a scale and the softmax per score (ops/rules.py ``ATTN_PER_SCORE``), as the kernel
  handlers count them.

The rest: a model traced with every attention score counted (``attention="full"``) costs
c + a s + q s^2 MACs for s tokens (every other contraction works per token; only the score
matrices grow as s^2), whichever path computes the attention (a fused kernel, the math
fallback's matmuls, a model that writes them out). Traces at s = 1, 2, 3 give c, a and q
exactly; q must equal the description's heads x (qk_head_dim + v_head_dim) summed over the
traced layers, or the description does not say what the model computes (then ``llm`` counts as
traced, and says so). What is left at the prompt's length once the whole score matrices are
taken out (their MACs, and FLOPs as the kernel handlers count them: 2 x MACs + ATTN_PER_SCORE
per score) is the non-attention cost; the difference of the 2- and 1-token traces, less the
same, is one more token's: the decode step's projections, MLP, norms and head. FLOPs the model
spends outside the kernels that also grow as s^2 (transformers building a mask; the math
fallback's own softmax rule) stay in the prefill figure.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn

from layerscope.analysis.attention_structure import decoder_blocks
from layerscope.frontends.llm_attention import UNKNOWN, LayerAttention
from layerscope.ops.rules import ATTN_PER_SCORE


@dataclass(frozen=True)
class Traced:
    """One trace's totals (attention scores all counted)."""

    params: int
    params_active: int
    macs: int
    flops: int


def trace(module: nn.Module, batch: int, seq: int) -> Traced:
    """Analyse ``module`` on ``batch`` x ``seq`` token ids, every attention score counted."""
    from layerscope.analysis.analyze import analyze

    ids = torch.empty(batch, seq, dtype=torch.long, device="meta")
    t = analyze(module, [ids], attention="full").totals
    active = t.params if t.params_active is None else t.params_active
    return Traced(t.params, active, t.macs, t.flops)


def quadratic(at: Sequence[Traced]) -> tuple[int, int, int]:
    """(c, a, q) with MACs(s) = c + a s + q s^2, from the traces at s = 1, 2, 3 (q = -1 when
    the second difference is odd: not such a quadratic)."""
    m1, m2, m3 = (t.macs for t in at)
    q2 = m3 - 2 * m2 + m1  # the second difference: 2q
    q = q2 // 2 if q2 % 2 == 0 else -1
    a = m2 - m1 - 3 * q
    return m1 - a - q, a, q


def scores_cost(layer: LayerAttention, batch: int, scores: int) -> tuple[int, int]:
    """(MACs, FLOPs) of ``scores`` visible scores per head, for ``batch`` sequences."""
    n = batch * layer.heads * scores
    macs = n * (layer.qk_head_dim + layer.v_head_dim)
    return macs, 2 * macs + ATTN_PER_SCORE * n


def whole_matrix_cost(layers: Sequence[LayerAttention], batch: int) -> tuple[int, int]:
    """The s^2 coefficients of these layers' attention counted whole: MACs batch x heads x
    (qk + v), FLOPs 2 x MACs + ATTN_PER_SCORE per score."""
    got = [scores_cost(a, batch, 1) for a in layers]
    return sum(m for m, _ in got), sum(f for _, f in got)


def prefill_attention(layers: Sequence[LayerAttention], batch: int, seq: int,
                      mode: str) -> tuple[int, int]:
    """(MACs, FLOPs) of every layer's scores and values for a prefill of ``seq`` tokens:
    ``mode`` "causal" counts what each layer's kernel computes (its window), "full" the whole
    matrix; a layer of unknown structure always counts the whole matrix."""
    macs = flops = 0
    for a in layers:
        whole = mode == "full" or a.kind == UNKNOWN
        m, f = scores_cost(a, batch, seq * seq if whole else a.prefill_scores(seq))
        macs, flops = macs + m, flops + f
    return macs, flops


def decode_attention(layers: Sequence[LayerAttention], context: int) -> tuple[int, int]:
    """(MACs, FLOPs) of one new token's query against the keys each layer holds with
    ``context`` tokens cached: min(context + 1, W)."""
    macs = flops = 0
    for a in layers:
        m, f = scores_cost(a, 1, a.keys(context))
        macs, flops = macs + m, flops + f
    return macs, flops


def kv_elements(layers: Sequence[LayerAttention], context: int | None = None) -> int:
    """Values in the KV cache: per token (``context`` None: every layer's entry for one token)
    or for one sequence of ``context`` tokens (a window layer keeps at most W)."""
    if context is None:
        return sum(a.cache_elements for a in layers)
    return sum(a.cache_elements * a.cached_tokens(context) for a in layers)


@dataclass(frozen=True)
class LayerGroup:
    """Layers that share one attention description, for the report."""

    attention: LayerAttention
    layers: int


def groups(layers: Sequence[LayerAttention]) -> list[LayerGroup]:
    """The distinct layer descriptions in first-seen order, each with its number of layers."""
    seen: dict[LayerAttention, int] = {}
    for a in layers:
        seen[a] = seen.get(a, 0) + 1
    return [LayerGroup(a, n) for a, n in seen.items()]


def matches(layers: Sequence[LayerAttention], fit: tuple[int, int, int], batch: int) -> bool:
    """Whether the traced model's s^2 MACs are those its layers' descriptions say (see the
    module's docstring)."""
    return fit[2] == whole_matrix_cost(layers, batch)[0]


# ---------------------------------------------------------------- layers grouped by structure
def block_signature(block: nn.Module) -> tuple[object, ...]:
    """What makes two blocks cost the same: every submodule's name and class, and its own
    parameters' and buffers' names and shapes (a dense MLP and a mixture of experts, experts of
    another width, a layer with other projections all differ)."""
    return tuple(
        (name, type(m).__name__,
         tuple((n, tuple(p.shape)) for n, p in m.named_parameters(recurse=False)),
         tuple((n, tuple(b.shape)) for n, b in m.named_buffers(recurse=False)))
        for name, m in block.named_modules())


def layer_keys(model: nn.Module, attention: Sequence[LayerAttention]) -> list[object] | None:
    """One hashable key per layer: its block's structure and its attention description;
    None when the model's blocks cannot be found."""
    blocks = decoder_blocks(model, len(attention))
    if blocks is None:
        return None
    return [(block_signature(b), a) for b, a in zip(blocks, attention)]


def prefix_terms(keys: Sequence[object], start: int = 1) -> dict[int, int]:
    """Coefficients c_n with count(model) = sum of c_n x count(model of its first n layers).

    count(first n layers) = outside + the blocks 0..n-1, so a block's own count is
    count(first f + 1) - count(first f). The whole model is the model of its first ``start``
    layers plus, for every group of identical layers after them, its number of such layers
    times the block of its first member f >= ``start``. All layers alike (start 1): c_1 = 2 - L,
    c_2 = L - 1 (the extrapolation from one and two blocks). ``start``: the fewest layers a
    model may have (a hybrid's: up to its first attention layer, ``first_attending``), so no
    model of fewer is needed."""
    terms = {start: 1}
    first: dict[object, int] = {}
    members: dict[object, int] = {}
    for i, key in enumerate(keys[start:], start=start):
        first.setdefault(key, i)
        members[key] = members.get(key, 0) + 1
    for key, f in first.items():
        terms[f + 1] = terms.get(f + 1, 0) + members[key]
        terms[f] = terms.get(f, 0) - members[key]
    return {n: c for n, c in sorted(terms.items()) if c}


def describe_groups(keys: Sequence[object]) -> list[tuple[int, int]]:
    """(first layer, layers) of each group of identical layers, in order of appearance."""
    seen: dict[object, list[int]] = {}
    for i, key in enumerate(keys):
        seen.setdefault(key, []).append(i)
    return [(v[0], len(v)) for v in seen.values()]


def _is_mixture(key: object) -> bool | None:
    """Whether a ``layer_keys`` key's block holds an ``experts`` module (None: no block)."""
    if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], tuple)):
        return None
    return any("experts" in str(entry[0]).split(".") for entry in key[0])


def _attention_words(key: object) -> str | None:
    a = key[1] if isinstance(key, tuple) and len(key) == 2 else None
    if not isinstance(a, LayerAttention):
        return None
    return (f"window-{a.window}" if a.window is not None else
            f"chunked-{a.chunk}" if a.chunk is not None else
            a.mixer or a.kind if a.kind != UNKNOWN else "unknown-attention")


def group_labels(keys: Sequence[object]) -> list[str]:
    """A name for each group of ``describe_groups(keys)``, from what tells the groups apart:
    "MoE" or "dense" (an ``experts`` module in the block or none), the attention ("window-W",
    "chunked-C", "causal", "mla"), else (or where two names would be the same) the layer it
    starts at. One group: ""."""
    spans = describe_groups(keys)
    if len(spans) == 1:
        return [""]
    firsts = [keys[f] for f, _ in spans]
    moe = [_is_mixture(k) for k in firsts]
    attention = [_attention_words(k) for k in firsts]
    labels = []
    for i in range(len(spans)):
        words = []
        if len(set(moe)) > 1 and moe[i] is not None:
            words.append("MoE" if moe[i] else "dense")
        if len(set(attention)) > 1 and attention[i] is not None:
            words.append(attention[i])
        labels.append(", ".join(words))
    return [label if label and labels.count(label) == 1 else
            ", ".join(filter(None, [label, f"like layer {first}"]))
            for label, (first, _) in zip(labels, spans)]
