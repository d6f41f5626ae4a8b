"""Decoder-only language models as plain PyTorch modules, built from an ``LLMConfig``.

The built-in LLM presets (``llama-3-8b``, ``mixtral-8x7b``, ``gpt2``, ...) are these modules built
on the meta device: no weight memory, so a 405B model is built in well under a second, and the
static analysis counts them exactly. Module names follow Hugging Face's (``model.layers.0.
self_attn.q_proj``), and so does the arithmetic that costs MACs, so a preset and the same config
built with ``transformers`` (``hf:config.json``, :func:`from_hf`) agree on parameters and MACs.

- Attention has separate q/k/v/o projections (grouped-query and multi-query attention exact: k
  and v have ``num_kv_heads`` heads) and calls ``F.scaled_dot_product_attention(is_causal=True)``
  with k/v expanded to the query heads (a view; Hugging Face's ``repeat_kv``).
- Rotary embeddings are applied functionally; their angles (position x inverse frequency, an
  elementwise outer product: no MACs) are computed once per forward, as Hugging Face does.
- Mixture of experts (Mixtral): a router ``Linear(h, E, bias=False)`` and E gated-SiLU experts.
  Costs are those of **expected routing k/E**: the T*k (token, expert) assignments are dealt out
  evenly (balanced dispatch: each expert gets floor or ceil of T*k/E tokens, T*k in all), so the
  MACs are exactly those of k active experts per token, and the trace needs no data-dependent
  shapes (it runs on the meta device). The output *values* are not those of a real top-k routing;
  use the ``hf:`` model for a faithful forward.
"""
from __future__ import annotations

import json
import os
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from layerscope.core import values
from layerscope.core.errors import UserError
from layerscope.core.infiles import check_input_file
from layerscope.frontends import hf_config_keys, llm_attention
from layerscope.frontends.llm_configs import HF_PREFIX, PRESETS, LLMConfig
from layerscope.frontends.llm_moe import moe_from_hf


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, written out as Llama's reference (and Hugging Face's
    LlamaRMSNorm) computes it, in float32."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def _norm(cfg: LLMConfig) -> nn.Module:
    if cfg.norm == "layernorm":
        return nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
    return RMSNorm(cfg.hidden_size, cfg.norm_eps)


class RotaryEmbedding(nn.Module):
    """cos/sin of the rotary angles for positions 0..S-1 (Su et al. 2021), as Hugging Face's
    LlamaRotaryEmbedding computes them (no parameters; ``inv_freq`` is a non-persistent buffer)."""

    def __init__(self, cfg: LLMConfig):
        super().__init__()
        d = cfg.head_dim
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = self.get_buffer("inv_freq").float()
        # angle = position * inv_freq: an outer product, elementwise (no contraction: 0 MACs,
        # as Hugging Face's rotary embedding is costed)
        freqs = positions[:, :, None].float() * inv_freq  # (B, S, d/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, H, S, d); cos, sin: (B, S, d)."""
    return x * cos[:, None] + _rotate_half(x) * sin[:, None]


