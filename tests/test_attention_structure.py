"""Masked attention counted by the structure the config states (analysis/attention_structure.py):
a scaled-dot-product call given a mask tensor inside decoder layer i counts layer i's causal,
sliding-window or chunked scores, not the whole matrix; ``analyze hf:`` then gives the prefill
MACs ``llm`` gives; replayed blocks stay exact (a sliding layer's record never replays a global
layer's call). Expected numbers are derived by hand in the comments."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from layerscope.analysis import attention_structure, capture
from layerscope.analysis.analyze import analyze
from layerscope.analysis.attention_structure import LayerMasks
from layerscope.analysis.llm import llm
from layerscope.frontends.llm_attention import CAUSAL, CHUNKED, SLIDING, UNKNOWN, LayerAttention
from layerscope.ops.aten import attention_counting


def _layer(kind, window=None, chunk=None):
    return LayerAttention(kind, 2, 2, 8, 8, 32, window=window, chunk=chunk)


# ---------------------------------------------------------------- scores per head
@pytest.mark.parametrize("layer,lq,lk,expected", [
    (_layer(CAUSAL), 16, 16, 136),  # 16 x 17 / 2
    (_layer(SLIDING, 4), 16, 16, 58),  # 1 + 2 + 3 + 4 + 12 x 4
    (_layer(SLIDING, 16), 16, 16, 136),  # the window covers the prompt
    # two new queries after 8 cached keys: positions 8 and 9 see 9 and 10 keys; window 4: 4 + 4
    (_layer(CAUSAL), 2, 10, 19),
    (_layer(SLIDING, 4), 2, 10, 8),
    (_layer(SLIDING, 4), 1, 3, 3),  # position 2 sees keys 0..2
    # chunks of 4: positions 3, 4, 5 see 4, 1, 2 keys
    (_layer(CHUNKED, chunk=4), 3, 6, 7),
    (_layer(UNKNOWN), 16, 16, None),
    (_layer(CAUSAL), 4, 2, None),  # more queries than keys: not this layout
], ids=["causal", "window", "window-covers", "cached-causal", "cached-window", "one-token",
        "chunked", "unknown", "lq>lk"])
def test_scores_of_the_last_lq_of_lk_keys(layer, lq, lk, expected):
    assert attention_structure.scores(layer, lq, lk) == expected


# ---------------------------------------------------------------- replayed blocks stay exact
class MaskedBlock(nn.Module):
    """One attention block called with a mask tensor: 2 heads of 8, q/k/v from one linear."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.heads = heads

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return x + y.transpose(1, 2).reshape(b, s, d)


class MaskedStack(nn.Module):
    def __init__(self, layers=4):
        super().__init__()
        self.layers = nn.ModuleList(MaskedBlock() for _ in range(layers))

    def forward(self, x, mask):
        for block in self.layers:
            x = block(x, mask)
        return x


def test_replay_never_copies_a_sliding_layer_to_a_global_one():
    # local, global, local, global: blocks 2 and 3 may replay blocks 0 and 1, never each other
    layers = [_layer(SLIDING, 4), _layer(CAUSAL)] * 2
    with torch.device("meta"):
        model = MaskedStack().eval()
    inputs = [torch.zeros(1, 16, 16), torch.zeros(1, 1, 16, 16, dtype=torch.bool)]
    caps, tallies = [], []
    for reuse in (True, False):
        masks = LayerMasks(model.layers, layers)
        with attention_counting("causal", masks) as counting, masks:
            caps.append(capture.capture(model, inputs, reuse_blocks=reuse))
        tallies.append((counting.structured_kernels, counting.masked_kernels,
                        counting.causal_kernels, masks.describe()))
    on, off = caps
    for name in off.order:
        assert dataclasses.asdict(on.modules[name]) == dataclasses.asdict(off.modules[name]), name
    assert on.replayed_calls >= 2 and off.replayed_calls == 0
    assert tallies[0] == tallies[1] == (4, 0, 0, "sliding window 4 in 2 layers, causal in 2 "
                                                 "layers")
    # each block's own ops (its linear is a row of its own): 2 heads x (8 + 8) MACs per score,
    # window 58 scores, causal 136
    attention = {f"layers.{i}": 2 * 16 * (58 if i % 2 == 0 else 136) for i in range(4)}
    assert {n: on.modules[n].forward.macs for n in attention} == attention


