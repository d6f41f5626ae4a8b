"""Decoder-only causal LMs that layerscope llm / plan / analyze must accept, described as built,
or refuse with their true reason: small configs written here (the shapes of the public
DeepSeek-V2-Lite, Falcon-7B, OPT-1.3B, Gemma-2, Pythia, Bloom, Mamba configs), never downloaded;
hand-derived numbers."""
from __future__ import annotations

import json

import pytest
from helpers import run_cli

from layerscope.analysis import plan as plan_mod
from layerscope.analysis.plan import plan
from layerscope.core.errors import UserError
from layerscope.frontends.inputs import InputSpec
from layerscope.frontends.torch_module import with_seq_len

# DeepSeek-V2-Lite's shape, small: multi-head latent attention (kv_lora_rank, no q_lora_rank,
# q/k heads of nope + rope = 24, v heads of 16), 8 routed + 2 shared experts, layer 0 dense
DEEPSEEK_V2 = {
    "model_type": "deepseek_v2", "vocab_size": 1000, "hidden_size": 64,
    "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 4, "kv_lora_rank": 16,
    "q_lora_rank": None, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
    "n_routed_experts": 8, "n_shared_experts": 2, "num_experts_per_tok": 2,
    "first_k_dense_replace": 1, "max_position_embeddings": 512, "tie_word_embeddings": False}


def write_config(tmp_path, config: dict, name: str = "model") -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return f"hf:{folder / 'config.json'}"


# ---------------------------------------------------------------- --seq-len at the default
def test_seq_len_equal_to_the_models_own_length_is_accepted():
    ids = InputSpec((1, 1024))
    args, kwargs = with_seq_len([ids], {}, 1024, "gpt2", max_position=1024)
    assert args == [ids] and kwargs == {}
    with pytest.raises(UserError, match="takes none"):  # no B x S input at all
        with_seq_len([InputSpec((1, 3, 8, 8))], {}, 8, "cnn")


def test_analyze_gpt2_at_its_default_length_1024():
    code, out, err = run_cli("analyze", "gpt2", "--seq-len", "1024", "--depth", "0",
                             "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inputs"] == [{"shape": [1, 1024], "dtype": "int64"}]


# ---------------------------------------------------------------- plan on latent attention
def test_plan_measures_deepseek_v2_latent_attention(tmp_path):
    """q/k heads of 24 and v heads of 16: the flash kernel cannot take them, the GPU's
    memory-efficient kernel does (no seq x seq tensor saved); the measurement used to fail
    inside the fake-tensor run and blame the model."""
    r = plan(write_config(tmp_path, DEEPSEEK_V2), 1, seq_len=64)
    assert r.activations.measured_on == "cuda (fake tensors)"
    assert r.activations.attention_scores_bytes == 0  # no 64 x 64 tensor saved
    assert r.activations.per_layer_bytes > 0


def test_a_failed_measurement_is_not_blamed_on_the_model(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a fake-tensor limitation")

    monkeypatch.setattr(plan_mod, "measure_saved", broken)
    spec = write_config(tmp_path, DEEPSEEK_V2)
    with pytest.raises(UserError) as err:
        plan(spec, 1, seq_len=64)
    text = str(err.value)
    assert "measuring the activations on fake tensors failed (RuntimeError: a fake-tensor " \
           "limitation)" in text and "rejected" not in text and "\n" not in text
