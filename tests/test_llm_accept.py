"""Decoder-only causal LMs that layerscope llm / plan / analyze must accept, described as built,
or refuse with their true reason: small configs written here (the shapes of the public
DeepSeek-V2-Lite, Falcon-7B, OPT-1.3B, Gemma-2, Pythia, Bloom, Mamba configs), never downloaded;
hand-derived numbers."""
from __future__ import annotations

import functools
import json

import pytest
from helpers import run_cli

from layerscope.analysis import plan as plan_mod
from layerscope.analysis.llm import llm
from layerscope.analysis.plan import plan
from layerscope.core.errors import UserError
from layerscope.frontends import llm_models
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
@pytest.mark.integration
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


# ------------------------------------------------- every causal LM transformers builds
FALCON_7B = {  # Falcon-7B's shape: one key/value head (multi_query), parallel attention + MLP
    "model_type": "falcon", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "multi_query": True, "parallel_attn": True,
    "new_decoder_architecture": False, "bias": False, "alibi": False,
    "max_position_embeddings": 512}
OPT_1_3B = {  # OPT-1.3B's shape: learned positions (2 offset rows), ReLU MLP, biases
    "model_type": "opt", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "ffn_dim": 256, "word_embed_proj_dim": 64,
    "max_position_embeddings": 512, "do_layer_norm_before": True, "enable_bias": True,
    "activation_function": "relu"}
