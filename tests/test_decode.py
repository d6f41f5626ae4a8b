"""profile --decode: measured decode steps of a Hugging Face config's model with its KV cache.

The model is a tiny Llama (hidden 64, 2 layers, 4 heads of 16 with 2 key/value heads, MLP 128,
vocab 256, untied head) written as config.json in tmp_path and built with random weights on
the CPU. Its bytes and FLOPs per decode step are derived by hand below and must equal what
``layerscope llm`` counts for a decode step at the same context and batch. The clock is a
counter (every reading 1 ms after the last), so each timed step takes exactly 1 ms and the
tokens/s, MBU and MFU are hand-derived too; the ceilings are hand-made."""
from __future__ import annotations

import json

import pytest

from layerscope.analysis import decode, roofline
from layerscope.analysis.decode import profile_decode
from layerscope.analysis.llm import GPU, llm
from layerscope.core.errors import UserError
from layerscope.core.records import Ceilings
from layerscope.core.results import load_result
from tests.helpers import run_cli

H, LAYERS, HEADS, KV_HEADS, D, F, V = 64, 2, 4, 2, 16, 128, 256
TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
              "intermediate_size": F, "num_attention_heads": HEADS,
              "num_key_value_heads": KV_HEADS, "num_hidden_layers": LAYERS, "vocab_size": V,
              "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
              "tie_word_embeddings": False}
STEP_S = 1e-3  # the counter clock's tick


def params() -> int:
    """embedding V h; per layer q, k, v, o (h nd, 2 h kv d, nd h), gate/up/down (3 h f) and
    two norms (2 h); the final norm h; the head h V."""
    per_layer = H * HEADS * D + 2 * H * KV_HEADS * D + HEADS * D * H + 3 * H * F + 2 * H
    return V * H + LAYERS * per_layer + H + H * V


def decode_bytes(batch: int, context: int) -> int:
    """fp32: the weights less the embedding rows the batch's tokens do not look up
    ((V - batch) h; the head is not tied), plus the K and V of every layer for the context's
    tokens of each sequence."""
    weights = 4 * (params() - (V - batch) * H)
    kv = 4 * batch * LAYERS * 2 * KV_HEADS * D * context
    return weights + kv


def decode_flops(batch: int, context: int) -> int:
    """Per token: each layer's linears (2 x MACs), residual adds (2h), rotary embedding on q
    and k (q cos, rotate-half's negation of half, its product with sin, the add: 3 nd + nd/2,
    and the same for k), SiLU and gate x up (2f), two RMSNorms (x^2, mean: h adds + a divide,
    + eps, rsqrt, x r, w x: 4h + 3 each); its attention against the context + 1 keys (scores
    and values: 2 x 2 n d MACs a key, plus a scale and a 5-FLOP softmax per score); outside the
    layers the final norm, the rotary table (d/2 frequencies x position, cos, sin, two
    scalings: d/2 + 4d), the position's add (1) and the head (2 h V)."""
    linears = 2 * (H * HEADS * D + 2 * H * KV_HEADS * D + HEADS * D * H + 3 * H * F)
    rope = 3 * HEADS * D + HEADS * D // 2 + 3 * KV_HEADS * D + KV_HEADS * D // 2
    norm = 4 * H + 3
    keys = context + 1
    attention = 2 * (2 * HEADS * D * keys) + 6 * HEADS * keys
    layer = linears + 2 * H + rope + 2 * F + 2 * norm + attention
    outside = norm + (D // 2 + 4 * D) + 1 + 2 * H * V
    return batch * (LAYERS * layer + outside)


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "tiny-llama" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY_LLAMA))
    return f"hf:{path}"


def _ceilings(monkeypatch, peak: float, bandwidth: float) -> None:
    monkeypatch.setattr(roofline, "ceilings", lambda *a, **k: Ceilings(
        "cpu", "float32", 1, peak, bandwidth, 2048, 2**29))


def _counter():
    now = [0.0]

    def clock() -> float:
        now[0] += STEP_S
        return now[0]

    return clock


def test_the_hand_derivation_is_the_tiny_llamas():
    assert params() == 106_816
    assert decode_bytes(1, 32) == 4 * (106_816 - 255 * 64) + 4 * 2 * 2 * 2 * 16 * 32 == 378_368
    assert decode_flops(1, 32) == 201_512


@pytest.mark.integration
@pytest.mark.parametrize("batch,context", [(1, 32), (2, 8)], ids=["b1-ctx32", "b2-ctx8"])
def test_bytes_and_flops_per_step_are_llms_decode_step(config, monkeypatch, batch, context):
    _ceilings(monkeypatch, peak=1e15, bandwidth=1e15)
    r = profile_decode(config, steps=3, context=context, batch_size=batch, warmup=1,
                       threads=1, clock=_counter())
    assert r.bytes_per_step == decode_bytes(batch, context)
    assert r.weight_bytes + r.kv_bytes == r.bytes_per_step
    assert r.flops_per_step == decode_flops(batch, context)
    # the same step as `layerscope llm --context L --batch-size B --dtype fp32 --gpu ...` counts
    counted = llm(config, context=context, batch_size=batch, dtype="fp32",
                  gpu=GPU("any", 1e15, 1e15, 10**12, fp32_flops=1e15))
    assert r.bytes_per_step == counted.roofline.decode_bytes_per_step
    assert r.flops_per_step == batch * counted.decode.flops_per_token
    assert r.bounds[0].tokens_per_s == counted.roofline.decode_tokens_per_s
    # each timed step is one tick; warm-up steps are not kept
    assert r.steps == r.step_time["n"] == 3 and r.step_time["median_s"] == pytest.approx(STEP_S)
    assert r.tokens_per_s == pytest.approx(batch / STEP_S)
    e = r.efficiency
    assert e.mbu == pytest.approx(decode_bytes(batch, context) / STEP_S / 1e15)
    assert e.mfu == pytest.approx(decode_flops(batch, context) / STEP_S / 1e15)
    assert e.peak_source == "measured" and e.datasheet is None  # a CPU has no datasheet


