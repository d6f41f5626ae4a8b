"""Attention as the model defines it (frontends/llm_attention.py, analysis/llm_structure.py):
per-layer descriptions read from Hugging Face configs (sliding windows, local/global patterns,
multi-head latent attention, multi-/grouped-query, Falcon's keys), score counts with a window,
decode against min(L + 1, W) keys, and KV-cache bytes per layer kind. Configs are written here,
small; the expected numbers are derived by hand in the comments."""
from __future__ import annotations

import json

import pytest

from layerscope.analysis import llm as llm_mod
from layerscope.analysis import llm_structure
from layerscope.analysis.analyze import analyze
from layerscope.analysis.llm import llm
from layerscope.core.errors import UserError
from layerscope.frontends import llm_attention
from layerscope.frontends.llm_attention import (
    CAUSAL,
    CHUNKED,
    MLA,
    SLIDING,
    UNKNOWN,
    LayerAttention,
)

C, S, U = CAUSAL, SLIDING, UNKNOWN


def _kinds(data):
    return [a.kind for a in llm_attention.from_hf(data)]


def _dense(**extra):
    return {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 512, **extra}


# ---------------------------------------------------------------- descriptions from configs
@pytest.mark.parametrize("extra,kinds", [
    ({"model_type": "llama"}, [C, C, C, C]),
    ({"model_type": "mistral", "sliding_window": 8}, [S, S, S, S]),
    ({"model_type": "mistral", "sliding_window": None}, [C, C, C, C]),
    # Qwen2: the window from layer max_window_layers on, only with use_sliding_window
    ({"model_type": "qwen2", "sliding_window": 8, "use_sliding_window": True,
      "max_window_layers": 2}, [C, C, S, S]),
    ({"model_type": "qwen2", "sliding_window": 8, "use_sliding_window": False,
      "max_window_layers": 2}, [C, C, C, C]),
    # Qwen2-MoE: every other layer from the first, below max_window_layers
    ({"model_type": "qwen2_moe", "sliding_window": 8, "use_sliding_window": True,
      "max_window_layers": 3}, [S, C, S, C]),
    # Gemma-2: local/global alternating; Gemma-3 and an explicit pattern: each p-th is global
    ({"model_type": "gemma2", "sliding_window": 8}, [S, C, S, C]),
    ({"model_type": "gemma3_text", "sliding_window": 8, "sliding_window_pattern": 3},
     [S, S, C, S]),
    ({"model_type": "cohere2", "sliding_window": 8}, [S, S, S, C]),
    # explicit layer_types win; a type without a known mask is "unknown"
    ({"model_type": "qwen3", "sliding_window": 8, "layer_types": [
        "full_attention", "sliding_attention", "chunked_attention", "full_attention"]},
     [C, S, U, C]),
])
def test_layer_kinds(extra, kinds):
    assert _kinds(_dense(**extra)) == kinds


@pytest.mark.parametrize("model_type,extra", [
    ("qwen2", {"use_sliding_window": True, "max_window_layers": 2}),
    ("qwen2_moe", {"use_sliding_window": True, "max_window_layers": 3}),
    ("gemma2", {}), ("gemma3_text", {"sliding_window_pattern": 3}), ("cohere2", {}),
    ("qwen3", {"use_sliding_window": True, "max_window_layers": 1}),
])
def test_layer_kinds_agree_with_transformers_config_classes(model_type, extra, monkeypatch):
    # the rules used without transformers give the layer types its configuration classes do
    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(llm_attention, "_resolved_layer_types", lambda data, layers: None)
    data = _dense(model_type=model_type, sliding_window=8, **extra)
    config = transformers.AutoConfig.for_model(**data)
    theirs = [{"full_attention": C, "sliding_attention": S}[t] for t in config.layer_types]
    assert _kinds(data) == theirs


def test_head_dim_given_separately_and_gqa():
    # 4 heads of 32 (not 64/4 = 16), 2 KV heads: the cache holds 2 x 2 x 32 values per layer
    (a, *_) = llm_attention.from_hf(_dense(model_type="qwen3", head_dim=32))
    assert (a.heads, a.kv_heads, a.qk_head_dim, a.v_head_dim, a.cache_elements) == (
        4, 2, 32, 32, 128)


