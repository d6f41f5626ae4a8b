"""Aten cost handlers: elementwise ops.

Conventions (formulas, what a FLOP is): ``layerscope/ops/aten.py``.
"""
from __future__ import annotations

from layerscope.ops.aten_base import first_out, register
from layerscope.ops.registry import OpCost


# ---------------------------------------------------------------- elementwise
def elementwise(k: int):
    """k FLOPs per element of the first output."""

    def handler(args, kwargs, out) -> OpCost:
        # out: any shape; cost = k * numel(out)
        return OpCost(flops=k * first_out(out).numel)

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
