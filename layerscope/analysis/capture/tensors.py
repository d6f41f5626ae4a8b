"""Small tensor helpers of the capture engine: sizes, shapes, and what the cost handlers see."""
from __future__ import annotations

import torch
import torch.nn as nn
from torch.utils import _pytree as pytree

from layerscope.ops.registry import TensorDesc


def tensor_nbytes(t: torch.Tensor, dtype: torch.dtype | None = None) -> int:
    """Bytes of ``t``'s elements (not of its storage: a view counts its own elements); with
    ``dtype`` (the analysis' --dtype), a floating tensor counts as if cast to it, as the run casts
    the model's floating parameters and buffers."""
    if dtype is not None and t.is_floating_point():
        return t.numel() * dtype.itemsize
    return t.numel() * t.element_size()


def shapes(obj) -> list[list[int]]:
    """Shapes of the tensors anywhere in ``obj`` (a module's arguments or outputs)."""
    return [list(t.shape) for t in pytree.tree_leaves(obj) if isinstance(t, torch.Tensor)]


def storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def tensors(obj, found: list | None = None) -> list[torch.Tensor]:
    """Tensors in nested tuples/lists/dicts (aten arguments nest no deeper); faster than pytree."""
    found = [] if found is None else found
    if isinstance(obj, torch.Tensor):
        found.append(obj)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            tensors(v, found)
    elif isinstance(obj, dict):
        for v in obj.values():
            tensors(v, found)
    return found


def _meta(t: torch.Tensor) -> TensorDesc:
    return TensorDesc(tuple(int(d) for d in t.shape), str(t.dtype).removeprefix("torch."),
                      t.element_size())


def described(obj):
    """The same structure with every tensor replaced by its TensorDesc (what handlers see)."""
    if isinstance(obj, torch.Tensor):
        return _meta(obj)
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        return type(obj)(described(v) for v in obj) if type(obj) in (list, tuple) else \
            tuple(described(v) for v in obj)
    if isinstance(obj, dict):
        return {k: described(v) for k, v in obj.items()}
    return obj


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer (meta is analysed as CPU)."""
    for t in list(model.parameters()) + list(model.buffers()):
        return torch.device("cpu") if t.device.type == "meta" else t.device
    return torch.device("cpu")
