"""``layerscope llm`` on published Hugging Face configs, against independent references.

Run from the repository root (CPU, a few minutes; needs transformers):

    .venv/bin/python benchmarks/llm_families.py
    .venv/bin/python benchmarks/llm_families.py --only mistral-7b-v0.1,gemma-2-2b

For every ``benchmarks/llm_configs/<name>.json`` (copies of the published ``config.json``; see
the README there) it compares ``layerscope.llm(hf:...)`` with two references made here, not by
layerscope:

- **parameters**: the model transformers builds from the config on the meta device
  (``AutoModelForCausalLM.from_config``), every parameter once; **active parameters**: the
  same, with the parameters inside an ``experts`` module counted k/E (k experts per token of E).
- **MACs, hand-derived from the config** (``reference`` below, one formula per architecture):
  every weight matmul (projections, MLP, router, shared experts, LM head) costs its weight's
  size per token; a routed expert's matmuls cost k/E of all experts' per token; attention costs,
  per layer and head, (qk head dim + v head dim) per score, with s(s+1)/2 scores for a causal
  prefill of s tokens and sum_i min(i + 1, W) for a window W; multi-head latent attention uses
  its nope + rope key width and its v width. Norms, rotary embeddings, activations, softmax,
  residual adds, biases and soft-capping are elementwise: 0 MACs in layerscope's definition
  (docs/definitions.md: a MAC is one multiply-accumulate of a contraction), so they are 0 here.
- **hybrids** (attention layers among or beside state-space, linear-attention or convolution
  layers: Jamba, Qwen3-Next, Granite-4.0-H, Falcon-H1; ``HYBRIDS``): the MACs of everything but
  the attention scores are half the FLOPs ``torch.utils.flop_counter.FlopCounterMode`` counts
  for the model transformers builds on the meta device (its own PyTorch code; it counts every
  score of an attention call, which is taken out), plus the attention layers' scores by hand;
  decode is what one more token adds to the 1-token count (the convention ``layerscope llm``
  states for such layers), and only the attention layers have a KV cache.
- **decode per token at context L**: one token's matmuls plus one query against min(L + 1, W)
  keys per layer (the cache's L tokens and the new one; a window layer sees at most W; Llama-4's
  chunked layers (L mod C) + 1): the convention ``layerscope llm`` states in its docstring.
- **KV cache**: bytes per token per layer, K and V of each KV head (multi-query: one head),
  multi-head latent attention its latent plus the shared rotary key (kv_lora_rank +
  qk_rope_head_dim, what MLA-aware servers cache; transformers' own cache keeps full K and V),
  in bf16; at context L a window layer holds min(L, W) tokens.

Prefill at 128 and 8192 tokens, decode at context 32768; a model with a learned position table
(GPT-2: 1024 positions; OPT, GPT-Neo, SantaCoder: 2048) or MPT (ALiBi biases computed for
max_seq_len positions) cannot be run that far, by transformers either, so it is measured at its
limit instead (seq = positions, context = positions - 1) and the refusal of 8192 / 32768 is
checked to be the one-line error naming that limit. Prints a table and writes
``benchmarks/results/llm_families.json`` (with the load average). Exit status 1 when any
family is not exact or within 0.1%, or is refused.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = Path(__file__).resolve().parent / "llm_configs"
RESULTS = Path(__file__).resolve().parent / "results" / "llm_families.json"
SEQS = (128, 8192)
CONTEXT = 32768
KV_BYTES = 2  # bf16
TOLERANCE = 1e-3


# ------------------------------------------------------------------ references
def reference_params(data: dict[str, Any]) -> tuple[int, int]:
    """(total, active) of the model transformers builds on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    data = {k: v for k, v in data.items() if k != "auto_map"}  # native classes, no remote code
    config = AutoConfig.for_model(**data)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    seen: dict[int, tuple[str, Any]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        seen.setdefault(id(p), (name, p))
    total = sum(p.numel() for _, p in seen.values())
    experts = sum(p.numel() for name, p in seen.values() if "experts" in name.split(".")[:-1])
    e, k = _routing(data)
    return total, total - experts + experts * k // e


def _routing(d: dict[str, Any]) -> tuple[int, int]:
    ffn = d.get("ffn_config") or {}  # DBRX
    e = d.get("num_local_experts") or d.get("num_experts") or d.get("n_routed_experts") or \
        ffn.get("moe_num_experts") or 1
    return e, (d.get("num_experts_per_tok") or ffn.get("moe_top_k") or 1) if e > 1 else 1


def keys_at(position: int, window: int | tuple[str, int] | None) -> int:
    """Keys the query at 0-based ``position`` attends: all before it and itself, at most the
    last W with a window, its own chunk's with Llama-4's chunked attention (("chunk", C))."""
    if isinstance(window, tuple):
        return position % window[1] + 1
    return position + 1 if window is None else min(position + 1, window)


def window_scores(seq: int, window: int | tuple[str, int] | None) -> int:
    """Scores per head of a causal prefill of ``seq`` tokens, summed query by query."""
    if window is None:
        return seq * (seq + 1) // 2
    return sum(keys_at(i, window) for i in range(seq))


def cached(context: int, window: int | tuple[str, int] | None) -> int:
    """Tokens a layer's cache holds at ``context``: a window or chunk at most W (C)."""
    bound = window[1] if isinstance(window, tuple) else window
    return context if bound is None else min(context, bound)


def reference(name: str, d: dict[str, Any]) -> dict[str, Any]:
    """Per-token matmul MACs, the attention layers (heads, qk dim, v dim, window, cache elements
    per token) and the vocabulary head, written out per architecture from the config."""
    kind = d.get("model_type")
    layers_n = d.get("num_hidden_layers") or d.get("n_layer")
    h = d.get("hidden_size") or d.get("n_embd")
    vocab = d["vocab_size"]
    h = h or d.get("d_model")
    attn: list[tuple[int, int, int, int | None, int]] = []  # heads, qk, v, window, cache
    per_token = 0  # weight MACs per token, all layers
    if kind == "mpt":  # ALiBi (elementwise score biases: no MACs), no position table
        h, layers_n, heads = d["d_model"], d["n_layers"], d["n_heads"]
        per_token = layers_n * (4 * h * h + 2 * h * d["expansion_ratio"] * h)
        attn = [(heads, h // heads, h // heads, None, 2 * h)] * layers_n
    elif kind == "bloom":  # ALiBi as MPT
        heads = d["n_head"]
        per_token = layers_n * (4 * h * h + 2 * h * 4 * h)
        attn = [(heads, h // heads, h // heads, None, 2 * h)] * layers_n
    elif kind == "gpt_neo":  # global and local (a window of window_size keys) layers
        heads, layers_n = d["num_heads"], d["num_layers"]
        f = d.get("intermediate_size") or 4 * h
        per_token = layers_n * (4 * h * h + 2 * h * f)
        kinds = [k for ks, n in d["attention_types"] for _ in range(n) for k in ks]
        attn = [(heads, h // heads, h // heads, d["window_size"] if k == "local" else None,
                 2 * h) for k in kinds]
    elif kind in ("gpt2", "gpt_bigcode"):
        heads, f = d["n_head"], d.get("n_inner") or 4 * h
        hd = h // heads
        kv = 1 if kind == "gpt_bigcode" and d.get("multi_query", True) else heads
        per_token = layers_n * (h * (heads + 2 * kv) * hd + h * h + 2 * h * f)
        attn = [(heads, hd, hd, None, 2 * kv * hd)] * layers_n
    elif kind == "opt":
        heads, f = d["num_attention_heads"], d["ffn_dim"]
        per_token = layers_n * (4 * h * h + 2 * h * f)
        proj = d.get("word_embed_proj_dim") or h
        if proj != h:  # project_in (proj -> h), project_out (h -> proj); the head is proj wide
            per_token += 2 * proj * h - h * vocab + proj * vocab
        attn = [(heads, h // heads, h // heads, None, 2 * h)] * layers_n
    elif kind in ("gptj", "phi"):  # q, k, v, out; fc_in/fc1, fc_out/fc2
        heads = d.get("n_head") or d["num_attention_heads"]
        f = d.get("n_inner") or d.get("intermediate_size") or 4 * h
        layers_n = d.get("n_layer") or d["num_hidden_layers"]
        per_token = layers_n * (4 * h * h + 2 * h * f)
        attn = [(heads, h // heads, h // heads, None, 2 * h)] * layers_n
    elif kind == "gpt_neox":
        heads, f = d["num_attention_heads"], d["intermediate_size"]
        per_token = layers_n * (3 * h * h + h * h + 2 * h * f)
        attn = [(heads, h // heads, h // heads, None, 2 * h)] * layers_n
    elif kind == "falcon":
        heads = d["num_attention_heads"]
        hd = h // heads
        kv = (d.get("num_kv_heads") or heads) if d.get("new_decoder_architecture") else (
            1 if d.get("multi_query", True) else heads)
        per_token = layers_n * (h * (heads + 2 * kv) * hd + h * h + 2 * h * 4 * h)
        attn = [(heads, hd, hd, None, 2 * kv * hd)] * layers_n
    elif kind in ("deepseek_v2", "deepseek_v3"):
        heads, rank = d["num_attention_heads"], d["kv_lora_rank"]
        nope, rope, v = d["qk_nope_head_dim"], d["qk_rope_head_dim"], d["v_head_dim"]
        q_rank = d.get("q_lora_rank")  # None: one q_proj; else q_a_proj then q_b_proj
        query = h * heads * (nope + rope) if q_rank is None else \
            h * q_rank + q_rank * heads * (nope + rope)
        attention = query + h * (rank + rope) + rank * heads * (nope + v) + heads * v * h
        e, k, fe = d["n_routed_experts"], d["num_experts_per_tok"], d["moe_intermediate_size"]
        dense = d["first_k_dense_replace"]
        moe = h * e + k * 3 * h * fe + 3 * h * fe * d["n_shared_experts"]  # router, k, shared
        per_token = layers_n * attention + dense * 3 * h * d["intermediate_size"] \
            + (layers_n - dense) * moe
        attn = [(heads, nope + rope, v, None, rank + rope)] * layers_n
    elif kind in HYBRIDS:  # the state-space layers: transformers' own code, FlopCounterMode
        heads = d["num_attention_heads"]
        kv = d.get("num_key_value_heads") or heads
        hd = d.get("head_dim") or h // heads
        # Falcon-H1's "hybrid" layers run attention and a Mamba-2 mixer side by side
        attn = [(heads, hd, hd, None, 2 * kv * hd) if t in ("full_attention", "attention",
                                                            "hybrid")
                else (0, 0, 0, None, 0) for t in _layer_types(d)]
        return {"per_token": None, "attention": attn, "counter": True}
    elif kind == "dbrx":  # Wqkv, out_proj; a router and k of E GLU experts (w1, v1, w2)
        a, f = d["attn_config"], d["ffn_config"]
        heads, kv, h, layers_n = d["n_heads"], a["kv_n_heads"], d["d_model"], d["n_layers"]
        hd = h // heads
        e, k = f["moe_num_experts"], f["moe_top_k"]
        per_token = layers_n * (h * (heads + 2 * kv) * hd + h * h + h * e
                                + k * 3 * h * f["ffn_hidden_size"])
        attn = [(heads, hd, hd, None, 2 * kv * hd)] * layers_n
    else:  # Llama-style: llama, mistral, qwen2, qwen2_moe, phi3, gemma2, gemma3_text, ...
        heads = d["num_attention_heads"]
        kv = d.get("num_key_value_heads") or heads
        hd = d.get("head_dim") or h // heads
        attention = h * heads * hd + 2 * h * kv * hd + heads * hd * h
        if kind == "llama4_text":  # experts on moe_layers (routed + a shared one), dense MLPs
            e, k, fe = d["num_local_experts"], d["num_experts_per_tok"], d["intermediate_size"]
            moe = d.get("moe_layers")
            if moe is None:
                step = d.get("interleave_moe_layer_step", 1)
                moe = list(range(step - 1, layers_n, step))
            per_token = layers_n * attention + sum(
                h * e + k * 3 * h * fe + 3 * h * fe if i in moe
                else 3 * h * d["intermediate_size_mlp"] for i in range(layers_n))
            chunk = d.get("attention_chunk_size")
            nope = d.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(layers_n)]
            attn = [(heads, hd, hd, ("chunk", chunk) if chunk and nope[i] else None,
                     2 * kv * hd) for i in range(layers_n)]
            return {"per_token": per_token + h * vocab, "attention": attn}
        if kind == "gpt_oss":  # k of E experts (gate_up, down), a router; sinks: elementwise
            e, k, f = d["num_local_experts"], d["num_experts_per_tok"], d["intermediate_size"]
            per_token = layers_n * (attention + h * e + k * 3 * h * f)
            attn = [(heads, hd, hd, d["sliding_window"] if t == "sliding_attention" else None,
                     2 * kv * hd) for t in d["layer_types"]]
            return {"per_token": per_token + h * vocab, "attention": attn}
        if kind == "glm4_moe":  # first_k_dense_replace dense, then routed + shared experts
            e, k, fe = d["n_routed_experts"], d["num_experts_per_tok"], d["moe_intermediate_size"]
            dense = d["first_k_dense_replace"]
            moe = h * e + k * 3 * h * fe + 3 * h * fe * d["n_shared_experts"]
            per_token = layers_n * attention + dense * 3 * h * d["intermediate_size"] \
                + (layers_n - dense) * moe
            attn = [(heads, hd, hd, None, 2 * kv * hd)] * layers_n
            return {"per_token": per_token + h * vocab, "attention": attn}
        if kind in ("mixtral", "qwen3_moe", "olmoe", "phimoe"):
            e = d.get("num_local_experts") or d["num_experts"]
            k, fe = d["num_experts_per_tok"], d.get("moe_intermediate_size") or \
                d["intermediate_size"]
            mlp = h * e + k * 3 * h * fe  # router, k experts
            assert d.get("decoder_sparse_step", 1) == 1 and not d.get("mlp_only_layers")
        elif kind in ("starcoder2", "nemotron"):  # c_fc, c_proj; up_proj, down_proj (relu^2)
            mlp = 2 * h * d["intermediate_size"]
        elif kind == "qwen2_moe":
            e, k, fe = d["num_experts"], d["num_experts_per_tok"], d["moe_intermediate_size"]
            fs = d["shared_expert_intermediate_size"]
            mlp = h * e + k * 3 * h * fe + 3 * h * fs + h  # router, k experts, shared, its gate
            assert d.get("decoder_sparse_step", 1) == 1 and not d.get("mlp_only_layers")
        else:
            mlp = 3 * h * d["intermediate_size"]
        per_token = layers_n * (attention + mlp)
        window = d.get("sliding_window") if d.get("use_sliding_window", True) else None
        if kind == "gemma2":  # every other layer from the first: a window
            windows = [window if i % 2 == 0 else None for i in range(layers_n)]
        elif kind == "gemma3_text":  # 5 local then 1 global
            p = d.get("sliding_window_pattern", 6)
            windows = [window if (i + 1) % p else None for i in range(layers_n)]
        elif kind == "cohere2":  # sliding_window_pattern - 1 local layers, then 1 global
            p = d["sliding_window_pattern"]
            windows = [window if (i + 1) % p else None for i in range(layers_n)]
        elif isinstance(d.get("layer_types"), list):  # written out in the config (OLMo-3)
            windows = [window if t == "sliding_attention" else None for t in d["layer_types"]]
        elif kind in ("qwen2", "qwen2_moe", "qwen3_moe"):
            assert window is None  # use_sliding_window false in these configs
            windows = [None] * layers_n
        else:  # mistral, mixtral, phi3, starcoder2: the window (if any) on every layer
            windows = [window] * layers_n
        attn = [(heads, hd, hd, w, 2 * kv * hd) for w in windows]
    return {"per_token": per_token + h * vocab, "attention": attn}


# hybrids: attention layers between state-space (Mamba, Mamba-2), linear-attention or
# convolution layers, whose MACs are those of transformers' own PyTorch code as
# torch.utils.flop_counter.FlopCounterMode counts it (half its FLOPs, the whole score matrix of
# every attention call), the attention then recounted causal by hand
HYBRIDS = ("jamba", "qwen3_next", "granitemoehybrid", "bamba", "nemotron_h", "lfm2",
           "falcon_h1", "zamba2", "minimax")


def _layer_types(d: dict[str, Any]) -> list[str]:
    """Each layer's type as transformers' configuration class resolves it."""
    from transformers import AutoConfig

    return list(AutoConfig.for_model(**{k: v for k, v in d.items() if k != "auto_map"})
                .layer_types)


def counter_macs(d: dict[str, Any], seq: int) -> int:
    """Half the FLOPs FlopCounterMode counts for transformers' model of ``d`` (meta device,
    its own PyTorch code) on 1 x ``seq`` token ids."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**{k: v for k, v in d.items() if k != "auto_map"})
    config._attn_implementation = "sdpa"
    if hasattr(config, "_experts_implementation"):
        config._experts_implementation = "batched_mm"  # the k chosen experts' matmuls
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    with FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, seq, dtype=torch.long, device="meta"))
    return counter.get_total_flops() // 2


def reference_counts(ref: dict[str, Any], seqs: tuple[int, ...], context: int,
                     data: dict[str, Any] | None = None) -> dict[str, Any]:
    attn = ref["attention"]

    def scores(s: int) -> int:
        return sum(heads * (qk + v) * window_scores(s, w) for heads, qk, v, w, _ in attn)

    def whole(s: int) -> int:
        return sum(heads * (qk + v) * s * s for heads, qk, v, *_ in attn)

    if ref.get("counter"):  # hybrids: FlopCounterMode less the whole score matrices
        assert data is not None
        rest = {s: counter_macs(data, s) - whole(s) for s in {*seqs, 1, 2}}
        prefill = {s: rest[s] + scores(s) for s in seqs}
        per_token = rest[2] - rest[1]  # what one more token adds, as llm counts decode
    else:
        prefill = {s: ref["per_token"] * s + scores(s) for s in seqs}
        per_token = ref["per_token"]
    decode = per_token + sum(heads * (qk + v) * keys_at(context, w)
                             for heads, qk, v, w, _ in attn)
    kv_token = KV_BYTES * sum(c for *_, c in attn)
    kv_total = KV_BYTES * sum(c * cached(context, w) for *_, w, c in attn)
    return {"prefill": prefill, "decode": decode, "kv_token": kv_token, "kv_total": kv_total}


# ------------------------------------------------------------------ layerscope
def ours(path: Path, seq: int, context: int) -> dict[str, Any]:
    from layerscope.analysis.llm import llm

    r = llm(f"hf:{path}", seq_len=seq, context=context)
    return {"params": r.params_total, "active": r.params_active, "prefill": r.prefill.macs,
            "decode": r.decode.macs_per_token, "kv_token": r.kv_cache.bytes_per_token,
            "kv_total": r.kv_cache.bytes_total, "attention_count": r.attention_count,
            "layers": [(a.kind, a.layers, a.window) for a in r.attention_layers]}


def refusal(path: Path, seq: int, context: int) -> str | None:
    from layerscope.analysis.llm import llm
    from layerscope.core.errors import UserError

    try:
        llm(f"hf:{path}", seq_len=seq, context=context)
    except UserError as exc:
        return str(exc)
    return None


def family(path: Path) -> dict[str, Any]:
    name = path.stem
    data = json.loads(path.read_text())
    kind = data.get("model_type")  # a learned position table, MPT's ALiBi biases: a limit
    positions = data.get("n_positions") if kind in ("gpt2", "gpt_bigcode") else (
        data.get("max_position_embeddings") if kind in ("opt", "gpt_neo") else
        data.get("max_seq_len") if kind == "mpt" else None)
    seqs, context, refused = SEQS, CONTEXT, {}
    if positions:  # a learned position table: as far as it goes
        refused = {"seq 8192": refusal(path, 8192, 1), "context 32768": refusal(path, 1,
                                                                                 CONTEXT)}
        seqs, context = (128, positions), positions - 1
    total, active = reference_params(data)
    ref = reference_counts(reference(name, data), seqs, context, data)
    got = {s: ours(path, s, context) for s in seqs}
    first = got[seqs[0]]
    row: dict[str, Any] = {
        "family": name, "params": [first["params"], total], "active": [first["active"], active],
        "prefill": {str(s): [got[s]["prefill"], ref["prefill"][s]] for s in seqs},
        "decode": [first["decode"], ref["decode"]], "context": context,
        "kv_token": [first["kv_token"], ref["kv_token"]],
        "kv_total": [first["kv_total"], ref["kv_total"]],
        "attention": first["layers"], "attention_count": first["attention_count"],
        "refused": refused}
    exact = (row["params"][0] == row["params"][1] and row["active"][0] == row["active"][1]
             and row["kv_token"][0] == row["kv_token"][1]
             and row["kv_total"][0] == row["kv_total"][1])
    ratios = [a / b for a, b in (*row["prefill"].values(), row["decode"])]
    row["ratios"] = ratios
    if not exact or any(abs(r - 1) > TOLERANCE for r in ratios):
        row["verdict"] = "MISMATCH"
    elif all(r == 1 for r in ratios):
        row["verdict"] = "exact"
    else:
        row["verdict"] = "within 0.1%"
    if refused:
        ok = all(v and f"({positions} positions)" in v for v in refused.values())
        what = "ALiBi biases" if kind == "mpt" else "learned positions"
        row["verdict"] += (f"; 8192/32768 refused: {what} ({positions})" if ok
                           else "; WRONG REFUSAL")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated config names (the results file is "
                        "written only for the whole set)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    paths = sorted(CONFIGS.glob("*.json"))
    if args.only:
        paths = [p for p in paths if p.stem in args.only.split(",")]
    load_before = os.getloadavg()[0]
    start = time.time()
    rows = []
    for p in paths:
        try:
            rows.append(family(p))
        except Exception as exc:  # a refusal or a crash is a row, not the end of the run
            rows.append({"family": p.stem, "verdict": f"refused: {exc}"})
        print(_line(rows[-1]), flush=True)
    meta = {"load_1min_before": load_before, "load_1min_after": os.getloadavg()[0],
            "seconds": round(time.time() - start, 1), "tolerance": TOLERANCE,
            "context": CONTEXT, "seqs": SEQS}
    print(f"load average {meta['load_1min_before']:.2f} -> {meta['load_1min_after']:.2f}, "
          f"{meta['seconds']} s")
    if not args.only:  # the results file holds the whole set
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps({"_meta": meta, "families": rows}, indent=1) + "\n")
        print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0 if all(not r["verdict"].startswith(("MISMATCH", "refused")) and "WRONG" not in
                    r["verdict"] for r in rows) else 1


def _line(r: dict[str, Any]) -> str:
    if "params" not in r:
        return f"{r['family']:24} | {r['verdict']}"
    pre = " ".join(f"{k}:{a / b:.6f}" for k, (a, b) in r["prefill"].items())
    return (f"{r['family']:24} | {r['params'][0]:>15,} / {r['params'][1]:>15,} | "
            f"{r['active'][0]:>15,} / {r['active'][1]:>15,} | {pre} | "
            f"kv {r['kv_token'][0]:,}/{r['kv_token'][1]:,} "
            f"total {r['kv_total'][0]:,}/{r['kv_total'][1]:,} | "
            f"decode@{r['context']} {r['decode'][0] / r['decode'][1]:.6f} | {r['verdict']}")


if __name__ == "__main__":
    raise SystemExit(main())
