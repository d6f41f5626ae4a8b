"""Attention as a decoder-only model defines it, layer by layer, read from its configuration.

One ``LayerAttention`` per layer says what that layer's attention kernel computes and what its
KV cache holds: plain causal attention, a sliding window of W keys (Mistral's ``sliding_window``
on every layer; Qwen2's ``use_sliding_window`` from ``max_window_layers`` on; Gemma-2/3 and
Cohere-2 local/global patterns via ``layer_types`` or ``sliding_window_pattern``), multi-head
latent attention (DeepSeek-V2/V3: ``kv_lora_rank``, ``qk_rope_head_dim``, ``qk_nope_head_dim``,
``v_head_dim``), multi-/grouped-query attention (``num_key_value_heads``; GPT-BigCode's
``multi_query``; Falcon's ``multi_query``, ``new_decoder_architecture`` and ``num_kv_heads``)
and ``head_dim`` given separately. A layer type the rules do not know (``chunked_attention``,
...) is ``kind="unknown"``: its scores are counted as the whole matrix, and said so. A layer
without softmax attention (transformers' layer types ``linear_attention``, ``mamba``, ``conv``,
``mlp``: the state-space, linear-attention and convolution layers of Jamba, Qwen3-Next,
Granite-4.0-H, Nemotron-H, LFM2, MiniMax) is ``kind="recurrent"``: no scores and no KV cache.

The layer types are those transformers' configuration class derives (``layer_types``, which
many families compute from other keys) when transformers is installed; without it, or for a
class that has none, the rules below replicate the common ones (Qwen2 windows layers ``i >=
max_window_layers``, Gemma-2 every other layer from the first, a ``sliding_window_pattern`` p
every layer but each p-th, Mistral every layer). Nothing here imports torch; the costs
follow from these records in analysis/llm_attention_cost.py.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from layerscope.core import values
from layerscope.core.errors import UserError
from layerscope.frontends import hf_config_keys

CAUSAL, SLIDING, CHUNKED, MLA, UNKNOWN = "causal", "sliding", "chunked", "mla", "unknown"
# a layer without softmax attention: a state-space (Mamba), linear-attention or short-convolution
# mixer, or an MLP alone (Nemotron-H's "-" layers): no scores and no KV cache
RECURRENT = "recurrent"
# transformers' layer_types: the layers that attend (a "hybrid" layer runs attention and a
# state-space mixer side by side: Falcon-H1, Zamba2's shared-attention layers) and those that
# do not
HYBRID = "hybrid"
_ATTENDING = {"full_attention": CAUSAL, "attention": CAUSAL, HYBRID: CAUSAL,
              "sliding_attention": SLIDING}
_NOT_ATTENDING = frozenset({"linear_attention", "mamba", "mamba2", "conv", "mlp", "moe",
                            "recurrent", "ssm"})


@dataclass(frozen=True)
class LayerAttention:
    """What one layer's attention computes and caches.

    ``heads`` query heads each compute a score per visible key (a ``qk_head_dim`` dot product)
    and a weighted sum of values (``v_head_dim``); ``window``: at most this many keys per query
    (the query itself and the W - 1 before it), None for all earlier keys; ``cache_elements``:
    values stored per token in this layer's KV cache (K and V of every KV head; MLA: its
    compressed latent and the shared rotary key)."""

    kind: str
    heads: int
    kv_heads: int
    qk_head_dim: int
    v_head_dim: int
    cache_elements: int
    window: int | None = None
    chunk: int | None = None  # chunked attention: queries attend their own chunk of C tokens
    # a RECURRENT layer's type as transformers names it ("linear_attention", "mamba", "conv",
    # "mlp"), or HYBRID for an attention layer with a state-space mixer beside it (Falcon-H1):
    # what the report calls its group
    mixer: str | None = None

    @property
    def attends(self) -> bool:
        """Whether the layer computes softmax attention scores (every kind but RECURRENT)."""
        return self.kind != RECURRENT

    def keys(self, position: int) -> int:
        """Keys the query at 0-based ``position`` attends."""
        if self.chunk is not None:
            return position % self.chunk + 1
        return position + 1 if self.window is None else min(position + 1, self.window)

    def prefill_scores(self, seq: int) -> int:
        """Scores per head of a causal prefill of ``seq`` tokens, sum over i < seq of the keys of
        query i: s(s+1)/2 without a window; with a window W < s, W(W+1)/2 + (s - W) W; in
        chunks of C, C(C+1)/2 per whole chunk and r(r+1)/2 for the r = s mod C left."""
        if self.chunk is not None:
            c, r = self.chunk, seq % self.chunk
            return seq // c * (c * (c + 1) // 2) + r * (r + 1) // 2
        w = self.window
        if w is None or seq <= w:
            return seq * (seq + 1) // 2
        return w * (w + 1) // 2 + (seq - w) * w

    def cached_tokens(self, context: int) -> int:
        """Tokens this layer keeps in its cache with ``context`` tokens seen (a window layer
        keeps the last W; a chunked layer at most C, as transformers' cache holds them)."""
        bound = self.window if self.chunk is None else self.chunk
        return context if bound is None else min(context, bound)


def _positive(get: Callable[[str], Any], key: str, where: str) -> int:
    return values.positive_int(get(key), f"{where}: {key}")


def from_hf(data: Mapping[str, Any], where: str = "hf") -> tuple[LayerAttention, ...]:
    """The per-layer attention of a Hugging Face ``config.json`` (as a dict), one record per
    layer. Sizes are checked (whole numbers >= 1, query heads a multiple of the KV heads)."""
    get = data.get
    if get("model_type") == "gpt2" or "n_embd" in data:
        heads = _positive(lambda k: get(k, 12), "n_head", where)
        d = _positive(lambda k: get(k, 768), "n_embd", where) // heads
        layers = _positive(lambda k: get(k, 12), "n_layer", where)
        kv = gpt2_kv_heads(data, heads)
        return (LayerAttention(CAUSAL, heads, kv, d, d, 2 * kv * d),) * layers
    data = hf_config_keys.standard_names(data)  # MPT's n_layers, GPT-Neo's num_heads, ...
    get = data.get
    layers_key = "n_layer" if "n_layer" in data else "num_hidden_layers"
    heads_key = "n_head" if "n_head" in data else "num_attention_heads"
    for key in (layers_key, heads_key, "hidden_size"):
        if key not in data:
            raise UserError(f"{where}: the Hugging Face config has no {key!r}: not a "
                            "decoder-only causal LM config layerscope can read")
    layers = _positive(get, layers_key, where)
    heads = _positive(get, heads_key, where)
    hidden = _positive(get, "hidden_size", where)
    base = _base_attention(data, heads, hidden, where)
    kinds, mixers = _layer_kinds(data, layers, where)
    window = _window(data, where)
    out = []
    for kind, mixer in zip(kinds, mixers):
        if kind == SLIDING and base.kind == MLA:
            out.append(LayerAttention(MLA, base.heads, base.kv_heads, base.qk_head_dim,
                                      base.v_head_dim, base.cache_elements, window))
        elif kind == SLIDING:
            out.append(LayerAttention(SLIDING, base.heads, base.kv_heads, base.qk_head_dim,
                                      base.v_head_dim, base.cache_elements, window))
        elif kind == CHUNKED:
            out.append(LayerAttention(CHUNKED, base.heads, base.kv_heads, base.qk_head_dim,
                                      base.v_head_dim, base.cache_elements,
                                      chunk=values.positive_int(get("attention_chunk_size"),
                                                                f"{where}: attention_chunk_size")))
        elif kind == UNKNOWN:
            out.append(LayerAttention(UNKNOWN, base.heads, base.kv_heads, base.qk_head_dim,
                                      base.v_head_dim, base.cache_elements))
        elif kind == RECURRENT:
            out.append(dataclasses.replace(NO_ATTENTION, mixer=mixer))
        elif mixer == HYBRID:  # attention beside a state-space mixer (Falcon-H1)
            out.append(dataclasses.replace(base, mixer=mixer))
        else:
            out.append(base)
    return tuple(out)


def gpt2_kv_heads(data: Mapping[str, Any], heads: int) -> int:
    """Key/value heads of a config in GPT-2's keys (``n_embd``, ``n_head``): GPT-BigCode
    (SantaCoder, StarCoder) shares them and is multi-query unless ``multi_query`` is false (its
    configuration's default is true): one K and one V head serve all the query heads."""
    if data.get("model_type") == "gpt_bigcode" and data.get("multi_query", True):
        return 1
    return heads


def _base_attention(data: Mapping[str, Any], heads: int, hidden: int,
                    where: str) -> LayerAttention:
    get = data.get
    if get("kv_lora_rank"):  # multi-head latent attention (DeepSeek-V2/V3)
        rank, rope, nope, v = (_positive(get, k, where) for k in (
            "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"))
        # the kernel sees every head's full keys (nope + rope) and values; the cache keeps the
        # latent and the one rotary key shared by the heads
        return LayerAttention(MLA, heads, heads, nope + rope, v, rank + rope)
    if get("head_dim") is not None:
        d = _positive(get, "head_dim", where)
    else:
        if hidden % heads:
            raise UserError(f"{where}: hidden_size {hidden} is not a multiple of the "
                            f"{heads} attention heads (and no head_dim is given)")
        d = hidden // heads
    kv = _kv_heads(data, heads, where)
    return LayerAttention(CAUSAL, heads, kv, d, d, 2 * kv * d)


def _kv_heads(data: Mapping[str, Any], heads: int, where: str) -> int:
    get = data.get
    if get("model_type") == "falcon" or "multi_query" in data or "num_kv_heads" in data:
        # Falcon: the new decoder architecture (40B, 180B) has num_kv_heads; otherwise
        # multi_query (7B: one KV head, the default) or multi-head
        if get("new_decoder_architecture"):
            kv = _positive(get, "num_kv_heads", where) if get("num_kv_heads") else heads
        else:
            kv = 1 if get("multi_query", True) else heads
    else:
        kv = _positive(get, "num_key_value_heads", where) if get("num_key_value_heads") \
            else heads
    if heads % kv:
        raise UserError(f"{where}: {heads} attention heads is not a multiple of {kv} key/value "
                        "heads (each key/value head serves a group of query heads)")
    return kv


def gpt_neo_layer_types(data: Mapping[str, Any]) -> list[str]:
    """GPT-Neo's layer types (``global``, ``local``), layer by layer: ``attention_types`` lists
    runs, [[types, repeats], ...] (its configuration's default: global, local x 12)."""
    runs = data.get("attention_types") or [[["global", "local"], 12]]
    try:
        return [kind for kinds, repeats in runs for _ in range(repeats) for kind in kinds]
    except (TypeError, ValueError):
        return list(data.get("attention_layers") or [])


def _window(data: Mapping[str, Any], where: str) -> int | None:
    get = data.get
    if get("model_type") == "gpt_neo":  # its local layers see the last window_size keys
        return values.positive_int(get("window_size", 256), f"{where}: window_size")
    if get("sliding_window") is None or get("use_sliding_window") is False:
        return None
    return values.positive_int(get("sliding_window"), f"{where}: sliding_window")


def _layer_kinds(data: Mapping[str, Any], layers: int, where: str
                 ) -> tuple[list[str], list[str | None]]:
    """causal / sliding / chunked / recurrent / unknown per layer, as transformers'
    configuration classes resolve them, and each layer's type where there are types."""
    get = data.get
    window = _window(data, where)
    types = get("layer_types")
    if types is None and get("model_type") == "gpt_neo":
        names = {"global": "full_attention", "local": "sliding_attention"}
        types = [names.get(t, str(t)) for t in gpt_neo_layer_types(data)]
        if len(types) != layers:
            raise UserError(f"{where}: attention_types gives {len(types)} layer types for "
                            f"{layers} layers (num_layers): give one per layer")
    if types is None:
        types = _resolved_layer_types(data, layers)
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise UserError(f"{where}: layer_types must list one type per layer "
                            f"({layers} layers)")
        kinds = dict(_ATTENDING) | {t: RECURRENT for t in _NOT_ATTENDING}
        if get("attention_chunk_size"):
            kinds["chunked_attention"] = CHUNKED
        out = [kinds.get(t, UNKNOWN) for t in types]
        if SLIDING in out and window is None:
            raise UserError(f"{where}: layer_types has sliding_attention layers but no "
                            "sliding_window")
        return out, [str(t) for t in types]
    return _kinds_by_rule(data, layers, window, where), [None] * layers


def _kinds_by_rule(data: Mapping[str, Any], layers: int, window: int | None,
                   where: str) -> list[str]:
    """causal / sliding per layer of a config without layer types (the module's rules)."""
    get = data.get
    if window is None:
        return [CAUSAL] * layers
    kind = str(get("model_type"))
    if kind in ("qwen2", "qwen3"):
        start = values.non_negative_int(get("max_window_layers", 28),
                                        f"{where}: max_window_layers")
        return [SLIDING if i >= start else CAUSAL for i in range(layers)]
    if kind == "qwen2_moe":
        start = values.non_negative_int(get("max_window_layers", 28),
                                        f"{where}: max_window_layers")
        return [SLIDING if (i + 1) % 2 and i < start else CAUSAL for i in range(layers)]
    pattern = get("sliding_window_pattern") or {"gemma2": 2, "gemma3_text": 6, "gemma3": 6,
                                                "cohere2": 4}.get(kind)
    if pattern:
        p = values.positive_int(pattern, f"{where}: sliding_window_pattern")
        return [SLIDING if (i + 1) % p else CAUSAL for i in range(layers)]
    return [SLIDING] * layers  # Mistral, Mixtral, Phi-3: the window on every layer


def _resolved_layer_types(data: Mapping[str, Any], layers: int) -> list[str] | None:
    """The ``layer_types`` transformers' configuration class derives for this config (many
    families compute them from other keys: Llama-4's chunked layers from ``no_rope_layers``),
    or None without transformers or when the class has none."""
    try:
        import transformers

        config = transformers.AutoConfig.for_model(**data)
    except Exception:  # no transformers, or a config it cannot read: the rules below decide
        return None
    types = getattr(config, "layer_types", None)
    if isinstance(types, list) and len(types) == layers and all(
            isinstance(t, str) for t in types):
        return types
    return None


# every layer without attention is alike: no heads, nothing cached per token
NO_ATTENTION = LayerAttention(RECURRENT, 0, 0, 0, 0, 0)


def first_attending(layers: tuple[LayerAttention, ...] | list[LayerAttention]) -> int | None:
    """The index of the first layer with attention in a model that also has layers without
    (a hybrid: Jamba, Qwen3-Next, Granite-4.0-H); None for any other model. A hybrid's model of
    its first layers must hold one: transformers builds its masks from the attention layers'
    cache, and a model of state-space layers alone fails there."""
    if all(a.attends for a in layers):
        return None
    return next((i for i, a in enumerate(layers) if a.attends), None)


def uniform(layers: int, heads: int, kv_heads: int, head_dim: int) -> tuple[LayerAttention, ...]:
    """Plain causal attention on every layer (the built-in presets)."""
    return (LayerAttention(CAUSAL, heads, kv_heads, head_dim, head_dim,
                           2 * kv_heads * head_dim),) * layers