def test_without_a_structure_or_outside_the_blocks_the_whole_matrix_counts():
    with torch.device("meta"):
        model = MaskedStack(2).eval()
    inputs = [torch.zeros(1, 16, 16), torch.zeros(1, 1, 16, 16, dtype=torch.bool)]
    masks = LayerMasks([], [])  # no block known
    with attention_counting("causal", masks) as counting, masks:
        cap = capture.capture(model, inputs)
    assert (counting.structured_kernels, counting.masked_kernels) == (0, 2)
    assert cap.modules["layers.0"].forward.macs == 2 * 16 * 256
    masks = LayerMasks(model.layers, [_layer(SLIDING, 4)] * 2)
    with attention_counting("full", masks) as counting, masks:  # full: every score
        cap = capture.capture(model, inputs)
    assert (counting.structured_kernels, counting.masked_kernels) == (0, 2)
    assert cap.modules["layers.1"].forward.macs == 2 * 16 * 256


# ---------------------------------------------------------------- analyze hf: agrees with llm
BASE = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
        "tie_word_embeddings": False}
# name: config, (layers, heads x (qk + v) per score, scores per head at 16 tokens) per group,
# the note's description
HF = {
    # Mistral-shaped: the window 4 < 16 tokens on every layer; 4 heads x (16 + 16)
    "mistral": ({**BASE, "architectures": ["MistralForCausalLM"], "model_type": "mistral",
                 "sliding_window": 4}, [(3, 128, 58)], "sliding window 4 in 3 layers", 3),
    # Qwen2 with use_sliding_window: the window from layer max_window_layers = 2 on; its global
    # layers pass no mask (is_causal), its window layer one
    "qwen2": ({**BASE, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
               "sliding_window": 4, "use_sliding_window": True, "max_window_layers": 2},
              [(2, 128, 136), (1, 128, 58)], "sliding window 4 in 1 layer", 1),
    # Gemma-3 local/global layers (head_dim 16 given separately)
    "gemma3": ({**BASE, "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
                "head_dim": 16, "sliding_window": 4, "layer_types": [
                    "sliding_attention", "full_attention", "sliding_attention"]},
               [(2, 128, 58), (1, 128, 136)], "sliding window 4 in 2 layers", 2),
    # Falcon-7B-shaped (multi-query) passes a causal mask on every layer: 4 heads of 16
    "falcon": ({"architectures": ["FalconForCausalLM"], "model_type": "falcon",
                "vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 4, "multi_query": True, "parallel_attn": True,
                "bias": False, "alibi": False}, [(2, 128, 136)], "causal in 2 layers", 2),
}


@pytest.mark.integration
@pytest.mark.parametrize("name", HF)
def test_analyze_hf_counts_masked_calls_by_the_config(name, tmp_path):
    pytest.importorskip("transformers")
    data, groups, described, masked = HF[name]
    (tmp_path / "config.json").write_text(json.dumps(data))
    spec = f"hf:{tmp_path}"
    counted = analyze(spec, seq_len=16, batch_size=2)
    full = analyze(spec, seq_len=16, batch_size=2, attention="full")
    # the whole matrix is 256 scores per head: full counts that many, causal what the mask lets
    # each query see; 2 sequences
    assert full.totals.macs - counted.totals.macs == sum(
        2 * n * per_score * (256 - scores) for n, per_score, scores in groups)
    assert counted.totals.macs == llm(spec, seq_len=16, batch_size=2).prefill.macs
    note = (f"{masked} masked attention kernel call(s) counted by the config's structure: "
            f"{described} (")
    assert any(n.startswith(note) for n in counted.notes), counted.notes
    assert not any("with a mask tensor counted as the whole" in n for n in counted.notes)
    assert not any("counted by the config's structure" in n for n in full.notes)


