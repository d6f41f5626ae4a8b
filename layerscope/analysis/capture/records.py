"""What a capture measures: one ``ModuleStats`` per distinct module, gathered in a ``Capture``."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from layerscope.analysis.capture.tensors import tensor_nbytes
from layerscope.core import tree
from layerscope.core.cost import ZERO, Cost


@dataclass
class ModuleStats:
    """The running figures of one module (or of one op bucket, for TorchScript): calls and
    first-call shapes, own parameters and buffers, and the cost of the ops charged to it."""

    name: str
    type: str
    depth: int
    children: list[str] = field(default_factory=list)
    calls: int = 0
    input_shapes: list = field(default_factory=list)
    output_shapes: list = field(default_factory=list)
    params: int = 0
    weight_bytes: int = 0
    buffer_bytes: int = 0
    forward: Cost = ZERO
    backward: Cost = ZERO
    # of the backward FLOPs, those of forward ops run again (activation checkpointing
    # recomputes its segments' forward inside backward, with grad mode on)
    recompute_flops: int = 0
    activation_bytes: int = 0
    ops: int = 0
    # Output bytes summed over every call (None where hooks do not fire: TorchScript): all
    # output tensors, and torchinfo's per-call figure (the first output tensor only).
    output_bytes: int | None = 0
    first_output_bytes: int | None = 0
    has_params: bool = False  # owns a parameter (torchinfo counts such leaf layers' outputs)
    # --functions only: the module's own forward ops again, split by the outermost torch
    # function that ran them ("add", "relu", ...); each a ModuleStats of its own (type = function).
    functions: dict[str, ModuleStats] = field(default_factory=dict)


@dataclass
class Capture:
    """Everything one analysis run measured, before it is shaped into rows."""

    modules: dict[str, ModuleStats]
    order: list[str]
    op_calls: int
    uncounted: Counter
    peak_activation_bytes: int
    input_bytes: int
    output_bytes: int
    training: bool
    warnings: list[str] = field(default_factory=list)  # what the caller should tell the user
    replayed_calls: int = 0  # module calls replayed from an earlier identical call (capture.reuse)
    # the analysis' --dtype: floating parameters, buffers and their gradients count in it
    dtype: torch.dtype | None = None


def module_table(model: nn.Module, dtype: torch.dtype | None = None
                 ) -> tuple[dict[str, ModuleStats], list[str]]:
    """One entry per distinct module, parameters charged to the first module that owns them;
    floating parameters and buffers count in ``dtype`` where given (the model cast to it)."""
    stats: dict[str, ModuleStats] = {}
    order: list[str] = []
    seen: set[int] = set()
    for name, module in model.named_modules():
        depth = tree.depth(name)
        s = ModuleStats(name, type(module).__name__, depth)
        s.has_params = any(p is not None and p.numel() > 0 for p in module._parameters.values())
        for p in module._parameters.values():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                s.params += p.numel()
                s.weight_bytes += tensor_nbytes(p, dtype)
        for b in module._buffers.values():
            if b is not None and id(b) not in seen:
                seen.add(id(b))
                s.buffer_bytes += tensor_nbytes(b, dtype)
        stats[name] = s
        order.append(name)
        if name:
            parent = tree.parent(name)
            stats[parent].children.append(name)
    return stats, order
