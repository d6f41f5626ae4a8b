"""The LLM presets (frontends/llm_models.py) and hf: models: parameters equal the published totals,
MACs equal hand derivations (causal and full attention, grouped-query, mixture of experts), the
hf: path equals the preset built from the same config, and active parameters per token."""
from __future__ import annotations

import json
import sys

import pytest
import torch
from helpers import run_cli

from layerscope.analysis.analyze import analyze
from layerscope.core.errors import UserError
from layerscope.frontends import llm_models, zoo
from layerscope.frontends.llm_configs import PRESETS, LLMConfig

# The totals of the models' published checkpoints (Hugging Face model cards / safetensors index).
PUBLISHED = {
    "gpt2": 124_439_808,
    "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-7b": 7_615_616_512,
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_every_preset_has_the_published_parameter_count_on_meta(name):
    model = zoo.build(zoo.lookup(name), meta=True)
    params = {id(p): p for p in model.parameters()}.values()
    assert sum(p.numel() for p in params) == PUBLISHED[name]
    assert all(p.device.type == "meta" for p in params)


def test_commands_that_run_a_large_preset_refuse_before_allocating_it():
    # 8,030,261,248 x 4 bytes = 29.9 GiB, over the 4 GiB default limit
    code, _, err = run_cli("profile", "llama-3-8b")
    assert code == 2 and "llama-3-8b: its float32 weights" in err and "29.9 GiB" in err, err


def _forward_macs(cfg: LLMConfig, s: int, causal: bool = True) -> int:
    """Hand derivation of a preset's forward MACs for token ids 1 x s.

    Per block (h hidden, H heads, Hkv kv heads, d = h/H, f MLP width):
      q and o projections  2 * s * h * (H d)
      k and v projections  2 * s * h * (Hkv d)    (grouped-query: Hkv < H)
      QK^T and AV          H * scores * 2d, scores = s(s+1)/2 causal, s^2 full
      MLP                  gated (gate, up, down) 3 s h f; GELU (fc, proj) 2 s h f
      mixture of experts   router s h E + k experts per token: 3 s k h f
    lm_head s h V. Embedding lookups, norms, rotary angles, residuals: no MACs."""
    h, heads, kv, d, f = (cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                          cfg.intermediate_size)
    scores = s * (s + 1) // 2 if causal else s * s
    attn = 2 * s * h * heads * d + 2 * s * h * kv * d + heads * scores * 2 * d
    if cfg.is_moe:
        mlp = s * h * cfg.num_experts + 3 * s * cfg.experts_per_token * h * f
    else:
        mlp = (2 if cfg.mlp == "gelu" else 3) * s * h * f
    return cfg.num_layers * (attn + mlp) + s * h * cfg.vocab_size


@pytest.mark.parametrize("name", ["gpt2", "llama-3-8b", "mixtral-8x7b", "qwen2.5-7b"])
def test_preset_macs_equal_the_hand_derivation(name):
    r = analyze(name, seq_len=8)
    assert r.totals.params == PUBLISHED[name]
    assert r.totals.macs == _forward_macs(PRESETS[name], 8)
    assert r.inputs == [{"shape": [1, 8], "dtype": "int64"}]
    assert r.settings["attention"] == "causal" and r.op_coverage == 1.0


def test_llama_3_8b_by_hand_at_8_tokens():
    # per block: q, o 2 x 8 x 4096 x 4096 = 268,435,456; k, v 2 x 8 x 4096 x 1024 = 67,108,864;
    # attention 32 heads x 36 scores x 256 = 294,912; MLP 3 x 8 x 4096 x 14336 = 1,409,286,144
    # -> 1,745,125,376 x 32 = 55,844,012,032; lm_head 8 x 4096 x 128256 = 4,202,692,608
    assert _forward_macs(PRESETS["llama-3-8b"], 8) == 60_046_704_640


def test_default_input_is_2048_token_ids_and_gpt2_its_1024_positions():
    assert analyze("mnist-cnn").settings["attention"] == "causal"  # a setting of every analysis
    loaded = zoo.lookup("llama-3-8b")
    assert (loaded.input_shape, loaded.input_dtype) == ((2048,), torch.int64)
    assert zoo.lookup("gpt2").input_shape == (1024,)


# A tiny Llama-style config: V=256, h=64, 2 layers, H=4, d=16, f=96, token ids 1 x 128.
TINY = dict(vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=96,
            max_position=128, default_seq_len=128)


def _tiny(kv_heads: int = 2, **kw) -> torch.nn.Module:
    with torch.device("meta"):
        return llm_models.build(LLMConfig("tiny", num_kv_heads=kv_heads, **(TINY | kw)))


@pytest.mark.parametrize("attention,macs", [
    # per block: q, o 2 x 128 x 64 x 64 = 1,048,576; k, v 2 x 128 x 64 x 32 = 524,288;
    # MLP 3 x 128 x 64 x 96 = 2,359,296; attention 4 heads x 32 x scores:
    # causal 128 x 129 / 2 = 8,256 scores -> 1,056,768; full 16,384 -> 2,097,152.
    # 2 blocks + lm_head 128 x 64 x 256 = 2,097,152:
    # causal 2 x 4,988,928 + 2,097,152 = 12,075,008; full 2 x 6,029,312 + 2,097,152 = 14,155,776
    ("causal", 12_075_008),
    ("full", 14_155_776),
], ids=["causal", "full"])
def test_tiny_llama_macs_by_hand_causal_and_full(attention, macs):
    r = analyze(_tiny(), "1x128:int64", attention=attention)
    assert r.totals.macs == macs
    assert r.settings["attention"] == attention
    assert any(n.startswith(f"attention counted {attention}: 2 causal") for n in r.notes)


@pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["multi-head", "grouped-query", "multi-query"])
def test_grouped_and_multi_query_attention_are_exact(kv_heads):
    # self_attn of one block, s=128: q, o 2 x 128 x 64 x 64; k, v 2 x 128 x 64 x (16 kv_heads);
    # every query head computes its scores: 4 heads x 8,256 x 32 whatever kv_heads is
    r = analyze(_tiny(kv_heads), "1x128:int64", depth=4)
    row = next(x for x in r.layers if x.name == "model.layers.0.self_attn")
    assert row.macs == 1_048_576 + 2 * 128 * 64 * 16 * kv_heads + 4 * 8_256 * 32
    assert row.params == 2 * 64 * 64 + 2 * 64 * 16 * kv_heads


