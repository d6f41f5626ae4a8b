"""What an analysis adds for language models: active parameters per token of a mixture of
experts, and the line saying how causal attention was counted."""
from __future__ import annotations

from typing import Any

import torch.nn as nn

from layerscope.analysis.attention_structure import LayerMasks
from layerscope.core.errors import UserError
from layerscope.frontends.llm_configs import LLMConfig
from layerscope.frontends.llm_moe import moe_from_hf
from layerscope.ops.aten import AttentionCounting


def routing(module: nn.Module, llm_config: LLMConfig | None) -> tuple[int, int] | None:
    """(experts per token k, experts E) of a language model ((1, 1) when dense), from its
    ``LLMConfig`` (presets, ``hf:``) or a Hugging Face ``config``; None for other models."""
    cfg: Any = llm_config if llm_config is not None else getattr(module, "config", None)
    if isinstance(cfg, LLMConfig):
        return cfg.experts_per_token, cfg.num_experts
    data = cfg.to_dict() if callable(getattr(cfg, "to_dict", None)) else None
    if isinstance(data, dict):  # a Hugging Face config: every key name transformers uses
        try:
            moe = moe_from_hf(data)
        except UserError:
            moe = None
        if moe is not None and moe.is_moe:
            return moe.experts_per_token, moe.routed_experts
    if hasattr(cfg, "num_hidden_layers") or hasattr(cfg, "n_layer"):  # a dense HF model
        return 1, 1
    return None


def expert_params(module: nn.Module) -> int:
    """Parameters inside an ``experts`` container (Mixtral's ``block_sparse_moe.experts``,
    Hugging Face's fused ``mlp.experts``), each shared tensor once. Shared experts (named
    ``shared_expert``) run for every token and are not among them."""
    seen = {id(p): p for name, p in module.named_parameters()
            if "experts" in name.split(".")[:-1]}
    return sum(p.numel() for p in seen.values())


def active_params(module: nn.Module, total: int, route: tuple[int, int]) -> int:
    """Parameters one token uses under expected routing: all the non-expert parameters plus
    k/E of the expert parameters (E identical experts per layer, k chosen per token).
    Mixtral-8x7B: 46,702,792,704 total, of which 32 layers x 8 experts x 3 x 4096 x 14336 =
    45,097,156,608 in experts; active = 1,605,636,096 + 45,097,156,608 x 2/8 = 12,879,925,248."""
    k, experts = route
    if experts <= 1:
        return total
    in_experts = expert_params(module)
    return total - in_experts + in_experts * k // experts


def moe_notes(route: tuple[int, int]) -> list[str]:
    k, experts = route
    if experts <= 1:
        return []
    return [f"mixture of experts, {k} of {experts} experts per token: params_active counts "
            f"{k}/{experts} of the expert parameters plus all others, and the MACs are those "
            "of the active experts (expected routing k/E: the presets deal T*k/E tokens to "
            "each expert, hf: models run transformers' batched_mm experts)"]


def attention_notes(counting: AttentionCounting) -> list[str]:
    n, masked = counting.causal_kernels, counting.masked_kernels
    out = []
    if counting.structured_kernels:
        described = counting.structure.describe() \
            if isinstance(counting.structure, LayerMasks) else "per layer"
        out.append(f"{counting.structured_kernels} masked attention kernel call(s) counted by "
                   f"the config's structure: {described} (the scores each query's mask lets "
                   "it see, as layerscope llm counts them; --attention full counts the whole "
                   "matrix)")
    if masked:
        out.append(f"{masked} attention kernel call(s) with a mask tensor counted as the whole "
                   "score matrix (a mask has no values in a trace without weights; a causal "
                   "model counts causal when called without attention_mask, is_causal=True)")
    if n and counting.mode == "full":
        out.append(f"attention counted full: {n} causal attention kernel call(s) counted as the "
                   "whole Lq x Lk score matrix (what the math fallback executes)")
    elif n:
        out.append(f"attention counted causal: {n} causal attention kernel call(s) counted as "
                   "the lower triangle incl. the diagonal, s(s+1)/2 scores per head "
                   "(--attention full counts the whole matrix)")
    return out
