"""Real input tensors for runs that execute the model (profiling, activations, sweeps)."""
from __future__ import annotations

from typing import Any

import torch

from layerscope.analysis.static_torch import InputSpec


def real_inputs(inputs: list[Any], device: str | torch.device = "cpu",
                dtype: torch.dtype | None = None, seed: int = 0) -> list[torch.Tensor]:
    """Seeded standard-normal tensors for float specs, zeros for integer ones (valid indices)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for x in inputs:
        if isinstance(x, InputSpec):
            if x.dtype.is_floating_point:
                t = torch.randn(x.shape, generator=gen).to(dtype or x.dtype)
            else:
                t = torch.zeros(x.shape, dtype=x.dtype)
        else:
            t = x.detach()
            if dtype is not None and t.is_floating_point():
                t = t.to(dtype)
        out.append(t.to(device))
    return out