def test_training_counts_the_causal_backward_too():
    # flash backward (torch.utils.flop_counter's sdpa_backward_flop_count): recompute QK^T, then
    # dV, dP, dQ, dK: 5 products of B*H*scores*d MACs. One block, 4 heads, d=16: full 16,384
    # scores, causal 8,256: 5 x 4 x 16 x 8,128 = 2,600,960 MACs fewer per block
    full = analyze(_tiny(), "1x128:int64", mode="training", attention="full", depth=4)
    causal = analyze(_tiny(), "1x128:int64", mode="training", depth=4)

    def attn(r):
        return next(x for x in r.layers if x.name == "model.layers.0.self_attn")

    assert attn(full).backward_macs - attn(causal).backward_macs == 2_600_960
    assert full.totals.backward_macs - causal.totals.backward_macs == 2 * 2_600_960


# ---------------------------------------------------------------- mixture of experts
def test_balanced_dispatch_deals_all_token_slots_evenly():
    assert llm_models.balanced_counts(8, 4, 2) == [4, 4, 4, 4]
    assert llm_models.balanced_counts(1, 8, 2) == [1, 1, 0, 0, 0, 0, 0, 0]
    assert sum(llm_models.balanced_counts(5, 8, 2)) == 10


@pytest.mark.parametrize("tokens", [8, 3, 1])
def test_moe_macs_are_those_of_the_active_experts(tokens):
    # E=4 experts of 3 x 64 x 96 = 18,432 parameters, k=2: per block router tokens x 64 x 4 and
    # 2 experts per token, 2 x 18,432 MACs; whatever tokens x k / E is (1 token: 0.5 per expert)
    cfg = LLMConfig("tiny-moe", num_kv_heads=2, num_experts=4, experts_per_token=2, **TINY)
    with torch.device("meta"):
        model = llm_models.build(cfg)
    r = analyze(model, f"1x{tokens}:int64")
    assert r.totals.macs == _forward_macs(cfg, tokens)
    # active: everything but the experts (2 x 4 x 18,432 = 147,456 of 205,632) + 2/4 of them
    assert r.totals.params == 205_632
    assert r.totals.params_active == 205_632 - 147_456 + 147_456 // 2
    assert any("expected routing k/E" in n for n in r.notes)


