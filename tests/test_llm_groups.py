"""llm counts layers grouped by structure (analysis/llm_structure.py ``prefix_terms``), never
assuming every block is alike: dense layers before or between mixture-of-experts ones and
local/global attention patterns are groups of their own. Small configs of several families are
built in FULL and their analysis must equal the grouped count exactly."""
from __future__ import annotations

import json

import pytest

from layerscope.analysis import llm as llm_mod
from layerscope.analysis import llm_structure
from layerscope.analysis.analyze import analyze
from layerscope.analysis.llm import llm
from layerscope.analysis.plan import plan


@pytest.mark.parametrize("keys,terms", [
    ("a", {1: 1}),
    ("aa", {2: 1}),  # 1 + (P2 - P1)
    ("aaaaa", {1: -3, 2: 4}),  # the extrapolation from one and two blocks: (2 - L), (L - 1)
    # DeepSeek-style: 2 dense then 3 MoE: P1 + (P2 - P1) + 3 (P3 - P2)
    ("ddmmm", {2: -2, 3: 3}),
    # first_k_dense_replace = 1: the first layer's model holds the dense one; P1 + 4 (P2 - P1)
    ("dmmmm", {1: -3, 2: 4}),
    # alternating m d m d m: P1 + 2 (P3 - P2) + 2 (P2 - P1)
    ("mdmdm", {1: -1, 3: 2}),
])
def test_prefix_terms(keys, terms):
    assert llm_structure.prefix_terms(list(keys)) == terms


@pytest.mark.parametrize("keys", ["abcab", "aabbbbc", "abab", "cbaabc"])
def test_prefix_terms_count_every_layer_once(keys):
    # with made-up costs (outside 1000, block x its letter's cost), the terms give the total
    cost = {"a": 3, "b": 50, "c": 700}

    def prefix(n):
        return 1000 + sum(cost[k] for k in keys[:n])

    terms = llm_structure.prefix_terms(list(keys))
    assert sum(c * prefix(n) for n, c in terms.items()) == prefix(len(keys))


BASE = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
        "tie_word_embeddings": False}
FAMILIES = {
    # DeepSeek-V3: MLA, 2 dense layers (first_k_dense_replace) then routed + shared experts
    "deepseek-v3": {**BASE, "architectures": ["DeepseekV3ForCausalLM"],
                    "model_type": "deepseek_v3", "num_hidden_layers": 5,
                    "num_key_value_heads": 4, "moe_intermediate_size": 32, "kv_lora_rank": 16,
                    "q_lora_rank": 24, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16,
                    "v_head_dim": 16, "n_routed_experts": 4, "n_shared_experts": 1,
                    "num_experts_per_tok": 2, "first_k_dense_replace": 2, "n_group": 1,
                    "topk_group": 1},
    # Qwen2-MoE: dense MLPs on the layers of mlp_only_layers, a shared expert elsewhere
    "qwen2-moe": {**BASE, "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
                  "num_hidden_layers": 5, "num_experts": 4, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
                  "mlp_only_layers": [1, 3], "decoder_sparse_step": 1},
    # Qwen3-MoE: experts every decoder_sparse_step-th layer
    "qwen3-moe": {**BASE, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                  "num_hidden_layers": 4, "num_experts": 4, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 32, "decoder_sparse_step": 2, "head_dim": 16},
    # Llama-4: experts on every interleave_moe_layer_step-th layer, a wider dense MLP between
    "llama-4": {**BASE, "architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text",
                "num_hidden_layers": 4, "num_local_experts": 4, "num_experts_per_tok": 1,
                "intermediate_size": 32, "intermediate_size_mlp": 128,
                "interleave_moe_layer_step": 2, "head_dim": 16},
    # Gemma-3: two local (window 4) layers then a global one
    "gemma-3": {**BASE, "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
                "num_hidden_layers": 5, "head_dim": 16, "sliding_window": 4,
                "sliding_window_pattern": 3},
}


def _path(tmp_path, data):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return f"hf:{path}"


@pytest.mark.integration
@pytest.mark.parametrize("family", list(FAMILIES))
def test_grouped_counts_equal_the_full_model(family, tmp_path):
    pytest.importorskip("transformers")
    spec = _path(tmp_path, FAMILIES[family])
    # every score counted: the whole model's trace and the grouped count must agree exactly
    full = analyze(spec, seq_len=16, attention="full").totals
    got = llm(spec, seq_len=16, attention="full")
    assert (got.params_total, got.prefill.macs) == (full.params, full.macs)
    # FLOPs too: the non-attention FLOPs need not be a polynomial in s (DeepSeek's are not),
    # so only the whole score matrices are taken out of the trace, never a fitted s^2 term
    assert got.prefill.flops == full.flops
    assert got.decode.flops_per_token >= 2 * got.decode.macs_per_token > 0
    # the grouped parameters without a trace (plan) too
    assert llm_mod.param_count(llm_mod.resolve_llm(spec)) == full.params


@pytest.mark.integration
@pytest.mark.parametrize("family", ["qwen2-moe", "qwen3-moe"])
def test_grouped_causal_counts_equal_the_full_model(family, tmp_path):
    # no window or chunks (whose masks the full trace counts whole), fused kernels: the full
    # trace counts is_causal kernels as the lower triangle
    pytest.importorskip("transformers")
    spec = _path(tmp_path, FAMILIES[family])
    full = analyze(spec, seq_len=16).totals
    got = llm(spec, seq_len=16)
    assert (got.params_total, got.prefill.macs, got.prefill.flops) == (
        full.params, full.macs, full.flops)


def test_dense_first_layers_are_not_extrapolated_from_the_first_two(tmp_path):
    # DeepSeek-V3 with 2 dense layers of 5: extrapolating from blocks 0 and 1 (both dense)
    # would count 5 dense layers; grouped, 2 dense and 3 MoE
    pytest.importorskip("transformers")
    data = FAMILIES["deepseek-v3"]
    grouped = llm_mod.param_count(llm_mod.resolve_llm(_path(tmp_path, data)))
    dense = {**data, "first_k_dense_replace": 5}
    (tmp_path / "dense").mkdir()
    (tmp_path / "dense" / "config.json").write_text(json.dumps(dense))
    all_dense = llm_mod.param_count(llm_mod.resolve_llm(f"hf:{tmp_path / 'dense'}"))
    assert grouped != all_dense
    source = llm_mod.resolve_llm(_path(tmp_path, data))
    terms, notes = llm_mod.layer_terms(source)
    assert terms == {2: -2, 3: 3} and notes == []


@pytest.mark.integration
def test_plan_counts_the_grouped_parameters(tmp_path):
    pytest.importorskip("transformers")
    spec = _path(tmp_path, FAMILIES["qwen2-moe"])
    full = analyze(spec, seq_len=16).totals
    assert plan(spec, 8, seq_len=16).params_total == full.params
