"""Masked attention counted by the structure a Hugging Face config states, layer by layer.

A weightless trace cannot read a mask tensor's values, so a scaled-dot-product call given one
counts the whole Lq x Lk matrix. A Hugging Face causal LM passes such a mask where it needs one
(a sliding window past the window: Mistral, Qwen2 with ``use_sliding_window``, Gemma-3's local
layers; Falcon always), and its config says what that mask is in each decoder layer
(``frontends.llm_attention.from_hf``). ``LayerMasks`` keeps, with global forward hooks removed on
exit, which decoder block is running, and counts a masked call made inside block i as layer i's
structure: query j of Lq attends the keys its position p = Lk - Lq + j may see (the queries are
the last Lq of the Lk keys: a prefill has Lq = Lk, a step with a cache Lq < Lk), i.e.
``prefill_scores(Lk) - prefill_scores(Lk - Lq)`` per head, the sum over p of min(p + 1, W) (no
window: p + 1). A call outside the blocks, with Lq > Lk, or in a layer of unknown kind stays the
whole matrix. The scores are those ``layerscope llm`` counts for the same layers. In a training
step the backward kernel of such a call counts the same scores (its autograd node names the
block).
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn

from layerscope.analysis.capture import Capture, ModuleStats
from layerscope.analysis.capture.tracker import AUTOGRAD_TAG
from layerscope.analysis.module_hooks import ForwardHookContext
from layerscope.core.cost import Cost
from layerscope.core.errors import UserError
from layerscope.frontends.llm_attention import UNKNOWN, LayerAttention, from_hf
from layerscope.ops.rules import ATTN_PER_SCORE


def decoder_blocks(model: nn.Module, layers: int) -> list[nn.Module] | None:
    """The model's decoder blocks: its outermost ``ModuleList`` of ``layers`` modules."""
    for m in model.modules():
        if isinstance(m, nn.ModuleList) and len(m) == layers:
            return list(m)
    return None


def scores(layer: LayerAttention, lq: int, lk: int) -> int | None:
    """Scores per head of ``lq`` queries, the last of ``lk`` keys, under ``layer``'s mask (None
    where it is not known: a layer of unknown kind, or more queries than keys)."""
    if layer.kind == UNKNOWN or not layer.attends or not 0 < lq <= lk:
        return None
    return layer.prefill_scores(lk) - layer.prefill_scores(lk - lq)


def describe(layers: Sequence[LayerAttention]) -> str:
    """``causal in 2 layers, sliding window 4 in 1 layer``: each kind of mask, first seen
    first."""
    seen: dict[str, int] = {}
    for a in layers:
        if a.kind == UNKNOWN or not a.attends:
            continue
        what = ("sliding window " if a.window is not None else "chunks of "
                if a.chunk is not None else "causal")
        what += str(a.window or a.chunk or "")
        seen[what] = seen.get(what, 0) + 1
    return ", ".join(f"{what} in {n} layer{'s' if n > 1 else ''}" for what, n in seen.items())


class LayerMasks(ForwardHookContext):
    """Within ``with``: the structure of the decoder block running (an ``ops.aten``
    ``MaskStructure``)."""

    def __init__(self, blocks: Sequence[nn.Module], layers: Sequence[LayerAttention],
                 names: Mapping[str, int] | None = None):
        """``names``: each block's qualified name in the model, for the backward pass (its ops
        run outside any forward; the capture engine tags each autograd node with the name of the
        module whose forward made it)."""
        self.layers = tuple(layers)
        self.index = {id(b): i for i, b in enumerate(blocks)}
        self.names = dict(names or {})
        self.stack: list[int] = []
        # the structures a masked call was counted by (a replayed call's structure is among
        # them: the capture engine replays only a call recorded under the same ``key``)
        self.used: set[LayerAttention] = set()

    def current(self) -> LayerAttention | None:
        """The running decoder block's layer: in the forward, the innermost block called; in
        the backward, the block whose forward made the autograd node running."""
        if self.stack:
            return self.layers[self.stack[-1]]
        node = torch._C._current_autograd_node()
        owner = node.metadata.get(AUTOGRAD_TAG) if node is not None else None
        parts = owner.split(".") if isinstance(owner, str) else []
        for n in range(len(parts), 0, -1):  # the longest prefix naming a block
            i = self.names.get(".".join(parts[:n]))
            if i is not None:
                return self.layers[i]
        return None

    def scores(self, lq: int, lk: int) -> int | None:
        layer = self.current()
        n = None if layer is None else scores(layer, lq, lk)
        if n is not None:
            self.used.add(layer)
        return n

    def key(self) -> Hashable:
        return self.current()

    def describe(self) -> str:
        """The layers whose structure counted a masked call, e.g. ``sliding window 4096 in
        32 layers``."""
        return describe([a for a in self.layers if a in self.used])

    def describe_all(self) -> str:
        """Every layer's structure, e.g. ``sliding window 128 in 12 layers, causal in 12
        layers``."""
        return describe(self.layers)

    def _pre(self, module, args) -> None:
        i = self.index.get(id(module))
        if i is not None:
            self.stack.append(i)

    def _post(self, module, args, output) -> None:
        i = self.index.get(id(module))
        if i is not None and self.stack and self.stack[-1] == i:
            self.stack.pop()

    def _on_exit(self) -> None:
        self.stack.clear()


