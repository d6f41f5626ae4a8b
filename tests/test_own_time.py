"""Own time of a container = inclusive - its nearest *called* descendants' inclusive times.

nanoGPT keeps its blocks in ``nn.ModuleDict``/``nn.ModuleList`` containers that are never
called (the root's forward loops over them), as every Hugging Face decoder keeps its layers in
``model.layers``. Subtracting only the direct children counted the blocks twice (in the blocks'
rows and again in the container's ``(own ops)`` row): shares added up to far above 100%.
Hand-derived times with a fake clock; on real runs only invariants (no time asserted).
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import layerscope
from layerscope.training.watch import Watch
from tests.helpers import FakeClock


class Tick(nn.Module):
    """A leaf that takes ``seconds`` fake seconds per call (one op, one parameter)."""

    def __init__(self, clock, seconds):
        super().__init__()
        self.clock, self.seconds = clock, seconds
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, x):
        self.clock.advance(self.seconds)
        return x * self.w


class TickBlock(nn.Module):
    def __init__(self, clock):
        super().__init__()
        self.clock = clock
        self.ln_1, self.attn = Tick(clock, 0.001), Tick(clock, 0.003)
        self.ln_2, self.mlp = Tick(clock, 0.001), Tick(clock, 0.004)

    def forward(self, x):
        self.clock.advance(0.0005)  # the residual adds: the block's own code
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TickGPT(nn.Module):
    """nanoGPT's layout, with leaves that take known fake time."""

    def __init__(self, clock, n_layer=3):
        super().__init__()
        self.clock = clock
        self.transformer = nn.ModuleDict(dict(
            wte=Tick(clock, 0.001), wpe=Tick(clock, 0.001),
            h=nn.ModuleList([TickBlock(clock) for _ in range(n_layer)]),
            ln_f=Tick(clock, 0.001)))
        self.lm_head = Tick(clock, 0.002)

    def forward(self, x):
        self.clock.advance(0.0002)  # the root's own code
        x = self.transformer.wte(x) + self.transformer.wpe(x)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


# per forward: root own 0.2 ms; wte, wpe, ln_f 1 ms each; lm_head 2 ms; per block 0.5 ms own
# + 9 ms in its four leaves
TICK_WALL = 0.0002 + 0.003 + 0.002 + 3 * (0.0005 + 0.009)


def test_profile_own_times_are_hand_derived_with_a_fake_clock():
    clock = FakeClock()
    report = layerscope.profile(TickGPT(clock), inputs=(1, 4), runs=5, warmup=2,
                                roofline=False, clock=clock)
    rows = {r.name: r for r in report.layers}
    assert report.end_to_end["median_s"] == pytest.approx(TICK_WALL)
    # the root's own code only: not the blocks inside the never-called ModuleDict/ModuleList
    assert rows["(root)"].self_only
    assert rows["(root)"].time["median_s"] == pytest.approx(0.0002)
    for i in range(3):
        assert rows[f"transformer.h.{i}"].self_only
        assert rows[f"transformer.h.{i}"].time["median_s"] == pytest.approx(0.0005)
        assert rows[f"transformer.h.{i}.mlp"].time["median_s"] == pytest.approx(0.004)
    assert rows["lm_head"].time["median_s"] == pytest.approx(0.002)
    assert "transformer" not in rows and "transformer.h" not in rows  # containers: no own ops
    assert rows["(root)"].share == pytest.approx(0.0002 / TICK_WALL)
    assert sum(r.share for r in report.layers) == pytest.approx(1.0)
    assert report.coverage == pytest.approx(1.0)
    by_type = {d["type"]: d["share"] for d in report.by_type}
    assert by_type["TickGPT (own ops)"] == pytest.approx(0.0002 / TICK_WALL)
    assert by_type["TickBlock (own ops)"] == pytest.approx(3 * 0.0005 / TICK_WALL)


# ---- real runs: invariants only --------------------------------------------------------
class CausalSelfAttention(nn.Module):  # nanoGPT's model.py, small
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(n_embd), CausalSelfAttention(n_embd, n_head)
        self.ln_2, self.mlp = nn.LayerNorm(n_embd), MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab=64, block_size=16, n_layer=2, n_head=2, n_embd=16):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, n_embd), wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(0.0),
            h=nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT

    def forward(self, idx):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class DecoderAttention(nn.Module):  # the shape of a Hugging Face decoder's self_attn
    def __init__(self, d, heads):
        super().__init__()
        self.q_proj, self.k_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.v_proj, self.o_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.heads = heads

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = (p(x).view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, C))


class DecoderMLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.gate_proj = nn.Linear(d, 2 * d, bias=False)
        self.up_proj = nn.Linear(d, 2 * d, bias=False)
        self.down_proj, self.act_fn = nn.Linear(2 * d, d, bias=False), nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.input_layernorm, self.self_attn = RMSNorm(d), DecoderAttention(d, heads)
        self.post_attention_layernorm, self.mlp = RMSNorm(d), DecoderMLP(d)

    def forward(self, x, mask):
        x = x + self.self_attn(self.input_layernorm(x), mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderModel(nn.Module):
    def __init__(self, vocab, d, heads, n_layers):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([DecoderLayer(d, heads) for _ in range(n_layers)])
        self.norm = RMSNorm(d)

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        T = input_ids.shape[1]  # the causal mask is the model's own code, as in transformers
        mask = torch.full((T, T), float("-inf"), device=x.device).triu(1)
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class DecoderForCausalLM(nn.Module):
    def __init__(self, vocab=64, d=16, heads=2, n_layers=2):
        super().__init__()
        self.model = DecoderModel(vocab, d, heads, n_layers)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids))


def _ids():
    return torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))


@pytest.mark.integration
@pytest.mark.parametrize("make", [GPT, DecoderForCausalLM], ids=["nanogpt", "hf-decoder"])
def test_shares_of_rows_never_add_above_the_run(make):
    torch.manual_seed(0)
    report = layerscope.profile(make(), inputs=(_ids(),), runs=3, warmup=1, roofline=False)
    shares = [r.share for r in report.layers]
    assert all(s is not None and s >= -1e-9 for s in shares)
    assert sum(shares) <= 1.0 + 1e-9
    assert 0.0 < report.coverage <= 1.0 + 1e-9
    assert sum(d["share"] for d in report.by_type) == pytest.approx(sum(shares), abs=1e-12)


@pytest.mark.integration
def test_sweep_type_shares_never_add_above_the_run():
    torch.manual_seed(0)
    rep = layerscope.sweep(GPT(), inputs=(_ids(),), runs=3, warmup=1)
    (cell,) = rep.cells
    assert cell.status == "ok", cell.error
    assert sum(d["share"] for d in cell.by_type) <= 1.0 + 1e-9
    assert all(not math.isnan(d["share"]) for d in cell.by_type)


# ---- watch(layers=True): the layer table counts the phase table's steps ---------------
def test_watch_layers_leave_warmup_out_like_the_phases():
    clock = FakeClock()
    model = TickGPT(clock)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.ones(2, 4)
    with Watch(model, opt, warmup_steps=2, layers=True, clock=clock) as w:
        for _ in range(5):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        model(x).sum().backward()  # a step never closed: in neither table
    r = w.report()
    rows = {row["name"]: row for row in r.layers}
    measured = r.breakdown["steps"]
    assert measured == 3
    root = rows["TickGPT"]
    assert root["calls"] == measured
    assert rows["transformer.h.0.mlp"]["calls"] == measured
    assert root["forward_s"] == pytest.approx(r.breakdown["seconds"]["forward"])
    assert root["forward_s"] == pytest.approx(measured * TICK_WALL)
    assert root["forward_s_per_step"] == pytest.approx(TICK_WALL)


def test_watch_layers_own_time_skips_never_called_containers():
    """The root's own forward time is its own code only (0.2 ms a step), not the blocks that
    sit in the never-called ModuleDict/ModuleList; own times of the called modules add up to
    the root's inclusive time."""
    clock = FakeClock()
    model = TickGPT(clock)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with Watch(model, opt, warmup_steps=1, layers=True, clock=clock) as w:
        for _ in range(3):
            opt.zero_grad()
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
    r = w.report()
    rows = {row["name"]: row for row in r.layers}
    assert rows["TickGPT"]["own_s"] == pytest.approx(2 * 0.0002)
    assert rows["transformer.h.1"]["own_s"] == pytest.approx(2 * 0.0005)
    assert rows["transformer.h.1.mlp"]["own_s"] == pytest.approx(2 * 0.004)
    assert sum(row["own_s"] for row in r.layers) == pytest.approx(rows["TickGPT"]["forward_s"])
    assert "transformer" not in rows and "transformer.h" not in rows  # never called
    from layerscope.renderers import render
    assert "Own ms / step" in render(r, "table", width=200)
