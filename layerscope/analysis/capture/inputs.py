"""Forward's arguments as the capture engine sees them: tensors, ``InputSpec`` shapes (made into
tensors for the run) and any other Python value, passed as is."""
from __future__ import annotations

import math

import torch
from torch.utils import _pytree as pytree

from layerscope.analysis.capture.tensors import tensor_nbytes

# The one import of InputSpec in the package (re-exported from here and from the package).
from layerscope.frontends.inputs import InputSpec


def map_inputs(obj, leaf):
    """``obj`` (forward's arguments) with every tensor and InputSpec passed through ``leaf``."""
    return pytree.tree_map(lambda x: leaf(x) if isinstance(x, (torch.Tensor, InputSpec)) else x,
                           obj, is_leaf=lambda x: isinstance(x, InputSpec))


def input_tensors(args, kwargs) -> list[torch.Tensor]:
    """The tensors among forward's (already mapped) arguments."""
    return [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]


def spec_dtype(spec: InputSpec, dtype: torch.dtype | None) -> torch.dtype:
    """The dtype a spec's tensor gets: ``dtype`` (the analysis' --dtype) for floating specs."""
    return dtype if (dtype is not None and spec.dtype.is_floating_point) else spec.dtype


def zeros_for(spec: InputSpec, dtype: torch.dtype | None, device) -> torch.Tensor:
    """The tensor an ``InputSpec`` stands for in a run (inside FakeTensorMode: a fake one)."""
    return torch.zeros(spec.shape, dtype=spec_dtype(spec, dtype), device=device)


def inputs_nbytes(inputs, kwargs, dtype: torch.dtype | None) -> int:
    """Bytes the tensors and specs among forward's arguments take once made real."""
    leaves = pytree.tree_leaves((inputs, kwargs), is_leaf=lambda x: isinstance(x, InputSpec))
    total = 0
    for x in leaves:
        if isinstance(x, InputSpec):
            total += math.prod(x.shape) * torch.empty((), dtype=spec_dtype(x, dtype)).element_size()
        elif isinstance(x, torch.Tensor):
            total += tensor_nbytes(x)
    return total