def layer_masks(module: nn.Module, args: Sequence[Any],
                kwargs: Mapping[str, Any] | None) -> LayerMasks | None:
    """The masks of a Hugging Face causal LM's decoder layers, from its ``config``; None for
    another model, a config ``from_hf`` cannot read, blocks not found, or a call given an
    ``attention_mask`` (as a keyword or after the token ids: its padding has no values in the
    trace, so the whole matrix is counted)."""
    if len(args) > 1 or kwargs and kwargs.get("attention_mask") is not None:
        return None
    config = getattr(module, "config", None)
    if not callable(getattr(config, "to_dict", None)) or not getattr(config, "model_type", None):
        return None
    try:
        layers = from_hf(config.to_dict())
    except (UserError, TypeError, ValueError):
        return None
    blocks = decoder_blocks(module, len(layers))
    if blocks is None:
        return None
    index = {id(b): i for i, b in enumerate(blocks)}
    names = {name: index[id(m)] for name, m in module.named_modules() if id(m) in index}
    return LayerMasks(blocks, layers, names)


def count_eager(cap: Capture, module: nn.Module, masks: LayerMasks) -> list[str]:
    """Count, in ``cap``, the score and value matmuls of a Hugging Face model built with eager
    attention (its class has no SDPA path: Gemma-2's soft-capping, gpt-oss's attention sinks,
    Bloom's ALiBi) by the structure of each layer's mask, as the SDPA kernels are counted.

    Such a model writes its attention out: q @ k^T over the whole Lq x Lk matrix, a
    materialised mask added, softmax, then probabilities @ v. In a decoder block of a prefill
    (its input (B, S, hidden): Lq = Lk = S) whose layer's attention is known, the module whose
    own ops (its projections are submodules) cost exactly calls x B x heads x S^2 x (qk head
    dim + v head dim) MACs is that layer's attention; it is counted the scores its mask lets
    each query see (``LayerAttention.prefill_scores``): the MACs of the hidden ones, and their
    FLOPs as the kernels count them (2 per MAC and ``ATTN_PER_SCORE`` per score), are taken
    out. The matrices stay in the activation bytes (eager materialises them) and the backward
    (training) is counted as traced. Any other module is left as it is. The note says what was
    found."""
    config = getattr(module, "config", None)
    if getattr(config, "_attn_implementation", None) != "eager" or not getattr(
            config, "model_type", None):
        return []
    counted = 0
    for name, i in masks.names.items():
        a, block = masks.layers[i], cap.modules.get(name)
        if not a.attends or a.kind == UNKNOWN or block is None or not block.calls \
                or not block.input_shapes or len(block.input_shapes[0]) != 3:
            continue
        b, seq = block.input_shapes[0][:2]
        width = a.qk_head_dim + a.v_head_dim
        hidden = seq * seq - a.prefill_scores(seq)
        for s in _subtree(cap, name)[1:]:
            if s.calls and s.forward.macs == s.calls * b * a.heads * seq * seq * width:
                n = s.calls * b * a.heads * hidden
                s.forward = Cost(s.forward.macs - n * width,
                                 s.forward.flops - n * (2 * width + ATTN_PER_SCORE),
                                 s.forward.bytes_read, s.forward.bytes_written)
                counted += 1
                break
    if not counted:
        return ["eager attention (the model's transformers class has no SDPA path): its scores "
                "are written out as matmuls with a materialised mask, and no layer's matmuls "
                "were found to count by its mask: every score of the whole matrix is counted; "
                "layerscope llm counts them from the config's attention description"]
    return [f"eager attention (the model's transformers class has no SDPA path): the score and "
            f"value matmuls of {counted} layer(s) are counted by the config's structure, "
            f"{masks.describe_all()} (the scores each query's mask lets it see, as the SDPA "
            "kernels and layerscope llm count them); the whole matrices stay in the activation "
            "bytes, as eager materialises them; --attention full counts every score"]


def _subtree(cap: Capture, name: str) -> list[ModuleStats]:
    out, todo = [], [name]
    while todo:
        s = cap.modules[todo.pop(0)]
        out.append(s)
        todo.extend(s.children)
    return out


def eager_notes(module: nn.Module) -> list[str]:
    """What a Hugging Face model built with eager attention makes of the attention count where
    ``count_eager`` does not apply (``--attention full``, a training step, a call with an
    attention mask): every score of the whole matrix is counted, whatever the mask."""
    config = getattr(module, "config", None)
    if getattr(config, "_attn_implementation", None) != "eager" or not getattr(
            config, "model_type", None):
        return []
    return ["eager attention (the model's transformers class has no SDPA path): its scores are "
            "written out as matmuls with a materialised mask, so every score of the whole "
            "matrix is counted, causal or windowed; layerscope llm counts them from the "
            "config's attention description"]
