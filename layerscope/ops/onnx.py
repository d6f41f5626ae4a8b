"""Cost handlers for ONNX operators, keyed by (domain, op_type, since_version).

The rules mirror ``layerscope/ops/aten.py`` so that a model costs the same exported or not
(docs/definitions.md):
- MACs count contractions only (Conv, ConvTranspose, Gemm, MatMul, Einsum, Attention, RNN gates'
  projections); FLOPs = 2 x MACs + the op's other arithmetic; bias adds are FLOPs.
- Elementwise ops cost 1 FLOP per output element; BatchNormalization 4 per element (inference);
  Layer/Group/Instance/RMS normalisation 8; Softmax 5; max-pool 1 per window element; average
  pool 1 per window element + 1 per output; sums 1 per input element, means + 1 per output.
- Data movement (Transpose, Concat, Slice, Gather, Pad, Expand, Cast, ...) costs 0 FLOPs but
  moves bytes. Transpose is a real copy in onnxruntime, so it reads and writes its tensor (unlike
  torch's ``permute`` view, whose cost shows up in the ``contiguous`` copy that follows).
- Reshape, Flatten, Squeeze, Unsqueeze, Identity and inference Dropout are views: no FLOPs, no
  traffic, no new tensor (onnxruntime reuses the input buffer).

A handler is ``handler(ins, outs, attrs) -> OpCost``: ``ins``/``outs`` are lists of
:class:`~layerscope.ops.registry.TensorDesc` (``None`` for an omitted optional input), ``attrs`` the
node's attributes as Python values. Its first comment gives the shapes it reads.

``since_version`` is the first opset from which a registration applies; most cost rules do not
depend on the version and are registered at 1. Versions matter where an attribute became an
input (Clip 11, Reshape 5, Squeeze/Unsqueeze 13, ReduceX 18, ...): those inputs are declared
``constants`` so that an initializer there is never counted as a parameter.
"""
from __future__ import annotations

import math

from layerscope.ops import rules
from layerscope.ops.registry import COMPUTE, VIEW, OpCost, TensorDesc, VersionedHandlerTable

ONNX = VersionedHandlerTable("onnx")
CONSTANT = "constant"  # a Constant node: its output is resident data, like an initializer
ZERO = OpCost()
MS = "com.microsoft"  # onnxruntime's contrib operators


def register(op_types, since: int, handler, *, domain: str = "", kind: str = COMPUTE,
             constants: tuple[int, ...] = (), buffers: tuple[int, ...] = ()) -> None:
    for op in [op_types] if isinstance(op_types, str) else op_types:
        ONNX.register(op, since, handler, domain=domain, kind=kind, constants=constants,
                      buffers=buffers)


def _out(outs) -> TensorDesc:
    return outs[0]


# ---------------------------------------------------------------- zero cost: views, copies
def zero(ins, outs, attrs) -> OpCost:
    # any shapes: no arithmetic (views, copies, indexing, shape queries)
    return ZERO


register("Constant", 1, zero, kind=CONSTANT)
register(["Reshape", "Squeeze", "Unsqueeze"], 1, zero, kind=VIEW)
register("Reshape", 5, zero, kind=VIEW, constants=(1,))
register(["Squeeze", "Unsqueeze"], 13, zero, kind=VIEW, constants=(1,))
register(["Flatten", "Identity", "Dropout"], 1, zero, kind=VIEW)
register("Dropout", 12, zero, kind=VIEW, constants=(1, 2))  # ratio, training_mode

register(["Transpose", "Concat", "Gather", "GatherElements", "GatherND", "Scatter",
          "ScatterElements", "ScatterND", "Cast", "CastLike", "Shape", "Size", "Range",
          "EyeLike", "OneHot", "NonZero", "ArgMax", "ArgMin", "Unique", "DepthToSpace",
          "SpaceToDepth", "Trilu", "Compress", "ReverseSequence", "Split", "Slice", "Pad",
          "Tile", "TopK"], 1, zero)
register("ConstantOfShape", 9, zero, constants=(0,))
register("Expand", 8, zero, constants=(1,))
register("Tile", 6, zero, constants=(1,))  # repeats
register("Slice", 10, zero, constants=(1, 2, 3, 4))  # starts, ends, axes, steps
register("Pad", 11, zero, constants=(1, 2, 3))  # pads, constant_value, axes
register("Split", 13, zero, constants=(1,))
register("TopK", 10, zero, constants=(1,))
register("MaxUnpool", 9, zero, constants=(2,))  # scatter to recorded indices; output_shape


