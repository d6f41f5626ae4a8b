"""layerscope llm / plan: hand-derived counts, model states per strategy, activations against
Korthikanti et al. 2022, validation, CLI and saved-JSON round trip."""
from __future__ import annotations

import functools
import json

import pytest
from helpers import check_golden, run_cli
from llm_toy import build_toy, toy_config

import layerscope
from layerscope.analysis import llm as llm_mod
from layerscope.analysis.llm import GPUS, LLMSource, gpu_spec, llm
from layerscope.analysis.plan import measure_activations, model_state_bytes, plan
from layerscope.core.errors import UserError
from layerscope.core.results import load_result
from layerscope.core.values import byte_size

CAUSAL = True  # the analysis counts is_causal attention as the lower triangle


def toy_source(**overrides) -> LLMSource:
    return LLMSource("toy", toy_config(**overrides), build_toy)


def korthikanti_source(**overrides) -> LLMSource:
    return LLMSource("toy", toy_config(**overrides), functools.partial(build_toy, sdpa=False))


# ---------------------------------------------------------------- llm
def test_llm_toy_hand_derived():
    # toy: h=64, 3 layers, 4 heads (d=16), MLP 256, vocab 512, 256 positions, tied head.
    # params: wte 512*64 + wpe 256*64 + 3 * (2 LN 256 + qkv 64*192+192 + proj 64*64+64
    #         + fc 64*256+256 + fc2 256*64+64 = 49,984) + ln_f 128 = 199,232
    r = llm(toy_source(), seq_len=32, batch_size=2)
    assert r.params_total == r.params_active == 199_232
    # linear MACs per token per block: 64*192 + 64*64 + 64*256 + 256*64 = 49,152; head 64*512
    # prefill 2x32 tokens: 64 * (3 * 49,152 + 32,768) = 11,534,336
    # attention per layer, batch and head: scores + probs@V, causal: 2 * 16 * 32*33/2 = 16,896
    #   (full: 2 * 16 * 32*32 = 32,768); x 3 layers x 2 batch x 4 heads
    attn = (16_896 if CAUSAL else 32_768) * 24
    assert r.prefill.macs == 11_534_336 + attn
    assert r.prefill.tokens == 64
    # decode at context 32: one token's linears and head (180,224) + one query over 33 keys:
    # 2 * 16 * 33 * 4 heads * 3 layers = 12,672 (full counting: prefill(33) - prefill(32) counts
    # the whole new row and column: 2 * 16 * (33^2 - 32^2) * 12 = 24,960)
    assert r.decode.macs_per_token == 180_224 + (12_672 if CAUSAL else 24_960)
    assert r.decode.context == 32
    # KV: 2 * 3 layers * 4 kv heads * 16 * 2 bytes = 768 per token; 2 x 32 tokens
    assert r.kv_cache.bytes_per_token == 768 and r.kv_cache.bytes_total == 768 * 64
    assert r.weight_bytes == {"fp32": 796_928, "bf16": 398_464, "fp16": 398_464,
                              "fp8": 199_232, "int4": 99_616}


def test_decode_is_causal_whatever_prefill_counts():
    # a decode step's one query attends every cached key: no masking question, same cost
    causal = llm(toy_source(), seq_len=32, attention="causal")
    full = llm(toy_source(), seq_len=32, attention="full")
    assert causal.decode == full.decode
    assert full.prefill.macs > causal.prefill.macs
    assert (causal.attention_count, full.attention_count) == ("causal", "full")


def test_moe_decode_reads_the_experts_in_use():
    from layerscope.frontends.llm_configs import PRESETS

    cfg, total = PRESETS["mixtral-8x7b"], 46_702_792_704
    experts = 32 * 8 * 176_160_768
    active = total - experts * 6 // 8
    # batch 1: the 2 chosen experts per layer; batch 4: 8 (1 - (6/8)^4) expected
    assert llm_mod.decode_weight_params(cfg, total, active, 1) == active
    used = 8 * (1 - 0.75 ** 4)
    assert llm_mod.decode_weight_params(cfg, total, active, 4) == pytest.approx(
        total - experts + experts * used / 8)


