"""LLM families whose structure a count must read, not assume: experts computed densely (counted
as the router's top-k), attention whose values are narrower than its keys (multi-head latent
attention), eager attention (counted by each layer's mask), hybrids of attention and
state-space layers (models of their first layers hold an attention layer; only attention
layers have a KV cache), and sizes a config leaves to transformers' defaults (named).
Small configs, built on the meta device; expected figures derived by hand in the comments."""
from __future__ import annotations

import json

import pytest
import torch

from layerscope.analysis import llm as llm_mod
from layerscope.analysis import llm_structure
from layerscope.analysis.analyze import analyze
from layerscope.analysis.llm import llm
from layerscope.analysis.plan import measure_activations, measure_saved, plan

pytest.importorskip("transformers")


def _spec(tmp_path, data, name="model"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    return f"hf:{folder / 'config.json'}"


BASE = {"vocab_size": 256, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 512,
        "tie_word_embeddings": False}

# Llama-4: transformers runs every token through all E experts (Llama4TextExperts: one bmm
# over (E, tokens, hidden)), the unrouted ones weighted 0
LLAMA4 = {**BASE, "model_type": "llama4_text", "num_hidden_layers": 2, "intermediate_size": 32,
          "intermediate_size_mlp": 128, "num_local_experts": 4, "num_experts_per_tok": 1,
          "interleave_moe_layer_step": 1, "attention_chunk_size": 8192}


@pytest.mark.integration
def test_llama4_experts_are_counted_as_the_routers_top_k(tmp_path):
    # Per token and layer: attention q 64x64 + k, v 64x32 + o 64x64 = 12,288; router 64x4 =
    # 256; shared expert 3 x 64 x 32 = 6,144; routed experts k = 1 of 4: 6,144 (all four, as
    # traced before: 24,576). Head 64 x 256 = 16,384. 8 tokens: 8 x (2 x 24,832 + 16,384) =
    # 528,384; causal attention 2 layers x 4 heads x 36 scores x (16 + 16) = 9,216.
    spec = _spec(tmp_path, LLAMA4)
    a = analyze(spec, seq_len=8)
    assert a.totals.macs == 528_384 + 9_216
    assert any("ran every token through all 4 experts" in n and "top-1" in n for n in a.notes)
    r = llm(spec, seq_len=8)
    assert (r.prefill.macs, r.prefill.flops) == (a.totals.macs, a.totals.flops)
    # decode at context 8: one token, 2 x 24,832 + 16,384, and 9 keys per head and layer
    assert r.decode.macs_per_token == 2 * 24_832 + 16_384 + 2 * 4 * 9 * 32


@pytest.mark.integration
def test_plan_counts_a_dense_mixtures_per_expert_tensors_k_over_e(tmp_path):
    # One Llama-4 block, 8 tokens, bf16: what it saves per (token, expert) pair, for all 4
    # experts: the copies of the tokens (E*T x 64: 4,096 B), their router weights (E*T x 1:
    # 64 B), the weighted copies (4,096 B), gate_up (E x T x 64: 4,096 B), SiLU's output
    # (E x T x 32: 2,048 B) and up x SiLU (2,048 B): 16,448 B, of which a top-1 router's
    # implementation saves 1/4: 12,336 B fewer
    source = llm_mod.resolve_llm(_spec(tmp_path, LLAMA4))
    model = source.build(llm_mod.with_layers(source.config, 1))
    dense = measure_saved(model, 1, 8, torch.bfloat16, "cuda")
    routed = measure_saved(model, 1, 8, torch.bfloat16, "cuda", route=(1, 4))
    assert dense.total - routed.total == 16_448 * 3 // 4
    # the whole model's figure is the grouped one, and plan reports it
    m = measure_activations(source, 1, 8, "bf16")
    full = measure_saved(source.build(source.config), 1, 8, torch.bfloat16, m.device,
                         route=(1, 4))
    assert sum(g.per_layer * g.layers for g in m.groups) + m.other == full.total


# DeepSeek-V2-shaped multi-head latent attention: queries and keys 16 + 8 = 24 wide, values 16
DSV2 = {**BASE, "model_type": "deepseek_v2", "num_hidden_layers": 2, "num_key_value_heads": 4,
        "intermediate_size": 128, "moe_intermediate_size": 32, "kv_lora_rank": 16,
        "q_lora_rank": None, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
        "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
        "first_k_dense_replace": 2}
del DSV2["head_dim"]


def test_analyze_counts_latent_attention_causal_as_llm_does(tmp_path):
    # PyTorch's CPU flash kernel takes one head width: a call with values narrower than keys
    # used to fall back to the math path, every score counted. Causal: 16 x 17 / 2 = 136 of
    # 256 scores per head; 2 layers x 4 heads x (24 + 16) x 120 = 38,400 MACs fewer than whole
    spec = _spec(tmp_path, DSV2)
    a = analyze(spec, seq_len=16)
    whole = analyze(spec, seq_len=16, attention="full")
    assert whole.totals.macs - a.totals.macs == 2 * 4 * 40 * 120
    assert any("2 causal attention kernel call(s)" in n for n in a.notes)
    r = llm(spec, seq_len=16)
    assert (a.totals.macs, a.totals.flops) == (r.prefill.macs, r.prefill.flops)


# gpt-oss: attention sinks, eager only; a window of 4 on layer 0, causal on layer 1
GPT_OSS = {**BASE, "model_type": "gpt_oss", "num_hidden_layers": 2, "intermediate_size": 128,
           "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 4,
           "layer_types": ["sliding_attention", "full_attention"]}


@pytest.mark.integration
def test_analyze_counts_eager_sink_attention_by_each_layers_mask(tmp_path):
    # 16 tokens, 4 heads x (16 + 16) per score: window 4 sees 4 x 5 / 2 + 12 x 4 = 58 of 256,
    # causal 136: (198 + 120) x 128 = 40,704 MACs fewer than the whole matrices
    spec = _spec(tmp_path, GPT_OSS)
    a = analyze(spec, seq_len=16)
    whole = analyze(spec, seq_len=16, attention="full")
    assert whole.totals.macs - a.totals.macs == (198 + 120) * 128
    r = llm(spec, seq_len=16)
    assert (a.totals.macs, a.totals.flops) == (r.prefill.macs, r.prefill.flops)
    assert any("counted by the config's structure, sliding window 4 in 1 layer, causal in 1 "
               "layer" in n for n in a.notes)


# hybrids: their first layer has no attention (transformers' layer types in the comments)
HYBRIDS = {
    # Jamba: attention on layer 2 (attn_layer_offset), Mamba elsewhere; experts on odd layers
    "jamba": {**BASE, "model_type": "jamba", "num_hidden_layers": 4, "intermediate_size": 128,
              "num_experts": 4, "num_experts_per_tok": 2, "attn_layer_period": 4,
              "attn_layer_offset": 2, "expert_layer_period": 2, "expert_layer_offset": 1,
              "mamba_d_state": 4, "mamba_dt_rank": 8},
    # Qwen3-Next: linear attention, then full attention every 2nd layer
    "qwen3-next": {**BASE, "model_type": "qwen3_next", "num_hidden_layers": 4,
                   "intermediate_size": 128, "num_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
                   "full_attention_interval": 2, "linear_num_key_heads": 2,
                   "linear_num_value_heads": 4, "linear_key_head_dim": 16,
                   "linear_value_head_dim": 16},
    # Granite-4.0-H: Mamba-2 layers and one attention layer, experts everywhere
    "granite-4-h": {**BASE, "model_type": "granitemoehybrid", "num_hidden_layers": 4,
                    "intermediate_size": 128, "num_local_experts": 4,
                    "num_experts_per_tok": 2, "shared_intermediate_size": 64,
                    "layer_types": ["mamba", "attention", "mamba", "mamba"], "mamba_n_heads": 8,
                    "mamba_d_head": 16, "mamba_d_state": 8, "mamba_chunk_size": 16},
    # Nemotron-H: one character per layer, Mamba, attention, MLP alone
    "nemotron-h": {**BASE, "model_type": "nemotron_h", "num_hidden_layers": 3,
                   "intermediate_size": 128, "hybrid_override_pattern": "M*-",
                   "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 8,
                   "n_groups": 1, "chunk_size": 16},
}
# the attention layers of each (index), for the KV cache: K and V of 2 heads x 16, bf16
ATTENDING = {"jamba": [2], "qwen3-next": [1, 3], "granite-4-h": [1], "nemotron-h": [1]}


@pytest.mark.integration
@pytest.mark.parametrize("family", list(HYBRIDS))
def test_hybrids_are_counted_from_models_that_hold_an_attention_layer(family, tmp_path):
    # before: the model of the first layer held no attention layer and transformers failed
    # building its masks; every layer was given a KV cache
    spec = _spec(tmp_path, HYBRIDS[family])
    r = llm(spec, seq_len=16, context=16)
    whole = analyze(spec, seq_len=16).totals
    assert (r.params_total, r.prefill.macs) == (whole.params, whole.macs)
    attending = ATTENDING[family]
    assert r.kv_cache.bytes_per_token == len(attending) * 2 * 2 * 16 * 2
    assert r.kv_cache.bytes_total == 16 * r.kv_cache.bytes_per_token
    assert r.attention_count == "causal"
    assert sum(g.layers for g in r.attention_layers if g.kind == "recurrent") == \
        HYBRIDS[family]["num_hidden_layers"] - len(attending)
    assert any("have no softmax attention" in n for n in r.notes)
    p = plan(spec, 8, seq_len=16)
    assert p.params_total == whole.params


@pytest.mark.integration
@pytest.mark.parametrize("family", ["jamba", "nemotron-h"])
def test_hybrid_activations_grouped_equal_the_full_model(family, tmp_path):
    # Jamba's first attention layer is layer 2: its dense Mamba layer 0 has no member after
    # it, so its block is what layer 0's block saved in the model of the first 3 layers
    source = llm_mod.resolve_llm(_spec(tmp_path, HYBRIDS[family]))
    m = measure_activations(source, 1, 16, "bf16")
    route = (source.config.experts_per_token, source.config.num_experts)
    full = measure_saved(source.build(source.config), 1, 16, torch.bfloat16, m.device, route)
    assert sum(g.per_layer * g.layers for g in m.groups) + m.other == full.total


@pytest.mark.parametrize("keys,start,terms", [
    ("mmamm", 3, {3: -1, 4: 2}),  # the first 3 layers, then 2 x the block of layer 3
    ("abcab", 3, {5: 1}),  # a's and b's blocks at 3 and 4: the whole model
    ("aaaa", 1, {1: -2, 2: 3}),  # start 1: as before
])
def test_prefix_terms_from_the_first_attention_layer(keys, start, terms):
    got = llm_structure.prefix_terms(list(keys), start)
    assert got == terms
    assert min(got) >= start
    cost = {"a": 3, "m": 50, "b": 700, "c": 9000}

    def prefix(n):
        return 1000 + sum(cost[k] for k in keys[:n])

    assert sum(c * prefix(n) for n, c in got.items()) == prefix(len(keys))


def test_per_layer_lists_and_patterns_are_cut_with_the_layers():
    data = {"model_type": "nemotron_h", "num_hidden_layers": 3,
            "hybrid_override_pattern": "M*-", "layers_block_type": ["mamba", "attention", "mlp"],
            "eos_token_id": [1, 2], "some_pattern_name": "xy"}
    out = llm_mod.with_layer_count(data, "num_hidden_layers", 2)
    assert out["hybrid_override_pattern"] == "M*"
    assert out["layers_block_type"] == ["mamba", "attention"]
    assert out["eos_token_id"] == [1, 2] and out["some_pattern_name"] == "xy"


LLAMA_NO_VOCAB = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1}