GEMMA_2 = {  # head_dim 32 x 4 heads = 128 != hidden 64; attention soft-capping (eager only)
    "model_type": "gemma2", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "max_position_embeddings": 512, "sliding_window": 16, "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 32}

QWEN3_SMALL = {  # small Qwen3: head_dim 32 x 4 heads = 128 != hidden 64, q/k norms
    "model_type": "qwen3", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "max_position_embeddings": 512, "tie_word_embeddings": True}
MISTRAL_NEMO = {**QWEN3_SMALL, "model_type": "mistral", "tie_word_embeddings": False}


@pytest.mark.integration
@pytest.mark.parametrize("config,params,kv_heads,kv_bytes", [
    # embed 1000*64 + 2 x (qkv 64*(64 + 2*16) + dense 64*64 + MLP 2*64*256 + LN 128) + ln_f 128
    # = 64,000 + 2 x 43,136 + 128; KV: 2 x 2 layers x 1 head x 16 x 2 bytes
    (FALCON_7B, 150_400, 1, 128),
    # embed 64,000 + positions 514*64 + 2 x (4 x (64*64+64) + fc1 64*256+256 + fc2 256*64+64
    # + 2 LN 256) + final LN 128 = 64,000 + 32,896 + 2 x 49,984 + 128; KV 2 x 2 x 4 x 16 x 2
    (OPT_1_3B, 196_992, 4, 512),
    # embed 64,000 + 2 x (q 64*128 + k, v 64*64 each + o 128*64 + MLP 3*64*128 + 4 norms 256)
    # + norm 64 = 64,000 + 2 x 49,408 + 64; KV 2 x 2 layers x 2 heads x 32 x 2 bytes
    (GEMMA_2, 162_880, 2, 512),
    # embed 64,000 (tied) + 2 x (q 64*128 + k, v 64*64 + o 128*64 + q/k norms 2*32 + MLP
    # 3*64*128 + 2 norms 128) + norm 64 = 64,000 + 2 x 49,344 + 64
    (QWEN3_SMALL, 162_752, 2, 512),
    # Mistral-NeMo's shape: as Qwen3 without q/k norms, head untied: + 64,000, - 2 x 64
    (MISTRAL_NEMO, 226_624, 2, 512),
], ids=["falcon-7b-multi-query", "opt-1.3b", "gemma-2-head-dim", "qwen3-head-dim",
        "mistral-nemo-head-dim"])
def test_llm_accepts_causal_lms_of_every_family(tmp_path, config, params, kv_heads, kv_bytes):
    r = llm(write_config(tmp_path, config), seq_len=16)
    assert r.params_total == params
    assert r.config["num_kv_heads"] == kv_heads
    assert r.kv_cache.bytes_per_token == kv_bytes


def test_gemma2_is_analysed_with_eager_attention(tmp_path):
    """Soft-capping needs eager attention: the scores are plain matmuls, counted by each
    layer's mask as the SDPA kernels are (--attention full: every score).
    Per token: 2 layers x (q, k, v, o 24,576 + MLP 24,576) + head 64,000 = 162,304, x 32;
    attention 4 heads x (32 + 32) per score: layer 0 a window of 16 (16 x 17 / 2 + 16 x 16 =
    392 scores), layer 1 causal (32 x 33 / 2 = 528): 235,520; whole: 2 layers x 2 (QK^T, AV)
    x 4 heads x 32 x 32 x 32 = 524,288."""
    spec = write_config(tmp_path, GEMMA_2)
    for flags, attention in (((), 235_520), (("--attention", "full"), 524_288)):
        code, out, err = run_cli("analyze", spec, "--seq-len", "32", "--depth", "0",
                                 "--format", "json", *flags)
        assert code == 0, err
        assert json.loads(out)["totals"]["macs"] == 32 * 162_304 + attention


def test_attention_implementation_per_model():
    import transformers

    pick = functools.partial(llm_models.attention_implementation, transformers)
    assert pick(transformers.AutoConfig.for_model(**GEMMA_2)) == "eager"
    assert pick(transformers.AutoConfig.for_model("llama")) == "sdpa"


BLOOM = {"model_type": "bloom", "vocab_size": 1000, "hidden_size": 64, "n_layer": 2, "n_head": 4}
MAMBA = {"model_type": "mamba", "vocab_size": 1000, "hidden_size": 64, "state_size": 8,
         "num_hidden_layers": 2, "expand": 2, "conv_kernel": 4}
ZERO_KV = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64,
           "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 0}


@pytest.mark.parametrize("config,command,expected", [
    (ZERO_KV, "llm", "num_key_value_heads must be at least 1, got 0"),
    (ZERO_KV, "analyze", "num_key_value_heads must be at least 1, got 0"),
    (MAMBA, "llm", "mamba is a state-space model (state_size, no num_attention_heads)"),
], ids=["kv-heads-0-llm", "kv-heads-0-analyze", "mamba-no-attention"])
def test_configs_llm_cannot_count_get_their_true_reason(tmp_path, config, command, expected):
    code, _, err = run_cli(command, write_config(tmp_path, config), "--seq-len", "16")
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err
    assert "not a decoder-only causal LM" not in err


def test_gpt_neo_layer_types_not_one_per_layer_is_one_line(tmp_path):
    # GPT-Neo's attention_types must expand to one type per layer
    config = {"model_type": "gpt_neo", "vocab_size": 256, "hidden_size": 64, "num_heads": 4,
              "num_layers": 3, "attention_types": [[["global", "local"], 1]]}
    code, _, err = run_cli("llm", write_config(tmp_path, config), "--seq-len", "16")
    assert code == 2 and "attention_types gives 2 layer types for 3 layers" in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_what_transformers_cannot_read_is_one_line(tmp_path, monkeypatch):
    import transformers

    def refuse(*args, **kwargs):  # transformers' validation errors span several lines
        raise ValueError("Class validation error for validator 'validate_architecture':\n"
                         "    ValueError: more detail")

    monkeypatch.setattr(transformers.AutoConfig, "for_model", refuse)
    with pytest.raises(UserError) as info:
        llm_models.from_hf(write_config(tmp_path, LLAMA))
    assert "transformers cannot read this config (Class validation error" in str(info.value)
    assert "\n" not in str(info.value)


FALCON_ALIBI = {"model_type": "falcon", "vocab_size": 1000, "hidden_size": 64,
                "num_hidden_layers": 2, "num_attention_heads": 4, "alibi": True,
                "multi_query": False, "parallel_attn": False, "bias": True}


@pytest.mark.parametrize("config", [BLOOM, FALCON_ALIBI], ids=["bloom", "falcon-alibi"])
def test_alibi_models_are_counted(tmp_path, config):
    # ALiBi adds a bias per score (elementwise: no MACs) and caches K and V as usual. Both:
    # 2 layers of fused q/k/v 64 x 192, output 64 x 64, MLP 2 x 64 x 256, the head 64 x 1000;
    # per score 4 heads x (16 + 16) = 128 MACs, 16 x 17 / 2 scores per head and layer
    r = llm(write_config(tmp_path, config), seq_len=16, context=40)
    per_token = 2 * (64 * 192 + 64 * 64 + 2 * 64 * 256) + 64 * 1000
    assert r.params_total > 0 and r.config["position"] == "alibi"
    assert r.prefill.macs == 16 * per_token + 2 * 128 * 136
    assert r.decode.macs_per_token == per_token + 2 * 128 * 41
    assert r.kv_cache.bytes_per_token == 2 * 2 * 64 * 2
    assert r.attention_count == "causal"


MPT = {"model_type": "mpt", "vocab_size": 256, "d_model": 64, "n_heads": 4, "n_layers": 2,
       "max_seq_len": 32, "expansion_ratio": 4, "no_bias": True,
       "attn_config": {"alibi": True}}


@pytest.mark.integration
def test_mpt_counted_within_its_alibi_table(tmp_path):
    # MPT names its sizes d_model / n_heads / n_layers. 2 layers of Wqkv 64 x 192, out_proj
    # 64 x 64, MLP 2 x 64 x 256, the tied head 64 x 256; per score 4 x (16 + 16) = 128 MACs
    path = write_config(tmp_path, MPT)
    r = llm(path, seq_len=16, context=31)
    per_token = 2 * (64 * 192 + 64 * 64 + 2 * 64 * 256) + 64 * 256
    assert r.prefill.macs == 16 * per_token + 2 * 128 * 136
    assert r.decode.macs_per_token == per_token + 2 * 128 * 32
    assert r.config["position"] == "alibi" and r.config["max_position"] == 32
    assert llm(path, seq_len=32).decode.context == 31  # the default context fits the table


@pytest.mark.parametrize("flags,expected", [
    (("--seq-len", "33"), "--seq-len 33 needs 33 positions, more than model's ALiBi biases, "
                          "computed for max_seq_len (32 positions)"),
    (("--seq-len", "8", "--context", "32"), "--context 32 needs 33 positions"),
])
def test_mpt_beyond_its_alibi_table_is_refused(tmp_path, flags, expected):
    # transformers' MPT computes its ALiBi biases once, for max_seq_len positions, and fails
    # on longer inputs
    code, _, err = run_cli("llm", write_config(tmp_path, MPT), *flags)
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("command,flags", [
    ("plan", ("--gpus", "1", "--seq-len", "33")),
    ("analyze", ("--seq-len", "33")),
])
def test_plan_and_analyze_refuse_mpt_beyond_its_alibi_table(tmp_path, command, flags):
    # the same cap as llm's: the trace used to fail inside transformers with a shape error
    code, _, err = run_cli(command, write_config(tmp_path, MPT), *flags)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "ALiBi biases, computed for max_seq_len (32 positions)" in err, err


@pytest.mark.integration
def test_plan_and_analyze_run_mpt_within_its_alibi_table(tmp_path):
    path = write_config(tmp_path, MPT)
    assert plan(path, 1, seq_len=32).seq_len == 32
    code, out, err = run_cli("analyze", path, "--seq-len", "32", "--depth", "0",
                             "--format", "json")
    assert code == 0 and json.loads(out)["totals"]["macs"] > 0, err


def test_analyze_counts_what_llm_refuses(tmp_path):
    config = MAMBA
    code, out, err = run_cli("analyze", write_config(tmp_path, config), "--seq-len", "16",
                             "--depth", "0", "--format", "json")
    assert code == 0 and json.loads(out)["totals"]["macs"] > 0, err


# ---------------------------------------------------------------- the config block, as built
PYTHIA = {  # GPT-NeoX: LayerNorm with bias, GELU MLP (no gate), biases everywhere, partial rope
    "model_type": "gpt_neox", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 256,
    "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 512,
    "rotary_pct": 0.25, "use_parallel_residual": True, "tie_word_embeddings": False}
LLAMA = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 512}