def test_cli_bad_gpu_file_is_one_line(tmp_path):
    bad = tmp_path / "gpu.json"
    bad.write_text('{"bf16_flops": "fast"}')
    code, out, err = run_cli("llm", "gpt2", "--gpu", str(bad))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "--gpu" in err


@pytest.mark.parametrize("attention", ["causal", "full"])
def test_extrapolation_equals_full_analysis(attention):
    src = toy_source(num_layers=5)
    full = layerscope.analyze(build_toy(src.config), ["2x16:int64"], attention=attention)
    got = llm_mod.counts(src, 2, 16, attention)
    assert (got.params, got.macs, got.flops) == (full.totals.params, full.totals.macs,
                                                 full.totals.flops)


@pytest.mark.parametrize("name,total", [
    ("gpt2", 124_439_808), ("llama-3-8b", 8_030_261_248), ("llama-3-70b", 70_553_706_496),
    ("mixtral-8x7b", 46_702_792_704)])
def test_preset_parameters(name, total):
    assert llm_mod.param_count(llm_mod.resolve_llm(name)) == total


def test_llama3_8b_decode_kv_and_roofline():
    # Llama-3-8B: 32 layers, 8 kv heads of 128: KV per token 2*32*8*128*2 = 131,072 bytes
    r = llm("llama-3-8b", seq_len=128, context=1024, gpu="h100-sxm")
    assert r.kv_cache.bytes_per_token == 131_072
    assert r.kv_cache.bytes_total == 131_072 * 1024
    # decode MACs per token: linears per layer q 4096^2 + k,v 2*4096*1024 + o 4096^2
    # + MLP 3*4096*14336 = 218,103,808; x 32 + head 4096*128,256 = 525,336,576
    # + attention: 32 heads * 128 * 1025 keys * 2 (scores, values) * 32 layers (causal)
    linear = 32 * 218_103_808 + 525_336_576
    attention = 32 * 128 * 1025 * 2 * 32
    assert r.decode.macs_per_token == linear + attention
    # prefill of 1 x 128 tokens: 128 tokens' linears + causal attention, 128*129/2 scores per
    # head and layer, each a score and a value product of 128 MACs
    assert r.prefill.macs == 128 * linear + 32 * 128 * 2 * (128 * 129 // 2) * 32
    # roofline: decode at batch 1 reads the bf16 weights but one row of the (untied) input
    # embedding table, (128,256 - 1) x 4096 parameters less, and the 1024-token cache
    step = 2 * (8_030_261_248 - 128_255 * 4096) + 131_072 * 1024
    assert r.roofline.decode_bytes_per_step == step
    assert r.roofline.decode_tokens_per_s == pytest.approx(3.35e12 / step)
    assert r.roofline.decode_bound == "memory"
    # prefill of 128 tokens: compute time flops/989.4e12 vs memory time weights/3.35e12
    t = max(r.prefill.flops / 989.4e12, (2 * 8_030_261_248 + 128 * 131_072) / 3.35e12)
    assert r.roofline.prefill_tokens_per_s == pytest.approx(128 / t)


def tiny_hf_llama(tmp_path, intermediate: int, layers: int) -> tuple[dict, str]:
    """A tiny Llama-style Hugging Face config (GQA: 4 heads, 2 kv heads) and its hf: reference."""
    data = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 256,
            "hidden_size": 64, "intermediate_size": intermediate, "num_hidden_layers": layers,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
            "tie_word_embeddings": False, "rms_norm_eps": 1e-5}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return data, f"hf:{path}"