@pytest.mark.integration
def test_a_size_the_config_leaves_to_transformers_is_named(tmp_path):
    # transformers' LlamaConfig gives 32000 tokens to a config without vocab_size: the head
    # alone is 64 x 32,000 MACs per token, so the count depends on it
    spec = _spec(tmp_path, LLAMA_NO_VOCAB)
    line = "the config does not give vocab_size: counted with the default of transformers' " \
        "llama configuration (vocab_size = 32000)"
    r = llm(spec, seq_len=4)
    assert r.config["vocab_size"] == 32000 and any(line in n for n in r.notes)
    assert any(line in n for n in analyze(spec, seq_len=4).notes)
    assert any(line in n for n in plan(spec, 8, seq_len=4).notes)
    given = _spec(tmp_path, {**LLAMA_NO_VOCAB, "vocab_size": 300}, "given")
    assert not any("does not give" in n for n in llm(given, seq_len=4).notes)


# Falcon-H1: every layer runs attention and a Mamba-2 mixer side by side (layer type "hybrid")
FALCON_H1 = {**BASE, "model_type": "falcon_h1", "num_hidden_layers": 2, "intermediate_size": 128,
             "mamba_n_heads": 4, "mamba_d_head": 16, "mamba_d_ssm": 64, "mamba_d_state": 8,
             "mamba_n_groups": 1, "mamba_chunk_size": 16, "mamba_d_conv": 4}


@pytest.mark.integration
def test_falcon_h1_hybrid_layers_attend_causally_beside_their_mixer(tmp_path):
    # before: the "hybrid" layer type was an unknown attention, counted as the whole matrix
    spec = _spec(tmp_path, FALCON_H1)
    r = llm(spec, seq_len=16, context=16)
    a = analyze(spec, seq_len=16)
    assert (r.params_total, r.prefill.macs) == (a.totals.params, a.totals.macs)
    assert r.attention_count == "causal"
    # both layers cache K and V of 2 heads x 16, bf16: 2 x 2 x 2 x 16 x 2 bytes per token
    assert r.kv_cache.bytes_per_token == 256
    # causal scores: 2 layers x 4 heads x 136 scores x 32 MACs fewer than the whole matrix
    full = llm(spec, seq_len=16, context=16, attention="full")
    assert full.prefill.macs - r.prefill.macs == 2 * 4 * 120 * 32
    assert any("2 of 2 layers run a state-space mixer beside their attention" in n
               for n in r.notes)
