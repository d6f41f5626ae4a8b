"""Cost rules shared by the aten handlers (``aten.py``) and the ONNX handlers (``onnx.py``), so a
model costs the same exported or not. Plain Python: importing it never imports torch (the ONNX path
must not)."""
from __future__ import annotations

import math

# ---------------------------------------------------------------- resampling
# Interpolation (docs/definitions.md; onnx.py's Resize uses the same function, so a model costs
# the same exported or not): an output element is a weighted sum of `taps` input elements,
# taps = product over the resized axes (input size != output size) of the taps per axis:
# nearest 1, linear 2, cubic 4. Antialiased downsampling by in/out > 1 widens the filter to
# ceil(taps * in/out) input elements per axis. FLOPs per output element = taps multiplies +
# (taps - 1) adds = 2*taps - 1; with a single tap (nearest, or nothing resized) it is a copy: 0.
# The weights depend only on output coordinates (per row/column, not per element): not counted.
TAPS_PER_AXIS = {"nearest": 1, "linear": 2, "cubic": 4}


def resample_taps(in_shape, out_shape, interp: str, antialias: bool = False) -> int:
    # in_shape, out_shape: (N, C, *in), (N, C, *out) -> input elements blended per output element
    per_axis = TAPS_PER_AXIS[interp]
    taps = 1
    for a, b in zip(in_shape, out_shape):
        if a != b:
            wide = antialias and per_axis > 1 and a > b
            taps *= math.ceil(per_axis * a / b) if wide else per_axis
    return taps


def blend_flops(outputs: int, taps: int) -> int:
    # outputs elements, each taps multiplies + taps - 1 adds; a single tap is a copy
    return 0 if taps == 1 else outputs * (2 * taps - 1)


def resample_flops(in_shape, out_shape, interp: str, antialias: bool = False) -> int:
    # FLOPs of the whole output: numel(out) * (2*taps - 1), 0 for one tap
    taps = resample_taps(in_shape, out_shape, interp, antialias)
    return blend_flops(math.prod(out_shape), taps)


# ---------------------------------------------------------------- normalisation and softmax
# Normalise: (x - mean) * invstd = 2 FLOPs per element; the affine (* w, + b) adds 1 each when
# the weight / bias is present (affine=False, elementwise_affine=False, bias=False, or
# F.batch_norm without weight pass None). Computing the statistics (training BatchNorm,
# LayerNorm, GroupNorm) adds mean (1) and variance (3) per element. Per-channel work (invstd
# from var) is not counted.
NORM_NORMALISE = 2
NORM_APPLY = NORM_NORMALISE + 2  # with weight and bias
NORM_STATS = 4

# softmax over the last dim: subtract max (2: compare + sub), exp (1), sum (1), divide (1).
SOFTMAX = 5


# ---------------------------------------------------------------- attention
# FLOPs per attention score: one scale multiply and the softmax.
ATTN_PER_SCORE = 1 + SOFTMAX

# How causal attention is counted (``--attention``): "causal" counts the scores a causal kernel
# computes (the lower triangle, diagonal included); "full" the whole Lq x Lk matrix, which is
# what the math fallback executes (it masks a full matrix).
ATTENTION_COUNTS = ("causal", "full")


def causal_scores(lq: int, lk: int) -> int:
    """Scores per head of ``is_causal=True`` attention, as PyTorch defines it: the mask is
    ``tril(ones(Lq, Lk))`` aligned to the upper left (F.scaled_dot_product_attention's docs and
    its math kernel), so query i (0-based) sees keys 0..i: min(i + 1, Lk) of them.
    Lq == Lk == s: sum_{i<s} (i + 1) = s(s+1)/2. Lq <= Lk: Lq(Lq+1)/2 (the keys after Lq are
    never seen). Lq > Lk: the first Lk queries give Lk(Lk+1)/2, the other Lq - Lk see all Lk."""
    if lq <= lk:
        return lq * (lq + 1) // 2
    return lk * (lk + 1) // 2 + (lq - lk) * lk


def cached_causal_scores(lq: int, lk: int) -> int:
    """Scores per head when Lq new queries attend to a KV cache of Lk >= Lq keys that ends with
    them (decoding, chunked prefill; the lower-right alignment of FlashAttention 2.1+ and
    ``torch.nn.attention.bias.causal_lower_right``): query i (0-based) is token Lk - Lq + i and
    sees keys 0..Lk - Lq + i, i.e. Lk - Lq + i + 1 keys; summed over i < Lq:
    Lq(Lk - Lq) + Lq(Lq + 1)/2. Lq == Lk: s(s+1)/2; one decoded token (Lq = 1): Lk."""
    if not 0 < lq <= lk:
        raise ValueError(f"a cached causal step needs 0 < Lq <= Lk, got Lq={lq}, Lk={lk}")
    return lq * (lk - lq) + lq * (lq + 1) // 2


# ---------------------------------------------------------------- recurrent layers
# Gate arithmetic per hidden unit and step (FLOPs besides the contractions):
#   LSTM: add the two projections (4), gate nonlinearities (4), c = f*c + i*g (3), tanh(c) (1),
#         h = o*tanh(c) (1) = 13;  GRU: r, z (add + sigmoid: 4), n = tanh(xn + r*hn) (3),
#         h = (1-z)*n + z*h (4) = 11;  RNN: add + nonlinearity = 2.
# Biases add 2*G*H per step when present.
GATES = {"lstm": 4, "gru": 3, "rnn": 1}
GATE_FLOPS = {"lstm": 13, "gru": 11, "rnn": 2}