@pytest.mark.integration
def test_hf_config_matches_preset_arithmetic(tmp_path):
    pytest.importorskip("transformers")
    from layerscope.frontends import llm_models

    data, ref = tiny_hf_llama(tmp_path, intermediate=128, layers=3)
    hf = llm(ref, seq_len=16, context=40)
    config = llm_models.llm_config_from_hf(data, "tiny")
    preset = llm(LLMSource("tiny", config, llm_mod.meta_builder(llm_models.build)), seq_len=16,
                 context=40)
    for key in ("params_total", "params_active", "kv_cache"):
        assert hf.to_dict()[key] == preset.to_dict()[key], key
    assert (hf.prefill.macs, hf.decode.macs_per_token) == (preset.prefill.macs,
                                                           preset.decode.macs_per_token)
    # FLOPs beyond 2 x MACs are the elementwise ops, which transformers' code writes its own way
    assert hf.prefill.flops == pytest.approx(preset.prefill.flops, rel=1e-3)
    # KV: 2 * 3 layers * 2 kv heads * 16 * 2 bytes
    assert hf.kv_cache.bytes_per_token == 384


@pytest.mark.integration
def test_moe_active_parameters():
    # Mixtral: 8 experts of 3*4096*14336 = 176,160,768, 2 per token: 6 idle per layer
    r = llm("mixtral-8x7b", seq_len=16, context=16)
    assert r.params_active == 46_702_792_704 - 32 * 6 * 176_160_768
    assert any("expected routing" in n for n in r.notes)


@pytest.mark.parametrize("kwargs,message", [
    ({"attention": "sparse"}, "^unknown attention 'sparse'"),
    ({"dtype": "int3"}, "^dtype must be"),
    ({"kv_dtype": "x"}, "^kv_dtype must be"),
    ({"gpu": "tpu-v5"}, "unknown GPU"),
    ({"seq_len": 0}, "^seq_len must be"),
    ({"context": -1}, "^context must be"),
    ({"batch_size": 0}, "^batch_size must be"),
], ids=["attention", "dtype", "kv-dtype", "gpu", "seq-len", "context", "batch"])
def test_llm_bad_values(kwargs, message):
    with pytest.raises(UserError, match=message):
        llm(toy_source(), **kwargs)


def test_learned_positions_bound():
    with pytest.raises(UserError, match="positions"):
        llm(toy_source(), seq_len=300)


@pytest.mark.parametrize("content,message", [
    ("{", "not a JSON file"),
    ("[]", "JSON object"),
    ('{"bf16_flops": 1e15, "bandwidth_bytes_per_s": 2e12}', "memory_bytes is missing"),
    ('{"bf16_flops": -1, "bandwidth_bytes_per_s": 2e12, "memory_bytes": 8e10}', "positive"),
    ('{"bf16_flops": "NaN", "bandwidth_bytes_per_s": 2e12, "memory_bytes": 8e10}', "finite"),
    ('{"bf16_flops": 1e15, "bandwidth_bytes_per_s": 2e12, "memory_bytes": 8e10, "x": 1}',
     "unknown key"),
], ids=["broken", "array", "missing", "negative", "nan", "unknown-key"])
def test_gpu_file_errors(tmp_path, content, message):
    path = tmp_path / "gpu.json"
    path.write_text(content)
    with pytest.raises(UserError, match=message):
        gpu_spec(str(path))


def test_gpu_file_and_table(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"name": "mine", "bf16_flops": 1e15, "bandwidth_bytes_per_s": 2e12,
                                "memory_bytes": "96GB"}))
    g = gpu_spec(str(path))
    assert (g.name, g.bf16_flops, g.bandwidth, g.memory) == ("mine", 1e15, 2e12, 96 * 10**9)
    assert set(GPUS) == {"h100-sxm", "h100-pcie", "h200", "a100-40gb", "a100-80gb", "l4",
                         "rtx-4090"}
    assert gpu_spec("H100") is GPUS["h100-sxm"]