@pytest.mark.integration
def test_mistral_shaped_training_step_counts_the_window_forward_and_backward(tmp_path):
    pytest.importorskip("transformers")
    data = HF["mistral"][0]
    (tmp_path / "config.json").write_text(json.dumps(data))
    spec = f"hf:{tmp_path}"
    counted, full = (analyze(spec, seq_len=16, mode="training", attention=a)
                     for a in ("causal", "full"))
    # forward as in inference: 3 layers x 4 heads x (16 + 16) x (256 - 58); the backward
    # kernel recomputes the scores and makes 4 gradient products: 5 x 16 MACs per score
    assert full.totals.macs - counted.totals.macs == 3 * 4 * 32 * (256 - 58)
    assert full.totals.backward_macs - counted.totals.backward_macs == 3 * 4 * 80 * (256 - 58)
    assert any(n.startswith("6 masked attention kernel call(s) counted by the config's "
                            "structure: sliding window 4 in 3 layers") for n in counted.notes)


# ---------------------------------------------------------------- no figure called causal that
# was counted full (llm, plan)
def test_llm_as_traced_never_labels_its_layers_causal():
    # the toy's attention written out as matmuls does not match a description claiming 8
    # heads: llm counts as traced, and each layer group says so too, not "causal"
    from llm_toy import build_toy, toy_config

    from layerscope.analysis import llm as llm_mod
    from layerscope.frontends import llm_attention

    cfg = toy_config()
    wrong = llm_attention.uniform(cfg.num_layers, 8, 8, 16)
    r = llm(llm_mod.LLMSource("toy", cfg, build_toy, attention=wrong), seq_len=16)
    assert r.attention_count == "as traced"
    assert [g.counted for g in r.attention_layers] == ["as traced"]


GEMMA2 = {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "vocab_size": 256,
          "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
          "sliding_window": 4, "max_position_embeddings": 512}


@pytest.mark.integration
def test_eager_attention_is_counted_by_structure_in_llm_and_analyze(tmp_path):
    # Gemma-2 runs eager attention (soft-capping): its scores are matmuls. llm counts them from
    # the description, analyze by each layer's mask (the matmuls of the layer's attention
    # module), and both say so. Layers local, global: 4 heads x (16 + 16) per score, 256 - 58
    # and 256 - 136 scores fewer per head than the whole matrices
    pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps(GEMMA2))
    spec = f"hf:{tmp_path}"
    r = llm(spec, seq_len=16)
    full = llm(spec, seq_len=16, attention="full")
    fewer = 128 * (256 - 58) + 128 * (256 - 136)
    assert full.prefill.macs - r.prefill.macs == fewer
    assert [(g.kind, g.counted) for g in r.attention_layers] == [
        (SLIDING, "causal, window 4"), (CAUSAL, "causal")]
    assert [g.counted for g in full.attention_layers] == ["full", "full"]
    assert any("eager attention" in n and "counted from the config's attention description"
               in n for n in r.notes)
    a = analyze(spec, seq_len=16)
    assert (a.totals.macs, a.totals.flops) == (r.prefill.macs, r.prefill.flops)
    assert any(n.startswith("eager attention") and "of 2 layer(s) are counted by the config's "
               "structure, sliding window 4 in 1 layer, causal in 1 layer" in n
               for n in a.notes)
    whole = analyze(spec, seq_len=16, attention="full")
    assert whole.totals.macs - a.totals.macs == fewer
    assert any("whole matrix is counted" in n for n in whole.notes)


def test_plan_labels_no_attention_count(tmp_path):
    # plan counts memory, not attention scores: nothing in its report or view says "causal"
    pytest.importorskip("transformers")
    from layerscope.analysis.plan import plan
    from layerscope.views.llm import plan_facts

    (tmp_path / "config.json").write_text(json.dumps(HF["mistral"][0]))
    p = plan(f"hf:{tmp_path}", 2, seq_len=16)
    shown = json.dumps({k: v for k, v in p.to_dict().items() if k != "config"})
    assert "causal" not in shown and "causal" not in json.dumps(plan_facts(p))
