"""Repeated blocks analysed once (``capture.reuse``): a capture that replays
repeated block calls gives exactly the figures of one that traces every call (per-module calls,
shapes, ops, MACs/FLOPs/bytes, activation and output bytes; op count, uncounted ops, the peak of
live activations), replays where blocks are the same and never where they differ, and leaves the
model as it was."""
from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

from layerscope.analysis import capture, static
from layerscope.frontends import llm_models
from layerscope.frontends.llm_configs import LLMConfig
from layerscope.ops.aten import attention_counting


def _both(model, inputs, **kw):
    on = capture.capture(model, inputs, reuse_blocks=True, **kw)
    off = capture.capture(model, inputs, reuse_blocks=False, **kw)
    return on, off


def assert_same(on, off):
    for f in ("order", "op_calls", "uncounted", "peak_activation_bytes", "input_bytes",
              "output_bytes", "training"):
        assert getattr(on, f) == getattr(off, f), f
    for name in off.order:
        assert dataclasses.asdict(on.modules[name]) == dataclasses.asdict(off.modules[name]), name
    assert off.replayed_calls == 0


# ---------------------------------------------------------------------------------- small models
class Block(nn.Module):
    """A pre-norm residual block: norm, two linears, an activation; ``gated`` changes forward."""

    def __init__(self, d=16, gated=False):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)
        self.gated = gated

    def forward(self, x):
        h = self.up(self.norm(x))
        h = h * torch.sigmoid(h) if self.gated else F.relu(h)
        return x + self.down(h)


