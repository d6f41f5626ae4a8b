"""Aten cost handlers: attention (SDPA kernels and their counting mode, the
MultiheadAttention and TransformerEncoderLayer fast paths).

Conventions (formulas, what a FLOP is): ``layerscope/ops/aten.py``.
"""
from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from layerscope.ops.aten_base import register
from layerscope.ops.registry import OpCost, TensorDesc
from layerscope.ops.rules import (
    ATTENTION_COUNTS,
    ATTN_PER_SCORE,
    NORM_APPLY,
    NORM_STATS,
    causal_scores,
)

# ---------------------------------------------------------------- attention
# Scaled dot-product attention on any kernel: MACs = B*H*(visible scores per head)*(E + Ev)
# (scores and values); FLOPs add one scale multiply and the softmax per visible score
# (ATTN_PER_SCORE, ops/rules.py). Without is_causal every kernel computes the whole Lq x Lk
# matrix. With is_causal=True the fused kernels (flash, memory-efficient, cuDNN, CPU flash) skip
# the masked scores: rules.causal_scores counts the lower triangle incl. the diagonal, s(s+1)/2
# per head, unless --attention full asks for the whole matrix (what the math fallback executes).
# An attn_mask tensor has no values under the fake/meta trace, so a masked call counts the whole
# matrix (the kernels compute it and add the mask), unless the analysis knows the structure the
# mask has where the call runs (``AttentionCounting.structure``: a Hugging Face model's sliding
# window or causal mask, layer by layer, from its config): then the scores that structure lets
# each query see. Hugging Face's sdpa path passes no mask and is_causal=True when nothing is
# padded and no window applies (transformers' masking_utils / sdpa_attention).
# Grouped-/multi-query attention: k and v may have fewer heads than q (enable_gqa): every query
# head still computes its scores, so the count uses q's heads.
_ATTENTION: ContextVar[AttentionCounting | None] = ContextVar("layerscope_attention",
                                                                default=None)


class MaskStructure(Protocol):
    """What the masks of the attention calls running now let each query see (set by an analysis
    that knows it, e.g. per decoder layer from a model's config)."""

    def scores(self, lq: int, lk: int) -> int | None:
        """Scores per head of a masked call with ``lq`` queries and ``lk`` keys, or None when
        the structure is not known here (the whole matrix is counted)."""

    def key(self) -> Hashable:
        """What ``scores`` depends on now: calls under equal keys count the same (the capture
        engine replays a repeated block only under the same key)."""


@dataclass
class AttentionCounting:
    """How an analysis counts causal and masked attention, and how many such kernels it met."""

    mode: str = "causal"
    causal_kernels: int = 0
    masked_kernels: int = 0  # called with a mask tensor: the whole matrix is counted
    structured_kernels: int = 0  # called with a mask tensor: counted by ``structure``
    structure: MaskStructure | None = None  # only consulted when mode is "causal"

    def reuse_key(self) -> Hashable:
        """What the counts of the calls running now depend on beyond their shapes."""
        return self.mode, None if self.structure is None else self.structure.key()


@contextlib.contextmanager
def attention_counting(mode: str = "causal",
                       structure: MaskStructure | None = None) -> Iterator[AttentionCounting]:
    """Count the attention kernels run inside as ``mode`` ("causal" or "full"); ``structure``:
    what masked calls see (without it, or in "full" mode, a masked call counts the whole
    matrix)."""
    if mode not in ATTENTION_COUNTS:
        raise ValueError(f"attention counting {mode!r}: use one of {', '.join(ATTENTION_COUNTS)}")
    counting = AttentionCounting(mode, structure=structure)
    token = _ATTENTION.set(counting)
    try:
        yield counting
    finally:
        _ATTENTION.reset(token)


def current_attention_counting() -> AttentionCounting | None:
    """The ``attention_counting`` in force (None outside one): what it counts is a tally the
    capture engine keeps exact when it replays a repeated block instead of tracing it."""
    return _ATTENTION.get()


def _visible_scores(lq: int, lk: int, is_causal: bool) -> int:
    """Scores per head the kernel computes under the current counting mode."""
    if not is_causal:
        return lq * lk
    counting = _ATTENTION.get()
    if counting is not None:
        counting.causal_kernels += 1
    if counting is not None and counting.mode == "full":
        return lq * lk
    return causal_scores(lq, lk)


def _causal_flag(args, kwargs, at: int) -> bool:
    return bool(args[at]) if len(args) > at else bool(kwargs.get("is_causal", False))