@pytest.mark.parametrize("data,per_token", [
    # DeepSeek-V2-Lite: 27 layers caching the 512-value latent and the 64-value rotary key,
    # bf16: 27 x (512 + 64) x 2 = 31,104 bytes per token
    ({"model_type": "deepseek_v2", "hidden_size": 2048, "num_hidden_layers": 27,
      "num_attention_heads": 16, "num_key_value_heads": 16, "kv_lora_rank": 512,
      "q_lora_rank": None, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
      "v_head_dim": 128}, 31_104),
    # Falcon-7B: multi_query, 71 heads of 4544 / 71 = 64: one KV head,
    # 32 layers x 2 (K, V) x 1 x 64 x 2 bytes = 8,192
    ({"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32,
      "num_attention_heads": 71, "multi_query": True}, 32 * 2 * 1 * 64 * 2),
    # Falcon-40B: new decoder architecture with 8 KV heads of 8192 / 128 = 64:
    # 60 x 2 x 8 x 64 x 2 = 122,880
    ({"model_type": "falcon", "hidden_size": 8192, "num_hidden_layers": 60,
      "num_attention_heads": 128, "new_decoder_architecture": True, "num_kv_heads": 8},
     122_880),
    # Falcon with multi_query false: multi-head, 4 layers x 2 x 8 x 8 x 2
    ({"model_type": "falcon", "hidden_size": 64, "num_hidden_layers": 4,
      "num_attention_heads": 8, "multi_query": False}, 4 * 2 * 8 * 8 * 2),
    # GPT-BigCode (SantaCoder): multi_query, one KV head of 2048 / 16 = 128:
    # 24 layers x 2 x 1 x 128 x 2 bytes = 12,288; multi_query false: 16 heads, 16 x that;
    # without the key its configuration's default (multi-query)
    ({"model_type": "gpt_bigcode", "n_embd": 2048, "n_head": 16, "n_layer": 24,
      "multi_query": True}, 12_288),
    ({"model_type": "gpt_bigcode", "n_embd": 2048, "n_head": 16, "n_layer": 24,
      "multi_query": False}, 16 * 12_288),
    ({"model_type": "gpt_bigcode", "n_embd": 2048, "n_head": 16, "n_layer": 24}, 12_288),
    # GPT-2 (same keys): multi-head, 12 x 2 x 12 x 64 x 2 = 36,864
    ({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12}, 36_864),
    # Mistral-7B: 32 layers x 2 x 8 KV heads x 128 x 2 = 131,072
    ({"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 8, "sliding_window": 4096}, 131_072),
])
def test_kv_bytes_per_token(data, per_token):
    layers = llm_attention.from_hf(data)
    assert llm_mod.nbytes(llm_structure.kv_elements(layers), "bf16") == per_token


def test_deepseek_v2_lite_scores_use_the_full_query_and_value_heads():
    (a, *_) = llm_attention.from_hf({
        "model_type": "deepseek_v2", "hidden_size": 2048, "num_hidden_layers": 27,
        "num_attention_heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128, "v_head_dim": 128})
    # each head's key is nope + rope = 192 wide, its value 128
    assert (a.kind, a.heads, a.qk_head_dim, a.v_head_dim, a.cache_elements) == (
        MLA, 16, 192, 128, 576)


@pytest.mark.parametrize("data,message", [
    (_dense(model_type="qwen3", sliding_window=8, layer_types=["full_attention"]),
     "one type per layer"),
    (_dense(model_type="qwen3", layer_types=["sliding_attention"] * 4), "no sliding_window"),
    (_dense(model_type="mistral", sliding_window=0), "sliding_window"),
    (_dense(model_type="llama", num_key_value_heads=3), "not a multiple of 3 key/value"),
    ({"model_type": "llama", "hidden_size": 64}, "no 'num_hidden_layers'"),
])
def test_bad_configs_are_one_line(data, message):
    with pytest.raises(UserError, match=message):
        llm_attention.from_hf(data, "hf:x")


# ---------------------------------------------------------------- score counts
@pytest.mark.parametrize("seq,window,scores", [
    (8, None, 36),  # 8 x 9 / 2
    (8, 8, 36), (8, 100, 36),  # a window at least s long changes nothing
    (8, 3, 3 * 4 // 2 + 5 * 3),  # 1 + 2 + 3, then 3 keys for each of the 5 others = 21
    (1, 1, 1),
    # Mistral-7B at 8192 tokens with its 4096 window: 4096 x 4097 / 2 + 4096 x 4096
    (8192, 4096, 8_390_656 + 16_777_216),
])
def test_prefill_scores_sum_min_i_plus_1_w(seq, window, scores):
    a = LayerAttention(SLIDING if window else CAUSAL, 1, 1, 1, 1, 2, window)
    assert a.prefill_scores(seq) == scores
    assert scores == sum(a.keys(i) for i in range(seq))  # the definition, summed


def test_mistral_7b_shaped_prefill_and_decode_at_8192():
    layers = llm_attention.from_hf({
        "model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "sliding_window": 4096})
    # prefill: 32 layers x 32 heads x 25,167,872 scores x (128 + 128) MACs
    macs, flops = llm_structure.prefill_attention(layers, 1, 8192, "causal")
    assert macs == 32 * 32 * 25_167_872 * 256
    assert flops == 2 * macs + 6 * 32 * 32 * 25_167_872  # scale + softmax (5) per score
    # --attention full: the whole 8192 x 8192 matrix
    assert llm_structure.prefill_attention(layers, 1, 8192, "full")[0] == \
        32 * 32 * 8192 * 8192 * 256
    # decode at 8192 cached: 4096 keys (not 8193): 32 x 32 x 4096 x 256
    assert llm_structure.decode_attention(layers, 8192)[0] == 32 * 32 * 4096 * 256
    assert llm_structure.decode_attention(layers, 100)[0] == 32 * 32 * 101 * 256
    # the cache holds the window: 131,072 bytes x 4096 tokens, not x 8192
    assert llm_mod.nbytes(llm_structure.kv_elements(layers, 8192), "bf16") == 131_072 * 4096


# ---------------------------------------------------------------- llm on hf: configs
def _write(tmp_path, data, name="m"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    return f"hf:{folder / 'config.json'}"


TINY = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 256,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
        "tie_word_embeddings": False}


@pytest.mark.integration
def test_llm_sliding_window_by_hand(tmp_path):
    pytest.importorskip("transformers")
    windowed = llm(_write(tmp_path, {**TINY, "sliding_window": 4}, "w"), seq_len=16, context=40)
    plain = llm(_write(tmp_path, {**TINY, "sliding_window": None}, "p"), seq_len=16,
                context=40)
    # the same model but for the window: 3 layers x 4 heads x (16 + 16) MACs per score;
    # causal 16 x 17 / 2 = 136 scores per head, window 4: 10 + 12 x 4 = 58
    assert plain.prefill.macs - windowed.prefill.macs == 3 * 4 * 32 * (136 - 58)
    # decode at 40 cached: 41 keys, with the window 4
    assert plain.decode.macs_per_token - windowed.decode.macs_per_token == 3 * 4 * 32 * 37
    # KV: 3 layers x 2 x 2 KV heads x 16 x 2 bytes = 384 per token; the window keeps 4 tokens
    assert windowed.kv_cache.bytes_per_token == plain.kv_cache.bytes_per_token == 384
    assert (plain.kv_cache.bytes_total, windowed.kv_cache.bytes_total) == (384 * 40, 384 * 4)
    assert windowed.attention_count == "causal"
    (group,) = windowed.attention_layers
    assert (group.kind, group.layers, group.window, group.counted) == (
        SLIDING, 3, 4, "causal, window 4")
    # a prompt no longer than the window counts as plain causal attention (the FLOPs differ
    # by transformers building the window's mask)
    short = [llm(_write(tmp_path, {**TINY, "sliding_window": w}, f"s{w}"), seq_len=16,
                 context=15) for w in (16, None)]
    assert short[0].prefill.macs == short[1].prefill.macs
    assert short[0].decode.macs_per_token == short[1].decode.macs_per_token


@pytest.mark.integration
def test_llm_qwen2_window_on_the_last_layers_only(tmp_path):
    pytest.importorskip("transformers")
    data = {**TINY, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "sliding_window": 4, "use_sliding_window": True, "max_window_layers": 2}
    r = llm(_write(tmp_path, data, "q"), seq_len=16, context=40)
    plain = llm(_write(tmp_path, {**data, "use_sliding_window": False}, "p"), seq_len=16,
                context=40)
    # only layer 2 (of 0, 1, 2) has the window: 1 layer x 4 heads x 32 x (136 - 58)
    assert plain.prefill.macs - r.prefill.macs == 4 * 32 * (136 - 58)
    assert plain.decode.macs_per_token - r.decode.macs_per_token == 4 * 32 * 37
    # KV at 40: two layers keep 40 tokens, one keeps 4; 128 bytes per layer and token
    assert r.kv_cache.bytes_total == 128 * (2 * 40 + 4)
    assert [(g.kind, g.layers) for g in r.attention_layers] == [(CAUSAL, 2), (SLIDING, 1)]


DSV2 = {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
        "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
        "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": None,
        "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
        "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
        "first_k_dense_replace": 2, "max_position_embeddings": 512}


@pytest.mark.integration
def test_llm_mla_scores_and_latent_cache(tmp_path):
    pytest.importorskip("transformers")
    causal = llm(_write(tmp_path, DSV2, "c"), seq_len=16, context=40)
    full = llm(_write(tmp_path, DSV2, "f"), seq_len=16, context=40, attention="full")
    # MLA computes its scores at q/k width 16 + 8 = 24 and values 16: per score 40 MACs;
    # 2 layers x 4 heads x 40 x (256 - 136)
    assert full.prefill.macs - causal.prefill.macs == 2 * 4 * 40 * (256 - 136)
    assert causal.attention_count == "causal" and full.attention_count == "full"
    # the cache holds the 16-value latent and the 8-value rotary key: 2 x 24 x 2 bytes
    assert causal.kv_cache.bytes_per_token == 96
    assert causal.kv_cache.bytes_total == 96 * 40


BIGCODE = {"architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode",
           "vocab_size": 256, "n_embd": 64, "n_head": 4, "n_layer": 2, "n_inner": 128,
           "n_positions": 64, "multi_query": True}


def test_llm_gpt_bigcode_multi_query_cache(tmp_path):
    pytest.importorskip("transformers")
    r = llm(_write(tmp_path, BIGCODE), seq_len=8, context=40)
    # one K and one V head of 64 / 4 = 16 per layer: 2 layers x 2 x 16 x 2 bytes = 128 per
    # token (not the 4 heads' 512), 40 tokens of it
    assert r.kv_cache.bytes_per_token == 128
    assert r.kv_cache.bytes_total == 128 * 40
    assert [(a.heads, a.kv_heads) for a in r.attention_layers] == [(4, 1)]
    assert r.config["num_kv_heads"] == 1
    # the scores do not depend on it: 2 layers x 4 heads x (16 + 16) x 8 x 9 / 2 of prefill
    # and 41 keys of decode, beside one token's matmuls: c_attn 64 x (64 + 2 x 16), c_proj
    # 64 x 64, c_fc and c_proj 2 x 64 x 128 per layer, the head 64 x 256
    per_token = 2 * (64 * 96 + 64 * 64 + 2 * 64 * 128) + 64 * 256
    assert r.prefill.macs == 8 * per_token + 2 * 4 * 32 * 36
    assert r.decode.macs_per_token == per_token + 2 * 4 * 32 * 41


GPT_NEO = {"architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo", "vocab_size": 256,
           "hidden_size": 64, "num_heads": 4, "num_layers": 2, "max_position_embeddings": 64,
           "attention_types": [[["global", "local"], 1]],
           "attention_layers": ["global", "local"], "window_size": 4}


def test_gpt_neo_and_mpt_key_names_and_local_layers():
    # GPT-Neo names its sizes num_layers / num_heads; its local layers see window_size keys
    assert [(a.kind, a.window, a.heads) for a in llm_attention.from_hf(GPT_NEO)] == [
        (C, None, 4), (S, 4, 4)]
    # MPT: n_layers, n_heads, d_model
    mpt = llm_attention.from_hf({"model_type": "mpt", "d_model": 64, "n_heads": 4,
                                 "n_layers": 3})
    assert [(a.kind, a.heads, a.qk_head_dim) for a in mpt] == [(C, 4, 16)] * 3


def test_llm_gpt_neo_local_layers_by_hand(tmp_path):
    pytest.importorskip("transformers")
    r = llm(_write(tmp_path, GPT_NEO), seq_len=16, context=40)
    # per token, 2 layers of q, k, v, out (4 x 64 x 64) and MLP 2 x 64 x 256, the tied head
    # 64 x 256: 114,688; per score 4 heads x (16 + 16) = 128 MACs, the global layer 16 x 17 / 2
    # = 136 scores, the local one (window 4) 4 x 5 / 2 + 12 x 4 = 58
    per_token = 2 * (4 * 64 * 64 + 2 * 64 * 256) + 64 * 256
    assert r.prefill.macs == 16 * per_token + 128 * (136 + 58)
    # decode at 40: 41 keys globally, 4 locally
    assert r.decode.macs_per_token == per_token + 128 * (41 + 4)
    # K and V, 64 values each, per layer per token; the local layer holds 4 tokens
    assert r.kv_cache.bytes_per_token == 2 * 2 * 64 * 2
    assert r.kv_cache.bytes_total == 256 * 40 + 256 * 4
    assert [(a.kind, a.layers, a.window) for a in r.attention_layers] == [(C, 1, None),
                                                                          (S, 1, 4)]


@pytest.mark.integration
def test_decode_is_one_token_not_a_prefill_difference(tmp_path):
    pytest.importorskip("transformers")
    path = _write(tmp_path, TINY)
    a, b = (llm(path, seq_len=8, context=c) for c in (40, 41))
    # one more cached key: 3 layers x 4 heads x 32 MACs
    assert b.decode.macs_per_token - a.decode.macs_per_token == 3 * 4 * 32


def test_attention_the_description_does_not_match_is_counted_as_traced():
    # the toy written out as matmuls counts 4 heads x 32 per score; a description claiming
    # 8 heads does not match, so llm counts as traced and never says "causal"
    from llm_toy import build_toy, toy_config

    cfg = toy_config()
    wrong = llm_attention.uniform(cfg.num_layers, 8, 8, 16)
    r = llm(llm_mod.LLMSource("toy", cfg, build_toy, attention=wrong), seq_len=16)
    assert r.attention_count == "as traced"
    assert any("attention counted as the trace met it" in n for n in r.notes)
    right = llm(llm_mod.LLMSource("toy", cfg, build_toy), seq_len=16)
    assert right.attention_count == "causal"
    # as traced, the causal kernel counts s(s+1)/2 and decode is prefill(L+1) - prefill(L):
    # the same MACs here
    assert (r.prefill.macs, r.decode.macs_per_token) == (right.prefill.macs,
                                                          right.decode.macs_per_token)


def test_unknown_layer_types_are_counted_full_and_said(tmp_path):
    layers = llm_attention.from_hf(_dense(model_type="qwen3", sliding_window=8, layer_types=[
        "full_attention", "chunked_attention", "full_attention", "full_attention"]))
    macs, _ = llm_structure.prefill_attention(layers, 1, 16, "causal")
    # three causal layers (136 scores per head) and one whole (256): 4 heads x 32
    assert macs == 4 * 32 * (3 * 136 + 256)
    records = llm_mod.attention_records(layers, "bf16", 1, 16, "causal")
    assert [(g.kind, g.counted) for g in records] == [(CAUSAL, "causal"), (UNKNOWN, "full")]


def test_cli_shows_each_kind_of_layer(tmp_path):
    pytest.importorskip("transformers")
    from helpers import run_cli

    data = {**TINY, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "sliding_window": 4, "use_sliding_window": True, "max_window_layers": 2}
    code, out, err = run_cli("llm", _write(tmp_path, data), "--seq-len", "16", "--context", "40",
                             "--width", "300")
    assert code == 0, err
    # 2 layers x 128 bytes per token x 40 tokens; 1 layer x 128 x its 4-token window
    assert ("2 layers causal (counted causal; KV 256 bytes per token, 10.24 kB); 1 layer "
            "sliding window 4 (counted causal, window 4; KV 128 bytes per token, 512 bytes)"
            ) in " ".join(out.split())


@pytest.mark.integration
@pytest.mark.parametrize("data", [TINY, DSV2], ids=["mistral", "deepseek-v2-mla"])
def test_full_counting_equals_flop_counter_mode_on_eager_attention(data, tmp_path):
    # transformers' eager attention writes out every score (q @ k^T, probs @ v) on real
    # weights; torch's FlopCounterMode counts 2 FLOPs per MAC of every matmul
    transformers = pytest.importorskip("transformers")
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    config = transformers.AutoConfig.for_model(**data)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.zeros(2, 16, dtype=torch.long))
    r = llm(_write(tmp_path, data), seq_len=16, batch_size=2, attention="full")
    assert 2 * r.prefill.macs == counter.get_total_flops()


def test_llama4_chunked_layers_as_transformers_resolves_them():
    # Llama-4: no_rope_layer_interval 4 (default): layers 0-2 of each 4 use chunked attention
    # (transformers derives layer_types from no_rope_layers), layer 3 is global
    pytest.importorskip("transformers")
    data = {"model_type": "llama4_text", "hidden_size": 64, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "attention_chunk_size": 4}
    layers = llm_attention.from_hf(data)
    assert [a.kind for a in layers] == [CHUNKED, CHUNKED, CHUNKED, CAUSAL]
    # chunks of 4 over 10 tokens: 2 x (1 + 2 + 3 + 4) + (1 + 2) = 23 scores per head
    assert layers[0].prefill_scores(10) == 23 == sum(layers[0].keys(i) for i in range(10))
    # decode at 10 cached: the new token (position 10) opens the third chunk's 3rd place
    assert layers[0].keys(10) == 3
    assert layers[0].cached_tokens(10) == 4


@pytest.mark.integration
def test_llm_llama4_chunked_attention_by_hand(tmp_path):
    pytest.importorskip("transformers")
    data = {"architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text",
            "vocab_size": 256, "hidden_size": 64, "intermediate_size": 32,
            "intermediate_size_mlp": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 4,
            "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
            "max_position_embeddings": 512}
    chunked = llm(_write(tmp_path, {**data, "attention_chunk_size": 4}, "c"), seq_len=16,
                  context=40)
    plain = llm(_write(tmp_path, {**data, "attention_chunk_size": 8192}, "p"), seq_len=16,
                context=40)
    # 3 chunked layers x 4 heads x 32 MACs per score: causal 136 scores, chunks of 4: 4 x 10
    assert plain.prefill.macs - chunked.prefill.macs == 3 * 4 * 32 * (136 - 40)
    # decode at 40: 41 keys, in chunks of 4 the new token is the first of its chunk: 1
    assert plain.decode.macs_per_token - chunked.decode.macs_per_token == 3 * 4 * 32 * 40
    assert [(g.kind, g.layers, g.counted) for g in chunked.attention_layers] == [
        (CHUNKED, 3, "causal, chunks of 4"), (CAUSAL, 1, "causal")]
    # counted whole, the grouped count equals the full model's trace
    full = analyze(_write(tmp_path, {**data, "attention_chunk_size": 4}, "f"), seq_len=16,
                   attention="full").totals
    assert llm(_write(tmp_path, {**data, "attention_chunk_size": 4}, "g"), seq_len=16,
               attention="full").prefill.macs == full.macs


def test_attention_written_out_as_matmuls_is_counted_as_the_config_says():
    # the toy with explicit q @ k^T, softmax, @ v (no kernel, no is_causal flag): the trace
    # sees the whole matrix, llm counts the causal attention the config describes, the same
    # MACs as the toy calling the causal kernel
    import functools

    from llm_toy import build_toy, toy_config

    cfg = toy_config()
    eager = llm(llm_mod.LLMSource("toy", cfg, functools.partial(build_toy, sdpa=False)),
                seq_len=16, context=20)
    kernel = llm(llm_mod.LLMSource("toy", cfg, build_toy), seq_len=16, context=20)
    assert eager.attention_count == kernel.attention_count == "causal"
    assert (eager.prefill.macs, eager.decode.macs_per_token) == (
        kernel.prefill.macs, kernel.decode.macs_per_token)
