"""Handler tables: every aten handler called directly on shape descriptions.

Each case gives the op, its arguments as the aten schema orders them (tensors as ``T(shape)``,
a ``TensorDesc``), its outputs, and the expected MACs and FLOPs derived by hand beside the case.
Conventions (docs/design.md, "Counting"): MACs count contractions only; FLOPs = 2 x MACs +
everything else; bias adds are FLOPs, not MACs.
"""
from __future__ import annotations

import pytest

from layerscope.ops.aten import ATEN
from layerscope.ops.registry import ALLOC, COMPUTE, VIEW, HandlerTable, OpCost
from layerscope.ops.registry import TensorDesc as T  # short: the case tables hold hundreds


def cost(op: str, args: tuple, out, kwargs: dict | None = None) -> OpCost:
    entry = ATEN.lookup(op)
    assert entry is not None, f"{op} is not registered"
    return entry.handler(tuple(args), kwargs or {}, out)


def xfail(reason: str):
    return pytest.mark.xfail(strict=True, reason=reason)


def case(id, op, args, out, macs, flops, marks=()):
    return pytest.param(op, args, out, macs, flops, id=id, marks=marks)


def check(op, args, out, macs, flops):
    got = cost(op, args, out)
    assert (got.macs, got.flops) == (macs, flops)


# ------------------------------------------------------------------ matrix products
# mm(a: (m, k), b: (k, n)); addmm(bias, a, b); bmm(a: (b, m, k), b: (b, k, n)); baddbmm(bias, a, b)
MATMUL_CASES = [
    case("mm", "aten.mm", (T((3, 4)), T((4, 5))), T((3, 5)),
         macs=3 * 5 * 4,  # m*n*k
         flops=2 * 3 * 5 * 4),
    case("addmm-bias-flops", "aten.addmm", (T((5,)), T((3, 4)), T((4, 5))), T((3, 5)),
         macs=3 * 5 * 4,  # m*n*k
         flops=2 * 3 * 5 * 4 + 3 * 5),  # 2*MACs + one bias add per output element
    case("bmm", "aten.bmm", (T((2, 3, 4)), T((2, 4, 5))), T((2, 3, 5)),
         macs=2 * 3 * 5 * 4,  # b*m*n*k
         flops=2 * 2 * 3 * 5 * 4),
    case("baddbmm-bias-flops", "aten.baddbmm", (T((2, 3, 5)), T((2, 3, 4)), T((2, 4, 5))),
         T((2, 3, 5)),
         macs=2 * 3 * 5 * 4,  # b*m*n*k
         flops=2 * 2 * 3 * 5 * 4 + 2 * 3 * 5),  # + one add per output element
    case("mv", "aten.mv", (T((6, 7)), T((7,))), T((6,)),
         macs=6 * 7,  # m*k
         flops=2 * 6 * 7),
    case("dot", "aten.dot", (T((7,)), T((7,))), T(()),
         macs=7, flops=2 * 7),
]


@pytest.mark.parametrize("op,args,out,macs,flops", MATMUL_CASES)
def test_matrix_products(op, args, out, macs, flops):
    check(op, args, out, macs, flops)


# ------------------------------------------------------------------ convolution
# convolution(x, w, bias?, stride, padding, dilation, transposed, output_padding, groups)
def conv_args(x, w, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
              transposed=False, output_padding=(0, 0), groups=1):
    return (T(x), T(w), T(bias) if bias else None, list(stride), list(padding), list(dilation),
            transposed, list(output_padding), groups)