def sdpa_backward_macs(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...]) -> int:
    # q: (B, H, Lq, E), k: (B, Hkv, Lk, E), v: (B, Hkv, Lk, Ev): the recomputed scores (Lq*Lk*E),
    # dP and dV (Lq*Lk*Ev each), dQ and dK (Lq*Lk*E each), per query head
    # (flop_counter.sdpa_backward_flop_count / 2)
    b, h, lq, e = q
    return b * h * lq * k[-2] * (3 * e + 2 * v[-1])


def _sdpa(q: TensorDesc, k: TensorDesc, v: TensorDesc, is_causal: bool = False,
          scores: int | None = None) -> OpCost:
    """``scores``: visible scores per head when known (a masked call's structure), otherwise
    the whole matrix or, with ``is_causal``, what the counting mode says."""
    b, h, lq, e = q.shape
    lk, ev = k.shape[-2], v.shape[-1]
    scores = b * h * (_visible_scores(lq, lk, is_causal) if scores is None else scores)
    macs = scores * (e + ev)  # q.k for every score, then score x v (flop_counter's formula)
    return OpCost(macs=macs, flops=2 * macs + ATTN_PER_SCORE * scores)


def _masked_scores(q: TensorDesc, k: TensorDesc) -> int | None:
    """Scores per head of a masked call when the structure in force knows them (tallied)."""
    counting = _ATTENTION.get()
    if counting is None:
        return None
    scores = None
    if counting.structure is not None and counting.mode == "causal":
        scores = counting.structure.scores(q.shape[-2], k.shape[-2])
    if scores is None:
        counting.masked_kernels += 1
    else:
        counting.structured_kernels += 1
    return scores


def sdpa(causal_at: int):
    def handler(args, kwargs, out) -> OpCost:
        # q: (B, H, Lq, E), k: (B, Hkv, Lk, E), v: (B, Hkv, Lk, Ev) -> (B, H, Lq, Ev);
        # is_causal at args[causal_at]; a mask (attn_bias) tensor, if any, before it or as the
        # keyword attn_mask
        if any(isinstance(x, TensorDesc) for x in (*args[3:causal_at], kwargs.get("attn_mask"))):
            scores = _masked_scores(args[0], args[1])
            if scores is not None:
                return _sdpa(*args[:3], scores=scores)
        return _sdpa(*args[:3], is_causal=_causal_flag(args, kwargs, causal_at))

    handler.__name__ = "sdpa"
    return handler


def sdpa_backward(causal_at: int, mask_at: int | str | None):
    def handler(args, kwargs, out) -> OpCost:
        # grad_out: (B, H, Lq, Ev), q, k, v -> grads; recompute the scores + 4 gradient products
        # (dV, dP, dQ, dK), each over the visible scores only; the forward's mask (attn_bias)
        # tensor, if any, at args[mask_at] or as the keyword mask_at. The recomputed scores
        # (q.k and the forward's scale and softmax, ATTN_PER_SCORE) are the forward's work
        # again: ``recompute`` (hardware FLOPs, HFU), the rest is the model's backward
        q, k = args[1], args[2]
        full = sdpa_backward_macs(q.shape, k.shape, args[3].shape)
        b, h, lq, _ = q.shape
        lk = k.shape[-2]
        mask = kwargs.get(mask_at) if isinstance(mask_at, str) else \
            args[mask_at] if mask_at is not None and len(args) > mask_at else None
        visible = _masked_scores(q, k) if isinstance(mask, TensorDesc) else None
        if visible is None:
            visible = _visible_scores(lq, lk, _causal_flag(args, kwargs, causal_at))
        macs = full // (lq * lk) * visible  # flop_counter's count is B*H*Lq*Lk*(...)
        scores = b * h * visible
        again = 2 * scores * q.shape[-1] + ATTN_PER_SCORE * scores
        return OpCost(macs=macs, flops=2 * macs + (ATTN_PER_SCORE + 4) * scores, recompute=again)

    handler.__name__ = "sdpa_backward"
    return handler


# each kernel's overload packet and the index of its is_causal argument (the tests check them
# against the op schemas); backward kernels: also where the forward's mask is (an index, a
# keyword, or None for a kernel that takes none)
SDPA_CAUSAL_ARG = {
    "_scaled_dot_product_flash_attention_for_cpu": 4, "_scaled_dot_product_flash_attention": 4,
    "_scaled_dot_product_efficient_attention": 6, "_scaled_dot_product_cudnn_attention": 6,
    "_scaled_dot_product_fused_attention_overrideable": 5}