# ---------------------------------------------------------------- plan
# Mixed-precision Adam, Psi params, N = 64 GPUs, t=2, p=2 -> d = 16; per device Psi/4 before DP.
# ZeRO (Rajbhandari et al. 2020): ddp 2+2+12; zero1 2+2+12/d; zero2 2+(2+12)/d; zero3 16/d.
@pytest.mark.parametrize("strategy,expected", [
    ("ddp", (2, 2, 12)), ("zero1", (2, 2, 12 / 16)), ("zero2", (2, 2 / 16, 12 / 16)),
    ("zero3", (2 / 16, 2 / 16, 12 / 16)), ("fsdp", (2 / 16, 2 / 16, 12 / 16))])
def test_model_states(strategy, expected):
    psi = 70_553_706_496
    got = model_state_bytes(psi, strategy, "bf16", 2, 2, 16)
    for g, per_param in zip(got, expected):
        assert g == pytest.approx(per_param * psi / 4, rel=0.005)


def test_model_states_fp32():
    # fp32 training: 4 + 4 + 8 (momentum, variance)
    assert model_state_bytes(1000, "ddp", "fp32", 1, 1, 4) == (4000, 4000, 8000)


@pytest.mark.parametrize("b,s", [(2, 32), (1, 64)], ids=["b2s32", "b1s64"])
def test_activations_match_korthikanti(b, s):
    # Korthikanti et al. 2022, eq. 2: per layer sbh(34 + 5as/h) bytes with 16-bit activations
    # and 1-byte dropout masks, no recompute. The toy block has the formula's assumptions
    # (GPT-style, MLP 4h, dropout on attention probabilities, after the projection and the MLP).
    # Beyond the formula autograd also saves LayerNorm's mean and rstd (2 x 2 x b*s fp32).
    c = toy_config(num_layers=2)
    h, a = c.hidden_size, c.num_heads
    m = measure_activations(korthikanti_source(num_layers=2), b, s, "fp16")
    formula = s * b * h * (34 + 5 * a * s / h)
    assert m.per_layer == pytest.approx(formula, rel=0.05)
    assert m.scores == 5 * a * s * s * b  # softmax out (2), dropout mask (1), dropout out (2)
    assert m.device == "cuda"


@pytest.mark.integration
def test_plan_tp_pp_recompute():
    src = korthikanti_source(num_layers=4)
    c = src.config
    b, s, h, a, t = 2, 32, c.hidden_size, c.num_heads, 2
    none = plan(src, 8, tp=t, pp=2, micro_batch=b, seq_len=s, dtype="fp16", strategy="zero3")
    act = none.activations
    assert (none.dp, act.layers_per_stage, act.micro_batches_in_flight) == (2, 2, 2)
    # with sequence parallelism: sbh(34/t + 5as/(ht)) per layer (Korthikanti eq. 4)
    per_layer = s * b * h * (34 + 5 * a * s / h) / t
    blocks = none.strategies[0].activations_bytes - act.other_bytes // t
    assert blocks == pytest.approx(per_layer * 2 * 2, rel=0.05)
    sel = plan(src, 8, tp=t, pp=2, micro_batch=b, seq_len=s, dtype="fp16", strategy="zero3",
               recompute="selective")
    # selective: the 5as^2b/t term is dropped (recomputed); one layer's comes back in backward
    assert sel.activations.per_layer_kept_bytes == act.per_layer_bytes - 5 * a * s * s * b
    full = plan(src, 8, tp=t, pp=2, micro_batch=b, seq_len=s, dtype="fp16", strategy="zero3",
                recompute="full")
    assert full.activations.per_layer_kept_bytes == 2 * s * b * h  # the block input
    assert full.strategies[0].peak_bytes < sel.strategies[0].peak_bytes \
        < none.strategies[0].peak_bytes


