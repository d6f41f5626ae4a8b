"""Attention calls run as the kernel a GPU runs for them, so that a static analysis on the CPU
counts them as that kernel does.

PyTorch's CPU flash-attention kernel takes one head width for queries, keys and values. A call
whose values are narrower (multi-head latent attention: DeepSeek-V2/V3 and Kimi-K2 have
queries and keys of nope + rope = 192 and values of 128) falls back on the CPU to the math path,
which writes the attention out as matmuls with a materialised causal mask: the whole score
matrix is counted, whatever ``is_causal`` says. A GPU runs such a call with the
memory-efficient kernel, which skips the masked scores. ``MixedWidthAttention`` runs it as that
kernel (``aten._scaled_dot_product_efficient_attention``, costed by the handlers of
``ops.aten`` like every fused kernel: the lower triangle when causal, the structure a mask has
where it is known) wherever that kernel can run (fake tensors, CUDA); elsewhere (real CPU
tensors, which have no such kernel) the call runs as written.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_NAMES = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")


def _arguments(args: tuple, kwargs: dict) -> dict:
    got = dict(zip(_NAMES, args))
    got.update({k: v for k, v in kwargs.items() if k in _NAMES or k in ("scale", "enable_gqa")})
    return got


def _bias(mask: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor | None:
    """A mask as the efficient kernel's additive bias, (B, H, Lq, Lk): a boolean mask's False
    entries become -inf (what the math path adds too)."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(
            ~mask, float("-inf"))
    return mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])


class MixedWidthAttention(TorchFunctionMode):
    """Within ``with``: ``F.scaled_dot_product_attention`` calls whose values' head width
    differs from the queries' run as the memory-efficient kernel (module docstring); grouped
    query attention's shared key/value heads are repeated for it first, as the math path
    repeats them."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        a = _arguments(args, kwargs)
        q, k, v = a.get("query"), a.get("key"), a.get("value")
        if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (q, k, v)) \
                or v.shape[-1] == q.shape[-1] or q.shape[-1] != k.shape[-1] \
                or not (_is_fake(q) or q.device.type == "cuda"):
            return func(*args, **kwargs)
        if k.shape[1] != q.shape[1]:
            if not a.get("enable_gqa") or q.shape[1] % k.shape[1]:
                return func(*args, **kwargs)
            group = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, _bias(a.get("attn_mask"), q, k), q.requires_grad,
            a.get("dropout_p", 0.0), bool(a.get("is_causal", False)),
            scale=a.get("scale"))[0]


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)