@pytest.mark.integration
def test_mixtral_active_parameters_per_token():
    # experts: 32 layers x 8 x (3 x 4096 x 14336) = 45,097,156,608; the rest 1,605,636,096:
    # embeddings 2 x 32000 x 4096 = 262,144,000; per layer attention 2 x 4096^2 + 2 x 4096 x 1024
    # = 41,943,040, router 4096 x 8 = 32,768, 2 norms 8,192 -> 41,984,000 x 32 = 1,343,488,000;
    # final norm 4,096. Active = 1,605,636,096 + 45,097,156,608 x 2/8 = 12,879,925,248
    r = analyze("mixtral-8x7b", seq_len=4)
    assert r.totals.params_active == 12_879_925_248
    assert "Active parameters per token" in run_cli("analyze", "mixtral-8x7b", "--seq-len",
                                                    "4", "--depth", "0")[1]


def test_dense_llms_use_all_their_parameters():
    r = analyze("qwen2.5-7b", seq_len=4)
    assert r.totals.params_active == r.totals.params == PUBLISHED["qwen2.5-7b"]


def test_other_models_have_no_active_parameter_figure():
    assert analyze("mnist-cnn").totals.params_active is None


# ---------------------------------------------------------------- hf: configs
def _hf_configs():
    transformers = pytest.importorskip("transformers")
    common = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=96, max_position_embeddings=128,
                  tie_word_embeddings=False)
    return {
        "llama": (transformers.LlamaConfig(**common), {}),
        "qwen2": (transformers.Qwen2Config(**common), {"qkv_bias": True}),
        "mixtral": (transformers.MixtralConfig(**common, num_local_experts=4,
                                               num_experts_per_tok=2),
                    {"num_experts": 4, "experts_per_token": 2}),
        "gpt2": (transformers.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                         n_positions=128, bos_token_id=0, eos_token_id=0),
                 {"num_kv_heads": 4, "intermediate_size": 256, "norm": "layernorm",
                  "mlp": "gelu", "position": "learned", "qkv_bias": True, "proj_bias": True,
                  "tied_embeddings": True}),
    }


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mixtral", "gpt2"])
def test_hf_config_equals_the_preset_built_from_the_same_config(arch, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config, preset_fields = _hf_configs()[arch]
    path = tmp_path / arch / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config.to_dict()))
    cfg = LLMConfig("tiny", **(TINY | {"num_kv_heads": 2} | preset_fields))
    with torch.device("meta"):
        preset = analyze(llm_models.build(cfg), "1x128:int64")
    hf = analyze(f"hf:{path}")
    assert hf.inputs == [{"shape": [1, 128], "dtype": "int64"}]
    assert (hf.totals.params, hf.totals.macs, hf.totals.params_active) == (
        preset.totals.params, preset.totals.macs, preset.totals.params_active)
    assert hf.totals.macs == _forward_macs(cfg, 128)  # causal: HF's sdpa path says is_causal
    mapped = llm_models.llm_config_from_hf(config.to_dict(), "tiny")
    assert {k: v for k, v in mapped.to_dict().items() if k not in ("rope_theta", "norm_eps")} \
        == {k: v for k, v in cfg.to_dict().items() if k not in ("rope_theta", "norm_eps")}


# The keys of the published config.json files that llm_config_from_hf reads.
HUB_CONFIGS = {
    "llama-3-8b": {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
                   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "intermediate_size": 14336, "max_position_embeddings": 8192,
                   "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "attention_bias": False,
                   "mlp_bias": False, "tie_word_embeddings": False},
    "mixtral-8x7b": {"model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096,
                     "num_hidden_layers": 32, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "intermediate_size": 14336,
                     "max_position_embeddings": 32768, "rope_theta": 1e6, "rms_norm_eps": 1e-05,
                     "num_local_experts": 8, "num_experts_per_tok": 2,
                     "tie_word_embeddings": False},
    "qwen2.5-7b": {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
                   "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                   "intermediate_size": 18944, "max_position_embeddings": 131072,
                   "rope_theta": 1e6, "rms_norm_eps": 1e-06, "tie_word_embeddings": False},
    "gpt2": {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12,
             "n_head": 12, "n_positions": 1024, "layer_norm_epsilon": 1e-05},
}