def test_plan_all_strategies_and_fits():
    r = plan(korthikanti_source(), 4, seq_len=16, gpu_memory="2MB")
    assert [row.strategy for row in r.strategies] == ["ddp", "zero1", "zero2", "zero3", "fsdp"]
    for row in r.strategies:
        assert row.peak_bytes == (row.weights_bytes + row.grads_bytes + row.optimizer_bytes
                                  + row.activations_bytes + row.logprobs_grad_bytes
                                  + row.logits_grad_bytes + row.gather_bytes
                                  + row.reduce_scatter_bytes)
        # tp 1: no sequence-parallel gather, no loss parallel
        assert row.gathered_inputs_bytes == row.loss_parallel_bytes == 0
        assert row.fits == (row.peak_bytes <= 2 * 10**6)
        # the loss's backward: fp32 gradients of the log-probabilities and of the logits,
        # 1 x 16 tokens x 512 vocabulary x 4 bytes each
        assert row.logprobs_grad_bytes == row.logits_grad_bytes == 32_768
    # zero3/fsdp gather one block's unsharded bf16 weights (49,984 parameters), twice (prefetch)
    assert [row.gather_bytes for row in r.strategies] == [0, 0, 0, 199_936, 199_936]
    # and reduce-scatter its gradients: this block's unsharded ones and the previous block's
    # reduce-scatter input, the same 2 x 2 x 49,984 bytes
    assert [row.reduce_scatter_bytes for row in r.strategies] == [0, 0, 0, 199_936, 199_936]
    assert not r.strategies[0].fits and r.strategies[3].fits


def test_plan_seq_equal_to_hidden_probe():
    # seq == hidden: (b, s, h) tensors look like seq x seq; the probe length keeps them apart
    src = korthikanti_source(num_layers=2)
    m = measure_activations(src, 1, 64, "fp16")
    assert m.scores == 5 * 4 * 64 * 64


# ---------------------------------------------------------------- kernels, recompute op
def tiny_llama(**overrides) -> LLMSource:
    """Llama-shaped: h=64, 4 heads of 16, 2 kv heads (kv = 32), SwiGLU MLP 176, RMSNorm."""
    from layerscope.frontends import llm_models
    from layerscope.frontends.llm_configs import LLMConfig

    base = dict(vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                intermediate_size=176, max_position=512)
    base.update(overrides)
    return LLMSource("tiny-llama", LLMConfig("tiny-llama", **base),
                     llm_mod.meta_builder(llm_models.build))


# b=2, s=32: T = 64 tokens, bf16 (e = 2).
# fused: e T (4h + 2q + 2kv + 3I) + 2 norms x 4T (fp32 rstd) + 4 T a (fp32 log-sum-exp)
#   = 128 * (256 + 128 + 64 + 528) + 512 + 1,024 = 126,464
# GeLU MLP, LayerNorm, 4 kv heads: 128 * (256 + 128 + 128 + 352) + 2 x 8T + 1,024 = 112,640
@pytest.mark.parametrize("overrides,expected", [
    ({}, 126_464),
    ({"norm": "layernorm", "mlp": "gelu", "num_kv_heads": 4}, 112_640),
], ids=["llama", "gpt"])
def test_fused_layer_bytes_hand_count(overrides, expected):
    from layerscope.analysis.block_bytes import fused_layer_bytes

    assert fused_layer_bytes(tiny_llama(**overrides).config, 2, 32, 2) == expected


@pytest.mark.integration
def test_unfused_is_the_measurement_and_fused_removes_what_fusion_saves():
    src = tiny_llama()
    m = measure_activations(src, 2, 32, "bf16")
    # unfused, by hand: each RMSNorm keeps its fp32 input (4Th), the bf16 normalized x (2Th),
    # the weight x normalized output the linears read (2Th) and the fp32 rstd (4T); flash
    # attention keeps q, k and v expanded to the 4 heads and its output (4 x 2Th) and the
    # log-sum-exp (4Ta) and the RNG seed and offset (16 + 8); the MLP keeps gate, SiLU, up and
    # the product (4 x 2TI): 64*64*24 + 512 + 1,024 + 24 + 8*64*176 = 189,976
    assert m.per_layer == 189_976
    # fusion saves: per norm the fp32 copy and the bf16 normalized x but keeps the bf16 input
    # (2 x 4Th = 32,768), K and V un-expanded (2 x 2T(h - kv) = 8,192), no SiLU output (2TI =
    # 22,528), and no RNG state (dropout 0): 189,976 - 63,512 = 126,464
    unfused = plan(src, 2, micro_batch=2, seq_len=32, kernels="unfused", strategy="ddp")
    fused = plan(src, 2, micro_batch=2, seq_len=32, kernels="fused", strategy="ddp")
    assert unfused.activations.per_layer_bytes == m.per_layer  # today's figure
    assert fused.activations.per_layer_bytes == 189_976 - 63_512 == 126_464
    assert fused.activations.measured_per_layer_bytes == m.per_layer
    assert (unfused.kernels, fused.kernels) == ("unfused", "fused")
    assert fused.activations.other_bytes == unfused.activations.other_bytes == m.other