class Stack(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


class ArgBlock(Block):
    """Behaviour chosen by a non-tensor argument."""

    def forward(self, x, twice=False):
        x = super().forward(x)
        return super().forward(x) if twice else x


class ArgStack(Stack):
    def forward(self, x):
        for i, b in enumerate(self.blocks):
            x = b(x, twice=(i % 2 == 1))
        return x


class Looped(nn.Module):
    """One block object called four times (ALBERT-style shared layer)."""

    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        for _ in range(4):
            x = self.block(x)
        return x


def _tied():
    """Distinct blocks sharing parameters, and a child module shared by two blocks."""
    blocks = [Block() for _ in range(4)]
    blocks[1].up.weight = blocks[0].up.weight
    blocks[3].down = blocks[2].down
    return Stack(blocks)


class BufferBlock(Block):
    def __init__(self, value):
        super().__init__()
        self.register_buffer("scale", torch.full((16,), float(value)))

    def forward(self, x):
        return super().forward(x) * self.scale


class Stateful(Block):
    """Keeps its last activation: the call outlives itself, so it is never replayed."""

    def forward(self, x):
        self.last = self.up(x)
        return super().forward(x)


class Passthrough(nn.Module):
    """Returns its input (an alias) next to a fresh tensor and a None."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        return x, self.lin(x), None


class PassStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Passthrough() for _ in range(3))

    def forward(self, x):
        for b in self.blocks:
            x, y, _ = b(x)
            x = x + y
        return x


class DictBlock(Block):
    def forward(self, x):
        return {"out": super().forward(x), "n": 3}


class DictStack(Stack):
    def forward(self, x):
        for b in self.blocks:
            x = b(x)["out"]
        return x


def _encoder():
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    return nn.TransformerEncoder(layer, 3, enable_nested_tensor=False)


X = [torch.zeros(2, 8, 16)]
# id -> (model builder, inputs, least number of replayed calls)
CASES = {
    "identical-stack": (lambda: Stack([Block() for _ in range(5)]), X, 4),
    "meta-stack": (lambda: _on_meta(lambda: Stack([Block() for _ in range(5)])), X, 4),
    "flag-differs": (lambda: Stack([Block(gated=g) for g in (False, True, False, True)]), X, 2),
    "width-differs": (lambda: Stack([Block(16), nn.Linear(16, 8), Block(8), Block(8)]),
                      X, 1),
    "non-tensor-arg": (lambda: ArgStack([ArgBlock() for _ in range(4)]), X, 2),
    "one-block-looped": (Looped, X, 3),
    "tied-and-shared": (_tied, X, 3),
    "buffer-value-differs": (lambda: Stack([BufferBlock(v) for v in (1, 2, 3)]), X, 2),
    "stateful-never-replayed": (lambda: Stack([Stateful() for _ in range(3)]), X, 0),
    "output-aliases-input": (PassStack, X, 0),
    "dict-output": (lambda: DictStack([DictBlock() for _ in range(3)]), X, 2),
    "transformer-encoder": (_encoder, [torch.zeros(2, 10, 32)], 2),
    "resnet18": (lambda: torchvision.models.resnet18(), [torch.zeros(1, 3, 64, 64)], 1),
    "resnet50": (lambda: torchvision.models.resnet50(), [torch.zeros(1, 3, 64, 64)], 8),
}


def _on_meta(build):
    with torch.device("meta"):
        return build()


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_replayed_capture_equals_traced(case):
    build, inputs, replays = case
    model = build().eval()
    on, off = _both(model, inputs)
    assert_same(on, off)
    assert on.replayed_calls >= replays
    if replays == 0:
        assert on.replayed_calls == 0


def test_resnet_blocks_of_other_shapes_are_not_merged():
    # resnet18: layer1.1 is layer1.0 again (64->64, stride 1); every layerN.0 (N>1) changes the
    # width and stride and has a downsample, and layerN.1 takes other shapes than layer1.*:
    # only layer1.1 can be replayed.
    on, off = _both(torchvision.models.resnet18().eval(), [torch.zeros(1, 3, 64, 64)])
    assert_same(on, off)
    assert on.replayed_calls == 1
    rows = {r.name: r for r in static.layer_rows(on, None)}
    assert rows["layer1.1.conv1"].input_shapes == [[1, 64, 16, 16]]
    # same MACs (64*64*9*16*16 = 128*128*9*8*8 = 9,437,184), other shapes: a distinct record
    assert rows["layer2.1.conv1"].macs == rows["layer1.1.conv1"].macs == 9_437_184
    assert rows["layer2.1.conv1"].input_shapes == [[1, 128, 8, 8]]


def test_rows_and_totals_are_the_same():
    model = Stack([Block() for _ in range(6)]).eval()
    on, off = _both(model, X)
    assert static.layer_rows(on, None) == static.layer_rows(off, None)
    assert static.totals(on, model) == static.totals(off, model)
    # 6 blocks x (LayerNorm 0 + up 2*8*16*64 + down 2*8*64*16) MACs = 6 x 32,768 = 196,608
    assert static.totals(on, model).macs == 6 * (2 * 8 * 16 * 64 * 2)


@pytest.mark.parametrize("kw", [{"training": True}, {"functions": True},
                                {"reuse_blocks": False}],
                         ids=["training", "functions", "switched-off"])
def test_no_replay_where_it_is_off(kw):
    model = Stack([Block() for _ in range(3)])
    kw = {"reuse_blocks": True, **kw}
    cap = capture.capture(model, X, **kw)
    assert cap.replayed_calls == 0


def test_the_model_is_left_as_it_was():
    model = Stack([Block() for _ in range(3)]).eval()
    own = model.blocks[1]
    own.forward = own.forward  # an instance attribute of the user's: put back, not removed
    before = {n: vars(m).get("forward") for n, m in model.named_modules()}
    params = {n: p for n, p in model.named_parameters()}
    cap = capture.capture(model, X)
    assert cap.replayed_calls >= 1
    assert {n: vars(m).get("forward") for n, m in model.named_modules()} == before
    assert {n: p for n, p in model.named_parameters()} == params
    assert model(torch.ones(2, 8, 16)).shape == (2, 8, 16)


def test_a_module_with_its_own_hook_is_traced_every_time():
    model = Stack([Block() for _ in range(3)]).eval()
    for b in model.blocks:
        b.down.register_forward_hook(lambda m, i, o: o * 2)
    on, off = _both(model, X)
    assert_same(on, off)
    assert on.replayed_calls == 0


def test_real_run_fallback_is_exact():
    # nonzero has a data-dependent shape: the fake run gives up and the model runs for real,
    # where nothing is replayed.
    class Nonzero(Block):
        def forward(self, x):
            return super().forward(x)[x.sum(-1) >= 0]

    model = Stack([Nonzero() for _ in range(2)]).eval()
    on, off = _both(model, [torch.zeros(8, 16)])
    assert_same(on, off)
    assert on.replayed_calls == 0


TINY = {
    "llama-like": LLMConfig("tiny", vocab_size=100, hidden_size=64, num_layers=4, num_heads=4,
                            num_kv_heads=2, intermediate_size=128, max_position=64),
    "gpt2-like": LLMConfig("tiny-gpt", vocab_size=100, hidden_size=64, num_layers=3, num_heads=4,
                           num_kv_heads=4, intermediate_size=256, max_position=64,
                           norm="layernorm", mlp="gelu", position="learned", qkv_bias=True,
                           proj_bias=True, tied_embeddings=True),
    "mixtral-like": LLMConfig("tiny-moe", vocab_size=100, hidden_size=64, num_layers=3,
                              num_heads=4, num_kv_heads=2, intermediate_size=96,
                              max_position=64, num_experts=4, experts_per_token=2),
}


@pytest.mark.parametrize("attention", ["causal", "full"])
@pytest.mark.parametrize("cfg", TINY.values(), ids=TINY.keys())
def test_llm_presets_replay_exactly_with_attention_tallies(cfg, attention):
    # the attention-kernel tallies feed the report's note ("N causal attention kernel
    # call(s)..."): a replayed block adds its kernels too
    model = _on_meta(lambda: llm_models.build(cfg)).eval()
    ids = [torch.zeros(2, 16, dtype=torch.int64)]
    caps, tallies = [], []
    for reuse in (True, False):
        with attention_counting(attention) as counting:
            caps.append(capture.capture(model, ids, reuse_blocks=reuse))
        tallies.append(counting)
    assert_same(*caps)
    assert caps[0].replayed_calls >= cfg.num_layers - 1
    assert tallies[0] == tallies[1]
    assert tallies[0].causal_kernels == cfg.num_layers  # one SDPA call per block


class Scaled(Block):
    def forward(self, x, scale=1.0):
        y = super().forward(x)
        return y * scale if scale != 1.0 else y


class AsksSignature(Stack):
    """Reads its blocks' forward signature during forward (as some Hugging Face code does)."""

    def forward(self, x):
        for b in self.blocks:
            x = b(x, scale=2.0) if "scale" in inspect.signature(b.forward).parameters else b(x)
        return x


def test_forward_signature_is_kept_while_blocks_are_wrapped():
    model = AsksSignature([Scaled() for _ in range(3)]).eval()
    on, off = _both(model, X)
    assert_same(on, off)
    assert on.replayed_calls == 2
    # the wrapper's own signature (*args, **kwargs) would drop scale=2.0: one mul fewer a block
    assert on.modules["blocks.0"].forward.flops > 0
