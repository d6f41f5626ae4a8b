"""What a built decoder-only LM is made of, read from its module types: the norm, the MLP's
activation and gating, where the linear layers carry biases, the positions, a tied head.

A Hugging Face config does not say all of it in keys every family shares (GPT-NeoX has biases and
LayerNorm without an ``attention_bias`` or ``rms_norm_eps`` key), so ``llm``'s ``config`` block
for an ``hf:`` model describes the model transformers built rather than guessing from the keys.
"""
from __future__ import annotations

from typing import Any

import torch.nn as nn

_OUTPUT = ("o_proj", "out_proj", "dense", "c_proj", "wo")  # attention output projections
_ACTIVATIONS = ("silu", "swish", "gelu", "relu")


def _block(model: nn.Module) -> nn.Module | None:
    """The first decoder block: the first module with an attention child."""
    for module in model.modules():
        if any(_is_attention(name) for name, _ in module.named_children()):
            return module
    return None


def _is_attention(name: str) -> bool:
    return "attn" in name or "attention" in name


def _is_norm(module: nn.Module) -> bool:
    return isinstance(module, nn.LayerNorm) or "norm" in type(module).__name__.lower()


def _activation(module: nn.Module) -> str | None:
    for m in module.modules():
        name = type(m).__name__.lower()
        for act in _ACTIVATIONS:
            if act in name:
                return "silu" if act == "swish" else act
    return None


def _call(model: nn.Module, method: str) -> Any:
    """A Hugging Face model's accessor (``get_input_embeddings``), or None."""
    get = getattr(model, method, None)
    return get() if callable(get) else None


def describe(model: nn.Module) -> dict[str, Any]:
    """The LLMConfig fields the module types decide: ``norm``, ``mlp``, ``qkv_bias``,
    ``proj_bias``, ``position``, ``tied_embeddings``; empty when no block is found."""
    block = _block(model)
    if block is None:
        return {}
    out: dict[str, Any] = {}
    norms = [type(m).__name__ for m in block.modules() if _is_norm(m)]
    if norms:
        out["norm"] = "rmsnorm" if "rms" in norms[0].lower() else "layernorm"
    qkv, proj, gated = False, False, False
    mlp_parts = []
    for name, child in block.named_children():
        for sub, module in child.named_modules():
            leaf = sub.rsplit(".", 1)[-1]
            has_bias = any("bias" in p for p, _ in module.named_parameters(recurse=False))
            if _is_norm(module):
                continue
            if _is_attention(name):
                if has_bias and leaf in _OUTPUT:
                    proj = True
                elif has_bias:
                    qkv = True
            else:
                proj = proj or has_bias
                # gate_proj, gate_up_proj, w1/w3 pairs (the router alone is named "gate")
                gated = gated or ("gate" in leaf and leaf != "gate") or any(
                    "gate" in p and p != "gate" for p, _ in module.named_parameters(recurse=False))
        if not _is_attention(name):
            mlp_parts.append(child)
    acts = [a for a in (_activation(m) for m in mlp_parts) if a]
    if acts:
        out["mlp"] = ("gated_" if gated else "") + acts[0]
    out["qkv_bias"], out["proj_bias"] = qkv, proj
    inputs = _call(model, "get_input_embeddings")
    head = _call(model, "get_output_embeddings")
    if inputs is not None and head is not None:
        out["tied_embeddings"] = head.weight is inputs.weight
    embeddings = [m for m in model.modules() if isinstance(m, nn.Embedding) and m is not inputs]
    if embeddings:
        out["position"] = "learned"
    elif _alibi(getattr(model, "config", None)):  # (Falcon builds a rotary module regardless)
        out["position"] = "alibi"
    elif any("rotary" in type(m).__name__.lower() for m in model.modules()):
        out["position"] = "rope"
    return out


def _alibi(config: Any) -> bool:
    """Whether a Hugging Face config adds ALiBi biases to the attention scores instead of
    position embeddings: Bloom always, Falcon with ``alibi``, MPT with ``attn_config.alibi``
    (elementwise additions: they cost no MACs and leave the KV cache as it is)."""
    if config is None:
        return False
    attn = getattr(config, "attn_config", None)
    inner = attn.get("alibi") if isinstance(attn, dict) else getattr(attn, "alibi", False)
    return getattr(config, "model_type", None) == "bloom" or bool(
        getattr(config, "alibi", False)) or bool(inner)
