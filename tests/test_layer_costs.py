"""End to end: ``layerscope.analyze`` on tiny modules, every expected number derived by hand.

MACs count contractions only; FLOPs = 2 x MACs + the rest; bias adds are FLOPs (docs/design.md,
"Counting"). Shapes are small so the whole file runs in a few seconds.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.utils._python_dispatch import TorchDispatchMode

import layerscope


def rows(report) -> dict:
    return {r.name: r for r in report.layers}


class Fn(nn.Module):
    """A parameter-free module whose forward is a plain function (no nn.Linear to hook)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


class SelfAttention(nn.Module):
    """nn.MultiheadAttention called as self-attention: the case its fast path handles."""

    def __init__(self, embed_dim=8, heads=2):
        super().__init__()
        self.mha = nn.MultiheadAttention(embed_dim, heads, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


# ------------------------------------------------------------------ layers with parameters
@pytest.mark.parametrize("module,inputs,macs,flops,params", [
    pytest.param(nn.Linear(16, 8), (4, 16),
                 4 * 16 * 8,  # batch * in * out
                 2 * 4 * 16 * 8 + 4 * 8,  # + one bias add per output element
                 16 * 8 + 8, id="linear-bias"),
    pytest.param(nn.Linear(16, 8, bias=False), (4, 16),
                 4 * 16 * 8, 2 * 4 * 16 * 8, 16 * 8, id="linear-no-bias"),
    pytest.param(nn.Linear(16, 8), (2, 3, 16),
                 2 * 3 * 16 * 8,  # every token of the (B, L) grid
                 2 * 2 * 3 * 16 * 8 + 2 * 3 * 8, 16 * 8 + 8, id="linear-3d-input"),
    pytest.param(nn.Conv2d(4, 8, 3, padding=1, groups=2, bias=False), (1, 4, 6, 6),
                 1 * 8 * 6 * 6 * (4 // 2) * 3 * 3,  # N*Cout*Hout*Wout*(Cin/g)*kh*kw
                 2 * (1 * 8 * 6 * 6 * 2 * 3 * 3),
                 8 * 2 * 3 * 3, id="conv2d-grouped"),
    pytest.param(nn.Conv2d(3, 4, 3, dilation=2), (1, 3, 9, 9),
                 1 * 4 * 5 * 5 * 3 * 3 * 3,  # Hout = 9 - 2*(3-1) = 5
                 2 * (1 * 4 * 5 * 5 * 3 * 3 * 3) + 1 * 4 * 5 * 5,  # + bias per output
                 4 * 3 * 3 * 3 + 4, id="conv2d-dilated"),
    pytest.param(nn.ConvTranspose2d(4, 6, 3, stride=2), (1, 4, 5, 5),
                 1 * 4 * 5 * 5 * 6 * 3 * 3,  # N*Cin*Hin*Win*Cout*kh*kw (Hout = 4*2+3 = 11)
                 2 * (1 * 4 * 5 * 5 * 6 * 3 * 3) + 1 * 6 * 11 * 11,
                 4 * 6 * 3 * 3 + 6, id="conv-transpose2d"),
])
def test_parametrised_layer(module, inputs, macs, flops, params):
    report = layerscope.analyze(module, inputs=inputs)
    assert (report.totals.macs, report.totals.flops) == (macs, flops)
    assert report.totals.params == params
    assert report.totals.weight_bytes == 4 * params  # float32
    assert report.uncounted_ops == []


# ------------------------------------------------------------------ functional contractions
# A hook-based counter sees no module with weights here and counts 0.
@pytest.mark.parametrize("fn,inputs,macs", [
    pytest.param(torch.matmul, [(2, 3, 4), (4, 5)], 2 * 3 * 4 * 5, id="torch.matmul-3d@2d"),
    pytest.param(lambda a, b: a @ b, [(2, 3, 4), (2, 4, 5)], 2 * 3 * 4 * 5, id="operator-@"),
    pytest.param(lambda a, b: torch.einsum("bij,bjk->bik", a, b), [(2, 3, 4), (2, 4, 5)],
                 2 * 3 * 4 * 5, id="einsum-bij,bjk"),
    pytest.param(torch.bmm, [(2, 3, 4), (2, 4, 5)], 2 * 3 * 4 * 5, id="torch.bmm"),
    pytest.param(lambda a, b: a @ b, [(2, 3, 6, 4), (2, 3, 4, 5)], 2 * 3 * 6 * 4 * 5,
                 id="operator-@-4d"),
])
def test_functional_matmul(fn, inputs, macs):
    report = layerscope.analyze(Fn(fn), inputs=inputs)
    assert report.totals.macs == macs  # batch * m * k * n
    assert report.totals.flops == 2 * macs
    assert rows(report)["(root)"].macs == macs


# ------------------------------------------------------------------ attention
# q: (B, H, Lq, E), k: (B, H, Lk, E), v: (B, H, Lk, Ev)
B, H, LQ, LK, E = 2, 3, 4, 5, 6
SCORES = B * H * LQ * LK


def attention_cost(ev):
    macs = SCORES * E + SCORES * ev  # q.k per score, p.v per score
    return macs, 2 * macs + SCORES * (1 + 5)  # scale multiply + 5-FLOP softmax per score


def explicit_attention(q, k, v):
    scale = 1 / q.shape[-1] ** 0.5
    return torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1) @ v


@pytest.mark.parametrize("fn,ev", [
    pytest.param(F.scaled_dot_product_attention, E, id="F.sdpa-flash-kernel"),
    pytest.param(explicit_attention, E, id="softmax(q@k^T*scale)@v"),
    pytest.param(explicit_attention, 7, id="softmax(q@k^T*scale)@v-Ev!=E"),
])
def test_attention_kernels_agree(fn, ev):
    report = layerscope.analyze(Fn(fn), inputs=[(B, H, LQ, E), (B, H, LK, E), (B, H, LK, ev)])
    assert (report.totals.macs, report.totals.flops) == attention_cost(ev)


def test_sdpa_of_narrower_values_is_counted_as_the_fused_kernel():
    # With E != Ev PyTorch's CPU flash kernel does not apply and the call would fall back to the
    # math path (decomposed before dispatch; it scales q and k by sqrt(scale) instead of the
    # scores). A static analysis runs it as the memory-efficient kernel a GPU runs for it
    # (definitions: multi-head latent attention), so MACs and FLOPs are every other path's.
    ev = 7
    report = layerscope.analyze(Fn(F.scaled_dot_product_attention),
                                inputs=[(B, H, LQ, E), (B, H, LK, E), (B, H, LK, ev)])
    assert (report.totals.macs, report.totals.flops) == attention_cost(ev)
    assert report.uncounted_ops == []


# nn.MultiheadAttention(E=8, 2 heads), B=2, L=3: in-projections 3*E*E and out-projection E*E
# per token, scores and values 2 * L * L * E per sequence.
MHA_MACS = 2 * 3 * (3 * 8 * 8 + 8 * 8) + 2 * (2 * 3 * 3 * 8)
# nn.TransformerEncoderLayer(E=8, 2 heads, F=16): the attention block + linear1 + linear2
TEL_MACS = MHA_MACS + 2 * 3 * (8 * 16 + 16 * 8)


def aten_ops(module: nn.Module, *xs, training: bool) -> set[str]:
    """The aten ops a real run of ``module`` dispatches (to check which path it takes)."""
    seen: set[str] = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    module.train(training)
    with Record(), torch.set_grad_enabled(training):
        module(*xs)
    module.eval()
    return seen


@pytest.mark.parametrize("mode", ["inference", "training"],
                         ids=["eval-fast-path", "training-slow-path"])
@pytest.mark.parametrize("module,fused_op,macs", [
    pytest.param(SelfAttention(8, 2), "aten._native_multi_head_attention", MHA_MACS,
                 id="MultiheadAttention"),
    pytest.param(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True),
                 "aten._transformer_encoder_layer_fwd", TEL_MACS, id="TransformerEncoderLayer"),
])
def test_attention_modules_same_macs_on_every_path(module, fused_op, macs, mode):
    # the premise: eval takes the fused kernel, training the unfused ops
    training = mode == "training"
    assert (fused_op in aten_ops(module, torch.zeros(2, 3, 8), training=training)) != training
    report = layerscope.analyze(module, inputs=(2, 3, 8), mode=mode)
    assert report.totals.macs == macs
    assert report.uncounted_ops == []


