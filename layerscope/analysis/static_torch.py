"""``InputSpec``: an input given by shape and dtype only (made into a tensor for each run).

The static analysis of a PyTorch module that lived here is now split by what it does:
``layerscope.analysis.capture`` (the capture engine: module tracker, counting dispatch mode,
storage lifetimes, parameter slots, fake and real runs, TorchScript scopes) and
``layerscope.analysis.static`` (rows, totals and uncounted ops from a capture). ``InputSpec``
stays here until it moves to the frontends' input specs; the capture package re-exports it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class InputSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()