BUILT = ("norm", "mlp", "qkv_bias", "proj_bias", "position", "tied_embeddings")


@pytest.mark.parametrize("config,expected", [
    (PYTHIA, ("layernorm", "gelu", True, True, "rope", False)),
    (OPT_1_3B, ("layernorm", "relu", True, True, "learned", True)),
    (FALCON_7B, ("layernorm", "gelu", False, False, "rope", True)),
    (GEMMA_2, ("rmsnorm", "gated_gelu", False, False, "rope", True)),
    (LLAMA, ("rmsnorm", "gated_silu", False, False, "rope", False)),
], ids=["pythia", "opt", "falcon", "gemma-2", "llama"])
def test_config_block_describes_the_model_as_built(tmp_path, config, expected):
    r = llm(write_config(tmp_path, config), seq_len=16)
    assert tuple(r.config[k] for k in BUILT) == expected


# ---------------------------------------------------------------- the decode bound
LLAMA_3_8B_STEP = 2 * (8_030_261_248 - 128_255 * 4096) + 131_072 * 1024


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_decode_reads_one_embedding_row_and_tp_splits_weights_and_kv(tp):
    """Llama-3-8B (untied): a decode step reads all weights but the input-embedding table,
    of which one row (4096 of its 128,256 x 4096); KV 2 x 32 x 8 x 128 x 2 = 131,072 bytes a
    token. tp GPUs each read 1/tp at tp x the bandwidth."""
    r = llm("llama-3-8b", seq_len=128, context=1024, gpu="h100-sxm", tp=tp)
    roof = r.roofline
    assert roof.decode_bytes_per_step == LLAMA_3_8B_STEP
    assert roof.decode_tokens_per_s == pytest.approx(tp * 3.35e12 / LLAMA_3_8B_STEP)
    assert roof.weights_bytes_per_gpu == -(-2 * 8_030_261_248 // tp)
    assert roof.kv_bytes_per_gpu == 131_072 * 1024 // tp
    assert roof.tp == tp and roof.fits and r.settings["tp"] == tp


def test_a_tied_head_still_reads_the_whole_table():
    # gpt2 ties lm_head to the embedding: the logits read all 50,257 x 768 of it.
    # KV 2 x 12 layers x 12 heads x 64 x 2 bytes = 36,864 a token, 64 tokens cached
    r = llm("gpt2", seq_len=64, gpu="h100-sxm")
    assert r.roofline.decode_bytes_per_step == 2 * 124_439_808 + 36_864 * 64


@pytest.mark.integration
def test_70b_bf16_does_not_fit_one_80gb_h100():
    # 70,553,706,496 x 2 bytes = 141.11 GB of weights; KV 2 x 80 x 8 x 128 x 2 = 327,680
    # bytes a token x 1024 = 0.34 GB; 141.44 GB > 80 GB: two GPUs at least
    r = llm("llama-3-70b", seq_len=16, context=1024, gpu="h100-sxm")
    assert not r.roofline.fits
    assert r.roofline.weights_bytes_per_gpu == 141_107_412_992
    note = next(n for n in r.notes if n.startswith("does not fit"))
    assert "141.11 GB of weights + 0.34 GB of KV cache per GPU = 141.44 GB, more than " \
           "h100-sxm's 80.00 GB (tp 1)" in note and "at least 2 GPUs" in note
    assert llm("llama-3-70b", seq_len=16, context=1024, gpu="h100-sxm", tp=2).roofline.fits


def test_tp_must_divide_the_heads():
    code, _, err = run_cli("llm", "gpt2", "--gpu", "h100", "--tp", "5")
    assert code == 2 and "tp 5 does not divide gpt2's 12 attention heads" in err, err
    assert "--tp" in err


def test_plan_on_bert_at_its_512_learned_positions(tmp_path):
    """The default length is the table's 512, which is also a model dimension: the probe that
    tells the seq x seq tensors apart used 513 and ran past the table."""
    bert = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 100}
    r = plan(write_config(tmp_path, bert), 1)
    assert r.seq_len == 512 and r.activations.per_layer_bytes > 0