@pytest.mark.integration
def test_recompute_op_keeps_every_other_matmul():
    # torchtitan's op-level SAC, matmuls counted 1.. in the block: q (1) kept, k (2) recomputed,
    # v (3) kept, attention output + fp32 log-sum-exp kept, o (4) recomputed, gate (5) kept,
    # up (6) recomputed, down (7) kept; plus the block input:
    # 2 * 64 * (64 + 64 + 32 + 64 + 176 + 64) + 4 * 64 * 4 = 59,392 + 1,024 = 60,416
    src = tiny_llama()
    for kernels, per_layer in (("fused", 126_464), ("unfused", 189_976)):
        r = plan(src, 2, micro_batch=2, seq_len=32, kernels=kernels, recompute="op",
                 strategy="ddp")
        a = r.activations
        assert a.per_layer_kept_bytes == 60_416, kernels  # matmul outputs: the same tensors
        assert a.recompute_working_bytes == per_layer - 60_416
        assert r.strategies[0].activations_bytes == 60_416 * 2 + a.other_bytes
    none = plan(src, 2, micro_batch=2, seq_len=32, kernels="fused", strategy="ddp")
    full = plan(src, 2, micro_batch=2, seq_len=32, kernels="fused", strategy="ddp",
                recompute="full")
    assert full.strategies[0].activations_bytes < r.strategies[0].activations_bytes \
        < none.strategies[0].activations_bytes


def test_llama3_8b_default_kernels_are_fused():
    # Llama-3-8B, 1 x 128 tokens: fused 2 * T * (4h + 2h + 2h/4 + 3 * 3.5h) = 34 T h
    # + 8T + 4T * 32 heads; the unfused measurement is the Hugging Face-style 52 T h
    t, h = 128, 4096
    r = plan("llama-3-8b", 8, seq_len=t, strategy="fsdp")
    assert r.kernels == "fused"
    assert r.activations.per_layer_bytes == 34 * t * h + 8 * t + 4 * t * 32
    assert r.activations.measured_per_layer_bytes == pytest.approx(52 * t * h, rel=1e-3)
    assert any("kernels fused" in n for n in r.notes)


def test_loss_backward_and_gather_lines_divide_by_tp():
    # tiny Llama, one block: 2 RMSNorms (128) + q, o (2 x 64*64) + k, v (2 x 64*32) + gate, up,
    # down (3 x 64*176) = 46,208 parameters; zero3 over dp = 2 gathers them (bf16, / tp = 2),
    # twice for the prefetch: 2 * 2 * 46,208 / 2 = 92,416. Loss backward: 2 x 32 tokens x 256
    # vocabulary x 4 bytes / tp = 32,768 per gradient.
    r = plan(tiny_llama(), 4, tp=2, micro_batch=2, seq_len=32, kernels="fused")
    by = {row.strategy: row for row in r.strategies}
    assert by["zero3"].gather_bytes == by["fsdp"].gather_bytes == 92_416
    assert by["ddp"].gather_bytes == by["zero2"].gather_bytes == 0
    assert {row.logprobs_grad_bytes for row in r.strategies} == {32_768}
    assert {row.logits_grad_bytes for row in r.strategies} == {32_768}
    # the 2 fused blocks (126,464 bytes each), divided by tp (sequence parallelism)
    blocks = by["ddp"].activations_bytes - r.activations.other_bytes // 2
    assert blocks == pytest.approx(2 * 126_464 / 2, abs=1)