# ---------------------------------------------------------------- elementwise
def elementwise(k: int):
    """k FLOPs per element of the first output."""

    def handler(ins, outs, attrs) -> OpCost:
        # out: any shape; cost = k * numel(out)
        return OpCost(flops=k * _out(outs).numel)

    handler.__name__ = f"elementwise_{k}"
    return handler


def variadic(ins, outs, attrs) -> OpCost:
    # Sum/Max/Min(x1, ..., xn) -> out (broadcast): n - 1 binary ops per output element
    n = sum(1 for x in ins if x is not None)
    return OpCost(flops=max(n - 1, 0) * _out(outs).numel)


def variadic_mean(ins, outs, attrs) -> OpCost:
    # Mean(x1, ..., xn) -> out: n - 1 adds + 1 divide per output element
    n = sum(1 for x in ins if x is not None)
    return OpCost(flops=n * _out(outs).numel)


ONE_FLOP_ELEMENTWISE = [
    "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh",
    "Exp", "Log", "Sqrt", "Reciprocal", "Pow", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan",
    "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Floor", "Ceil", "Round", "Sign", "Equal", "Less",
    "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "Where",
    "HardSigmoid", "HardSwish", "Elu", "Selu", "Celu", "Softplus", "Softsign", "Mish",
    "ThresholdedRelu", "Shrink", "Mod", "IsNaN", "IsInf", "BitShift", "BitwiseAnd", "BitwiseOr",
    "BitwiseXor", "BitwiseNot", "Gelu", "Clip", "CumSum",
]
register(ONE_FLOP_ELEMENTWISE, 1, elementwise(1))
register("Clip", 11, elementwise(1), constants=(1, 2))  # min, max became inputs
register(["Sum", "Max", "Min"], 1, variadic)
register("Mean", 1, variadic_mean)


# ---------------------------------------------------------------- reductions and pooling
def reduce_sum(ins, outs, attrs) -> OpCost:
    # x: any shape -> reduced; one add (compare, multiply) per input element
    return OpCost(flops=ins[0].numel)


def reduce_mean(ins, outs, attrs) -> OpCost:
    # x: any shape -> reduced; one add per input element + one divide per output element
    return OpCost(flops=ins[0].numel + _out(outs).numel)


def max_pool(ins, outs, attrs) -> OpCost:
    # x: (N, C, *in), kernel_shape -> (N, C, *out); one comparison per window element
    return OpCost(flops=_out(outs).numel * math.prod(attrs["kernel_shape"]))


def avg_pool(ins, outs, attrs) -> OpCost:
    # x: (N, C, *in), kernel_shape -> (N, C, *out); window adds + one divide per output
    n_out = _out(outs).numel
    return OpCost(flops=n_out * math.prod(attrs["kernel_shape"]) + n_out)


def global_avg_pool(ins, outs, attrs) -> OpCost:
    # x: (N, C, *in) -> (N, C, 1, ...); every input element added once + one divide per output
    # (aten's adaptive_avg_pool rule)
    return OpCost(flops=ins[0].numel + _out(outs).numel)


