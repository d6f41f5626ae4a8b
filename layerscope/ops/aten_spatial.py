"""Aten cost handlers: pooling, padding gradients and resampling.

Conventions (formulas, what a FLOP is): ``layerscope/ops/aten.py``.
"""
from __future__ import annotations

import math

from layerscope.ops.aten_base import first_out, register
from layerscope.ops.registry import OpCost, TensorDesc
from layerscope.ops.rules import TAPS_PER_AXIS, blend_flops, resample_flops, resample_taps


# ---------------------------------------------------------------- pooling
def _kernel_size(args, index: int, spatial: int) -> int:
    k = args[index]
    k = list(k) if isinstance(k, (list, tuple)) else [k]
    if len(k) == 1:
        k = k * spatial
    return math.prod(k)


def max_pool(args, kwargs, out) -> OpCost:
    # x: (N, C, *in), kernel_size -> (N, C, *out); one comparison per window element
    spatial = len(args[0].shape) - 2
    return OpCost(flops=first_out(out).numel * _kernel_size(args, 1, spatial))


def avg_pool(args, kwargs, out) -> OpCost:
    # x: (N, C, *in), kernel_size -> (N, C, *out); window adds + one divide per output
    spatial = len(args[0].shape) - 2
    n_out = first_out(out).numel
    return OpCost(flops=n_out * _kernel_size(args, 1, spatial) + n_out)


def adaptive_avg_pool(args, kwargs, out) -> OpCost:
    # x: (N, C, *in) -> (N, C, *out); every input element is added once (non-overlapping
    # windows when in divides by out) + one divide per output
    return OpCost(flops=args[0].numel + first_out(out).numel)


def adaptive_max_pool(args, kwargs, out) -> OpCost:
    # x: (N, C, *in) -> (N, C, *out); one comparison per input element, no divide
    return OpCost(flops=args[0].numel)


def pool_backward(args, kwargs, out) -> OpCost:
    # grad_out, x -> grad_x: one add per grad_x element
    return OpCost(flops=first_out(out).numel)


def pad_backward(args, kwargs, out) -> OpCost:
    # reflection/replication_pad*d_backward(grad_out: (N, C, *padded), x, padding) -> grad_x:
    # the interior is copied; every border element is added onto the element it mirrors or
    # repeats: numel(grad_out) - numel(grad_x) adds
    return OpCost(flops=args[0].numel - first_out(out).numel)


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
        return OpCost(flops=resample_flops(args[0].shape, first_out(out).shape, interp,
                                           antialias))

    handler.__name__ = f"upsample_{interp}{'_aa' if antialias else ''}"
    return handler


def upsample_backward(interp: str, antialias: bool = False):
    def handler(args, kwargs, out) -> OpCost:
        # upsample_*_backward(grad_out: (N, C, *out), output_size, input_size, ...) -> grad_x:
        # every grad_out element is scattered to its taps: taps multiplies + taps adds
        # (a single tap: 1 add)
        grad_out, grad_x = args[0], first_out(out)
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
    return OpCost(flops=blend_flops(first_out(out).numel, _grid_taps(args[0], args[2])))


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
    macs = first_out(out).numel * args[0].shape[-1]
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
