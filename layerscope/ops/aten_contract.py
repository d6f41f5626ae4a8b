"""Aten cost handlers: contractions (matrix products, convolutions, bilinear).

Conventions (formulas, what a FLOP is): ``layerscope/ops/aten.py``.
"""
from __future__ import annotations

import math

from layerscope.ops.aten_base import first_out, register
from layerscope.ops.registry import OpCost, TensorDesc


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


def mm(args, kwargs, out) -> OpCost:
    # a: (m, k) @ b: (k, n) -> (m, n)
    macs = mm_macs(args[0].shape, args[1].shape)
    return OpCost(macs=macs, flops=2 * macs)


def addmm(args, kwargs, out) -> OpCost:
    # bias + a: (m, k) @ b: (k, n) -> (m, n); the bias add is m*n FLOPs, not MACs
    macs = mm_macs(args[1].shape, args[2].shape)
    return OpCost(macs=macs, flops=2 * macs + first_out(out).numel)


def bmm(args, kwargs, out) -> OpCost:
    # a: (b, m, k) @ b: (b, k, n) -> (b, m, n)
    macs = bmm_macs(args[0].shape, args[1].shape)
    return OpCost(macs=macs, flops=2 * macs)


def baddbmm(args, kwargs, out) -> OpCost:
    # bias + a: (b, m, k) @ b: (b, k, n) -> (b, m, n)
    macs = bmm_macs(args[1].shape, args[2].shape)
    return OpCost(macs=macs, flops=2 * macs + first_out(out).numel)


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
    return _conv(args[0], args[1], first_out(out), isinstance(args[2], TensorDesc), bool(args[6]))


def mkldnn_convolution(args, kwargs, out) -> OpCost:
    # mkldnn_convolution(x, w, bias?, padding, stride, dilation, groups): never transposed
    return _conv(args[0], args[1], first_out(out), isinstance(args[2], TensorDesc), False)


def cudnn_convolution(transposed: bool):
    def handler(args, kwargs, out) -> OpCost:
        # cudnn_convolution[_transpose](x, w, padding, ...): no bias argument
        return _conv(args[0], args[1], first_out(out), False, transposed)

    handler.__name__ = "cudnn_convolution_transpose" if transposed else "cudnn_convolution"
    return handler


def slow_conv2d(args, kwargs, out) -> OpCost:
    # _slow_conv2d_forward(x, w, kernel_size, bias?, stride, padding)
    return _conv(args[0], args[1], first_out(out), isinstance(args[3], TensorDesc), False)


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