@pytest.mark.integration
def test_mbu_above_one_is_refused_with_its_cause(config, monkeypatch):
    # 378,368 bytes in 1 ms is 378 MB/s: a 1 MB/s bandwidth would make MBU 37,837%
    _ceilings(monkeypatch, peak=1e15, bandwidth=1e6)
    r = profile_decode(config, steps=2, context=32, warmup=0, threads=1, clock=_counter())
    assert r.efficiency.mbu is None
    assert any("MBU against the measured peak" in n and "above 100%" in n
               and "roofline --refresh" in n for n in r.efficiency.notes)
    assert r.bounds[0].bound == "memory"


def test_the_result_is_saved_read_back_and_drawn(config, monkeypatch, tmp_path):
    _ceilings(monkeypatch, peak=1e12, bandwidth=1e11)
    out = tmp_path / "decode.json"
    code, _, err = run_cli("profile", config, "--decode", "2", "--context", "16", "--warmup",
                           "1", "--threads", "1", "--quiet", "-o", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["kind"] == "decode" and d["bytes_per_step"] == decode_bytes(1, 16)
    assert d["efficiency"]["bytes_per_step"] == decode_bytes(1, 16)
    assert 0 <= d["efficiency"]["mbu"] <= 1
    result = load_result(d)
    assert result.to_dict() == d
    for fmt in ("table", "csv", "html"):
        code, text, err = run_cli("render", str(out), "--format", fmt)
        assert code == 0, err
        assert "MBU" in text or "mbu" in text


@pytest.mark.parametrize("argv,message", [
    (["--decode", "0"], "--decode"),
    (["--decode", "2", "--backward"], "--backward does not apply"),
    (["--decode", "2", "--runs", "3"], "--runs does not apply"),
    (["--context", "8"], "--context sets the KV cache of --decode N: give both"),
], ids=["zero-steps", "backward", "runs", "context-alone"])
def test_bad_decode_options_are_one_line_exit_2(config, argv, message):
    code, out, err = run_cli("profile", config, *argv)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model,message", [
    ("mnist-cnn", "decode needs a language model given as hf:PATH/config.json"),
    ("llama-3-8b", "preset built without a KV cache"),
], ids=["not-an-llm", "preset"])
def test_a_model_without_a_kv_cache_is_refused_in_one_line(model, message):
    code, out, err = run_cli("profile", model, "--decode", "2")
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_weights_that_do_not_fit_are_refused_naming_the_bytes(config, monkeypatch):
    monkeypatch.setattr(decode, "available_memory", lambda device: 100_000)
    with pytest.raises(UserError) as e:
        profile_decode(config, steps=2, context=32)
    # fp32 weights: 4 x 106,816 = 427,264 bytes; the KV cache of 33 tokens: 33 x 512
    text = str(e.value)
    assert ("its weights need 427.26KB in float32 (+ 16.90KB of KV cache), more than the "
            "100.00KB of memory available on cpu; give a smaller dtype, batch_size or "
            "context") in text
    code, out, err = run_cli("profile", config, "--decode", "2", "--context", "32")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "give a smaller --dtype, --batch-size or --context, or another device" in err


def test_a_noisy_decode_names_the_option_that_adds_steps():
    from layerscope.core.noise import MachineReading, noise_section
    from layerscope.core.stats import TimingStats

    spread = TimingStats.of([1e-3] * 5 + [5e-3] * 5)  # p90/p10 = 5: noisy
    quiet = MachineReading((0.0, 0.0, 0.0), 8, 8)
    decode_warning = noise_section(spread, quiet, 1, repeats="--decode steps").warnings[0]
    assert decode_warning.endswith("a quiet machine or more --decode steps.")
    assert noise_section(spread, quiet, 1).warnings[0].endswith("or more --runs.")


def test_a_known_gpu_adds_its_datasheet_beside_the_measured_ceilings(config, monkeypatch):
    """On a GPU the datasheet table knows, MBU/MFU and llm's bound are given against its
    datasheet too (the CPU stands in here: the datasheet lookup is replaced)."""
    from layerscope.analysis import efficiency as eff

    sheet = ("h100-sxm datasheet (fp32, dense)", 67e12, 3.35e12)
    monkeypatch.setattr(eff, "datasheet_peak", lambda device, dtype=None: sheet)
    _ceilings(monkeypatch, peak=1e15, bandwidth=1e15)
    r = profile_decode(config, steps=2, context=32, warmup=0, threads=1, clock=_counter())
    moved, flops = decode_bytes(1, 32), decode_flops(1, 32)
    assert [b.source for b in r.bounds] == ["measured", sheet[0]]
    # one sequence: tokens/s <= 1 / max(FLOPs / peak, bytes / bandwidth)
    assert r.bounds[1].tokens_per_s == pytest.approx(1 / max(flops / 67e12, moved / 3.35e12))
    assert r.bounds[1].bound == "memory"
    e = r.efficiency
    assert e.datasheet.peak_source == sheet[0]
    assert e.datasheet.mbu == pytest.approx(moved / STEP_S / 3.35e12)
    assert e.datasheet.mfu == pytest.approx(flops / STEP_S / 67e12)
    from layerscope.views.decode import facts

    shown = dict(facts(r))
    assert sheet[0] in shown["MBU"] and "measured peak" in shown["MBU"]
