"""Profiler ranges named after modules: ``module::<qualified name> (<Type>)`` around each
module's forward (``ops --trace``, ``profile --kernels``), and a guard that hides Kineto's
banners on file descriptor 2 while the profiler runs."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn as nn

from layerscope.analysis.module_hooks import ForwardHookContext

RANGE_PREFIX = "module::"


class ModuleRanges(ForwardHookContext):
    """A profiler range named ``module::<qualified name> (<Type>)`` around each module's forward."""

    def __init__(self, model: nn.Module):
        self.names = {id(m): f"{RANGE_PREFIX}{name or '(root)'} ({type(m).__name__})"
                      for name, m in model.named_modules()}
        self.stack: list[Any] = []

    def _pre(self, module, args):
        name = self.names.get(id(module))
        if name is not None:
            self.stack.append(torch.ops.profiler._record_function_enter_new(name, None))

    def _post(self, module, args, output):
        if id(module) in self.names and self.stack:
            torch.ops.profiler._record_function_exit._RecordFunction(self.stack.pop())

    def _on_exit(self) -> None:
        while self.stack:
            torch.ops.profiler._record_function_exit._RecordFunction(self.stack.pop())


@contextmanager
def quiet_native_stderr():
    """Kineto prints start/stop banners straight to file descriptor 2; hide them while the
    profiler runs (Python exceptions are objects and still propagate)."""
    import sys

    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