def test_multihead_attention_paths_agree_on_flops():
    # dropout=0 and need_weights=False: fast and slow paths do the same arithmetic
    fast = layerscope.analyze(SelfAttention(8, 2), inputs=(2, 3, 8))
    slow = layerscope.analyze(SelfAttention(8, 2), inputs=(2, 3, 8), mode="training")
    flops = (2 * MHA_MACS + 2 * 3 * (3 * 8 + 8)  # in- and out-projection biases per token
             + 2 * 2 * 3 * 3 * 6)  # scale + softmax per score (B*H*L*L)
    assert fast.totals.flops == slow.totals.flops == flops


# ------------------------------------------------------------------ recurrent layers
# Input I=4, hidden H=5, T=3 steps, B=2. One layer-direction step costs G*H*(in + H) MACs,
# G = 4 (LSTM), 3 (GRU), 1 (RNN); layer 2 of a bidirectional stack reads 2H features.
def rnn_macs(g, steps=3 * 2, i=4, h=5, layers=2, directions=2):
    per_step = directions * g * h * (i + h)  # layer 1
    per_step += (layers - 1) * directions * g * h * (directions * h + h)  # layers 2..
    return steps * per_step


@pytest.mark.parametrize("module,inputs,macs,params", [
    pytest.param(nn.LSTM(4, 5, num_layers=2, bidirectional=True), (3, 2, 4),
                 3 * 2 * (2 * 4 * 5 * (4 + 5) + 2 * 4 * 5 * (10 + 5)),  # = rnn_macs(4)
                 2 * (4 * 5 * (4 + 5) + 2 * 4 * 5) + 2 * (4 * 5 * (10 + 5) + 2 * 4 * 5),
                 id="LSTM-2-layers-bidirectional"),
    pytest.param(nn.GRU(4, 5, num_layers=2, bidirectional=True), (3, 2, 4), rnn_macs(3),
                 2 * (3 * 5 * 9 + 2 * 3 * 5) + 2 * (3 * 5 * 15 + 2 * 3 * 5),
                 id="GRU-2-layers-bidirectional"),
    pytest.param(nn.RNN(4, 5, num_layers=2, bidirectional=True), (3, 2, 4), rnn_macs(1),
                 2 * (5 * 9 + 2 * 5) + 2 * (5 * 15 + 2 * 5), id="RNN-2-layers-bidirectional"),
    pytest.param(nn.LSTM(4, 5, batch_first=True), (2, 3, 4),
                 rnn_macs(4, layers=1, directions=1), 4 * 5 * 9 + 2 * 4 * 5,
                 id="LSTM-batch-first"),
    pytest.param(nn.LSTMCell(4, 5), (2, 4), 2 * 4 * 5 * (4 + 5), 4 * 5 * 9 + 2 * 4 * 5,
                 id="LSTMCell"),  # one step: B * G*H*(I+H)
    pytest.param(nn.GRUCell(4, 5), (2, 4), 2 * 3 * 5 * (4 + 5), 3 * 5 * 9 + 2 * 3 * 5,
                 id="GRUCell"),
])
def test_recurrent_layers(module, inputs, macs, params):
    report = layerscope.analyze(module, inputs=inputs)
    assert report.totals.macs == macs
    assert report.totals.params == params
    assert report.uncounted_ops == []


