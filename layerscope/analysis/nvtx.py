"""``--nvtx``: NVTX ranges around every module's forward and around layerscope's phases, named
as layerscope names them (``module::<qualified name> (<Type>)`` as in ``ops --trace``, and
``layerscope::<phase>``), so that Nsight Systems shows the names of our reports.

Installed only for the duration of a ``with`` block (global forward hooks, nothing left on the
model); without CUDA it does nothing and the caller notes it."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
import torch.nn as nn

from layerscope.analysis.profiler_ranges import ModuleRanges

PHASE_PREFIX = "layerscope::"
NO_CUDA_NOTE = "--nvtx: no CUDA here, so no NVTX ranges were emitted"
NVTX_NOTE = ("--nvtx: NVTX ranges were pushed around every module call in every run (the bare "
             "runs too), so the figures include their cost")


def available() -> bool:
    return torch.cuda.is_available()


class NvtxRanges(ModuleRanges):
    """An NVTX range per module forward (the names of ``ModuleRanges``), and ``phase(name)``
    ranges; whatever a raising forward left open is popped on exit."""

    def _pre(self, module, args):
        name = self.names.get(id(module))
        if name is not None:
            torch.cuda.nvtx.range_push(name)
            self.stack.append(name)

    def _post(self, module, args, output):
        if id(module) in self.names and self.stack:
            self.stack.pop()
            torch.cuda.nvtx.range_pop()

    def _on_exit(self) -> None:
        while self.stack:
            self.stack.pop()
            torch.cuda.nvtx.range_pop()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        torch.cuda.nvtx.range_push(f"{PHASE_PREFIX}{name}")
        try:
            yield
        finally:
            torch.cuda.nvtx.range_pop()


class _Off:
    """--nvtx not asked for, or no CUDA: nothing is pushed."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def phase(self, name: str) -> Any:
        return nullcontext()


def nvtx_ranges(model: nn.Module, enabled: bool) -> NvtxRanges | _Off:
    return NvtxRanges(model) if enabled and available() else _Off()