def test_a_model_that_rejects_the_tokens_is_named(monkeypatch):
    import torch.nn as nn

    from layerscope.analysis.llm import LLMSource
    from layerscope.frontends.llm_configs import PRESETS

    class Refuses(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Linear(2, 2)

        def forward(self, ids):
            raise ValueError("sequence too long for this model")

    with pytest.raises(UserError, match="toy rejected a 1 x 16 batch of token ids: ValueError: "
                                        "sequence too long"):
        plan(LLMSource("toy", PRESETS["gpt2"], lambda c: Refuses()), 1, seq_len=16)


@pytest.mark.integration
def test_llm_says_when_an_hf_model_runs_eager_attention(tmp_path):
    r = llm(write_config(tmp_path, GEMMA_2), seq_len=16)
    assert any("built with eager attention" in n and "attention description" in n
               for n in r.notes)
    assert not any("eager" in n for n in llm(write_config(tmp_path, LLAMA, "llama"),
                                             seq_len=16).notes)


@pytest.mark.integration
@pytest.mark.parametrize("config", [FALCON_7B, OPT_1_3B, GEMMA_2, QWEN3_SMALL],
                         ids=["falcon", "opt", "gemma-2", "qwen3"])
def test_plan_measures_every_family(tmp_path, config):
    r = plan(write_config(tmp_path, config), 1, seq_len=32)
    assert r.activations.measured_on == "cuda (fake tensors)"
    assert r.activations.per_layer_bytes > 0 and r.activations.other_bytes > 0


@pytest.mark.integration
@pytest.mark.parametrize("tp,share", [(8, 8), (16, 8)], ids=["tp8", "tp16-replicated"])
def test_kv_heads_fewer_than_gpus_are_replicated(tp, share):
    """Llama-3-8B has 8 key/value heads: over 16 GPUs each keeps one whole head, 1/8 of the
    cache (131,072 bytes a token x 1024), not 1/16; the decode step of a GPU reads its weight
    share and its cache share."""
    r = llm("llama-3-8b", seq_len=128, context=1024, gpu="h100-sxm", tp=tp)
    assert r.roofline.kv_bytes_per_gpu == 131_072 * 1024 // share
    step = 2 * (8_030_261_248 - 128_255 * 4096) / tp + 131_072 * 1024 / share
    assert r.roofline.decode_tokens_per_s == pytest.approx(3.35e12 / step)