def test_rnn_macs_helper_matches_the_written_out_lstm_sum():
    assert rnn_macs(4) == 3 * 2 * (2 * 4 * 5 * (4 + 5) + 2 * 4 * 5 * (10 + 5)) == 5760


# ------------------------------------------------------------------ training: backward MACs
def test_linear_backward_macs():
    # fc1's input x needs no gradient: only grad_W = grad_out^T @ x (B*in*out MACs).
    # fc2's input does: grad_x = grad_out @ W and grad_W, i.e. 2 x its forward MACs.
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4))
    report = layerscope.analyze(model, inputs=(4, 16), mode="training")
    r = rows(report)
    assert r["0"].macs == 4 * 16 * 8
    assert r["0"].backward_macs == 4 * 16 * 8  # grad_W only: 1 x forward
    assert r["0"].backward_flops == 2 * 4 * 16 * 8 + 4 * 8  # + grad_b: sum over the batch
    assert r["1"].backward_macs == 0
    assert r["1"].backward_flops == 4 * 8  # threshold_backward: 1 per element
    assert r["2"].macs == 4 * 8 * 4
    assert r["2"].backward_macs == 2 * (4 * 8 * 4)  # grad_x + grad_W
    assert r["2"].backward_flops == 2 * 2 * (4 * 8 * 4) + 4 * 4
    assert report.totals.backward_macs == 4 * 16 * 8 + 2 * (4 * 8 * 4)
    assert report.totals.gradient_bytes == 4 * (16 * 8 + 8 + 8 * 4 + 4)


def test_single_linear_backward_is_one_forward():
    report = layerscope.analyze(nn.Linear(16, 8), inputs=(4, 16), mode="training")
    assert report.totals.backward_macs == report.totals.macs == 4 * 16 * 8


