"""Aten cost handlers: reductions, losses, normalisation and softmax.

Conventions (formulas, what a FLOP is): ``layerscope/ops/aten.py``.
"""
from __future__ import annotations

from layerscope.ops.aten_base import first_out, register
from layerscope.ops.registry import OpCost, TensorDesc
from layerscope.ops.rules import NORM_APPLY, NORM_NORMALISE, NORM_STATS, SOFTMAX


# ---------------------------------------------------------------- reductions and losses
def reduce_sum(args, kwargs, out) -> OpCost:
    # x: any shape -> reduced; one add per input element
    return OpCost(flops=args[0].numel)


def reduce_mean(args, kwargs, out) -> OpCost:
    # x: any shape -> reduced; one add per input element + one divide per output element
    return OpCost(flops=args[0].numel + first_out(out).numel)


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
