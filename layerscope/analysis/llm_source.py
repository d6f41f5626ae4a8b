"""A decoder-only language model as its configuration plus a builder of the model on the meta
device: from a preset name, an ``hf:`` Hub id or config, or a config file; and the model of its
first n layers."""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from layerscope.core import values
from layerscope.core.errors import UserError
from layerscope.frontends import hf_config_keys, llm_attention
from layerscope.frontends.llm_attention import LayerAttention
from layerscope.frontends.llm_configs import HF_PREFIX, LLMConfig


@dataclass(frozen=True)
class LLMSource:
    """A decoder-only LM as configuration plus a builder: ``build(config)`` returns the model on
    the meta device, taking token ids (batch, seq) int64 and returning logits (or an output with
    ``.logits``). ``config.num_layers`` is honoured, which is what the extrapolation needs.
    ``notes``: what a report of this model should say about how it was counted."""

    name: str
    config: LLMConfig
    build: Callable[[LLMConfig], nn.Module]
    # keywords only: two optional tuples side by side are easy to pass the wrong way round
    notes: tuple[str, ...] = field(default=(), kw_only=True)
    # what every command on this model should say about its configuration (sizes it leaves
    # out, filled with transformers' defaults)
    config_notes: tuple[str, ...] = field(default=(), kw_only=True)
    # each layer's attention as the model defines it (frontends/llm_attention.py); empty:
    # plain causal attention with the config's heads on every layer
    attention: tuple[LayerAttention, ...] = field(default=(), kw_only=True)
    # what caps the positions at config.max_position, the model failing beyond it (None: a
    # learned position table when config.position is "learned", else nothing)
    position_table: str | None = field(default=None, kw_only=True)

    def position_cap(self) -> str | None:
        """What caps the positions at ``config.max_position`` (None: nothing does)."""
        from layerscope.frontends.llm_models import position_table

        return self.position_table or position_table(self.config)

    def layer_attention(self) -> tuple[LayerAttention, ...]:
        c = self.config
        return self.attention or llm_attention.uniform(c.num_layers, c.num_heads,
                                                       c.num_kv_heads, c.head_dim)


def resolve_llm(model: str | LLMSource) -> LLMSource:
    """A preset name (``llama-3-70b``), ``hf:PATH/config.json`` or an ``LLMSource``."""
    if isinstance(model, LLMSource):
        return model
    if not isinstance(model, str) or not model.strip():
        raise UserError("no model given: name an LLM preset (gpt2, llama-3-8b, ...) or "
                        "hf:PATH/config.json")
    from layerscope.frontends import llm_models

    model = model.strip()
    if model.startswith(HF_PREFIX):
        return _hf_source(model)
    config = llm_models.llm_config(model.lower())
    return LLMSource(config.name, config, meta_builder(llm_models.build))


def meta_builder(build: Callable[[LLMConfig], nn.Module]) -> Callable[[LLMConfig], nn.Module]:
    def on_meta(config: LLMConfig) -> nn.Module:
        with torch.device("meta"):
            return build(config)

    return on_meta


def _hf_source(spec: str) -> LLMSource:
    """``hf:``: the config's own architecture, built by ``frontends.llm_models.from_hf`` (meta
    device, transformers) from a copy of the config with the layer count the extrapolation asks
    for."""
    from layerscope.frontends import llm_models

    name, data = llm_models.hf_config_dict(spec)
    config = llm_models.llm_config_from_hf(data, name, spec)
    key = hf_config_keys.layers_key(data)

    def build(c: LLMConfig) -> nn.Module:
        with tempfile.TemporaryDirectory(prefix="layerscope-hf-") as folder:
            with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
                json.dump(with_layer_count(data, key, c.num_layers), f)  # a scratch file
            model, _, _ = llm_models.from_hf(HF_PREFIX + os.path.join(folder, "config.json"),
                                             shown=spec, checked=True)
        return model

    # the config block describes the model as built (norm, MLP, biases, positions, tied head):
    # the keys of a config do not say all of it in every family
    from layerscope.frontends.llm_built import describe

    one = build(with_layers(config, 1))
    config = dataclasses.replace(config, **describe(one))
    notes: tuple[str, ...] = ()
    if getattr(getattr(one, "config", None), "_attn_implementation", None) == "eager":
        notes = (f"{name} is built with eager attention (its transformers class has no SDPA "
                 "path, e.g. attention soft-capping): its attention scores are counted from the "
                 "config's attention description where the traced matmuls agree with it",)
    return LLMSource(name, config, build, notes=notes,
                     config_notes=tuple(hf_config_keys.defaults_note(data, spec)),
                     attention=llm_attention.from_hf(data, spec),
                     position_table=llm_models.position_table(config, data))



def with_layer_count(data: dict[str, Any], key: str, layers: int) -> dict[str, Any]:
    """The config with ``layers`` blocks: the first ones. Per-layer lists (a list with one entry
    per layer: ``layer_types``, Llama-4's ``no_rope_layers``, Zamba2's ``layers_block_type``)
    and per-layer pattern strings (Nemotron-H's ``hybrid_override_pattern``, one character per
    layer) are cut to match, as transformers checks their length; GPT-Neo's
    ``attention_types``, runs of layer types, is rewritten as one run per kept layer."""
    out = {**data, key: layers}
    total = data.get(key)
    for name, value in data.items():
        if isinstance(total, int) and name != key and (
                isinstance(value, list) or isinstance(value, str) and "pattern" in name) \
                and len(value) == total:
            out[name] = value[:layers]
    if data.get("model_type") == "gpt_neo":
        kinds = llm_attention.gpt_neo_layer_types(data)[:layers]
        out["attention_types"] = [[[kind], 1] for kind in kinds]
        out["attention_layers"] = kinds
    return out


def check_tokens(config: LLMConfig, batch: int, seq: int, what: str) -> None:
    """Refuse a (batch, seq) of token ids whose widest tensor torch cannot describe even on the
    meta device (a tensor's size in bytes is an int64 there; the trace would fail deep inside
    torch with "Storage size calculation overflowed"). The widest tensor per token of a
    decoder-only LM is the fp32 logits (vocab), the MLP's inner activation of the routed experts
    or GPT-2's fused q/k/v projection (3 x hidden)."""
    widest = max(config.vocab_size, config.intermediate_size * config.experts_per_token,
                 3 * config.hidden_size)
    if batch * seq * widest * 4 > values.INT64_MAX:
        raise UserError(f"{what}: {batch:,} x {seq:,} tokens is too many to count: the model's "
                        f"widest tensor ({batch} x {seq} x {widest} fp32 values) would exceed "
                        "2**63-1 bytes, more than torch can describe; give fewer tokens (or a "
                        "config with a smaller vocabulary or MLP)",
                        arguments=tuple(what.split(" x ")))


def with_layers(config: LLMConfig, layers: int) -> LLMConfig:
    return dataclasses.replace(config, num_layers=layers)
