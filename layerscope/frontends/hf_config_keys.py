"""How the Hugging Face causal-LM configs name the same sizes, and which ones ``llm`` refuses.

Families spell one size differently: the MLP width is ``intermediate_size`` (Llama),
``ffn_hidden_size`` (Falcon), ``ffn_dim`` (OPT) or ``n_inner`` (GPT-2); the key/value heads are
``num_key_value_heads`` (Llama), ``num_kv_heads`` (Falcon's new decoder) or one head under
``multi_query`` (Falcon-7B, GPTBigCode); Bloom says ``n_head``/``n_layer`` through its config
class's ``attribute_map``. A key the file leaves out takes the value transformers' config class
gives it, so a short config means what transformers builds from it. Nothing here imports torch.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from layerscope.core import values
from layerscope.core.errors import UserError

# sizes every reader of a config divides by or builds from: a present key must be >= 1
SIZE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "num_kv_heads", "intermediate_size", "head_dim", "n_head",
             "n_layer", "n_embd")


# what the counts depend on beyond SIZE_KEYS: a mixture of experts, latent attention, a window
COUNTED_KEYS = SIZE_KEYS + (
    "moe_intermediate_size", "num_local_experts", "num_experts", "n_routed_experts",
    "num_experts_per_tok", "n_shared_experts", "first_k_dense_replace", "kv_lora_rank",
    "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "sliding_window")


def defaulted(data: Mapping[str, Any]) -> dict[str, Any]:
    """The sizes the counts depend on (``COUNTED_KEYS``) that ``data`` leaves out and
    transformers' config class for its ``model_type`` fills with a constant of its own (a
    Llama config without ``vocab_size`` is built with 32000 tokens, a Mistral one without
    ``num_key_value_heads`` with 8): key -> that value. A key the class derives from others
    (``head_dim``: hidden / heads) has no constant default and is not among them; empty without
    transformers or for a model type it does not know."""
    try:
        from transformers import CONFIG_MAPPING

        cls = CONFIG_MAPPING[str(data.get("model_type"))]
        fields = {f.name: f.default for f in dataclasses.fields(cls)}
    except Exception:  # no transformers, an unknown model_type, a class that is no dataclass
        return {}
    aliases = dict(getattr(cls, "attribute_map", None) or {})
    given = set(data) | {own for std, own in aliases.items() if std in data} | {
        std for std, own in aliases.items() if own in data}
    return {key: fields[key] for key in COUNTED_KEYS
            if key in fields and key not in given and fields[key] is not None
            and fields[key] is not dataclasses.MISSING}


def defaults_note(data: Mapping[str, Any], where: str) -> list[str]:
    """One note naming the sizes ``data`` leaves out and the values transformers gave them."""
    got = defaulted(data)
    if not got:
        return []
    kind = data.get("model_type")
    listed = ", ".join(f"{k} = {v}" for k, v in got.items())
    return [f"{where}: the config does not give {', '.join(got)}: counted with the default of "
            f"transformers' {kind} configuration ({listed}); give them in the config if the "
            "model has other values"]


def check_sizes(data: dict[str, Any], where: str) -> None:
    """Refuse a size that is present but not a whole number >= 1 (``num_key_value_heads: 0``
    would be a division by zero inside transformers), naming the key."""
    for key in SIZE_KEYS:
        if data.get(key) is not None:
            values.positive_int(data[key], f"{where}: {key}")


def own_names(data: Mapping[str, Any]) -> dict[str, str]:
    """Standard name -> the key this family's config class stores it under (its
    ``attribute_map``: MPT's ``n_layers``, GPT-Neo's ``num_layers`` and ``num_heads``, GPT-2's
    ``n_layer``); empty without transformers or for a model type it does not know."""
    try:
        from transformers import CONFIG_MAPPING

        cls = CONFIG_MAPPING[str(data.get("model_type"))]
    except Exception:  # no transformers, an unknown or missing model_type
        return {}
    return dict(getattr(cls, "attribute_map", None) or {})


def standard_names(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with the standard names (``num_hidden_layers``, ``num_attention_heads``,
    ``hidden_size``, ...) added where the family's config class renames them."""
    out = dict(data)
    for standard, own in own_names(data).items():
        if out.get(standard) is None and out.get(own) is not None:
            out[standard] = out[own]
    return out


def layers_key(data: Mapping[str, Any]) -> str:
    """The key holding the number of decoder layers in this config file."""
    own = own_names(data).get("num_hidden_layers")
    if own is not None and own in data:
        return own
    if "num_hidden_layers" not in data and ("n_layer" in data or "n_embd" in data
                                            or data.get("model_type") == "gpt2"):
        return "n_layer"
    return "num_hidden_layers"


def with_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` plus what transformers' config class sets for the keys it leaves out, and the
    standard names (``num_attention_heads``, ...) of the keys a class renames. Without
    transformers, or for a model type it does not know, ``data`` as it is."""
    try:
        import transformers

        config = transformers.AutoConfig.for_model(**data)
    except Exception:  # no transformers, an unknown model_type, values it refuses: the file
        return standard_names(data)  # (building it says what transformers refuses)
    merged = {**config.to_dict(), **data}
    for standard, own in getattr(config, "attribute_map", {}).items():
        if merged.get(standard) is None and merged.get(own) is not None:
            merged[standard] = merged[own]
    return merged


def kv_heads(config: dict[str, Any], heads: int, where: str) -> int:
    """Key/value heads: ``num_key_value_heads``; Falcon's ``num_kv_heads`` under its new decoder
    architecture; one under ``multi_query``; else one per query head."""
    if config.get("num_key_value_heads") is not None:
        return values.positive_int(config["num_key_value_heads"], f"{where}: num_key_value_heads")
    if config.get("new_decoder_architecture") and config.get("num_kv_heads") is not None:
        return values.positive_int(config["num_kv_heads"], f"{where}: num_kv_heads")
    if config.get("multi_query"):
        return 1
    return heads


def mlp_width(config: dict[str, Any], hidden: int, where: str) -> int:
    """The MLP's inner width under whichever name the family uses; 4 x hidden when none."""
    for key in ("intermediate_size", "ffn_hidden_size", "ffn_dim", "n_inner"):
        if config.get(key) is not None:
            return values.positive_int(config[key], f"{where}: {key}")
    return 4 * hidden


def refuse_unsupported(config: dict[str, Any], where: str) -> None:
    """The true reason ``llm`` cannot describe a config, in one line naming the key."""
    kind = config.get("model_type") or "this"
    if config.get("num_attention_heads") is None and (
            "mamba" in str(kind) or config.get("state_size") is not None):
        raise UserError(f"{where}: {kind} is a state-space model (state_size, no "
                        "num_attention_heads): it has no attention and no KV cache for layerscope "
                        "llm to count; `layerscope analyze` counts its parameters and MACs")