def test_depthwise_conv_backward_macs():
    # the input needs no gradient: only grad_W, one MAC per forward MAC
    conv = nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False)
    report = layerscope.analyze(conv, inputs=(1, 4, 8, 8), mode="training")
    assert report.totals.macs == 1 * 4 * 8 * 8 * 1 * 3 * 3  # N*C*H*W*(Cin/g)*kh*kw
    assert report.totals.backward_macs == 1 * 4 * 8 * 8 * 1 * 3 * 3


# ------------------------------------------------------------------ byte definitions
def bytes_model(inplace: bool) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(4, 8), nn.ReLU(inplace=inplace),
                         nn.Linear(8, 2))


# Input (2, 2, 2) float32. Flatten is a view: no traffic, no new tensor.
# Linear(4, 8): addmm reads bias 8 + x 2*4 + W^T 4*8 floats, writes 2*8 floats.
# ReLU: reads and writes 2*8 floats. Linear(8, 2): reads 2 + 2*8 + 8*2, writes 2*2 floats.
EXPECTED_BYTES = {  # name: (bytes_read, bytes_written)
    "0": (0, 0),
    "1": (4 * (8 + 2 * 4 + 4 * 8), 4 * 2 * 8),
    "2": (4 * 2 * 8, 4 * 2 * 8),
    "3": (4 * (2 + 2 * 8 + 8 * 2), 4 * 2 * 2),
}


@pytest.mark.parametrize("inplace", [True, False], ids=["relu-inplace", "relu-out-of-place"])
def test_byte_definitions(inplace):
    report = layerscope.analyze(bytes_model(inplace), inputs=(2, 2, 2))
    r = rows(report)
    for name, (read, written) in EXPECTED_BYTES.items():
        assert (r[name].bytes_read, r[name].bytes_written) == (read, written), name
    relu_new = 0 if inplace else 4 * 2 * 8  # in place: the same storage, no new activation
    assert r["0"].activation_bytes == 0  # a view
    assert r["1"].activation_bytes == 4 * 2 * 8
    assert r["2"].activation_bytes == relu_new
    assert r["3"].activation_bytes == 4 * 2 * 2
    assert report.totals.activation_bytes == 4 * 2 * 8 + relu_new + 4 * 2 * 2
    assert report.totals.bytes_read == sum(read for read, _ in EXPECTED_BYTES.values())
    assert report.totals.bytes_written == sum(w for _, w in EXPECTED_BYTES.values())
    assert (r["1"].weight_bytes, r["3"].weight_bytes) == (4 * (4 * 8 + 8), 4 * (8 * 2 + 2))
    assert report.totals.input_bytes == 4 * 2 * 2 * 2
    assert report.totals.output_bytes == 4 * 2 * 2


# ------------------------------------------------------------------ invariants
@pytest.fixture(scope="module")
def resnet18():
    return torchvision.models.resnet18()


@pytest.mark.parametrize("depth", [0, 1, 2, None], ids=lambda d: f"depth={d}")
def test_resnet18_rows_sum_to_totals(resnet18, depth):
    report = layerscope.analyze(resnet18, inputs=(1, 3, 32, 32), depth=depth)
    for field in ("macs", "flops", "params", "weight_bytes", "bytes_read", "bytes_written",
                  "activation_bytes"):
        assert sum(getattr(r, field) for r in report.layers) == getattr(report.totals, field), \
            field
    assert report.totals.params == 11_689_512  # torchvision's published figure
    assert report.totals.weight_bytes == 4 * 11_689_512
    if depth is not None:
        assert max(r.depth for r in report.layers) <= depth


def test_resnet18_analysis_leaves_model_unchanged(resnet18):
    resnet18.train()
    before = {k: v.clone() for k, v in resnet18.state_dict().items()}
    layerscope.analyze(resnet18, inputs=(1, 3, 32, 32))
    assert resnet18.training
    after = resnet18.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4, bias=False)
        self.b = nn.Linear(4, 4, bias=False)
        self.b.weight = self.a.weight  # one tensor, two modules

    def forward(self, x):
        return self.b(self.a(x))


def test_tied_weight_counted_once():
    report = layerscope.analyze(Tied(), inputs=(2, 4))
    r = rows(report)
    assert report.totals.params == 4 * 4  # not 2 * 16
    assert report.totals.weight_bytes == 4 * 4 * 4
    assert report.totals.trainable_params == 4 * 4
    assert r["a"].params + r["b"].params == 4 * 4
    assert report.totals.macs == 2 * (2 * 4 * 4)  # both layers still compute