CONV_CASES = [
    case("plain-3x3", "aten.convolution",
         conv_args((1, 3, 8, 8), (4, 3, 3, 3), padding=(1, 1)), T((1, 4, 8, 8)),
         macs=1 * 4 * 8 * 8 * 3 * 3 * 3,  # N*Cout*Hout*Wout*Cin*kh*kw
         flops=2 * (1 * 4 * 8 * 8 * 3 * 3 * 3)),
    case("bias", "aten.convolution",
         conv_args((1, 3, 8, 8), (4, 3, 3, 3), bias=(4,), padding=(1, 1)), T((1, 4, 8, 8)),
         macs=1 * 4 * 8 * 8 * 3 * 3 * 3,
         flops=2 * (1 * 4 * 8 * 8 * 3 * 3 * 3) + 1 * 4 * 8 * 8),  # + one add per output
    case("grouped-g2", "aten.convolution",
         conv_args((1, 4, 8, 8), (6, 2, 3, 3), padding=(1, 1), groups=2), T((1, 6, 8, 8)),
         macs=1 * 6 * 8 * 8 * (4 // 2) * 3 * 3,  # N*Cout*Hout*Wout*(Cin/g)*kh*kw
         flops=2 * (1 * 6 * 8 * 8 * 2 * 3 * 3)),
    case("depthwise", "aten.convolution",
         conv_args((2, 4, 8, 8), (4, 1, 3, 3), padding=(1, 1), groups=4), T((2, 4, 8, 8)),
         macs=2 * 4 * 8 * 8 * 1 * 3 * 3,  # N*C*Hout*Wout*1*kh*kw
         flops=2 * (2 * 4 * 8 * 8 * 3 * 3)),
    case("dilated-d2", "aten.convolution",
         conv_args((1, 3, 9, 9), (4, 3, 3, 3), dilation=(2, 2)), T((1, 4, 5, 5)),
         macs=1 * 4 * 5 * 5 * 3 * 3 * 3,  # Hout = 9 - 2*(3-1) = 5
         flops=2 * (1 * 4 * 5 * 5 * 3 * 3 * 3)),
    case("strided-s2", "aten.convolution",
         conv_args((1, 3, 8, 8), (4, 3, 3, 3), stride=(2, 2), padding=(1, 1)), T((1, 4, 4, 4)),
         macs=1 * 4 * 4 * 4 * 3 * 3 * 3,  # Hout = (8 + 2 - 3)//2 + 1 = 4
         flops=2 * (1 * 4 * 4 * 4 * 3 * 3 * 3)),
    case("transposed-2d", "aten.convolution",
         conv_args((1, 4, 5, 5), (4, 6, 3, 3), bias=(6,), stride=(2, 2), transposed=True),
         T((1, 6, 11, 11)),
         # every input pixel scatters Cout*kh*kw products: N*Cin*Hin*Win*Cout*kh*kw
         macs=1 * 4 * 5 * 5 * 6 * 3 * 3,
         flops=2 * (1 * 4 * 5 * 5 * 6 * 3 * 3) + 1 * 6 * 11 * 11),  # + bias per output
    case("transposed-2d-grouped", "aten.convolution",
         conv_args((1, 4, 5, 5), (4, 3, 3, 3), stride=(2, 2), transposed=True, groups=2),
         T((1, 6, 11, 11)),
         macs=1 * 4 * 5 * 5 * (6 // 2) * 3 * 3,  # N*Cin*Hin*Win*(Cout/g)*kh*kw
         flops=2 * (1 * 4 * 5 * 5 * 3 * 3 * 3)),
    case("conv1d", "aten.convolution",
         (T((2, 3, 10)), T((5, 3, 3)), None, [1], [0], [1], False, [0], 1), T((2, 5, 8)),
         macs=2 * 5 * 8 * 3 * 3,  # N*Cout*Lout*Cin*k
         flops=2 * (2 * 5 * 8 * 3 * 3)),
    case("conv3d", "aten.convolution",
         (T((1, 2, 4, 4, 4)), T((3, 2, 3, 3, 3)), T((3,)), [1, 1, 1], [1, 1, 1], [1, 1, 1],
          False, [0, 0, 0], 1), T((1, 3, 4, 4, 4)),
         macs=1 * 3 * 4 * 4 * 4 * 2 * 3 * 3 * 3,  # N*Cout*Dout*Hout*Wout*Cin*kd*kh*kw
         flops=2 * (1 * 3 * 4 * 4 * 4 * 2 * 27) + 1 * 3 * 4 * 4 * 4),
    # _convolution shares convolution's first nine arguments (+ benchmark, deterministic, ...)
    case("_convolution-alias", "aten._convolution",
         conv_args((1, 3, 8, 8), (4, 3, 3, 3), stride=(2, 2), padding=(1, 1))
         + (False, False, True, True), T((1, 4, 4, 4)),
         macs=1 * 4 * 4 * 4 * 3 * 3 * 3,
         flops=2 * (1 * 4 * 4 * 4 * 3 * 3 * 3)),
    # mkldnn_convolution(self, weight, bias?, padding, stride, dilation, groups): no `transposed`
    # argument; args[6] is `groups`, which the handler reads as `transposed`.
    case("mkldnn_convolution-strided", "aten.mkldnn_convolution",
         (T((1, 3, 8, 8)), T((4, 3, 3, 3)), None, [1, 1], [2, 2], [1, 1], 1), T((1, 4, 4, 4)),
         macs=1 * 4 * 4 * 4 * 3 * 3 * 3,  # N*Cout*Hout*Wout*Cin*kh*kw
         flops=2 * (1 * 4 * 4 * 4 * 3 * 3 * 3)),
    # cudnn_convolution(self, weight, padding, stride, dilation, groups, benchmark, ...):
    # no bias; args[6] is `benchmark`.
    case("cudnn_convolution-benchmark", "aten.cudnn_convolution",
         (T((1, 3, 8, 8)), T((4, 3, 3, 3)), [1, 1], [2, 2], [1, 1], 1, True, False, True),
         T((1, 4, 4, 4)),
         macs=1 * 4 * 4 * 4 * 3 * 3 * 3,
         flops=2 * (1 * 4 * 4 * 4 * 3 * 3 * 3)),
    # _slow_conv2d_forward(self, weight, kernel_size, bias?, stride, padding): 6 arguments.
    case("_slow_conv2d_forward-bias", "aten._slow_conv2d_forward",
         (T((1, 3, 8, 8)), T((4, 3, 3, 3)), [3, 3], T((4,)), [1, 1], [1, 1]), T((1, 4, 8, 8)),
         macs=1 * 4 * 8 * 8 * 3 * 3 * 3,
         flops=2 * (1 * 4 * 8 * 8 * 3 * 3 * 3) + 1 * 4 * 8 * 8),
]


@pytest.mark.parametrize("op,args,out,macs,flops", CONV_CASES)
def test_convolution(op, args, out, macs, flops):
    check(op, args, out, macs, flops)


# convolution_backward(grad_out, x, w, bias_sizes, stride, padding, dilation, transposed,
#                      output_padding, groups, output_mask) -> (grad_x?, grad_w?, grad_b?)
# Each forward MAC x*w -> y appears once in grad_x (gy*w) and once in grad_w (gy*x): each of
# those products costs exactly the forward MACs F. grad_b sums grad_out: 1 add per element.
def conv_bwd_args(gy, x, w, groups=1, mask=(True, True, True), stride=(1, 1), padding=(1, 1),
                  transposed=False, bias=True):
    return (T(gy), T(x), T(w), [w[1] * groups if transposed else w[0]] if bias else None,
            list(stride), list(padding), [1, 1], transposed, [0, 0], groups, list(mask))


F_PLAIN = 1 * 4 * 8 * 8 * 3 * 3 * 3  # forward: N*Cout*Hout*Wout*Cin*kh*kw = 6912
F_GROUPED = 1 * 6 * 8 * 8 * (4 // 2) * 3 * 3  # N*Cout*Hout*Wout*(Cin/g)*kh*kw = 6912
F_DEPTHWISE = 1 * 4 * 8 * 8 * 1 * 3 * 3  # 2304
F_TRANSPOSED = 1 * 4 * 5 * 5 * 6 * 3 * 3  # N*Cin*Hin*Win*Cout*kh*kw = 5400

CONV_BWD_CASES = [
    case("input+weight+bias", "aten.convolution_backward",
         conv_bwd_args((1, 4, 8, 8), (1, 3, 8, 8), (4, 3, 3, 3)),
         (T((1, 3, 8, 8)), T((4, 3, 3, 3)), T((4,))),
         macs=F_PLAIN + F_PLAIN,  # grad_x + grad_w
         flops=2 * (2 * F_PLAIN) + 1 * 4 * 8 * 8),  # + grad_b: one add per grad_out element
    case("weight+bias-only", "aten.convolution_backward",
         conv_bwd_args((1, 4, 8, 8), (1, 3, 8, 8), (4, 3, 3, 3), mask=(False, True, True)),
         (None, T((4, 3, 3, 3)), T((4,))),
         macs=F_PLAIN,  # grad_w only (first layer: the input needs no grad)
         flops=2 * F_PLAIN + 1 * 4 * 8 * 8),
    case("input-only", "aten.convolution_backward",
         conv_bwd_args((1, 4, 8, 8), (1, 3, 8, 8), (4, 3, 3, 3), mask=(True, False, False),
                       bias=False),
         (T((1, 3, 8, 8)), None, None),
         macs=F_PLAIN, flops=2 * F_PLAIN),
    case("transposed", "aten.convolution_backward",
         conv_bwd_args((1, 6, 11, 11), (1, 4, 5, 5), (4, 6, 3, 3), stride=(2, 2),
                       padding=(0, 0), transposed=True),
         (T((1, 4, 5, 5)), T((4, 6, 3, 3)), T((6,))),
         macs=F_TRANSPOSED + F_TRANSPOSED,
         flops=2 * (2 * F_TRANSPOSED) + 1 * 6 * 11 * 11),
    case("grouped-g2", "aten.convolution_backward",
         conv_bwd_args((1, 6, 8, 8), (1, 4, 8, 8), (6, 2, 3, 3), groups=2),
         (T((1, 4, 8, 8)), T((6, 2, 3, 3)), T((6,))),
         macs=F_GROUPED + F_GROUPED,
         flops=2 * (2 * F_GROUPED) + 1 * 6 * 8 * 8),
    case("depthwise-weight-only", "aten.convolution_backward",
         conv_bwd_args((1, 4, 8, 8), (1, 4, 8, 8), (4, 1, 3, 3), groups=4,
                       mask=(False, True, False), bias=False),
         (None, T((4, 1, 3, 3)), None),
         macs=F_DEPTHWISE, flops=2 * F_DEPTHWISE),
]


@pytest.mark.parametrize("op,args,out,macs,flops", CONV_BWD_CASES)
def test_convolution_backward(op, args, out, macs, flops):
    check(op, args, out, macs, flops)


# ------------------------------------------------------------------ attention
# Per score element (B*H*Lq*Lk of them): E MACs for q.k, Ev MACs for p.v; 1 scale multiply and
# a 5-FLOP softmax (max-compare, subtract, exp, sum, divide).
B, H, LQ, LK, E, EV = 2, 4, 5, 6, 8, 3
SCORES = B * H * LQ * LK
SDPA_MACS = SCORES * (E + EV)
SDPA_FLOPS = 2 * SDPA_MACS + SCORES * (1 + 5)
HQ, HKV = 8, 2  # grouped-query attention: 4 query heads share each key/value head
GQA_SCORES = B * HQ * LQ * LK  # every query head scores against its shared key head
GQA_MACS = GQA_SCORES * (E + E)
GQA_FLOPS = 2 * GQA_MACS + GQA_SCORES * 6

SDPA_FORWARD_OPS = [
    "aten._scaled_dot_product_flash_attention_for_cpu",
    "aten._scaled_dot_product_flash_attention",
    "aten._scaled_dot_product_efficient_attention",
    "aten._scaled_dot_product_cudnn_attention",
    "aten._scaled_dot_product_fused_attention_overrideable",
]


@pytest.mark.parametrize("op", SDPA_FORWARD_OPS, ids=lambda op: op.split("._")[-1])
@pytest.mark.parametrize("q,k,v,macs,flops", [
    pytest.param((B, H, LQ, E), (B, H, LK, E), (B, H, LK, EV), SDPA_MACS, SDPA_FLOPS, id="mha"),
    pytest.param((B, HQ, LQ, E), (B, HKV, LK, E), (B, HKV, LK, E), GQA_MACS, GQA_FLOPS,
                 id="gqa"),
])
def test_sdpa_forward(op, q, k, v, macs, flops):
    # all kernels take (query, key, value, ...) as their first three arguments
    out = (T(q[:3] + v[3:]), T(q[:3]))
    check(op, (T(q), T(k), T(v), 0.0, False), out, macs, flops)


SDPA_BACKWARD_OPS = [
    "aten._scaled_dot_product_flash_attention_for_cpu_backward",
    "aten._scaled_dot_product_flash_attention_backward",
    "aten._scaled_dot_product_efficient_attention_backward",
    "aten._scaled_dot_product_cudnn_attention_backward",
]
# Backward: recompute S = q.k (E), dP = dO.v (Ev), dV = P^T.dO (Ev), dQ = dS.k (E),
# dK = dS^T.q (E) -> per score element 3E + 2Ev MACs; FLOPs add the forward's 6 per score
# and 4 for the softmax gradient.
SDPA_BWD_MACS = SCORES * (3 * E + 2 * EV)
SDPA_BWD_FLOPS = 2 * SDPA_BWD_MACS + SCORES * (6 + 4)
GQA_BWD_MACS = GQA_SCORES * (3 * E + 2 * E)
GQA_BWD_FLOPS = 2 * GQA_BWD_MACS + GQA_SCORES * 10


@pytest.mark.parametrize("op", SDPA_BACKWARD_OPS, ids=lambda op: op.split("._")[-1])
@pytest.mark.parametrize("q,k,v,macs,flops", [
    pytest.param((B, H, LQ, E), (B, H, LK, E), (B, H, LK, EV), SDPA_BWD_MACS, SDPA_BWD_FLOPS,
                 id="mha"),
    pytest.param((B, HQ, LQ, E), (B, HKV, LK, E), (B, HKV, LK, E), GQA_BWD_MACS,
                 GQA_BWD_FLOPS, id="gqa"),
])
def test_sdpa_backward(op, q, k, v, macs, flops):
    grad_out = T(q[:3] + v[3:])
    # (grad_out, query, key, value, ...) on every backward kernel
    args = (grad_out, T(q), T(k), T(v), grad_out, T(q[:3]))
    check(op, args, (T(q), T(k), T(v)), macs, flops)


def mha_args(lq, lk, emb, heads, in_bias=True, out_bias=True):
    # _native_multi_head_attention(q, k, v, embed_dim, num_head, qkv_weight, qkv_bias,
    #                              proj_weight, proj_bias, mask, need_weights, average, mask_type)
    return (T((2, lq, emb)), T((2, lk, emb)), T((2, lk, emb)), emb, heads,
            T((3 * emb, emb)), T((3 * emb,)) if in_bias else None, T((emb, emb)),
            T((emb,)) if out_bias else None, None, False, True, None)


# B=2, E=8, 2 heads of 4: in-projections (Lq+Lk+Lv)*E*E, out-projection Lq*E*E,
# scores and values 2*H*Lq*Lk*(E/H) = 2*Lq*Lk*E, all times B.
MHA_SELF_MACS = 2 * (3 * 3 * 8 * 8 + 3 * 8 * 8 + 2 * 2 * 3 * 3 * 4)  # Lq = Lk = 3
MHA_SELF_FLOPS = (2 * MHA_SELF_MACS + 2 * 3 * 3 * 8  # in-proj bias on q, k, v
                  + 2 * 3 * 8  # out-proj bias
                  + 2 * 2 * 3 * 3 * 6)  # scale + softmax per score (B*H*Lq*Lk scores)
MHA_CROSS_MACS = 2 * ((3 + 5 + 5) * 8 * 8 + 3 * 8 * 8 + 2 * 2 * 3 * 5 * 4)  # Lq=3, Lk=Lv=5
MHA_CROSS_FLOPS = (2 * MHA_CROSS_MACS + 2 * (3 + 5 + 5) * 8 + 2 * 3 * 8 + 2 * 2 * 3 * 5 * 6)


@pytest.mark.parametrize("args,macs,flops", [
    pytest.param(mha_args(3, 3, 8, 2), MHA_SELF_MACS, MHA_SELF_FLOPS, id="self-attention"),
    pytest.param(mha_args(3, 5, 8, 2), MHA_CROSS_MACS, MHA_CROSS_FLOPS, id="cross-attention"),
    pytest.param(mha_args(3, 3, 8, 2, in_bias=False, out_bias=False), MHA_SELF_MACS,
                 2 * MHA_SELF_MACS + 2 * 2 * 3 * 3 * 6, id="no-bias"),
])
def test_native_multi_head_attention(args, macs, flops):
    check("aten._native_multi_head_attention", args, (T((2, 3, 8)), T((2, 3, 3))), macs, flops)


def test_transformer_encoder_layer_fwd():
    # _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_w, qkv_b, proj_w, proj_b,
    #   use_gelu, norm_first, eps, ln1_w, ln1_b, ln2_w, ln2_b, ffn1_w, ffn1_b, ffn2_w, ffn2_b)
    b, l, e, f = 2, 3, 8, 16  # noqa: E741 - the einsum letters
    args = (T((b, l, e)), e, 2, T((3 * e, e)), T((3 * e,)), T((e, e)), T((e,)), False, False,
            1e-5, T((e,)), T((e,)), T((e,)), T((e,)), T((f, e)), T((f,)), T((e, f)), T((e,)),
            None, None)
    tokens = b * l
    ffn_macs = tokens * e * f + tokens * f * e  # linear1 E->F, linear2 F->E
    macs = MHA_SELF_MACS + ffn_macs
    flops = (MHA_SELF_FLOPS + 2 * ffn_macs
             + tokens * f + tokens * e  # FFN biases
             + tokens * f  # activation
             + 2 * 8 * tokens * e  # two LayerNorms, 8 FLOPs per element (stats 4 + apply 4)
             + 2 * tokens * e)  # two residual adds
    check("aten._transformer_encoder_layer_fwd", args, T((b, l, e)), macs, flops)


# ------------------------------------------------------------------ recurrent layers
# T=3 steps, B=2, input I=4, hidden H=5. One layer-direction step per batch element does
# G*H*I + G*H*H MACs (G = 4 LSTM, 3 GRU, 1 RNN). Gate FLOPs per hidden unit and step:
# LSTM 13, GRU 11, RNN 2; with biases, 2*G*H adds per step.
STEPS = 3 * 2  # T * B


def w(rows, cols=None):
    return T((rows, cols)) if cols else T((rows,))


def lstm_dir(i, h=5):  # w_ih, w_hh, b_ih, b_hh
    return [w(4 * h, i), w(4 * h, h), w(4 * h), w(4 * h)]


LSTM_BIDIR_MACS = STEPS * 2 * (4 * 5 * 4 + 4 * 5 * 5)  # 2 directions
LSTM_BIDIR_FLOPS = (2 * LSTM_BIDIR_MACS + STEPS * 2 * 5 * 13  # gates, 2 directions x H
                    + STEPS * 2 * 2 * 4 * 5)  # biases: 2 directions x 2*G*H
GRU_NOBIAS_MACS = STEPS * (3 * 5 * 4 + 3 * 5 * 5)
RNN_MACS = STEPS * (5 * 4 + 5 * 5)
# mkldnn_rnn_layer / _cudnn_rnn expect the cudnn mode numbers: 0 relu, 1 tanh, 2 LSTM, 3 GRU.
LSTM_1L_MACS = STEPS * (4 * 5 * 4 + 4 * 5 * 5)
LSTM_1L_FLOPS = 2 * LSTM_1L_MACS + STEPS * 5 * 13 + STEPS * 2 * 4 * 5
GRU_2L_MACS = STEPS * ((3 * 5 * 4 + 3 * 5 * 5) + (3 * 5 * 5 + 3 * 5 * 5))  # layer 1 input is H
GRU_2L_FLOPS = 2 * GRU_2L_MACS + STEPS * 2 * 5 * 11 + STEPS * 2 * 2 * 3 * 5

RNN_CASES = [
    case("lstm-bidirectional", "aten.lstm.input",
         (T((3, 2, 4)), [T((2, 2, 5)), T((2, 2, 5))], lstm_dir(4) + lstm_dir(4), True, 1, 0.0,
          False, True, False), (T((3, 2, 10)), T((2, 2, 5)), T((2, 2, 5))),
         macs=LSTM_BIDIR_MACS, flops=LSTM_BIDIR_FLOPS),
    case("lstm-batch-first", "aten.lstm.input",
         (T((2, 3, 4)), [T((1, 2, 5)), T((1, 2, 5))], lstm_dir(4), True, 1, 0.0, False, False,
          True), (T((2, 3, 5)), T((1, 2, 5)), T((1, 2, 5))),
         macs=LSTM_1L_MACS, flops=LSTM_1L_FLOPS),
    case("lstm-unbatched", "aten.lstm.input",
         (T((3, 4)), [T((1, 5)), T((1, 5))], lstm_dir(4), True, 1, 0.0, False, False, False),
         (T((3, 5)), T((1, 5)), T((1, 5))),
         macs=3 * (4 * 5 * 4 + 4 * 5 * 5),  # T steps only
         flops=2 * 3 * (4 * 5 * 4 + 4 * 5 * 5) + 3 * 5 * 13 + 3 * 2 * 4 * 5),
    case("gru-no-bias", "aten.gru.input",
         (T((3, 2, 4)), T((1, 2, 5)), [w(15, 4), w(15, 5)], False, 1, 0.0, False, False, False),
         (T((3, 2, 5)), T((1, 2, 5))),
         macs=GRU_NOBIAS_MACS, flops=2 * GRU_NOBIAS_MACS + STEPS * 5 * 11),
    case("rnn_tanh", "aten.rnn_tanh.input",
         (T((3, 2, 4)), T((1, 2, 5)), [w(5, 4), w(5, 5), w(5), w(5)], True, 1, 0.0, False,
          False, False), (T((3, 2, 5)), T((1, 2, 5))),
         macs=RNN_MACS, flops=2 * RNN_MACS + STEPS * 5 * 2 + STEPS * 2 * 5),
    # lstm.data(data: (sum of lengths, I), batch_sizes, hx[], params[], has_biases, ...):
    # a PackedSequence of lengths 3 and 3 is 6 tokens.
    case("lstm-packed-sequence", "aten.lstm.data",
         (T((6, 4)), T((3,), "int64", 8), [T((1, 2, 5)), T((1, 2, 5))], lstm_dir(4), True, 1,
          0.0, False, False), (T((6, 5)), T((1, 2, 5)), T((1, 2, 5))),
         macs=LSTM_1L_MACS, flops=LSTM_1L_FLOPS),
    case("mkldnn_rnn_layer-lstm", "aten.mkldnn_rnn_layer",
         (T((3, 2, 4)), w(20, 4), w(20, 5), w(20), w(20), T((2, 5)), T((2, 5)), False, [], 2,
          5, 1, True, False, False, False), (T((3, 2, 5)), T((2, 5)), T((2, 5)), T((0,))),
         macs=LSTM_1L_MACS, flops=LSTM_1L_FLOPS),
    case("mkldnn_rnn_layer_backward-lstm", "aten.mkldnn_rnn_layer_backward",
         (T((3, 2, 4)), w(20, 4), w(20, 5), w(20), w(20), T((2, 5)), T((2, 5)), T((3, 2, 5)),
          T((2, 5)), T((2, 5)), T((3, 2, 5)), T((2, 5)), T((2, 5)), False, 2, 5, 1, True, True,
          False, [], False, T((0,))),
         (T((3, 2, 4)), w(20, 4), w(20, 5), w(20), w(20), T((2, 5)), T((2, 5))),
         # a data gradient and a weight gradient per projection: 2 x forward
         macs=2 * LSTM_1L_MACS, flops=2 * LSTM_1L_FLOPS),
    case("_cudnn_rnn-gru-2-layers", "aten._cudnn_rnn",
         (T((3, 2, 4)), [w(15, 4), w(15, 5), w(15), w(15), w(15, 5), w(15, 5), w(15), w(15)],
          4, None, T((2, 2, 5)), None, 3, 5, 0, 2, False, 0.0, False, False, [], None),
         (T((3, 2, 5)), T((2, 2, 5)), T((0,)), T((0,)), T((0,))),
         macs=GRU_2L_MACS, flops=GRU_2L_FLOPS),
    # _thnn_fused_*_cell(input_gates: (B, G*H), hidden_gates, cx/hx, input_bias?, hidden_bias?):
    # the projections are separate mm ops, only gate arithmetic (and biases) remain.
    case("_thnn_fused_lstm_cell-bias", "aten._thnn_fused_lstm_cell",
         (T((2, 20)), T((2, 20)), T((2, 5)), w(20), w(20)), (T((2, 5)), T((2, 5)), T((2, 20))),
         macs=0, flops=2 * 5 * 13 + 2 * 2 * 20),  # B*H*13 + B*(2*G*H)
    case("_thnn_fused_lstm_cell-no-bias", "aten._thnn_fused_lstm_cell",
         (T((2, 20)), T((2, 20)), T((2, 5))), (T((2, 5)), T((2, 5)), T((2, 20))),
         macs=0, flops=2 * 5 * 13),
    case("_thnn_fused_gru_cell-bias", "aten._thnn_fused_gru_cell",
         (T((2, 15)), T((2, 15)), T((2, 5)), w(15), w(15)), (T((2, 5)), T((2, 25))),
         macs=0, flops=2 * 5 * 11 + 2 * 2 * 15),
]


@pytest.mark.parametrize("op,args,out,macs,flops", RNN_CASES)
def test_recurrent(op, args, out, macs, flops):
    check(op, args, out, macs, flops)


# ------------------------------------------------------------------ normalisation, softmax
X = (2, 3, 4, 4)  # 96 elements
N_X = 2 * 3 * 4 * 4
STATS3 = (T((3,)), T((3,)))

NORM_CASES = [
    # native_batch_norm(x, w, b, running_mean, running_var, training, momentum, eps)
    case("batch_norm-eval", "aten.native_batch_norm",
         (T(X), T((3,)), T((3,)), T((3,)), T((3,)), False, 0.1, 1e-5), (T(X),) + STATS3,
         macs=0, flops=4 * N_X),  # (x - mean) * invstd * w + b
    case("batch_norm-training", "aten.native_batch_norm",
         (T(X), T((3,)), T((3,)), T((3,)), T((3,)), True, 0.1, 1e-5), (T(X),) + STATS3,
         macs=0, flops=(4 + 4) * N_X),  # + mean (1) and variance (3) per element
    case("_native_batch_norm_legit_no_training", "aten._native_batch_norm_legit_no_training",
         (T(X), T((3,)), T((3,)), T((3,)), T((3,)), 0.1, 1e-5), (T(X), T((0,)), T((0,))),
         macs=0, flops=4 * N_X),
    case("_native_batch_norm_legit-training", "aten._native_batch_norm_legit",
         (T(X), T((3,)), T((3,)), T((3,)), T((3,)), True, 0.1, 1e-5), (T(X),) + STATS3,
         macs=0, flops=8 * N_X),
    # _native_batch_norm_legit.no_stats(x, w, b, training, momentum, eps): training is args[3]
    case("_native_batch_norm_legit.no_stats-eval", "aten._native_batch_norm_legit.no_stats",
         (T(X), T((3,)), T((3,)), False, 0.1, 1e-5), (T(X),) + STATS3,
         macs=0, flops=4 * N_X),
    case("layer_norm", "aten.native_layer_norm",
         (T((2, 3, 8)), [8], T((8,)), T((8,)), 1e-5), (T((2, 3, 8)), T((2, 3, 1)), T((2, 3, 1))),
         macs=0, flops=8 * 2 * 3 * 8),  # statistics 4 + apply 4 per element
    case("group_norm", "aten.native_group_norm",
         (T(X), T((3,)), T((3,)), 2, 3, 16, 3, 1e-5), (T(X), T((2, 3)), T((2, 3))),
         macs=0, flops=8 * N_X),
    case("layer_norm_backward", "aten.native_layer_norm_backward",
         (T((2, 3, 8)), T((2, 3, 8)), [8], T((2, 3, 1)), T((2, 3, 1)), T((8,)), T((8,)),
          [True, True, True]), (T((2, 3, 8)), T((8,)), T((8,))),
         macs=0, flops=(6 + 1 + 1) * 2 * 3 * 8),  # dx 6, dw 1, db 1 per element
    # F.nll_loss / F.cross_entropy's second half on 4 samples of 10 classes: 4 picked values
    # summed, / 4 for the mean; backward writes one value per target
    case("nll_loss-mean", "aten.nll_loss_forward", (T((4, 10)), T((4,)), None, 1, -100),
         (T(()), T(())), macs=0, flops=4 + 1),
    case("nll_loss-weighted-sum", "aten.nll_loss_forward", (T((4, 10)), T((4,)), T((10,)), 2,
                                                            -100),
         (T(()), T(())), macs=0, flops=2 * 4),
    case("nll_loss_backward", "aten.nll_loss_backward",
         (T(()), T((4, 10)), T((4,)), None, 1, -100, T(())), T((4, 10)), macs=0, flops=4),
    case("nll_loss2d-mean", "aten.nll_loss2d_forward", (T((2, 3, 5, 5)), T((2, 5, 5)), None, 1,
                                                        -100),
         (T(()), T(())), macs=0, flops=50 + 1),
    # LayerNorm(bias=False) (nanoGPT's default): no bias gradient is computed
    case("layer_norm_backward-no-bias", "aten.native_layer_norm_backward",
         (T((2, 3, 8)), T((2, 3, 8)), [8], T((2, 3, 1)), T((2, 3, 1)), T((8,)), None,
          [True, True, False]), (T((2, 3, 8)), T((8,)), None),
         macs=0, flops=(6 + 1) * 2 * 3 * 8),
    # BatchNorm2d(affine=False): the input's gradient only
    case("batch_norm_backward-no-affine", "aten.native_batch_norm_backward",
         (T(X), T(X), None, T((3,)), T((3,)), T((3,)), T((3,)), True, 1e-5,
          [True, False, False]), (T(X), None, None),
         macs=0, flops=6 * N_X),
    # Without affine parameters the `* w + b` is not done: normalise (x - mean) * invstd = 2,
    # + 1 for a weight, + 1 for a bias, + 4 for statistics.
    case("batch_norm-no-affine-eval", "aten.native_batch_norm",
         (T(X), None, None, T((3,)), T((3,)), False, 0.1, 1e-5), (T(X), T((0,)), T((0,))),
         macs=0, flops=2 * N_X),  # BatchNorm2d(affine=False), F.batch_norm without weight
    case("batch_norm-no-affine-training", "aten.native_batch_norm",
         (T(X), None, None, T((3,)), T((3,)), True, 0.1, 1e-5), (T(X),) + STATS3,
         macs=0, flops=(2 + 4) * N_X),
    case("batch_norm-weight-only", "aten.native_batch_norm",
         (T(X), T((3,)), None, T((3,)), T((3,)), False, 0.1, 1e-5), (T(X), T((0,)), T((0,))),
         macs=0, flops=3 * N_X),
    case("_native_batch_norm_legit_no_training-no-affine",
         "aten._native_batch_norm_legit_no_training",
         (T(X), None, None, T((3,)), T((3,)), 0.1, 1e-5), (T(X), T((0,)), T((0,))),
         macs=0, flops=2 * N_X),
    case("_native_batch_norm_legit-no-affine", "aten._native_batch_norm_legit",
         (T(X), None, None, T((3,)), T((3,)), True, 0.1, 1e-5), (T(X),) + STATS3,
         macs=0, flops=6 * N_X),
    case("_native_batch_norm_legit.no_stats-no-affine", "aten._native_batch_norm_legit.no_stats",
         (T(X), None, None, True, 0.1, 1e-5), (T(X),) + STATS3,
         macs=0, flops=6 * N_X),
    case("layer_norm-no-affine", "aten.native_layer_norm",
         (T((2, 3, 8)), [8], None, None, 1e-5), (T((2, 3, 8)), T((2, 3, 1)), T((2, 3, 1))),
         macs=0, flops=(4 + 2) * 2 * 3 * 8),  # elementwise_affine=False
    case("layer_norm-no-bias", "aten.native_layer_norm",
         (T((2, 3, 8)), [8], T((8,)), None, 1e-5), (T((2, 3, 8)), T((2, 3, 1)), T((2, 3, 1))),
         macs=0, flops=(4 + 2 + 1) * 2 * 3 * 8),  # LayerNorm(bias=False)
    case("group_norm-no-affine", "aten.native_group_norm",
         (T(X), None, None, 2, 3, 16, 3, 1e-5), (T(X), T((2, 3)), T((2, 3))),
         macs=0, flops=(4 + 2) * N_X),
    case("softmax", "aten._softmax", (T((2, 3, 7)), -1, False), T((2, 3, 7)),
         macs=0, flops=5 * 2 * 3 * 7),  # max-compare, subtract, exp, sum, divide
    case("log_softmax", "aten._log_softmax", (T((2, 3, 7)), -1, False), T((2, 3, 7)),
         macs=0, flops=5 * 2 * 3 * 7),
    case("softmax_backward", "aten._softmax_backward_data",
         (T((2, 3, 7)), T((2, 3, 7)), -1, "float32"), T((2, 3, 7)),
         macs=0, flops=4 * 2 * 3 * 7),  # g*y, row sum, subtract, multiply
]


@pytest.mark.parametrize("op,args,out,macs,flops", NORM_CASES)
def test_normalisation_and_softmax(op, args, out, macs, flops):
    check(op, args, out, macs, flops)


# ------------------------------------------------------------------ pooling and reductions
POOL_CASES = [
    # max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)
    case("max_pool2d-3x3-s2", "aten.max_pool2d_with_indices",
         (T((1, 2, 6, 6)), [3, 3], [2, 2], [0, 0], [1, 1], False),
         (T((1, 2, 2, 2)), T((1, 2, 2, 2), "int64", 8)),
         macs=0, flops=1 * 2 * 2 * 2 * 3 * 3),  # outputs * window: one comparison per element
    case("max_pool2d-int-kernel", "aten.max_pool2d", (T((1, 2, 6, 6)), 3, 3), T((1, 2, 2, 2)),
         macs=0, flops=1 * 2 * 2 * 2 * 3 * 3),  # an int kernel is square
    case("max_pool1d", "aten.max_pool1d", (T((1, 2, 9)), [3], [3]), T((1, 2, 3)),
         macs=0, flops=1 * 2 * 3 * 3),
    # avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    case("avg_pool2d-2x2", "aten.avg_pool2d",
         (T((1, 2, 6, 6)), [2, 2], [2, 2], [0, 0], False, True, None), T((1, 2, 3, 3)),
         macs=0, flops=1 * 2 * 3 * 3 * 2 * 2 + 1 * 2 * 3 * 3),  # window adds + 1 divide / out
    case("avg_pool3d", "aten.avg_pool3d",
         (T((1, 1, 4, 4, 4)), [2, 2, 2], [2, 2, 2]), T((1, 1, 2, 2, 2)),
         macs=0, flops=8 * 8 + 8),
    case("adaptive_avg_pool2d-global", "aten._adaptive_avg_pool2d",
         (T((1, 2, 6, 6)), [1, 1]), T((1, 2, 1, 1)),
         macs=0, flops=1 * 2 * 6 * 6 + 1 * 2),  # every input added once + 1 divide per output
    case("adaptive_avg_pool2d-3x3", "aten.adaptive_avg_pool2d",
         (T((1, 2, 6, 6)), [3, 3]), T((1, 2, 3, 3)),
         macs=0, flops=1 * 2 * 6 * 6 + 1 * 2 * 3 * 3),
    # max pooling has no divide: non-overlapping windows compare each input element once
    case("adaptive_max_pool2d", "aten.adaptive_max_pool2d",
         (T((1, 2, 6, 6)), [3, 3]), (T((1, 2, 3, 3)), T((1, 2, 3, 3), "int64", 8)),
         macs=0, flops=1 * 2 * 6 * 6),
    case("max_pool2d_backward", "aten.max_pool2d_with_indices_backward",
         (T((1, 2, 2, 2)), T((1, 2, 6, 6)), [3, 3], [2, 2], [0, 0], [1, 1], False,
          T((1, 2, 2, 2), "int64", 8)), T((1, 2, 6, 6)),
         macs=0, flops=1 * 2 * 6 * 6),  # one add per grad_x element
]

REDUCE_CASES = [
    case("sum-all", "aten.sum", (T((2, 3, 4)),), T(()), macs=0, flops=2 * 3 * 4),
    case("sum-dim", "aten.sum", (T((2, 3, 4)), [-1], False), T((2, 3)),
         macs=0, flops=2 * 3 * 4),  # one add per input element
    case("mean-dim", "aten.mean", (T((2, 3, 4)), [-1], False), T((2, 3)),
         macs=0, flops=2 * 3 * 4 + 2 * 3),  # adds + one divide per output element
    case("mean-all", "aten.mean", (T((2, 3, 4)),), T(()), macs=0, flops=2 * 3 * 4 + 1),
    case("amax", "aten.amax", (T((2, 3, 4)), [1], True), T((2, 1, 4)), macs=0, flops=24),
]


REDUCE_CASES += [
    # _is_all_true(x: bool) -> scalar (an assert on a mask, e.g. nested-tensor checks):
    # one AND per element, as aten.all
    # fractional_max_pool2d(x, kernel_size, output_size, random_samples): window comparisons
    case("fractional_max_pool2d", "aten.fractional_max_pool2d",
         (T((1, 2, 8, 8)), [2, 2], [3, 3], T((1, 2, 2))),
         (T((1, 2, 3, 3)), T((1, 2, 3, 3), "int64", 8)), macs=0, flops=18 * 4),
    # reflection_pad2d_backward(grad_out: (1, 2, 6, 6), x: (1, 2, 4, 4), padding): the 2*(36-16)
    # border elements are added onto the elements they mirror
    case("reflection_pad2d_backward", "aten.reflection_pad2d_backward",
         (T((1, 2, 6, 6)), T((1, 2, 4, 4)), [1, 1, 1, 1]), T((1, 2, 4, 4)), macs=0, flops=40),
    case("replication_pad1d_backward", "aten.replication_pad1d_backward",
         (T((1, 2, 7)), T((1, 2, 4)), [1, 2]), T((1, 2, 4)), macs=0, flops=6),
    case("_is_all_true", "aten._is_all_true", (T((2, 3, 4), "bool", 1),), T((), "bool", 1),
         macs=0, flops=24),
]


@pytest.mark.parametrize("op,args,out,macs,flops", POOL_CASES + REDUCE_CASES)
def test_pooling_and_reductions(op, args, out, macs, flops):
    check(op, args, out, macs, flops)


# ------------------------------------------------------------------ resampling
# An output element blends taps input elements, taps = product over the resized axes of
# 1 (nearest), 2 (linear), 4 (cubic); antialiased downsampling by in/out widens an axis to
# ceil(taps * in/out). FLOPs = numel(out) * (taps multiplies + taps - 1 adds); nearest: 0.
RESAMPLE_CASES = [
    # upsample_nearest*d(x, output_size, scales...): a copy
    case("nearest1d", "aten.upsample_nearest1d", (T((1, 2, 4)), [8], 2.0), T((1, 2, 8)),
         macs=0, flops=0),
    case("nearest2d", "aten.upsample_nearest2d", (T((1, 2, 4, 4)), [8, 8], 2.0, 2.0),
         T((1, 2, 8, 8)), macs=0, flops=0),
    case("nearest3d", "aten.upsample_nearest3d", (T((1, 2, 2, 2, 2)), [4, 4, 4], 2.0, 2.0, 2.0),
         T((1, 2, 4, 4, 4)), macs=0, flops=0),
    case("nearest_exact2d", "aten._upsample_nearest_exact2d",
         (T((1, 2, 4, 4)), [8, 8], 2.0, 2.0), T((1, 2, 8, 8)), macs=0, flops=0),
    case("nearest_exact1d", "aten._upsample_nearest_exact1d", (T((1, 2, 4)), [8], 2.0),
         T((1, 2, 8)), macs=0, flops=0),
    # upsample_linear1d(x, output_size, align_corners, scale): 2 taps, 16 outputs x 3
    case("linear1d", "aten.upsample_linear1d", (T((1, 2, 4)), [8], False, 2.0), T((1, 2, 8)),
         macs=0, flops=16 * 3),
    # upsample_bilinear2d(x, output_size, align_corners, scale_h, scale_w): 4 taps,
    # 128 outputs x 7
    case("bilinear2d", "aten.upsample_bilinear2d", (T((1, 2, 4, 4)), [8, 8], False, 2.0, 2.0),
         T((1, 2, 8, 8)), macs=0, flops=128 * 7),
    # .vec overload (x, output_size?, align_corners, scale_factors), found by its packet:
    # same shapes, same cost
    case("bilinear2d-vec", "aten.upsample_bilinear2d", (T((1, 2, 4, 4)), None, True, [2, 2]),
         T((1, 2, 8, 8)), macs=0, flops=128 * 7),
    # one axis resized (4x4 -> 4x8): 2 taps, 64 outputs x 3
    case("bilinear2d-one-axis", "aten.upsample_bilinear2d",
         (T((1, 2, 4, 4)), [4, 8], False, 1.0, 2.0), T((1, 2, 4, 8)), macs=0, flops=64 * 3),
    # upsample_bicubic2d: 4 x 4 = 16 taps, 128 outputs x 31
    case("bicubic2d", "aten.upsample_bicubic2d", (T((1, 2, 4, 4)), [8, 8], True),
         T((1, 2, 8, 8)), macs=0, flops=128 * 31),
    # upsample_trilinear3d: 8 taps, 128 outputs x 15
    case("trilinear3d", "aten.upsample_trilinear3d",
         (T((1, 2, 2, 2, 2)), [4, 4, 4], False, 2.0, 2.0, 2.0), T((1, 2, 4, 4, 4)),
         macs=0, flops=128 * 15),
    # antialiased 4x4 -> 2x2: ceil(2 * 4/2) = 4 taps per axis, 16 in all: 8 outputs x 31
    case("bilinear2d_aa-down", "aten._upsample_bilinear2d_aa",
         (T((1, 2, 4, 4)), [2, 2], False, 0.5, 0.5), T((1, 2, 2, 2)), macs=0, flops=8 * 31),
    # antialias only widens downsampling: 4x4 -> 8x8 is plain bilinear
    case("bilinear2d_aa-up", "aten._upsample_bilinear2d_aa",
         (T((1, 2, 4, 4)), [8, 8], False, 2.0, 2.0), T((1, 2, 8, 8)), macs=0, flops=128 * 7),
    # bicubic antialiased 9 -> 3 (ceil(4 * 3) = 12) by 4 -> 4 (unchanged): 12 taps, 6 x 23
    case("bicubic2d_aa-down", "aten._upsample_bicubic2d_aa",
         (T((1, 2, 9, 4)), [3, 4], False, None, None), T((1, 2, 3, 4)), macs=0, flops=24 * 23),
    # backward(grad_out, output_size, input_size, ...): every grad_out element scatters to its
    # taps: taps multiplies + taps adds (one tap: 1 add)
    case("bilinear2d_backward", "aten.upsample_bilinear2d_backward",
         (T((1, 2, 8, 8)), [8, 8], [1, 2, 4, 4], False, 2.0, 2.0), T((1, 2, 4, 4)),
         macs=0, flops=128 * 2 * 4),
    case("nearest2d_backward", "aten.upsample_nearest2d_backward",
         (T((1, 2, 8, 8)), [8, 8], [1, 2, 4, 4], 2.0, 2.0), T((1, 2, 4, 4)),
         macs=0, flops=128),
    case("bicubic2d_aa_backward", "aten._upsample_bicubic2d_aa_backward",
         (T((1, 2, 3, 4)), [3, 4], [1, 2, 9, 4], False, None, None), T((1, 2, 9, 4)),
         macs=0, flops=24 * 2 * 12),
]


RESAMPLE_CASES += [
    # grid_sampler_2d(x, grid: (N, Hg, Wg, 2), interpolation_mode 0 bilinear / 1 nearest /
    # 2 bicubic, padding_mode, align_corners) -> (N, C, Hg, Wg): both axes interpolated
    case("grid_sampler_2d-bilinear", "aten.grid_sampler_2d",
         (T((2, 3, 4, 4)), T((2, 5, 6, 2)), 0, 0, False), T((2, 3, 5, 6)),
         macs=0, flops=180 * 7),  # 4 taps: 7 per output
    case("grid_sampler_2d-nearest", "aten.grid_sampler_2d",
         (T((2, 3, 4, 4)), T((2, 5, 6, 2)), 1, 0, False), T((2, 3, 5, 6)), macs=0, flops=0),
    case("grid_sampler_2d-bicubic", "aten.grid_sampler_2d",
         (T((2, 3, 4, 4)), T((2, 5, 6, 2)), 2, 0, False), T((2, 3, 5, 6)),
         macs=0, flops=180 * 31),  # 16 taps
    case("grid_sampler_3d-trilinear", "aten.grid_sampler_3d",
         (T((1, 2, 4, 4, 4)), T((1, 3, 3, 3, 3)), 0, 0, False), T((1, 2, 3, 3, 3)),
         macs=0, flops=54 * 15),  # 8 taps
    # backward(grad_out, x, grid, mode, padding, align_corners, output_mask): grad_x and
    # grad_grid each taps multiplies + taps adds per grad_out element
    case("grid_sampler_2d_backward", "aten.grid_sampler_2d_backward",
         (T((2, 3, 5, 6)), T((2, 3, 4, 4)), T((2, 5, 6, 2)), 0, 0, False, [True, True]),
         (T((2, 3, 4, 4)), T((2, 5, 6, 2))), macs=0, flops=2 * 180 * 2 * 4),
    case("grid_sampler_2d_backward-grid-only", "aten.grid_sampler_2d_backward",
         (T((2, 3, 5, 6)), T((2, 3, 4, 4)), T((2, 5, 6, 2)), 0, 0, False, [False, True]),
         (None, T((2, 5, 6, 2))), macs=0, flops=180 * 2 * 4),
    # affine_grid_generator(theta: (N, 2, 3), size, align_corners) -> (N, H, W, 2): every
    # point is theta @ (x, y, 1): 2 * 5 * 6 * 2 outputs x 3 MACs
    case("affine_grid_generator", "aten.affine_grid_generator",
         (T((2, 2, 3)), [2, 3, 5, 6], False), T((2, 5, 6, 2)), macs=360, flops=720),
]


@pytest.mark.parametrize("op,args,out,macs,flops", RESAMPLE_CASES)
def test_resampling(op, args, out, macs, flops):
    check(op, args, out, macs, flops)


def test_resampling_registers_every_interpolating_variant():
    stems = ["nearest1d", "nearest2d", "nearest3d", "linear1d", "bilinear2d", "bicubic2d",
             "trilinear3d"]
    ops = ([f"aten.upsample_{s}" for s in stems]
           + [f"aten._upsample_nearest_exact{d}d" for d in (1, 2, 3)]
           + ["aten._upsample_bilinear2d_aa", "aten._upsample_bicubic2d_aa"])
    for op in ops:
        assert op in ATEN and op + "_backward" in ATEN, op


# ------------------------------------------------------------------ bilinear, embeddings
# nn.Bilinear(I=3, J=4, O=5), batch 2: _trilinear(x1: (2, 3), W: (5, 3, 4), x2: (2, 4),
# expand1=[1, 3], expand2=[0], expand3=[1, 2], sumdim=[2, 3], unroll_dim=1) over dims
# (B, O, I, J). Step 1, x1 * W summed over I: B*O*I*J = 120 MACs; step 2, that * x2 summed over
# J: B*O*J = 40 MACs.
BILINEAR_ARGS = (T((2, 3)), T((5, 3, 4)), T((2, 4)), [1, 3], [0], [1, 2], [2, 3], 1)
# EmbeddingBag(V=10, D=3) on n=6 indices in 2 bags: (n - bags) * D = 12 adds;
# mean + bags * D = 6 divides; per_sample_weights + n * D = 18 multiplies.
BAG_OUT = (T((2, 3)), T((6,), "int64", 8), T((2,), "int64", 8), T((2,), "int64", 8))


def bag_args(mode, psw=False):
    # _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
    #                per_sample_weights, include_last_offset, padding_idx)
    return (T((10, 3)), T((6,), "int64", 8), T((2,), "int64", 8), False, mode, False,
            T((6,)) if psw else None, False, -1)


def bag_bwd_args(mode, psw=False):
    # _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, max_indices,
    #                         num_weights, scale_grad_by_freq, mode, sparse, psw, padding_idx)
    i64 = T((6,), "int64", 8)
    return (T((2, 3)), i64, T((2,), "int64", 8), i64, T((2,), "int64", 8), i64, 10, False, mode,
            False, T((6,)) if psw else None, -1)


EMBEDDING_CASES = [
    case("_trilinear-nn.Bilinear", "aten._trilinear", BILINEAR_ARGS, T((2, 5)),
         macs=120 + 40, flops=2 * 160),
    # sumdim empty: an elementwise triple product over (4, 5): 2 steps of 20 FLOPs each
    case("_trilinear-elementwise", "aten._trilinear",
         (T((4, 5)), T((4, 5)), T((4, 5)), [], [], [], [], 1), T((4, 5)), macs=0, flops=40),
    case("_embedding_bag-sum", "aten._embedding_bag", bag_args(0), BAG_OUT, macs=0, flops=12),
    case("_embedding_bag-mean", "aten._embedding_bag", bag_args(1), BAG_OUT,
         macs=0, flops=12 + 6),
    case("_embedding_bag-max", "aten._embedding_bag", bag_args(2), BAG_OUT,
         macs=0, flops=12),  # comparisons instead of adds
    case("_embedding_bag-per-sample-weights", "aten._embedding_bag", bag_args(0, psw=True),
         BAG_OUT, macs=0, flops=12 + 18),
    case("_embedding_bag_forward_only-mean", "aten._embedding_bag_forward_only", bag_args(1),
         BAG_OUT, macs=0, flops=18),
    # backward -> (V, D): sum n*D = 18 adds; mean also scales: 36; max: bags*D = 6 adds
    case("_embedding_bag_backward-sum", "aten._embedding_bag_backward", bag_bwd_args(0),
         T((10, 3)), macs=0, flops=18),
    case("_embedding_bag_backward-mean", "aten._embedding_bag_backward", bag_bwd_args(1),
         T((10, 3)), macs=0, flops=36),
    case("_embedding_bag_backward-max", "aten._embedding_bag_backward", bag_bwd_args(2),
         T((10, 3)), macs=0, flops=6),
    case("_embedding_bag_backward-psw", "aten._embedding_bag_backward",
         bag_bwd_args(0, psw=True), T((10, 3)), macs=0, flops=18 + 18),
    # _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, max_indices,
    #                               num_weights, scale_grad_by_freq, mode, psw, padding_idx)
    case("_embedding_bag_dense_backward-mean", "aten._embedding_bag_dense_backward",
         bag_bwd_args(1)[:2] + bag_bwd_args(1)[3:7] + (False, 1, None, -1), T((10, 3)),
         macs=0, flops=36),
    # per-sample-weight gradient: one D-long dot product per index: 6 * 3 MACs
    case("_embedding_bag_per_sample_weights_backward",
         "aten._embedding_bag_per_sample_weights_backward",
         (T((2, 3)), T((10, 3)), T((6,), "int64", 8), T((2,), "int64", 8),
          T((6,), "int64", 8), 0, -1), T((6,)), macs=18, flops=36),
    # embedding_dense_backward(grad_out: (2, 4, 3), indices, num_weights, ...): 24 adds
    case("embedding_dense_backward", "aten.embedding_dense_backward",
         (T((2, 4, 3)), T((2, 4), "int64", 8), 10, -1, False), T((10, 3)), macs=0, flops=24),
]


@pytest.mark.parametrize("op,args,out,macs,flops", EMBEDDING_CASES)
def test_bilinear_and_embeddings(op, args, out, macs, flops):
    check(op, args, out, macs, flops)


# ------------------------------------------------------------------ elementwise
A = (2, 3, 5)
N_A = 2 * 3 * 5


@pytest.mark.parametrize("op,args,flops_per_element", [
    pytest.param("aten.add", (T(A), T(A)), 1, id="add"),
    pytest.param("aten.add_", (T(A), T((5,))), 1, id="add_-broadcast"),
    pytest.param("aten.mul", (T(A), 2.0), 1, id="mul-scalar"),
    pytest.param("aten.div", (T(A), T(A)), 1, id="div"),
    pytest.param("aten.relu", (T(A),), 1, id="relu"),
    pytest.param("aten.relu_", (T(A),), 1, id="relu_-inplace"),
    pytest.param("aten.gelu", (T(A),), 1, id="gelu"),
    pytest.param("aten.sigmoid", (T(A),), 1, id="sigmoid"),
    pytest.param("aten.where", (T(A, "bool", 1), T(A), T(A)), 1, id="where"),
    pytest.param("aten.threshold_backward", (T(A), T(A), 0.0), 1, id="threshold_backward"),
    pytest.param("aten.addcmul", (T(A), T(A), T(A)), 2, id="addcmul"),  # a + b*c
    pytest.param("aten.lerp", (T(A), T(A), 0.5), 2, id="lerp"),  # a + w*(b - a)
    pytest.param("aten.celu", (T(A),), 1, id="celu"),
    pytest.param("aten.softshrink", (T(A), 0.5), 1, id="softshrink"),
    pytest.param("aten.rrelu_with_noise", (T(A), T(A), 0.1, 0.3, True), 1, id="rrelu"),
    pytest.param("aten.mish_backward", (T(A), T(A)), 1, id="mish_backward"),
])
def test_elementwise(op, args, flops_per_element):
    check(op, args, T(A), 0, flops_per_element * N_A)


def test_native_dropout_draws_and_scales():
    # native_dropout(x, p, train) -> (y, mask): draw the mask (1) and scale (1) per element
    check("aten.native_dropout", (T(A), 0.1, True), (T(A), T(A, "bool", 1)), 0, 2 * N_A)


# ------------------------------------------------------------------ kinds and zero-cost ops
@pytest.mark.parametrize("op,kind", [
    pytest.param("aten.view", VIEW, id="view"),
    pytest.param("aten._unsafe_view", VIEW, id="_unsafe_view"),
    pytest.param("aten.t", VIEW, id="t"),
    pytest.param("aten.transpose", VIEW, id="transpose"),
    pytest.param("aten.permute", VIEW, id="permute"),
    pytest.param("aten.expand", VIEW, id="expand"),
    pytest.param("aten.slice", VIEW, id="slice"),
    pytest.param("aten.detach", VIEW, id="detach"),
    pytest.param("aten.empty", ALLOC, id="empty"),
    pytest.param("aten.empty_like", ALLOC, id="empty_like"),
    pytest.param("aten.empty_strided", ALLOC, id="empty_strided"),
    pytest.param("aten.clone", COMPUTE, id="clone-moves-data"),
    pytest.param("aten.cat", COMPUTE, id="cat-moves-data"),
    pytest.param("aten.as_strided_", VIEW, id="as_strided_"),
    pytest.param("aten.max_unpool2d", COMPUTE, id="max_unpool2d-scatters"),
    pytest.param("aten.max_unpool3d", COMPUTE, id="max_unpool3d-scatters"),
    pytest.param("aten._pack_padded_sequence", COMPUTE, id="_pack_padded_sequence"),
    pytest.param("aten._pad_packed_sequence", COMPUTE, id="_pad_packed_sequence"),
    pytest.param("aten.reflection_pad3d", COMPUTE, id="reflection_pad3d"),
    pytest.param("aten.pixel_unshuffle", COMPUTE, id="pixel_unshuffle"),
    pytest.param("aten.linspace", COMPUTE, id="linspace"),
])
def test_zero_cost_kinds(op, kind):
    entry = ATEN.lookup(op)
    assert entry.kind == kind
    assert entry.handler((T((4, 6)), [24]), {}, T((24,))) == OpCost(0, 0)


def test_lookup_takes_the_first_registered_name():
    # the engine asks for the overload, then its packet
    assert ATEN.lookup("aten.mm.default", "aten.mm") is ATEN.lookup("aten.mm")
    assert ATEN.lookup("aten.no_such_op") is None


# ------------------------------------------------------------------ the table itself
def test_aten_table_refuses_duplicate_registration():
    before = len(ATEN)
    with pytest.raises(ValueError, match="aten.mm"):
        ATEN.register("aten.mm", lambda args, kwargs, out: OpCost())
    assert len(ATEN) == before


def test_table_refuses_duplicate_within_and_across_calls():
    table = HandlerTable("t")
    table.register(["x.a", "x.b"], lambda *a: OpCost())
    with pytest.raises(ValueError, match="x.a"):
        table.register("x.a", lambda *a: OpCost())
    with pytest.raises(ValueError, match="x.c"):
        table.register(["x.c", "x.c"], lambda *a: OpCost())


def test_refused_registration_changes_nothing():
    table = HandlerTable("t")
    table.register("x.a", lambda *a: OpCost())
    with pytest.raises(ValueError):
        table.register(["x.new", "x.a"], lambda *a: OpCost())
    assert "x.new" not in table


# ------------------------------------------------------------------ contraction formulas
# The four products are torch.utils.flop_counter's formulas written out (importing flop_counter
# imports triton): each must give exactly half its FLOPs on every shape.
FORMULA_CASES = [
    ("mm", (7, 3), (3, 11)),
    ("mm", (1, 9216), (9216, 4096)),
    ("bmm", (4, 5, 6), (4, 6, 2)),
    ("bmm", (96, 128, 64), (96, 64, 128)),
    ("conv2d", (2, 3, 32, 32), (8, 3, 3, 3), (2, 8, 30, 30), False),
    ("conv2d-grouped", (1, 32, 14, 14), (32, 1, 3, 3), (1, 32, 14, 14), False),
    ("conv1d-dilated", (3, 4, 50), (6, 2, 5), (3, 6, 42), False),
    ("conv3d", (1, 2, 8, 9, 10), (4, 2, 3, 3, 3), (1, 4, 6, 7, 8), False),
    ("conv2d-transposed", (2, 16, 7, 7), (16, 8, 4, 4), (2, 8, 16, 16), True),
    ("sdpa-backward", (2, 8, 128, 64), (2, 8, 256, 64), (2, 8, 256, 32)),
    ("sdpa-backward-gqa", (1, 32, 17, 128), (1, 8, 40, 128), (1, 8, 40, 128)),
]


@pytest.mark.parametrize("case", FORMULA_CASES, ids=[c[0] for c in FORMULA_CASES])
def test_contraction_formulas_are_flop_counters(case):
    from torch.utils import flop_counter as fc

    from layerscope.ops import aten

    kind, *shapes = case
    if kind == "mm":
        ours, theirs = aten.mm_macs(*shapes), fc.mm_flop(*shapes)
    elif kind == "bmm":
        ours, theirs = aten.bmm_macs(*shapes), fc.bmm_flop(*shapes)
    elif kind.startswith("conv"):
        ours = aten.conv_macs(*shapes)
        theirs = fc.conv_flop_count(*[list(s) for s in shapes[:3]], shapes[3])
    else:
        q, k, v = shapes
        grad = q[:3] + (v[-1],)
        ours, theirs = aten.sdpa_backward_macs(q, k, v), fc.sdpa_backward_flop_count(grad, q, k, v)
    assert 2 * ours == theirs