@pytest.mark.parametrize("recompute,gathered", [
    # 2 blocks x 2 gathered inputs (attention's, MLP's) x e T h + the head's input e T h, of
    # which (tp - 1) / tp: (2 x 16,384 + 8,192) / 2
    ("none", 20_480),
    ("selective", 20_480),
    # the all-gather is redone in the recompute: one block's, (16,384 + 8,192) / 2
    ("op", 12_288),
    ("full", 12_288),
])
def test_tensor_parallel_saves_gathered_inputs_whole_and_loss_parallel(recompute, gathered):
    # tiny Llama, b=2, s=32 (T = 64), h = 64, bf16: each all-gathered input (the norm's output
    # the column-parallel q/k/v and gate/up read) is e T h = 2 * 64 * 64 = 8,192 bytes, 16,384
    # per block; PyTorch's sequence parallelism saves it whole, not divided by tp = 2
    src = tiny_llama()
    r = plan(src, 4, tp=2, micro_batch=2, seq_len=32, kernels="fused", recompute=recompute)
    for row in r.strategies:
        assert row.gathered_inputs_bytes == gathered
        # loss parallel's backward: (one-hot + exp(log-probs)) beside the two fp32 gradients,
        # 2 x 32 tokens x 256 vocabulary x 4 bytes / tp
        assert row.loss_parallel_bytes == 32_768
        assert row.peak_bytes == (row.weights_bytes + row.grads_bytes + row.optimizer_bytes
                                  + row.activations_bytes
                                  + r.activations.recompute_working_bytes // 2
                                  + gathered + 3 * 32_768 + row.gather_bytes
                                  + row.reduce_scatter_bytes)
    one = plan(src, 2, micro_batch=2, seq_len=32, kernels="fused", recompute=recompute,
               strategy="ddp").strategies[0]
    assert one.gathered_inputs_bytes == one.loss_parallel_bytes == 0


@pytest.mark.integration
def test_hf_config_defaults_to_unfused_and_fuses_on_request(tmp_path):
    # transformers' Llama as written is measured (unfused); asked for, the fused count is the
    # config's arithmetic, the same as the preset-style tiny Llama's (126,464 at 2 x 32)
    pytest.importorskip("transformers")
    _, ref = tiny_hf_llama(tmp_path, intermediate=176, layers=2)
    unfused = plan(ref, 2, micro_batch=2, seq_len=32, strategy="ddp")
    assert unfused.kernels == "unfused"
    assert unfused.activations.per_layer_bytes == unfused.activations.measured_per_layer_bytes
    fused = plan(ref, 2, micro_batch=2, seq_len=32, strategy="ddp", kernels="fused")
    assert fused.activations.per_layer_bytes == 126_464


@pytest.mark.parametrize("kwargs,message", [
    ({"kernels": "fused"}, "^kernels fused is counted for dense blocks only; .*: measure it"),
    ({"recompute": "op"}, "^recompute op is counted for dense blocks only"),
], ids=["fused", "op"])
def test_moe_fused_and_op_refused(kwargs, message):
    with pytest.raises(UserError, match=message):
        plan("mixtral-8x7b", 8, seq_len=16, **kwargs)


@pytest.mark.parametrize("kwargs,message", [
    ({"gpus": 6, "tp": 4}, "multiple"), ({"gpus": 8, "pp": 8}, "pipeline stages"),
    ({"gpus": 3, "tp": 3}, "heads"),
    ({"gpus": 8, "strategy": "zero4"}, "^unknown strategy 'zero4'"),
    ({"gpus": 8, "recompute": "some"}, "^unknown recompute 'some'"),
    ({"gpus": 8, "dtype": "fp8"}, "^dtype for training"),
    ({"gpus": 8, "gpu_memory": "80XB"}, "^gpu_memory must"), ({"gpus": 0}, "^gpus must"),
    ({"gpus": 8, "kernels": "triton"}, "^unknown kernels 'triton'"),
], ids=["tp-pp-divide", "pp-layers", "tp-heads", "strategy", "recompute", "dtype", "memory",
        "gpus", "kernels"])
