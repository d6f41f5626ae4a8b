"""Cost handlers for PyTorch aten ops, keyed by overload packet ("aten.addmm") or overload.

Conventions (docs/definitions.md; in short docs/design.md, "Counting"):
- MACs count contractions only; FLOPs = 2 x MACs + the op's other arithmetic.
- Elementwise ops cost 1 FLOP per output element unless stated beside their registration.
- Contraction formulas are ``torch.utils.flop_counter``'s (its FLOPs are 2 x MACs and leave bias
  adds out, so MACs = its figure / 2 and bias adds are added here), written out below as MACs
  and tested against it: importing ``flop_counter`` imports triton where it is installed, a
  fifth of a second every analysis would pay for four products.
- Fused kernels (SDPA, the MultiheadAttention / TransformerEncoderLayer fast paths, RNN layers)
  cost exactly what the unfused ops they replace cost, so every kernel path agrees on MACs.

Each handler's first comment gives the shapes it reads.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Hashable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from layerscope.ops.registry import ALLOC, VIEW, HandlerTable, OpCost, TensorDesc
from layerscope.ops.rules import (
    ATTENTION_COUNTS,
    ATTN_PER_SCORE,
    GATE_FLOPS,
    GATES,
    NORM_APPLY,
    NORM_NORMALISE,
    NORM_STATS,
    SOFTMAX,
    TAPS_PER_AXIS,
    blend_flops,
    causal_scores,
    resample_flops,
    resample_taps,
)

ATEN = HandlerTable("aten")
register = ATEN.register

ZERO = OpCost()


def _first_out(out) -> TensorDesc:
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out


def _outs(out) -> list[TensorDesc]:
    if isinstance(out, TensorDesc):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _outs(o)]
    return []


# ---------------------------------------------------------------- zero-cost and data movement
def zero(args, kwargs, out) -> OpCost:
    # any shapes: no arithmetic (views, allocation, copies, indexing)
    return ZERO


register(
    [
        "aten.view", "aten._unsafe_view", "aten.t", "aten.transpose", "aten.permute",
        "aten.expand", "aten.squeeze", "aten.unsqueeze", "aten.select", "aten.slice",
        "aten.split", "aten.split_with_sizes", "aten.unsafe_split", "aten.unsafe_split_with_sizes",
        "aten.unbind", "aten.chunk", "aten.detach", "aten.alias", "aten.as_strided",
        "aten.narrow", "aten.diagonal", "aten._reshape_alias", "aten.view_as", "aten.unfold",
        "aten.transpose_", "aten.t_", "aten.squeeze_", "aten.unsqueeze_", "aten.lift_fresh",
        "aten._nested_tensor_from_mask", "prim.device", "aten.sym_size", "aten.sym_stride",
        "aten.sym_numel", "aten.sym_storage_offset", "aten.is_same_size",
        "aten._local_scalar_dense",
        "aten.set_", "aten.resize_", "aten._has_compatible_shallow_copy_type", "aten.is_nonzero",
        "aten.as_strided_",
    ],
    zero,
    kind=VIEW,
)
register(
    ["aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty",
     "aten.new_empty_strided"],
    zero,
    kind=ALLOC,
)
register(
    [
        "aten.clone", "aten.copy_", "aten._to_copy", "aten.copy", "aten.cat", "aten.stack",
        "aten.constant_pad_nd", "aten.reflection_pad1d", "aten.reflection_pad2d",
        "aten.reflection_pad3d", "aten.replication_pad1d", "aten.replication_pad2d",
        "aten.replication_pad3d",
        "aten.index", "aten.index_select", "aten.gather", "aten.embedding",
        "aten.zeros", "aten.ones", "aten.full", "aten.zeros_like", "aten.ones_like",
        "aten.linspace", "aten.logspace",
        "aten.full_like", "aten.new_zeros", "aten.new_ones", "aten.new_full", "aten.arange",
        "aten.fill_", "aten.zero_", "aten.fill", "aten.scalar_tensor", "aten.tril", "aten.triu",
        "aten.slice_backward", "aten.select_backward", "aten.roll", "aten.flip", "aten.repeat",
        "aten.masked_select", "aten.index_put_", "aten.index_put", "aten.scatter",
        "aten.scatter_", "aten.select_scatter", "aten.slice_scatter", "aten.as_strided_scatter",
        "aten.pixel_shuffle", "aten.pixel_unshuffle", "aten.channel_shuffle",
        "aten.native_channel_shuffle",
        "aten.bernoulli_", "aten.bernoulli", "aten.uniform_", "aten.normal_", "aten.rand",
        "aten.randn", "aten.rand_like", "aten.randn_like", "aten.randperm",
        "aten.im2col", "aten.col2im",
        "aten.argmax", "aten.argmin", "aten.topk", "aten.sort",
        # max_unpool scatters each input to its recorded index; packing a padded batch into a
        # PackedSequence (and back) gathers rows: data movement only
        "aten.max_unpool2d", "aten.max_unpool3d", "aten._pack_padded_sequence",
        "aten._pad_packed_sequence",
    ],
    zero,
)


# ---------------------------------------------------------------- elementwise
def elementwise(k: int):
    """k FLOPs per element of the first output."""

    def handler(args, kwargs, out) -> OpCost:
        # out: any shape; cost = k * numel(out)
        return OpCost(flops=k * _first_out(out).numel)

    handler.__name__ = f"elementwise_{k}"
    return handler


ONE_FLOP_ELEMENTWISE = [
    "aten.add", "aten.add_", "aten.sub", "aten.sub_", "aten.rsub", "aten.mul", "aten.mul_",
    "aten.div", "aten.div_", "aten.neg", "aten.reciprocal", "aten.abs", "aten.sign",
    "aten.relu", "aten.relu_", "aten.relu6", "aten.leaky_relu", "aten.leaky_relu_",
    "aten.hardtanh", "aten.hardtanh_", "aten.hardswish", "aten.hardswish_", "aten.hardsigmoid",
    "aten.hardsigmoid_", "aten.sigmoid", "aten.sigmoid_", "aten.tanh", "aten.tanh_",
    "aten.gelu", "aten.gelu_", "aten.silu", "aten.silu_", "aten.mish", "aten.elu", "aten.elu_",
    "aten.softplus", "aten.exp", "aten.exp_", "aten.log", "aten.sqrt", "aten.rsqrt", "aten.pow",
    "aten.clamp", "aten.clamp_", "aten.clamp_min", "aten.clamp_min_", "aten.clamp_max",
    "aten.where", "aten.maximum", "aten.minimum", "aten.erf", "aten.sin", "aten.cos",
    "aten.masked_fill", "aten.masked_fill_", "aten.eq", "aten.ne", "aten.lt", "aten.le",
    "aten.gt", "aten.ge", "aten.logical_not", "aten.logical_and", "aten.logical_or",
    "aten.bitwise_not", "aten.bitwise_and", "aten.bitwise_or", "aten.bitwise_xor",
    "aten.floor", "aten.ceil", "aten.round", "aten.trunc",
    "aten.threshold", "aten.threshold_backward", "aten.sigmoid_backward", "aten.tanh_backward",
    "aten.gelu_backward", "aten.silu_backward", "aten.hardtanh_backward",
    "aten.hardswish_backward", "aten.hardsigmoid_backward", "aten.leaky_relu_backward",
    "aten.elu_backward", "aten.softplus_backward", "aten.native_dropout_backward",
    "aten.prelu", "aten._prelu_kernel", "aten.log_sigmoid_forward", "aten.glu",
    "aten.celu", "aten.celu_", "aten.hardshrink", "aten.softshrink", "aten.rrelu_with_noise",
    "aten.rrelu_with_noise_", "aten.sgn", "aten.mish_backward", "aten._prelu_kernel_backward",
    "aten.rrelu_with_noise_backward", "aten.log_sigmoid_backward", "aten.softshrink_backward",
    "aten.hardshrink_backward",
]
register(ONE_FLOP_ELEMENTWISE, elementwise(1))
# a*b+c, a+w*(b-a) and friends: two arithmetic ops per element.
register(["aten.addcmul", "aten.addcmul_", "aten.addcdiv", "aten.addcdiv_", "aten.lerp",
          "aten.lerp_"], elementwise(2))
# Dropout in training: draw the mask and scale (1 each) per element.
register("aten.native_dropout", elementwise(2))


# ---------------------------------------------------------------- reductions and pooling
def reduce_sum(args, kwargs, out) -> OpCost:
    # x: any shape -> reduced; one add per input element
    return OpCost(flops=args[0].numel)


def reduce_mean(args, kwargs, out) -> OpCost:
    # x: any shape -> reduced; one add per input element + one divide per output element
    return OpCost(flops=args[0].numel + _first_out(out).numel)


register(["aten.sum", "aten.amax", "aten.amin", "aten.max", "aten.min", "aten.prod",
          "aten.logsumexp", "aten.norm", "aten.linalg_vector_norm", "aten.any", "aten.all",
          "aten._is_all_true", "aten._is_any_true"],
         reduce_sum)
register(["aten.mean", "aten.var", "aten.std", "aten.var_mean", "aten.std_mean"], reduce_mean)


def _nll_arg(args, kwargs, at: int, name: str):
    return args[at] if len(args) > at else kwargs.get(name)


def nll_loss(args, kwargs, out) -> OpCost:
    # nll_loss_forward / nll_loss2d_forward(log_probs: (N, C, ...), target: (N, ...), weight,
    # reduction, ignore_index) -> (loss, total_weight): one add (sum) or negation (none) per
    # target, a class weight's multiply per target, + 1 divide for the mean (reduction 1)
    n = args[1].numel
    weighted = isinstance(_nll_arg(args, kwargs, 2, "weight"), TensorDesc)
    mean = _nll_arg(args, kwargs, 3, "reduction") == 1
    return OpCost(flops=n * (1 + weighted) + mean)


def nll_loss_backward(args, kwargs, out) -> OpCost:
    # nll_loss_backward / nll_loss2d_backward(grad, log_probs, target, weight, reduction,
    # ignore_index, total_weight) -> log_probs-shaped, zero but at the targets: one value per
    # target (-grad, divided by the total weight for the mean), a class weight's multiply
    n = args[2].numel
    weighted = isinstance(_nll_arg(args, kwargs, 3, "weight"), TensorDesc)
    return OpCost(flops=n * (1 + weighted))


register(["aten.nll_loss_forward", "aten.nll_loss2d_forward"], nll_loss)
register(["aten.nll_loss_backward", "aten.nll_loss2d_backward"], nll_loss_backward)


def _kernel_size(args, index: int, spatial: int) -> int:
    k = args[index]
    k = list(k) if isinstance(k, (list, tuple)) else [k]
    if len(k) == 1:
        k = k * spatial
    return math.prod(k)


def max_pool(args, kwargs, out) -> OpCost:
    # x: (N, C, *in), kernel_size -> (N, C, *out); one comparison per window element
    spatial = len(args[0].shape) - 2
    return OpCost(flops=_first_out(out).numel * _kernel_size(args, 1, spatial))


def avg_pool(args, kwargs, out) -> OpCost:
    # x: (N, C, *in), kernel_size -> (N, C, *out); window adds + one divide per output
    spatial = len(args[0].shape) - 2
    n_out = _first_out(out).numel
    return OpCost(flops=n_out * _kernel_size(args, 1, spatial) + n_out)


def adaptive_avg_pool(args, kwargs, out) -> OpCost:
    # x: (N, C, *in) -> (N, C, *out); every input element is added once (non-overlapping
    # windows when in divides by out) + one divide per output
    return OpCost(flops=args[0].numel + _first_out(out).numel)


def adaptive_max_pool(args, kwargs, out) -> OpCost:
    # x: (N, C, *in) -> (N, C, *out); one comparison per input element, no divide
    return OpCost(flops=args[0].numel)


def pool_backward(args, kwargs, out) -> OpCost:
    # grad_out, x -> grad_x: one add per grad_x element
    return OpCost(flops=_first_out(out).numel)


def pad_backward(args, kwargs, out) -> OpCost:
    # reflection/replication_pad*d_backward(grad_out: (N, C, *padded), x, padding) -> grad_x:
    # the interior is copied; every border element is added onto the element it mirrors or
    # repeats: numel(grad_out) - numel(grad_x) adds
    return OpCost(flops=args[0].numel - _first_out(out).numel)


register(["aten.max_pool2d_with_indices", "aten.max_pool3d_with_indices",
          "aten.max_pool1d", "aten.max_pool2d",
          # fractional_max_pool*d(x, kernel_size, output_size, random_samples): random window
          # starts, the same comparisons per window
          "aten.fractional_max_pool2d", "aten.fractional_max_pool3d"], max_pool)
register(["aten.avg_pool2d", "aten.avg_pool3d", "aten.avg_pool1d"], avg_pool)
register(["aten._adaptive_avg_pool2d", "aten.adaptive_avg_pool2d", "aten._adaptive_avg_pool3d",
          "aten.adaptive_avg_pool1d"], adaptive_avg_pool)
register(["aten.adaptive_max_pool2d", "aten.adaptive_max_pool1d", "aten.adaptive_max_pool3d"],
         adaptive_max_pool)
register(["aten.max_pool2d_with_indices_backward", "aten.avg_pool2d_backward",
          "aten._adaptive_avg_pool2d_backward", "aten.adaptive_max_pool2d_backward",
          "aten.max_pool3d_with_indices_backward", "aten.avg_pool3d_backward",
          "aten._adaptive_avg_pool3d_backward", "aten.fractional_max_pool2d_backward",
          "aten.fractional_max_pool3d_backward", "aten.adaptive_max_pool3d_backward",
          "aten.adaptive_max_pool1d_backward"], pool_backward)
register([f"aten.{kind}_pad{d}d_backward" for kind in ("reflection", "replication")
          for d in (1, 2, 3)], pad_backward)


# ---------------------------------------------------------------- resampling
# The interpolation rule (taps, blend FLOPs) lives in ops/rules.py, shared with onnx.py.
def upsample(interp: str, antialias: bool = False):
    def handler(args, kwargs, out) -> OpCost:
        # upsample_{nearest,linear,bilinear,bicubic,trilinear}*(x: (N, C, *in), output_size?,
        # [align_corners], scales...) -> (N, C, *out); align_corners moves the sample points,
        # not the number of taps
        return OpCost(flops=resample_flops(args[0].shape, _first_out(out).shape, interp,
                                           antialias))

    handler.__name__ = f"upsample_{interp}{'_aa' if antialias else ''}"
    return handler


def upsample_backward(interp: str, antialias: bool = False):
    def handler(args, kwargs, out) -> OpCost:
        # upsample_*_backward(grad_out: (N, C, *out), output_size, input_size, ...) -> grad_x:
        # every grad_out element is scattered to its taps: taps multiplies + taps adds
        # (a single tap: 1 add)
        grad_out, grad_x = args[0], _first_out(out)
        taps = resample_taps(grad_x.shape, grad_out.shape, interp, antialias)
        return OpCost(flops=grad_out.numel * (1 if taps == 1 else 2 * taps))

    handler.__name__ = f"upsample_{interp}{'_aa' if antialias else ''}_backward"
    return handler


# grid_sample's interpolation_mode: 0 bilinear (trilinear in 3-D), 1 nearest, 2 bicubic; every
# spatial axis is interpolated at the grid's points
GRID_MODES = {0: "linear", 1: "nearest", 2: "cubic"}


def _grid_taps(x: TensorDesc, mode) -> int:
    return TAPS_PER_AXIS[GRID_MODES.get(int(mode), "linear")] ** (len(x.shape) - 2)


def grid_sampler(args, kwargs, out) -> OpCost:
    # grid_sampler_{2,3}d(x: (N, C, *in), grid: (N, *out, dims), interpolation_mode,
    # padding_mode, align_corners) -> (N, C, *out): the resampling rule with every axis resized
    return OpCost(flops=blend_flops(_first_out(out).numel, _grid_taps(args[0], args[2])))


def grid_sampler_backward(args, kwargs, out) -> OpCost:
    # grid_sampler_{2,3}d_backward(grad_out: (N, C, *out), x, grid, interpolation_mode,
    # padding_mode, align_corners, output_mask) -> (grad_x?, grad_grid): per grad_out element
    # and gradient computed, taps multiplies + taps adds (grad_x scatters to the taps; grad_grid
    # weighs each tap's value by its weight's derivative)
    mask = args[6] if len(args) > 6 else (True, True)
    grads = int(bool(mask[0])) + 1
    return OpCost(flops=grads * args[0].numel * 2 * _grid_taps(args[1], args[3]))


def affine_grid(args, kwargs, out) -> OpCost:
    # affine_grid_generator(theta: (N, d, d+1), size, align_corners) -> grid: (N, *out, d):
    # every grid point is theta @ (x, y[, z], 1): numel(grid) * (d + 1) MACs
    macs = _first_out(out).numel * args[0].shape[-1]
    return OpCost(macs=macs, flops=2 * macs)


register(["aten.grid_sampler_2d", "aten.grid_sampler_3d"], grid_sampler)
register(["aten.grid_sampler_2d_backward", "aten.grid_sampler_3d_backward"],
         grid_sampler_backward)
register("aten.affine_grid_generator", affine_grid)


NEAREST = ["aten.upsample_nearest1d", "aten.upsample_nearest2d", "aten.upsample_nearest3d",
           "aten._upsample_nearest_exact1d", "aten._upsample_nearest_exact2d",
           "aten._upsample_nearest_exact3d"]
LINEAR = ["aten.upsample_linear1d", "aten.upsample_bilinear2d", "aten.upsample_trilinear3d"]
register(NEAREST, upsample("nearest"))
register(LINEAR, upsample("linear"))
register("aten.upsample_bicubic2d", upsample("cubic"))
register("aten._upsample_bilinear2d_aa", upsample("linear", antialias=True))
register("aten._upsample_bicubic2d_aa", upsample("cubic", antialias=True))
register([op + "_backward" for op in NEAREST], upsample_backward("nearest"))
register([op + "_backward" for op in LINEAR], upsample_backward("linear"))
register("aten.upsample_bicubic2d_backward", upsample_backward("cubic"))
register("aten._upsample_bilinear2d_aa_backward", upsample_backward("linear", antialias=True))
register("aten._upsample_bicubic2d_aa_backward", upsample_backward("cubic", antialias=True))


# ---------------------------------------------------------------- normalisation and softmax
# NORM_NORMALISE / NORM_APPLY / NORM_STATS and SOFTMAX: ops/rules.py (shared with onnx.py).


def _norm(x: TensorDesc, weight, bias, stats: bool) -> OpCost:
    affine = isinstance(weight, TensorDesc) + isinstance(bias, TensorDesc)
    per = NORM_NORMALISE + affine + (NORM_STATS if stats else 0)
    return OpCost(flops=per * x.numel)


def batch_norm(args, kwargs, out) -> OpCost:
    # native_batch_norm(x: (N, C, *), w?, b?, running_mean, running_var, training, momentum, eps)
    training = bool(args[5]) if len(args) > 5 else bool(kwargs.get("training", False))
    return _norm(args[0], args[1], args[2], training)


def batch_norm_no_stats(args, kwargs, out) -> OpCost:
    # _native_batch_norm_legit_no_training(x: (N, C, *), w?, b?, ...): normalise with running stats
    return _norm(args[0], args[1], args[2], False)


def batch_norm_legit(args, kwargs, out) -> OpCost:
    # _native_batch_norm_legit(x, w?, b?, running_mean?, running_var?, training, momentum, eps)
    training = bool(args[5]) if len(args) > 5 else True
    return _norm(args[0], args[1], args[2], training)


def batch_norm_legit_no_stats(args, kwargs, out) -> OpCost:
    # _native_batch_norm_legit.no_stats(x, w?, b?, training, momentum, eps): no running stats
    training = bool(args[3]) if len(args) > 3 else True
    return _norm(args[0], args[1], args[2], training)


def layer_norm(args, kwargs, out) -> OpCost:
    # native_layer_norm(x, normalized_shape, w?, b?, eps): statistics + normalise + affine
    return _norm(args[0], args[2], args[3], True)


def group_norm(args, kwargs, out) -> OpCost:
    # native_group_norm(x, w?, b?, N, C, HxW, group, eps): statistics + normalise + affine
    return _norm(args[0], args[1], args[2], True)


def rms_norm(args, kwargs, out) -> OpCost:
    # _fused_rms_norm(x, normalized_shape, w?, eps): charged as a LayerNorm with its weight
    return OpCost(flops=(NORM_APPLY + NORM_STATS) * args[0].numel)


def norm_backward(args, kwargs, out) -> OpCost:
    # native_*_norm_backward(grad_out: x-shaped, x, ..., output_mask) -> (dx, dw, db): dx 6,
    # dw 1, db 1 per element, each only when computed (a gradient the mask leaves out is None:
    # no weight or no bias, as the forward drops their FLOPs, or an input that needs none)
    dx, dw, db = (tuple(out) + (None, None, None))[:3]
    per = 6 * (dx is not None) + (dw is not None) + (db is not None)
    return OpCost(flops=per * args[0].numel)


def softmax(args, kwargs, out) -> OpCost:
    # _softmax(x: any, dim, half_to_float) -> x-shaped
    return OpCost(flops=SOFTMAX * args[0].numel)


def softmax_backward(args, kwargs, out) -> OpCost:
    # _softmax_backward_data(grad: x-shaped, out, dim, dtype): g*y, row sum, sub, mul
    return OpCost(flops=4 * args[0].numel)


register("aten.native_batch_norm", batch_norm)
register("aten._native_batch_norm_legit_no_training", batch_norm_no_stats)
register("aten._native_batch_norm_legit.no_stats", batch_norm_legit_no_stats)
register(["aten._native_batch_norm_legit", "aten._native_batch_norm_legit_functional"],
         batch_norm_legit)
register("aten.native_layer_norm", layer_norm)
register("aten.native_group_norm", group_norm)
register("aten._fused_rms_norm", rms_norm)
register(["aten.native_batch_norm_backward", "aten.native_layer_norm_backward",
          "aten.native_group_norm_backward"], norm_backward)
register(["aten._softmax", "aten._log_softmax", "aten._safe_softmax"], softmax)
register(["aten._softmax_backward_data", "aten._log_softmax_backward_data"], softmax_backward)


# ---------------------------------------------------------------- contractions
def mm_macs(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    # a: (m, k) @ b: (k, n): m*k*n (flop_counter.mm_flop / 2)
    return a[0] * a[1] * b[1]


def bmm_macs(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    # a: (B, m, k) @ b: (B, k, n): B*m*k*n (flop_counter.bmm_flop / 2)
    return a[0] * a[1] * a[2] * b[2]


def conv_macs(x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...],
              transposed: bool) -> int:
    # x: (N, C, *in), w: (w0, w1, *k), y: (N, C', *out): N * w0 * w1 * prod(k) * prod(out), the
    # input's spatial size instead of the output's when transposed (flop_counter.conv_flop_count
    # / 2)
    return x[0] * w[0] * w[1] * math.prod(w[2:]) * math.prod((x if transposed else y)[2:])


def sdpa_backward_macs(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...]) -> int:
    # q: (B, H, Lq, E), k: (B, Hkv, Lk, E), v: (B, Hkv, Lk, Ev): the recomputed scores (Lq*Lk*E),
    # dP and dV (Lq*Lk*Ev each), dQ and dK (Lq*Lk*E each), per query head
    # (flop_counter.sdpa_backward_flop_count / 2)
    b, h, lq, e = q
    return b * h * lq * k[-2] * (3 * e + 2 * v[-1])


def mm(args, kwargs, out) -> OpCost:
    # a: (m, k) @ b: (k, n) -> (m, n)
    macs = mm_macs(args[0].shape, args[1].shape)
    return OpCost(macs=macs, flops=2 * macs)


def addmm(args, kwargs, out) -> OpCost:
    # bias + a: (m, k) @ b: (k, n) -> (m, n); the bias add is m*n FLOPs, not MACs
    macs = mm_macs(args[1].shape, args[2].shape)
    return OpCost(macs=macs, flops=2 * macs + _first_out(out).numel)


def bmm(args, kwargs, out) -> OpCost:
    # a: (b, m, k) @ b: (b, k, n) -> (b, m, n)
    macs = bmm_macs(args[0].shape, args[1].shape)
    return OpCost(macs=macs, flops=2 * macs)


def baddbmm(args, kwargs, out) -> OpCost:
    # bias + a: (b, m, k) @ b: (b, k, n) -> (b, m, n)
    macs = bmm_macs(args[1].shape, args[2].shape)
    return OpCost(macs=macs, flops=2 * macs + _first_out(out).numel)


def dot(args, kwargs, out) -> OpCost:
    # a: (k,) . b: (k,) -> scalar; mv: (m, k) @ (k,) -> (m,)
    macs = args[0].numel
    return OpCost(macs=macs, flops=2 * macs)


def _conv(x: TensorDesc, w: TensorDesc, y: TensorDesc, has_bias: bool, transposed: bool) -> OpCost:
    # x: (N, Cin, *in), w: (Cout, Cin/g, *k) [transposed: (Cin, Cout/g, *k)] -> y: (N, Cout, *out).
    # MACs = N * Cout * prod(out) * Cin/g * prod(k);
    # transposed: N * Cin * prod(in) * Cout/g * prod(k)
    macs = conv_macs(x.shape, w.shape, y.shape, transposed)
    return OpCost(macs=macs, flops=2 * macs + (y.numel if has_bias else 0))


def convolution(args, kwargs, out) -> OpCost:
    # convolution / _convolution / convolution_overrideable(x, w, bias?, stride, padding,
    # dilation, transposed, output_padding, groups, ...)
    return _conv(args[0], args[1], _first_out(out), isinstance(args[2], TensorDesc), bool(args[6]))


def mkldnn_convolution(args, kwargs, out) -> OpCost:
    # mkldnn_convolution(x, w, bias?, padding, stride, dilation, groups): never transposed
    return _conv(args[0], args[1], _first_out(out), isinstance(args[2], TensorDesc), False)


def cudnn_convolution(transposed: bool):
    def handler(args, kwargs, out) -> OpCost:
        # cudnn_convolution[_transpose](x, w, padding, ...): no bias argument
        return _conv(args[0], args[1], _first_out(out), False, transposed)

    handler.__name__ = "cudnn_convolution_transpose" if transposed else "cudnn_convolution"
    return handler


def slow_conv2d(args, kwargs, out) -> OpCost:
    # _slow_conv2d_forward(x, w, kernel_size, bias?, stride, padding)
    return _conv(args[0], args[1], _first_out(out), isinstance(args[3], TensorDesc), False)


def convolution_backward(args, kwargs, out) -> OpCost:
    # grad_out: (N, Cout, *out), x, w, bias_sizes, stride, padding, dilation, transposed,
    # output_padding, groups, output_mask -> (grad_x?, grad_w?, grad_b?).
    # grad_x (a transposed convolution of grad_out) and grad_w (a convolution of x with grad_out)
    # each do exactly the forward's MACs, groups included: every product of the forward is
    # revisited once for each gradient. Forward MACs = numel(grad_out) * prod(w[1:]), or for a
    # transposed convolution numel(x) * prod(w[1:]). grad_b sums grad_out: 1 FLOP per element.
    # (flop_counter's conv_backward_flop ignores groups in its weight term, so it is not used.)
    grad_out, x, w, transposed, mask = args[0], args[1], args[2], bool(args[7]), args[10]
    per_weight = math.prod(w.shape[1:])
    forward = (x.numel if transposed else grad_out.numel) * per_weight
    macs = forward * (int(bool(mask[0])) + int(bool(mask[1])))
    bias_grad = grad_out.numel if mask[2] else 0
    return OpCost(macs=macs, flops=2 * macs + bias_grad)


register("aten.mm", mm)
register("aten.addmm", addmm)
register("aten.bmm", bmm)
register("aten.baddbmm", baddbmm)
register(["aten.dot", "aten.mv", "aten.vdot"], dot)
register(["aten.convolution", "aten._convolution", "aten.convolution_overrideable"], convolution)
register("aten.mkldnn_convolution", mkldnn_convolution)
register("aten.cudnn_convolution", cudnn_convolution(False))
register("aten.cudnn_convolution_transpose", cudnn_convolution(True))
register("aten._slow_conv2d_forward", slow_conv2d)
register("aten.convolution_backward", convolution_backward)


def _spanned(x: TensorDesc, expand, total: int) -> dict[int, int]:
    # x unsqueezed at `expand` to `total` dims -> {dim it spans: size}
    kept = [d for d in range(total) if d not in set(expand)]
    return dict(zip(kept, x.shape))


def trilinear(args, kwargs, out) -> OpCost:
    # _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim): each operand is
    # unsqueezed at its expand dims to one rank, and i1*i2*i3 is summed over sumdim. The kernel
    # contracts (i1 * i2) over the sumdims i3 lacks, then that with i3 over the rest; each step
    # costs prod(sizes of the dims its two operands span) MACs if it sums a dim, else that many
    # FLOPs (an elementwise product). nn.Bilinear, x1: (B, I), W: (O, I, J), x2: (B, J):
    # B*O*I*J (x1 W) + B*O*J (. x2) MACs (fvcore counts B*O*I*J; the second step is real work).
    ops = args[:3]
    total = len(ops[0].shape) + len(args[3])
    d1, d2, d3 = (_spanned(x, e, total) for x, e in zip(ops, args[3:6]))
    sizes: dict[int, int] = {}
    for d in (d1, d2, d3):
        for dim, n in d.items():
            sizes[dim] = max(sizes.get(dim, 1), n)
    sumdim = set(args[6])
    first = set(d1) | set(d2)
    summed_first = {d for d in sumdim & first if d not in d3}
    second = (first - summed_first) | set(d3)
    macs = flops = 0
    for dims, summed in ((first, summed_first), (second, sumdim - summed_first)):
        work = math.prod(sizes[d] for d in dims)
        if summed:
            macs += work
        else:
            flops += work
    return OpCost(macs=macs, flops=2 * macs + flops)


register("aten._trilinear", trilinear)


# ---------------------------------------------------------------- embeddings
# EmbeddingBag reduces the n looked-up rows of D into `bags` bags (mode 0 sum, 1 mean, 2 max):
# (n - bags) * D adds (max: comparisons); mean divides: + bags * D; per_sample_weights scale
# every row first: + n * D multiplies. The lookup itself is a gather: 0.
BAG_SUM, BAG_MEAN, BAG_MAX = 0, 1, 2


def embedding_bag(args, kwargs, out) -> OpCost:
    # _embedding_bag[_forward_only](weight: (V, D), indices: (n,), offsets: (B,), scale_grad,
    # mode, sparse, per_sample_weights?: (n,), include_last_offset, padding_idx)
    # -> (out: (bags, D), offset2bag, bag_size, max_indices)
    d, n = args[0].shape[1], args[1].numel
    y = _first_out(out)
    mode = int(args[4]) if len(args) > 4 else BAG_SUM
    flops = max(n - y.shape[0], 0) * d + (y.numel if mode == BAG_MEAN else 0)
    psw = args[6] if len(args) > 6 else kwargs.get("per_sample_weights")
    return OpCost(flops=flops + (n * d if isinstance(psw, TensorDesc) else 0))


def embedding_bag_backward(mode_at: int, psw_at: int):
    def handler(args, kwargs, out) -> OpCost:
        # _embedding_bag[_dense]_backward(grad: (bags, D), indices: (n,), ...) -> (V, D):
        # sum: each looked-up row accumulates its bag's gradient, n * D adds; mean also scales
        # by 1/bag_size, + n * D; max: only each bag's maxima receive it, bags * D adds;
        # per_sample_weights: + n * D multiplies
        grad, n = args[0], args[1].numel
        d = grad.shape[-1]
        mode = int(args[mode_at]) if len(args) > mode_at else BAG_SUM
        flops = {BAG_SUM: n * d, BAG_MEAN: 2 * n * d}.get(mode, grad.numel)
        psw = args[psw_at] if len(args) > psw_at else None
        return OpCost(flops=flops + (n * d if isinstance(psw, TensorDesc) else 0))

    handler.__name__ = "embedding_bag_backward"
    return handler


def embedding_bag_psw_backward(args, kwargs, out) -> OpCost:
    # _embedding_bag_per_sample_weights_backward(grad: (bags, D), weight: (V, D), indices: (n,),
    # ...) -> (n,): each sample's gradient is the dot product of its row and its bag's gradient
    macs = args[2].numel * args[1].shape[1]
    return OpCost(macs=macs, flops=2 * macs)


def embedding_backward(args, kwargs, out) -> OpCost:
    # embedding_dense_backward(grad_out: (..., D), indices, num_weights, padding_idx, scale):
    # every gradient row is added into its weight row: 1 add per grad_out element
    return OpCost(flops=args[0].numel)


register(["aten._embedding_bag", "aten._embedding_bag_forward_only"], embedding_bag)
register("aten._embedding_bag_backward", embedding_bag_backward(8, 10))
register("aten._embedding_bag_dense_backward", embedding_bag_backward(7, 8))
register("aten._embedding_bag_per_sample_weights_backward", embedding_bag_psw_backward)
register("aten.embedding_dense_backward", embedding_backward)


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


# ---------------------------------------------------------------- recurrent layers
# Per time step and batch element, a layer-direction with weights w_ih: (G*H, I), w_hh: (G*H, H)
# does G*H*I + G*H*H MACs (G = 4 LSTM, 3 GRU, 1 RNN), i.e. numel(w_ih) + numel(w_hh); so a
# whole RNN costs T * B * (sum of its 2-D weight matrices' sizes) MACs, on every path.
# Gate FLOPs per hidden unit and step (GATES, GATE_FLOPS): ops/rules.py (shared with onnx.py).
CUDNN_MODES = {0: "rnn", 1: "rnn", 2: "lstm", 3: "gru"}


def _rnn_cost(steps: int, weights: list[TensorDesc], kind: str, has_biases: bool) -> OpCost:
    matrices = [w for w in weights if isinstance(w, TensorDesc) and len(w.shape) == 2]
    macs = steps * sum(w.numel for w in matrices)
    gates = GATES[kind]
    # every w_ih (first of each layer-direction's pair) has G*H rows
    hidden_rows = sum(w.shape[0] for w in matrices[::2]) if matrices else 0
    hidden_units = hidden_rows // gates
    elementwise = steps * hidden_units * GATE_FLOPS[kind]
    bias = steps * 2 * hidden_rows if has_biases else 0
    return OpCost(macs=macs, flops=2 * macs + elementwise + bias)


def _steps(x: TensorDesc, batch_first: bool) -> int:
    # (T, B, I) or (B, T, I) or unbatched (T, I): time steps x batch
    return x.shape[0] * x.shape[1] if len(x.shape) == 3 else x.shape[0]


def aten_rnn(kind: str):
    def handler(args, kwargs, out) -> OpCost:
        # lstm.input(x: (T, B, I), hx[], params[], has_biases, num_layers, dropout, train, bidir,
        # batch_first); gru/rnn_*.input(x, hx, params[], has_biases, ...)
        return _rnn_cost(_steps(args[0], bool(args[8])), list(args[2]), kind, bool(args[3]))

    handler.__name__ = f"{kind}_layer"
    return handler


def aten_rnn_packed(kind: str):
    def handler(args, kwargs, out) -> OpCost:
        # lstm.data(data: (sum of batch sizes, I), batch_sizes, hx[], params[], has_biases, ...);
        # gru/rnn_*.data(data, batch_sizes, hx, params[], has_biases, ...): every packed row is
        # one (time step, sequence) pair
        return _rnn_cost(args[0].shape[0], list(args[3]), kind, bool(args[4]))

    handler.__name__ = f"{kind}_packed_layer"
    return handler


def mkldnn_rnn_layer(args, kwargs, out) -> OpCost:
    # mkldnn_rnn_layer(x: (T, B, I), w_ih: (G*H, I), w_hh: (G*H, H), b_ih, b_hh, hx, cx, reverse,
    # batch_sizes, mode, hidden_size, num_layers, has_biases, bidirectional, batch_first, train)
    kind = CUDNN_MODES.get(int(args[9]), "lstm")
    return _rnn_cost(_steps(args[0], bool(args[14])), [args[1], args[2]], kind, bool(args[12]))


def mkldnn_rnn_layer_backward(args, kwargs, out) -> OpCost:
    # (x, w_ih, w_hh, b_ih, b_hh, hx, cx, output, hy, cy, grad_out, grad_hy, grad_cy, reverse,
    # mode, hidden_size, num_layers, has_biases, train, bidirectional, batch_sizes, batch_first, ws)
    # Each projection's backward is a data-gradient and a weight-gradient product: 2 x forward MACs.
    kind = CUDNN_MODES.get(int(args[14]), "lstm")
    fwd = _rnn_cost(_steps(args[0], bool(args[21])), [args[1], args[2]], kind, bool(args[17]))
    return OpCost(macs=2 * fwd.macs, flops=2 * fwd.flops)


def cudnn_rnn(args, kwargs, out) -> OpCost:
    # _cudnn_rnn(x: (T, B, I), weights[], weight_stride0, weight_buf, hx, cx, mode, hidden, proj,
    # num_layers, batch_first, dropout, train, bidirectional, batch_sizes, dropout_state)
    weights = list(args[1])
    has_biases = len(weights) > 2 and any(isinstance(w, TensorDesc) and len(w.shape) == 1
                                          for w in weights)
    return _rnn_cost(_steps(args[0], bool(args[10])), weights,
                     CUDNN_MODES.get(int(args[6]), "lstm"), has_biases)


def fused_cell(kind: str):
    def handler(args, kwargs, out) -> OpCost:
        # _thnn_fused_{lstm,gru}_cell(input_gates: (B, G*H), hidden_gates: (B, G*H), ...):
        # the projections were already done by mm; only the gate arithmetic remains
        rows = args[0].shape[-1]
        batch = args[0].numel // rows
        units = rows // GATES[kind]
        bias = 2 * rows * batch if len(args) > 3 and isinstance(args[3], TensorDesc) else 0
        return OpCost(flops=batch * units * GATE_FLOPS[kind] + bias)

    handler.__name__ = f"fused_{kind}_cell"
    return handler


register("aten.lstm.input", aten_rnn("lstm"))
register("aten.gru.input", aten_rnn("gru"))
register(["aten.rnn_tanh.input", "aten.rnn_relu.input"], aten_rnn("rnn"))
register("aten.lstm.data", aten_rnn_packed("lstm"))
register("aten.gru.data", aten_rnn_packed("gru"))
register(["aten.rnn_tanh.data", "aten.rnn_relu.data"], aten_rnn_packed("rnn"))
register("aten.mkldnn_rnn_layer", mkldnn_rnn_layer)
register("aten.mkldnn_rnn_layer_backward", mkldnn_rnn_layer_backward)
register("aten._cudnn_rnn", cudnn_rnn)
register("aten._thnn_fused_lstm_cell", fused_cell("lstm"))
register("aten._thnn_fused_gru_cell", fused_cell("gru"))