class Attention(nn.Module):
    def __init__(self, cfg: LLMConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        h, q, kv = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(h, q, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(h, kv, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(h, kv, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(q, h, bias=cfg.proj_bias)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None
                ) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if self.kv_heads != self.heads:
            # each kv head serves heads/kv_heads query heads: an expand (a view, no arithmetic)
            # and a copy; the attention then costs B*H*(...) as the kernels execute it
            k, v = _repeat_kv(k, self.heads // self.kv_heads), _repeat_kv(v, self.heads //
                                                                          self.kv_heads)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.o_proj(y.transpose(1, 2).reshape(b, s, -1))
        return out


def _repeat_kv(x: torch.Tensor, n: int) -> torch.Tensor:
    b, kv, s, d = x.shape
    return x[:, :, None].expand(b, kv, n, s, d).reshape(b, kv * n, s, d)


class GatedMLP(nn.Module):
    """down(silu(gate(x)) * up(x)) (Shazeer 2020; Llama, Mistral, Qwen2, Mixtral's experts)."""

    def __init__(self, cfg: LLMConfig):
        super().__init__()
        h, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(h, f, bias=cfg.proj_bias)
        self.up_proj = nn.Linear(h, f, bias=cfg.proj_bias)
        self.down_proj = nn.Linear(f, h, bias=cfg.proj_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class GeluMLP(nn.Module):
    """proj(gelu_tanh(fc(x))) (GPT-2)."""

    def __init__(self, cfg: LLMConfig):
        super().__init__()
        h, f = cfg.hidden_size, cfg.intermediate_size
        self.fc = nn.Linear(h, f, bias=cfg.proj_bias)
        self.proj = nn.Linear(f, h, bias=cfg.proj_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.proj(F.gelu(self.fc(x), approximate="tanh"))
        return out


def balanced_counts(tokens: int, experts: int, k: int) -> list[int]:
    """The T*k (token, expert) assignments dealt out evenly: expert e gets floor or ceil of
    T*k/E tokens, the first (T*k mod E) experts one more; they sum to T*k."""
    slots = tokens * k
    return [slots // experts + (1 if e < slots % experts else 0) for e in range(experts)]


class MoE(nn.Module):
    """Router + E experts, top-k, costed under expected routing (module docstring)."""

    def __init__(self, cfg: LLMConfig):
        super().__init__()
        self.k = cfg.experts_per_token
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.experts = nn.ModuleList(GatedMLP(cfg) for _ in range(cfg.num_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        tokens = x.reshape(b * s, h)
        probs = F.softmax(self.gate(tokens), dim=-1, dtype=torch.float32)
        weights, _ = torch.topk(probs, self.k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)  # Mixtral renorms
        # every token once per chosen expert, dealt out evenly over the experts (expected
        # routing k/E): the shapes do not depend on the router's values
        slots = tokens[:, None].expand(b * s, self.k, h).reshape(b * s * self.k, h)
        counts = balanced_counts(b * s, len(self.experts), self.k)
        parts = torch.split(slots, counts)
        outs = [expert(part) for expert, part in zip(self.experts, parts)]
        mixed = torch.cat(outs) * weights.reshape(-1, 1)
        return mixed.view(b * s, self.k, h).sum(dim=1).view(b, s, h)


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then + mlp(norm(x))."""

    def __init__(self, cfg: LLMConfig):
        super().__init__()
        self.input_layernorm = _norm(cfg)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = _norm(cfg)
        mlp: nn.Module = MoE(cfg) if cfg.is_moe else (
            GeluMLP(cfg) if cfg.mlp == "gelu" else GatedMLP(cfg))
        if cfg.is_moe:
            self.block_sparse_moe = mlp  # Mixtral's name
        else:
            self.mlp = mlp

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None
                ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope)
        ff = self.block_sparse_moe if hasattr(self, "block_sparse_moe") else self.mlp
        out: torch.Tensor = x + ff(self.post_attention_layernorm(x))
        return out


class DecoderModel(nn.Module):
    def __init__(self, cfg: LLMConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        if cfg.position == "learned":
            self.embed_positions = nn.Embedding(cfg.max_position, cfg.hidden_size)
        else:
            self.rotary_emb = RotaryEmbedding(cfg)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = _norm(cfg)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        b, s = input_ids.shape
        positions = torch.arange(s, device=input_ids.device)[None].expand(b, s)
        x = self.embed_tokens(input_ids)
        rope = None
        if hasattr(self, "embed_positions"):
            x = x + self.embed_positions(positions)
        else:
            rope = self.rotary_emb(x, positions)
        for layer in self.layers:
            x = layer(x, rope)
        out: torch.Tensor = self.norm(x)
        return out


class CausalLM(nn.Module):
    """token ids (B, S) int64 -> logits (B, S, vocab)."""

    def __init__(self, cfg: LLMConfig):
        super().__init__()
        self.config = cfg
        self.model = DecoderModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tied_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.lm_head(self.model(input_ids))
        return out


def build(cfg: LLMConfig) -> CausalLM:
    """The model of ``cfg`` on the current default device (the zoo builds it under
    ``torch.device("meta")``)."""
    return CausalLM(cfg)


# ------------------------------------------------------------------ Hugging Face configurations
HF_INSTALL = "pip install layerscope[hf]"


def llm_config_from_hf(config: dict[str, Any], name: str = "hf",
                       source: str | None = None) -> LLMConfig:
    """The ``LLMConfig`` of a Hugging Face ``config.json`` (llama, mistral, mixtral, qwen2,
    gpt2 and the models that share their keys), for KV-cache and memory-plan arithmetic.
    Every size is checked here (a whole number of at least 1, heads that group evenly), so a
    bad config is one line naming ``source`` (the user's ``hf:...``) and the key, never a
    division by zero or a negative dimension deep in the model's construction."""
    where = source or name
    get = config.get

    def count(key: str, default: Any = None) -> int:
        value = get(key, default) if default is not None else config[key]
        return values.positive_int(value, f"{where}: {key}")

    def real(key: str, default: float) -> float:
        return values.finite_positive_float(get(key) or default, f"{where}: {key}")

    if get("model_type") == "gpt2" or "n_embd" in config:
        h = count("n_embd", 768)
        heads = count("n_head", 12)
        if h % heads:
            raise UserError(f"{where}: n_embd {h} is not a multiple of n_head {heads}")
        return LLMConfig(
            name, vocab_size=count("vocab_size", 50257), hidden_size=h,
            num_layers=count("n_layer", 12), num_heads=heads,
            num_kv_heads=llm_attention.gpt2_kv_heads(config, heads),
            intermediate_size=count("n_inner") if get("n_inner") else 4 * h,
            max_position=count("n_positions", 1024), norm="layernorm", mlp="gelu",
            position="learned", qkv_bias=True, proj_bias=True,
            tied_embeddings=bool(get("tie_word_embeddings", True)),
            norm_eps=real("layer_norm_epsilon", 1e-5),
            default_seq_len=min(2048, count("n_positions", 1024)))
    hf_config_keys.check_sizes(config, where)
    config = hf_config_keys.with_defaults(config)
    hf_config_keys.refuse_unsupported(config, where)
    get = config.get
    try:
        heads = count("num_attention_heads")
        hidden = count("hidden_size")
        head_dim = count("head_dim") if get("head_dim") is not None else None
        if head_dim is None and hidden % heads:
            raise UserError(f"{where}: hidden_size {hidden} is not a multiple of "
                            f"num_attention_heads {heads}")
        kv_heads = hf_config_keys.kv_heads(config, heads, where)
        if heads % kv_heads:
            raise UserError(f"{where}: num_attention_heads {heads} is not a multiple of "
                            f"num_key_value_heads {kv_heads} (each key/value head serves a "
                            "group of query heads)")
        bias = get("attention_bias")
        rope = get("rope_parameters") or get("rope_scaling") or {}
        if not isinstance(rope, dict):
            raise UserError(f"{where}: rope_scaling must be a JSON object, got {rope!r:.40}")
        moe = moe_from_hf(config, where)  # every key name transformers uses
        experts, per_token = moe.routed_experts, moe.experts_per_token
        max_position = count("max_seq_len") if get("model_type") == "mpt" and \
            get("max_seq_len") else count("max_position_embeddings", 2048)
        return LLMConfig(
            name, vocab_size=count("vocab_size"), hidden_size=hidden,
            num_layers=count("num_hidden_layers"), num_heads=heads, num_kv_heads=kv_heads,
            intermediate_size=hf_config_keys.mlp_width(config, hidden, where),
            max_position=max_position,
            head_size=None if head_dim is None or head_dim * heads == hidden else head_dim,
            # Qwen2 has q/k/v biases without saying so; Llama-style configs say attention_bias
            qkv_bias=bool(bias) if bias is not None else get("model_type") == "qwen2",
            proj_bias=bool(get("mlp_bias")) and bool(bias),
            tied_embeddings=bool(get("tie_word_embeddings", False)),
            num_experts=experts, experts_per_token=per_token,
            rope_theta=values.finite_positive_float(
                get("rope_theta") or rope.get("rope_theta") or 10000.0, f"{where}: rope_theta"),
            norm_eps=real("rms_norm_eps", 1e-6),
            default_seq_len=min(2048, max_position))
    except KeyError as exc:
        raise UserError(f"{where}: the Hugging Face config has no {exc.args[0]!r}: not a "
                        "decoder-only causal LM config layerscope can read") from None


def _config_name(path: str) -> str:
    """The model's name for a config file: its folder's for ``config.json`` (the hub's layout,
    the folder is the model), else the file's own (``mistral-7b.json`` -> ``mistral-7b``)."""
    folder, file = os.path.split(os.path.abspath(path))
    if file == "config.json":
        return os.path.basename(folder)
    return os.path.splitext(file)[0]


def hf_config_dict(spec: str) -> tuple[str, dict[str, Any]]:
    """``hf:PATH/config.json`` (or a folder holding one) or ``hf:ORG/NAME`` -> (name, dict)."""
    target = spec[len(HF_PREFIX):].strip()
    if not target:
        raise UserError(f"{spec!r}: name a config, e.g. hf:path/to/config.json or "
                        "hf:meta-llama/Meta-Llama-3-8B")
    path = os.path.join(target, "config.json") if os.path.isdir(target) else target
    check_input_file(path, "a model config (config.json)")
    if os.path.isdir(target) and not os.path.isfile(path):
        raise UserError(f"{spec}: the folder {target} has no config.json; name the folder that "
                        "holds the model's config.json, or the file itself")
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise UserError(f"{spec}: cannot read {path} as JSON ({exc})") from None
        except RecursionError:
            raise UserError(f"{spec}: {path} is not a model config (JSON nested too "
                            "deeply)") from None
        if not isinstance(data, dict):
            raise UserError(f"{spec}: {path} is not a JSON object")
        return _config_name(path) or target, data
    if target.endswith(".json") or os.sep in target.strip("./") and target.count("/") != 1:
        raise UserError(f"{spec}: no such file {path!r}")
    return target, _hub_config(spec, target)


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise UserError(f"hf: models need the transformers package: {HF_INSTALL}") from None
    return transformers


def _hub_config(spec: str, repo: str) -> dict[str, Any]:
    transformers = _transformers()
    try:
        config = transformers.AutoConfig.from_pretrained(repo)
    except Exception as exc:  # offline, unknown repo, gated repo: one line, no traceback
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{spec}: cannot fetch the config of {repo!r} from the Hugging Face hub "
                        f"({first[:200]}); pass a local file as hf:PATH/config.json") from None
    data: dict[str, Any] = config.to_dict()
    return data


def from_hf(spec: str, shown: str | None = None, *, checked: bool = False,
            device: str = "meta", dtype: torch.dtype | None = None
            ) -> tuple[nn.Module, LLMConfig | None, str]:
    """(model, its LLMConfig or None when the architecture is not one it can describe, name) of
    ``hf:...``, built with ``AutoModelForCausalLM.from_config`` on the meta device. ``shown``:
    the spec the user gave, for messages (``spec`` may be a scratch copy of it); ``checked``:
    the caller has checked the sizes of the user's config (its scratch copy may ask for no
    blocks at all: the model of what lies outside them). ``device``: another device builds it
    there with transformers' random initialisation (``dtype``: its parameters' dtype), to be
    run (``profile --decode``)."""
    name, data = hf_config_dict(spec)
    spec = shown or spec
    if not checked:
        hf_config_keys.check_sizes(data, spec)
    transformers = _transformers()
    try:
        config = transformers.AutoConfig.for_model(**data)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{spec}: transformers cannot read this config ({first})") from None
    config._attn_implementation = attention_implementation(transformers, config)
    if hasattr(config, "_experts_implementation"):
        # mixture of experts: "batched_mm" gathers each (token, chosen expert) pair's weights and
        # multiplies them in one bmm, so the MACs are those of the k active experts and nothing
        # depends on the router's values (the default grouped_mm needs bf16 and real offsets)
        config._experts_implementation = "batched_mm"
    try:
        with torch.device(device):
            model: nn.Module = transformers.AutoModelForCausalLM.from_config(
                config, **({"dtype": dtype} if dtype is not None else {}))
    except Exception as exc:
        raise UserError(f"{spec}: transformers cannot build a causal LM from this config "
                        f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                        ) from None
    try:
        llm: LLMConfig | None = llm_config_from_hf(data, name)
    except UserError:
        llm = None
    return model, llm, name


def position_table(config: LLMConfig | None, data: dict[str, Any] | None = None) -> str | None:
    """What caps a model's positions at ``config.max_position``, the model failing beyond it
    (None where nothing does): a learned position table (GPT-2, OPT), or MPT's ALiBi biases,
    computed once for ``max_seq_len`` positions (``data``: the Hugging Face config)."""
    if data is not None and data.get("model_type") == "mpt" and data.get("max_seq_len"):
        return "ALiBi biases, computed for max_seq_len"
    if config is not None and config.position == "learned":
        return "learned position table"
    return None


def attention_implementation(transformers: Any, config: Any) -> str:
    """``sdpa`` where the model's class can express its attention with it: the kernels
    layerscope costs by their is_causal flag (eager materialises a mask and counts the whole
    score matrix). ``eager`` where it cannot (Gemma-2's attention soft-capping, Bloom's ALiBi,
    models without attention): what transformers itself runs for them."""
    mapping = transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING
    try:
        cls = mapping[type(config)]
    except KeyError:  # not a causal LM: from_config says so in its own words
        return "sdpa"
    return "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"


def llm_config(model: str) -> LLMConfig:
    """The ``LLMConfig`` of a preset name or an ``hf:`` spec, without building the model (the
    KV-cache and memory-plan arithmetic needs only the numbers)."""
    if model.startswith(HF_PREFIX):
        name, data = hf_config_dict(model)
        return llm_config_from_hf(data, name, model)
    cfg = PRESETS.get(model)
    if cfg is None:
        import difflib

        close = difflib.get_close_matches(model, PRESETS, n=2, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise UserError(f"{model!r} is not an LLM: {hint}name a preset ({', '.join(PRESETS)}) "
                        "or a Hugging Face config as hf:PATH/config.json")
    return cfg