def test_plan_bad_values(kwargs, message):
    with pytest.raises(UserError, match=message):
        plan(korthikanti_source(), **kwargs)


@pytest.mark.parametrize("text,expected", [
    ("80GB", 80 * 10**9), ("80GiB", 80 * 2**30), ("512 MiB", 512 * 2**20), ("1.5TB", 1.5e12),
    ("100", 100)])
def test_byte_size(text, expected):
    assert byte_size(text) == expected


@pytest.mark.parametrize("text", ["0GB", "-1GB", "80XB", "GB", "", "nan", "1e999GB"])
def test_byte_size_bad(text):
    with pytest.raises(UserError):
        byte_size(text, "--gpu-memory")


# ---------------------------------------------------------------- CLI, saved JSON
def test_cli_llm_json_round_trip(tmp_path):
    out = tmp_path / "r.json"
    code, _, err = run_cli("llm", "gpt2", "--seq-len", "64", "--gpu", "a100-80gb", "-o",
                           str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert {"params_total", "params_active", "weight_bytes", "prefill", "decode", "kv_cache",
            "attention_count"} <= set(d)
    assert set(d["prefill"]) == {"macs", "flops", "tokens"}
    assert set(d["decode"]) == {"macs_per_token", "flops_per_token", "context"}
    assert {"bytes_per_token", "bytes_total"} <= set(d["kv_cache"])
    back = load_result(d)
    assert back.to_dict() == d
    code, text, _ = run_cli("render", str(out))
    assert code == 0 and "Decode per token" in text


def test_cli_plan_json(tmp_path):
    out = tmp_path / "p.json"
    code, _, err = run_cli("plan", "gpt2", "--gpus", "8", "--seq-len", "128", "-o", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    for row in d["strategies"]:
        assert set(row) == {"strategy", "weights_bytes", "grads_bytes", "optimizer_bytes",
                            "activations_bytes", "peak_bytes", "fits", "logprobs_grad_bytes",
                            "logits_grad_bytes", "gather_bytes", "gathered_inputs_bytes",
                            "loss_parallel_bytes", "reduce_scatter_bytes"}
    assert d["kernels"] == "fused"  # a dense preset's default
    assert load_result(d).to_dict() == d


def test_cli_plan_kernels_and_recompute_op(tmp_path):
    out = tmp_path / "p.json"
    code, _, err = run_cli("plan", "gpt2", "--gpus", "8", "--seq-len", "128", "--kernels",
                           "unfused", "--recompute", "op", "-o", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert (d["kernels"], d["recompute"]) == ("unfused", "op")
    code, _, err = run_cli("plan", "gpt2", "--gpus", "8", "--kernels", "cuda")
    assert code == 2 and "--kernels" in err
    code, out, err = run_cli("plan", "mixtral-8x7b", "--gpus", "8", "--recompute", "op")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "--recompute op is counted for dense blocks only" in err


@pytest.mark.parametrize("kind", ["llm", "plan"])
def test_terminal_golden(kind, update_golden):
    from layerscope.renderers.terminal import to_text

    if kind == "llm":  # fixed figures (the toy's, full attention) so the layout alone is tested
        r = llm(toy_source(), seq_len=32, batch_size=2, gpu="h100-sxm", attention="full")
        r.prefill.macs, r.prefill.flops = 12_320_768, 25_206_784
        r.decode.macs_per_token, r.decode.flops_per_token = 205_184, 421_576
    else:
        r = plan(korthikanti_source(), 8, tp=2, seq_len=32, micro_batch=2, dtype="fp16",
                 recompute="selective", gpu_memory="1MB")
    r.notes = [n for n in r.notes if "causal" not in n]
    check_golden(f"{kind}_toy.txt", to_text(r, width=100), update_golden)