@pytest.mark.parametrize("name", list(HUB_CONFIGS))
def test_published_hf_configs_map_to_the_presets(name):
    mapped = llm_models.llm_config_from_hf(HUB_CONFIGS[name], name).to_dict()
    preset = PRESETS[name].to_dict()
    assert {k: v for k, v in mapped.items() if k != "default_seq_len"} == \
        {k: v for k, v in preset.items() if k != "default_seq_len"}


def test_a_head_dim_other_than_hidden_over_heads_is_kept():
    # Mistral-NeMo / Gemma / small Qwen3 shape: q is 32 x 64 = 2048 wide, not hidden 4096
    config = llm_models.llm_config_from_hf(HUB_CONFIGS["llama-3-8b"] | {"head_dim": 64}, "x")
    assert (config.head_dim, config.head_size) == (64, 64)
    same = llm_models.llm_config_from_hf(HUB_CONFIGS["llama-3-8b"] | {"head_dim": 128,
                                                                      "attention_bias": None})
    assert (same.head_dim, same.head_size) == (128, None)


def test_hf_with_an_attention_mask_counts_the_whole_matrix_and_says_so(tmp_path):
    # transformers builds a boolean mask when given attention_mask (its values are unknown in the
    # trace): the kernel computes every score and masks it, so the whole matrix is counted
    config, _ = _hf_configs()["llama"]
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    r = analyze(f"hf:{tmp_path}", ("1x128:int64", "attention_mask=1x128:int64"))
    cfg = LLMConfig("tiny", **(TINY | {"num_kv_heads": 2}))
    assert r.totals.macs == _forward_macs(cfg, 128, causal=False)
    assert r.op_coverage == 1.0
    assert any(n.startswith("2 attention kernel call(s) with a mask tensor") for n in r.notes)


def test_hf_folder_and_llm_config_without_building(tmp_path):
    config, _ = _hf_configs()["llama"]
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    assert llm_models.llm_config(f"hf:{tmp_path}").num_kv_heads == 2
    assert llm_models.llm_config("llama-3-70b") is PRESETS["llama-3-70b"]
    with pytest.raises(UserError, match="not an LLM"):
        llm_models.llm_config("resnet50")


@pytest.mark.parametrize("spec,expected", [
    ("hf:", "name a config"),
    ("hf:missing/dir/config.json", "no such file"),
    ("hf:no-such-org/no-such-model", "cannot fetch the config"),
], ids=["empty", "missing-file", "offline-hub"])
def test_hf_errors_are_one_line(spec, expected, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = run_cli("analyze", spec)
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err


def test_hf_without_transformers_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    monkeypatch.setitem(sys.modules, "transformers", None)  # import fails
    code, _, err = run_cli("analyze", f"hf:{tmp_path / 'config.json'}")
    assert code == 2 and "pip install layerscope[hf]" in err


def test_hf_config_that_is_not_a_causal_lm(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(UserError, match="not a JSON object"):
        analyze(f"hf:{tmp_path / 'config.json'}")


# ---------------------------------------------------------------- --seq-len and the CLI
@pytest.mark.parametrize("argv,expected", [
    (["gpt2", "--seq-len", "2048"],
     "longer than the model's learned position table (1024 positions)"),
    (["resnet18", "--seq-len", "16"], "this model takes none; give --input instead"),
    (["llama-3-8b", "--attention", "half"], "invalid choice"),
], ids=["gpt2-positions", "no-token-input", "attention-choice"])
def test_seq_len_and_attention_refusals(argv, expected):
    code, _, err = run_cli("analyze", *argv)
    assert code == 2 and expected in err, err


def test_seq_len_changes_the_token_input_and_the_cli_says_causal():
    code, out, err = run_cli("analyze", "llama-3-8b", "--seq-len", "16", "--depth", "0",
                             "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["inputs"] == [{"shape": [1, 16], "dtype": "int64"}]
    assert d["settings"]["attention"] == "causal"
    assert d["totals"]["macs"] == _forward_macs(PRESETS["llama-3-8b"], 16)
    assert d["totals"]["params_active"] == PUBLISHED["llama-3-8b"]


def test_models_lists_the_llm_group():
    code, out, _ = run_cli("models")
    assert code == 0
    head = out.split("torchvision:")[0]
    assert "LLM" in head and all(f"  {n}\n" in head for n in PUBLISHED)