REDUCE_SUM_LIKE = ["ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                   "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
register(REDUCE_SUM_LIKE + ["ReduceSum"], 1, reduce_sum)
register("ReduceSum", 13, reduce_sum, constants=(1,))  # axes became an input
register(REDUCE_SUM_LIKE, 18, reduce_sum, constants=(1,))
register("ReduceMean", 1, reduce_mean)
register("ReduceMean", 18, reduce_mean, constants=(1,))
register("MaxPool", 1, max_pool)
register("AveragePool", 1, avg_pool)
register("GlobalAveragePool", 1, global_avg_pool)
register("GlobalMaxPool", 1, reduce_sum)


# ---------------------------------------------------------------- resampling
# Resize / Upsample(mode: nearest | linear | cubic; bilinear in Upsample-1): aten's rule
# (rules.resample_flops): numel(out) * (2*taps - 1), taps = product over resized axes of 1 / 2 / 4,
# antialiased downsampling widening each axis to ceil(taps * in/out); nearest is a copy (0).
INTERPOLATION = {"nearest": "nearest", "linear": "linear", "bilinear": "linear",
                 "cubic": "cubic", "bicubic": "cubic"}


def resize(ins, outs, attrs) -> OpCost:
    # x: (N, C, *in), roi?, scales?, sizes? -> (N, C, *out)
    interp = INTERPOLATION.get(attrs.get("mode", "nearest"), "nearest")
    return OpCost(flops=rules.resample_flops(ins[0].shape, _out(outs).shape, interp,
                                       bool(attrs.get("antialias", 0))))


def grid_sample(ins, outs, attrs) -> OpCost:
    # GridSample(x: (N, C, *in), grid: (N, *out, dims)) -> (N, C, *out); mode bilinear | nearest |
    # bicubic (opset 16), linear | nearest | cubic (20): every spatial axis interpolated, as
    # aten's grid_sampler
    interp = INTERPOLATION.get(attrs.get("mode", "linear"), "linear")
    taps = rules.TAPS_PER_AXIS[interp] ** (len(ins[0].shape) - 2)
    return OpCost(flops=rules.blend_flops(_out(outs).numel, taps))


def affine_grid(ins, outs, attrs) -> OpCost:
    # AffineGrid(theta: (N, d, d+1), size) -> (N, *out, d): numel(grid) * (d + 1) MACs
    macs = _out(outs).numel * ins[0].shape[-1]
    return OpCost(macs=macs, flops=2 * macs)


register(["Resize", "Upsample"], 1, resize)
register("GridSample", 16, grid_sample)
register("AffineGrid", 20, affine_grid, constants=(1,))  # size
register("Upsample", 9, resize, constants=(1,))  # scales
register("Resize", 10, resize, constants=(1,))  # scales
register("Resize", 11, resize, constants=(1, 2, 3))  # roi, scales, sizes


# ---------------------------------------------------------------- normalisation and softmax
def batch_norm(ins, outs, attrs) -> OpCost:
    # x: (N, C, *), scale, B, mean, var: (C,); inference normalise + affine = 4/elem,
    # training_mode=1 also computes the statistics (+4/elem)
    per = rules.NORM_APPLY + (rules.NORM_STATS if attrs.get("training_mode", 0) else 0)
    return OpCost(flops=per * ins[0].numel)


def norm_with_stats(ins, outs, attrs) -> OpCost:
    # Group/Instance/RMS normalisation(x: any, scale, bias): statistics + apply = 8/elem
    return OpCost(flops=(rules.NORM_APPLY + rules.NORM_STATS) * ins[0].numel)


def layer_norm(ins, outs, attrs) -> OpCost:
    # LayerNormalization(x: any, scale, B?): statistics 4 + normalise 2 + scale 1 + bias 1 if
    # present per element (aten's native_layer_norm rule)
    has_bias = len(ins) > 2 and ins[2] is not None
    return OpCost(flops=(rules.NORM_STATS + rules.NORM_NORMALISE + 1 + has_bias) * ins[0].numel)


def softmax(ins, outs, attrs) -> OpCost:
    # x: any -> x-shaped; max, subtract, exp, sum, divide = 5/elem
    return OpCost(flops=rules.SOFTMAX * ins[0].numel)


register("BatchNormalization", 1, batch_norm, buffers=(3, 4))  # running mean, var: buffers
register(["InstanceNormalization", "GroupNormalization", "RMSNormalization"], 1, norm_with_stats)
register("LayerNormalization", 1, layer_norm)
register(["Softmax", "LogSoftmax"], 1, softmax)


# ---------------------------------------------------------------- contractions
def _conv(x: TensorDesc, w: TensorDesc, y: TensorDesc, has_bias: bool, transposed: bool) -> OpCost:
    # x: (N, Cin, *in), w: (Cout, Cin/g, *k) [transposed: (Cin, Cout/g, *k)] -> y: (N, Cout, *out).
    # MACs = N * Cout * prod(out) * Cin/g * prod(k) = numel(y) * prod(w[1:]);
    # transposed: N * Cin * prod(in) * Cout/g * prod(k) = numel(x) * prod(w[1:]).
    # Groups and dilation need no term of their own: they are in w's shape and y's shape.
    per_weight = math.prod(w.shape[1:])
    macs = (x.numel if transposed else y.numel) * per_weight
    return OpCost(macs=macs, flops=2 * macs + (y.numel if has_bias else 0))


def conv(ins, outs, attrs) -> OpCost:
    # Conv(x, w, B?)
    return _conv(ins[0], ins[1], _out(outs), len(ins) > 2 and ins[2] is not None, False)


def conv_transpose(ins, outs, attrs) -> OpCost:
    # ConvTranspose(x, w: (Cin, Cout/g, *k), B?)
    return _conv(ins[0], ins[1], _out(outs), len(ins) > 2 and ins[2] is not None, True)


def conv_integer(ins, outs, attrs) -> OpCost:
    # ConvInteger(x, w, x_zero_point?, w_zero_point?): no bias
    return _conv(ins[0], ins[1], _out(outs), False, False)


def qlinear_conv(ins, outs, attrs) -> OpCost:
    # QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?)
    return _conv(ins[0], ins[3], _out(outs), len(ins) > 8 and ins[8] is not None, False)


def _matmul_macs(a: TensorDesc, y: TensorDesc) -> int:
    # a: (..., m, k) or (k,) @ b -> y (numpy broadcasting): every output element is a k-long
    # dot product, so MACs = numel(y) * k
    return y.numel * a.shape[-1]


def matmul(ins, outs, attrs) -> OpCost:
    # MatMul / MatMulInteger(a: (..., m, k), b: (..., k, n)) -> (..., m, n)
    macs = _matmul_macs(ins[0], _out(outs))
    return OpCost(macs=macs, flops=2 * macs)


def qlinear_matmul(ins, outs, attrs) -> OpCost:
    # QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)
    macs = _matmul_macs(ins[0], _out(outs))
    return OpCost(macs=macs, flops=2 * macs)


def gemm(ins, outs, attrs) -> OpCost:
    # Gemm(A: (M, K) or (K, M) if transA, B: (K, N) or (N, K) if transB, C?) -> (M, N).
    # MACs = M*N*K; the C add is 1 FLOP per output (aten's addmm); alpha != 1 scales the product
    # and beta != 1 scales C: 1 FLOP per output each.
    a, y = ins[0], _out(outs)
    k = a.shape[0] if attrs.get("transA", 0) else a.shape[1]
    macs = y.numel * k
    has_c = len(ins) > 2 and ins[2] is not None
    extra = (y.numel if has_c else 0) + (y.numel if attrs.get("alpha", 1.0) != 1.0 else 0)
    extra += y.numel if has_c and attrs.get("beta", 1.0) != 1.0 else 0
    return OpCost(macs=macs, flops=2 * macs + extra)


register("Conv", 1, conv)
register("ConvTranspose", 1, conv_transpose)
register("ConvInteger", 10, conv_integer, constants=(2, 3))
register("QLinearConv", 10, qlinear_conv, constants=(1, 2, 4, 5, 6, 7))
register(["MatMul"], 1, matmul)
register("MatMulInteger", 10, matmul, constants=(2, 3))
register("QLinearMatMul", 10, qlinear_matmul, constants=(1, 2, 4, 5, 6, 7))
register("Gemm", 1, gemm)


# ---------------------------------------------------------------- einsum
def _einsum_terms(equation: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str, dict]:
    """Letters per operand and of the output, with '...' expanded to one placeholder letter per
    broadcast dimension (aligned from the right), and each letter's size."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    ell = max((len(s) - (len(t) - 3) for t, s in zip(terms, shapes) if "..." in t), default=0)
    placeholders = "".join(chr(0x100 + i) for i in range(ell))
    expanded, sizes = [], {}
    for term, shape in zip(terms, shapes):
        if "..." in term:
            n = len(shape) - (len(term) - 3)
            term = term.replace("...", placeholders[ell - n:])
        expanded.append(term)
        for letter, size in zip(term, shape):
            sizes[letter] = max(sizes.get(letter, 1), size)
    if arrow:
        out = rhs.replace("...", placeholders)
    else:  # implicit output: broadcast dims, then letters used once, alphabetically
        counts = {c: "".join(expanded).count(c) for c in sizes}
        out = placeholders + "".join(sorted(c for c, n in counts.items()
                                            if n == 1 and c not in placeholders))
    return expanded, out, sizes


def einsum(ins, outs, attrs) -> OpCost:
    # Einsum(x1, ..., xn; equation). Contracted left to right (torch.einsum's default order):
    # each pairwise step that sums a letter costs prod(sizes of the letters involved) MACs; a step
    # that sums nothing (outer or elementwise product) costs that many FLOPs. One operand:
    # 1 add per input element if a letter is summed, else a copy.
    xs = [x for x in ins if x is not None]
    terms, out, sizes = _einsum_terms(attrs["equation"], [x.shape for x in xs])
    if len(terms) == 1:
        summed = set(terms[0]) - set(out)
        return OpCost(flops=xs[0].numel if summed else 0)
    macs = flops = 0
    current = set(terms[0])
    for i in range(1, len(terms)):
        union = current | set(terms[i])
        needed = set(out).union(*map(set, terms[i + 1:]))
        work = math.prod(sizes[c] for c in union)
        if union - needed:
            macs += work
        else:
            flops += work
        current = union & needed
    return OpCost(macs=macs, flops=2 * macs + flops)


register("Einsum", 12, einsum)


# ---------------------------------------------------------------- attention (opset 23)
def attention(ins, outs, attrs) -> OpCost:
    # Attention(Q, K, V, mask?, past_key?, past_value?): 4-D Q: (B, Hq, Lq, E), K: (B, Hkv, Lk, E),
    # V: (B, Hkv, Lk, Ev); 3-D Q: (B, Lq, Hq*E), K: (B, Lk, Hkv*E), V: (B, Lk, Hkv*Ev) with
    # q_num_heads / kv_num_heads. MACs = B*Hq*Lq*Lk*(E + Ev) (scores and values, as aten's SDPA);
    # FLOPs add the scale and the softmax per score (aten's rules.ATTN_PER_SCORE).
    q, k, v = ins[0], ins[1], ins[2]
    if len(q.shape) == 4:
        b, hq, lq, e = q.shape
        lk, ev = k.shape[2], v.shape[3]
    else:
        hq, hkv = attrs["q_num_heads"], attrs["kv_num_heads"]
        b, lq = q.shape[0], q.shape[1]
        e, lk, ev = q.shape[2] // hq, k.shape[1], v.shape[2] // hkv
    past = ins[4] if len(ins) > 4 else None
    if past is not None:  # the cache is concatenated before the product
        lk += past.shape[2]
    scores = b * hq * lq * lk
    macs = scores * (e + ev)
    return OpCost(macs=macs, flops=2 * macs + rules.ATTN_PER_SCORE * scores)


register("Attention", 23, attention)


# ---------------------------------------------------------------- recurrent layers
def recurrent(kind: str):
    def handler(ins, outs, attrs) -> OpCost:
        # X: (T, B, I) [layout 1: (B, T, I)], W: (D, G*H, I), R: (D, G*H, H), B?: (D, 2*G*H).
        # As aten's RNN rule: MACs = T*B*(numel(W) + numel(R)); gate arithmetic
        # rules.GATE_FLOPS[kind] per hidden unit and step; biases 2*G*H per direction and step.
        x, w, r = ins[0], ins[1], ins[2]
        steps = x.shape[0] * x.shape[1]
        macs = steps * (w.numel + r.numel)
        hidden_rows = w.shape[0] * w.shape[1]
        units = hidden_rows // rules.GATES[kind]
        bias = steps * 2 * hidden_rows if len(ins) > 3 and ins[3] is not None else 0
        return OpCost(macs=macs, flops=2 * macs + steps * units * rules.GATE_FLOPS[kind] + bias)

    handler.__name__ = f"onnx_{kind}"
    return handler


register("LSTM", 1, recurrent("lstm"), constants=(4,))  # sequence_lens
register("GRU", 1, recurrent("gru"), constants=(4,))
register("RNN", 1, recurrent("rnn"), constants=(4,))


# ---------------------------------------------------------------- onnxruntime contrib ops
def fused_conv(ins, outs, attrs) -> OpCost:
    # com.microsoft FusedConv(x, w, B?, Z?): Conv + optional sum input Z + activation, 1/elem each
    cost = conv(ins[:3], outs, attrs)
    y = _out(outs).numel
    has_z = len(ins) > 3 and ins[3] is not None
    extra = (y if has_z else 0) + (y if attrs.get("activation") else 0)
    return OpCost(cost.macs, cost.flops + extra)


def fused_matmul(ins, outs, attrs) -> OpCost:
    # com.microsoft FusedMatMul(a, b; transA, transB, alpha): MatMul + alpha scaling (1/elem)
    a, y = ins[0], _out(outs)
    k = a.shape[-2] if attrs.get("transA", 0) else a.shape[-1]
    macs = y.numel * k
    return OpCost(macs, 2 * macs + (y.numel if attrs.get("alpha", 1.0) != 1.0 else 0))


def bias_then(k: int):
    def handler(ins, outs, attrs) -> OpCost:
        # x, bias? -> x-shaped: k/elem + 1/elem for the bias add
        n = _out(outs).numel
        return OpCost(flops=k * n + (n if len(ins) > 1 and ins[1] is not None else 0))

    handler.__name__ = f"bias_then_{k}"
    return handler


register("FusedConv", 1, fused_conv, domain=MS)
register("FusedMatMul", 1, fused_matmul, domain=MS)
register(["Gelu", "FastGelu", "BiasGelu", "QuickGelu"], 1, bias_then(1), domain=MS)
