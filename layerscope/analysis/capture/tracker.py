"""Which module is running: global forward hooks (removed on exit) keep a stack of module names,
and in training every autograd node a module's forward creates is tagged with its name, so that
backward ops and backward timers can be charged to modules too."""
from __future__ import annotations

import torch
import torch.nn as nn
from torch.utils import _pytree as pytree

from layerscope.analysis.capture.records import ModuleStats
from layerscope.analysis.capture.tensors import shapes, tensor_nbytes
from layerscope.analysis.module_hooks import ForwardHookContext

# Key in ``node.metadata`` under which an autograd node holds the name of the module (or, for
# TorchScript, the op bucket) whose forward created it.
AUTOGRAD_TAG = "layerscope.module"


def tag_graph(obj, name: str) -> None:
    """Tag every untagged autograd node reachable from ``obj``'s tensors with ``name``."""
    todo = [t.grad_fn for t in pytree.tree_leaves(obj)
            if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while todo:
        node = todo.pop()
        meta = node.metadata
        if AUTOGRAD_TAG in meta:
            continue
        meta[AUTOGRAD_TAG] = name
        todo.extend(f for f, _ in node.next_functions if f is not None)


class ModuleTracker(ForwardHookContext):
    """Which module is running: global hooks keyed by module identity, removed on exit.

    A context manager; ``current()`` names the innermost module running ("" for the root or
    outside any module). ``stats`` (optional) receives each module's call count, first-call
    shapes and output bytes; ``tag_autograd`` tags the autograd nodes each module's forward
    creates with its name (``AUTOGRAD_TAG``)."""

    def __init__(self, model: nn.Module, stats: dict[str, ModuleStats] | None,
                 tag_autograd: bool):
        self.names = {id(m): name for name, m in model.named_modules()}
        self.stats = stats
        self.stack: list[str] = []
        self.tag_autograd = tag_autograd

    def current(self) -> str:
        return self.stack[-1] if self.stack else ""

    def _pre(self, module, args):
        name = self.names.get(id(module))
        if name is None:
            return
        if self.tag_autograd and self.stack:
            # Autograd nodes not tagged yet were made by the enclosing module's own code.
            tag_graph(args, self.stack[-1])
        self.stack.append(name)
        if self.stats is not None:
            s = self.stats[name]
            s.calls += 1
            if s.calls == 1:
                s.input_shapes = shapes(args)

    def _post(self, module, args, output):
        name = self.names.get(id(module))
        if name is None or not self.stack or self.stack[-1] != name:
            return
        if self.tag_autograd:
            tag_graph(output, name)
        if self.stats is not None:
            s = self.stats[name]
            outs = [t for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor)]
            if s.calls == 1:
                s.output_shapes = [list(t.shape) for t in outs]
            # every call's outputs, an in-place result (ReLU(inplace=True)) counted again
            s.output_bytes += sum(map(tensor_nbytes, outs))
            s.first_output_bytes += tensor_nbytes(outs[0]) if outs else 0
        self.stack.pop()

    def _on_exit(self) -> None:
        self.stack.clear()