SDPA_BACKWARD_CAUSAL_ARG = {
    "_scaled_dot_product_flash_attention_for_cpu_backward": 7,
    "_scaled_dot_product_flash_attention_backward": 11,
    "_scaled_dot_product_efficient_attention_backward": 11,
    "_scaled_dot_product_cudnn_attention_backward": 14}
SDPA_BACKWARD_MASK_ARG: dict[str, int | str | None] = {
    "_scaled_dot_product_flash_attention_for_cpu_backward": "attn_mask",
    "_scaled_dot_product_flash_attention_backward": None,
    "_scaled_dot_product_efficient_attention_backward": 4,
    "_scaled_dot_product_cudnn_attention_backward": 8}
for _op, _at in SDPA_CAUSAL_ARG.items():
    register(f"aten.{_op}", sdpa(_at))
for _op, _at in SDPA_BACKWARD_CAUSAL_ARG.items():
    register(f"aten.{_op}", sdpa_backward(_at, SDPA_BACKWARD_MASK_ARG[_op]))


def _seq_batch(x: TensorDesc) -> tuple[int, int, int]:
    """(B, L, E) for the fast paths, which always run batch-first."""
    b, length, e = x.shape
    return b, length, e


def _mha(q: TensorDesc, k: TensorDesc, v: TensorDesc, num_heads: int, has_in_bias: bool,
         has_out_bias: bool) -> OpCost:
    """nn.MultiheadAttention: in-projections, attention, out-projection (as the unfused path)."""
    b, lq, e = _seq_batch(q)
    lk, lv = k.shape[1], v.shape[1]
    proj_macs = b * (lq + lk + lv) * e * e + b * lq * e * e
    head = e // num_heads
    attn = _sdpa(TensorDesc((b, num_heads, lq, head)), TensorDesc((b, num_heads, lk, head)),
                 TensorDesc((b, num_heads, lv, head)))
    bias = (b * (lq + lk + lv) * e if has_in_bias else 0) + (b * lq * e if has_out_bias else 0)
    return OpCost(macs=proj_macs + attn.macs, flops=2 * proj_macs + attn.flops + bias)


def native_mha(args, kwargs, out) -> OpCost:
    # _native_multi_head_attention(q: (B, Lq, E), k: (B, Lk, E), v: (B, Lv, E), embed_dim,
    # num_heads, qkv_weight: (3E, E), qkv_bias?, proj_weight: (E, E), proj_bias?, mask?,
    # need_weights=True, average_attn_weights=True, ...)
    q, k = args[0], args[1]
    heads = int(args[4])
    cost = _mha(q, k, args[2], heads, isinstance(args[6], TensorDesc),
                isinstance(args[8], TensorDesc))
    need_weights = bool(args[10]) if len(args) > 10 else kwargs.get("need_weights", True)
    average = bool(args[11]) if len(args) > 11 else kwargs.get("average_attn_weights", True)
    if need_weights and average:
        # the returned weights are averaged over heads: a mean (one add per score, one divide
        # per averaged score), as the unfused path's mean op costs
        b, lq, lk = q.shape[0], q.shape[1], k.shape[1]
        cost = OpCost(cost.macs, cost.flops + b * heads * lq * lk + b * lq * lk)
    return cost


def transformer_encoder_layer(args, kwargs, out) -> OpCost:
    # _transformer_encoder_layer_fwd(src: (B, L, E), embed_dim, num_heads, qkv_weight, qkv_bias,
    # proj_weight, proj_bias, use_gelu, norm_first, eps, ln1_w, ln1_b, ln2_w, ln2_b,
    # ffn1_w: (F, E), ffn1_b, ffn2_w: (E, F), ffn2_b, mask?, mask_type?)
    src = args[0]
    b, length, e = _seq_batch(src)
    attn = _mha(src, src, src, int(args[2]), isinstance(args[4], TensorDesc),
                isinstance(args[6], TensorDesc))
    f = args[14].shape[0]
    tokens = b * length
    ffn_macs = 2 * tokens * e * f
    ffn_flops = 2 * ffn_macs + tokens * (f + e) + tokens * f  # biases + activation
    norms = 2 * (NORM_APPLY + NORM_STATS) * tokens * e
    residuals = 2 * tokens * e
    return OpCost(macs=attn.macs + ffn_macs,
                  flops=attn.flops + ffn_flops + norms + residuals)


register("aten._native_multi_head_attention", native_mha)
register("aten._transformer_encoder_layer_fwd", transformer_encoder_layer)
