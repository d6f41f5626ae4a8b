"""A mixture-of-experts configuration under every key name transformers' models use.

Routed experts: ``num_local_experts`` (Mixtral, Llama-4), ``num_experts`` (Qwen2/3-MoE, OLMoE),
``n_routed_experts`` (DeepSeek-V2/V3, GLM-4-MoE), ``moe_num_experts``; experts per token:
``num_experts_per_tok``, ``num_experts_per_token``, ``moe_k``, ``moe_topk``, ``moe_top_k``;
shared experts (run for every token): ``n_shared_experts``, ``num_shared_experts`` or a
``shared_expert_intermediate_size``; expert width: ``moe_intermediate_size`` (else the MLP's
``intermediate_size``). Which layers are dense (``first_k_dense_replace``, ``mlp_only_layers``,
``decoder_sparse_step``, ``interleave_moe_layer_step``, ...) is not read here: ``llm`` groups the
layers by the structure of the model transformers builds (analysis/llm_structure.py), and the
active parameters are those inside the ``experts`` modules it finds (analysis/llm_counts.py).
Nothing here imports torch.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from layerscope.core import values
from layerscope.core.errors import UserError

ROUTED = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
PER_TOKEN = ("num_experts_per_tok", "num_experts_per_token", "moe_k", "moe_topk", "moe_top_k")
SHARED = ("n_shared_experts", "num_shared_experts")


@dataclass(frozen=True)
class MoEShape:
    """``routed_experts`` E (1: a dense model), ``experts_per_token`` k, ``shared_experts``,
    the width of a routed expert's MLP (None: not given)."""

    routed_experts: int = 1
    experts_per_token: int = 1
    shared_experts: int = 0
    expert_width: int | None = None

    @property
    def is_moe(self) -> bool:
        return self.routed_experts > 1


def _first(data: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, Any] | None:
    for key in keys:
        if data.get(key):  # 0 and null mean "none" in these configs
            return key, data[key]
    return None


def moe_from_hf(data: Mapping[str, Any], where: str = "hf") -> MoEShape:
    """The mixture of experts of a Hugging Face ``config.json`` (as a dict, or an object with
    ``to_dict``); a dense model is ``MoEShape()``."""
    routed = _first(data, ROUTED)
    if routed is None:
        return MoEShape()
    experts = values.positive_int(routed[1], f"{where}: {routed[0]}")
    if experts <= 1:
        return MoEShape()
    chosen = _first(data, PER_TOKEN)
    k = values.positive_int(chosen[1], f"{where}: {chosen[0]}") if chosen else 1
    if k > experts:
        raise UserError(f"{where}: {chosen[0] if chosen else 'k'} {k} is more than the "
                        f"{experts} experts")
    shared_key = _first(data, SHARED)
    shared = values.positive_int(shared_key[1], f"{where}: {shared_key[0]}") if shared_key \
        else (1 if data.get("shared_expert_intermediate_size") else 0)
    width = data.get("moe_intermediate_size") or data.get("intermediate_size")
    return MoEShape(experts, k, shared,
                    values.positive_int(width, f"{where}: moe_intermediate_size")
                    if isinstance(width, int) else None)
