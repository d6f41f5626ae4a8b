"""A ``Capture`` shaped into the report's layer rows, totals and uncounted ops."""
from __future__ import annotations

import torch.nn as nn

from layerscope.analysis.capture import Capture, ModuleStats, tensor_nbytes
from layerscope.core.cost import ZERO
from layerscope.core.report import LayerRow, Totals, UncountedOp

# Bytes of optimizer state per trainable parameter byte (exp_avg + exp_avg_sq for Adam).
OPTIMIZER_STATE_FACTOR = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}


def _subtree(cap: Capture, name: str) -> list[ModuleStats]:
    out, todo = [], [name]
    while todo:
        n = todo.pop()
        out.append(cap.modules[n])
        todo.extend(cap.modules[n].children)
    return out


def _summed(stats: list[ModuleStats], training: bool) -> dict[str, int]:
    """The additive columns shared by a row and the totals, summed over ``stats``."""
    fwd = sum((s.forward for s in stats), ZERO)
    out = {"params": sum(s.params for s in stats),
           "weight_bytes": sum(s.weight_bytes for s in stats),
           "buffer_bytes": sum(s.buffer_bytes for s in stats),
           "macs": fwd.macs, "flops": fwd.flops, "bytes_read": fwd.bytes_read,
           "bytes_written": fwd.bytes_written,
           "activation_bytes": sum(s.activation_bytes for s in stats)}
    if training:
        bwd = sum((s.backward for s in stats), ZERO)
        out |= {"backward_macs": bwd.macs, "backward_flops": bwd.flops,
                "backward_bytes_read": bwd.bytes_read, "backward_bytes_written": bwd.bytes_written}
    return out


def _row(stats: list[ModuleStats], head: ModuleStats, self_only: bool,
         training: bool) -> LayerRow:
    return LayerRow(name=head.name or "(root)", type=head.type, depth=head.depth,
                    calls=head.calls, input_shapes=head.input_shapes,
                    output_shapes=head.output_shapes, self_only=self_only,
                    **_summed(stats, training))


def _has_own(s: ModuleStats) -> bool:
    return s.ops > 0 or s.params > 0 or s.buffer_bytes > 0


def layer_rows(cap: Capture, depth: int | None = None) -> list[LayerRow]:
    """Rows at ``depth`` (None: leaf modules). A container above the cut-off gets a
    ``self_only`` row for its own ops and parameters, so rows always sum to the totals."""
    rows = []
    for name in cap.order:
        s = cap.modules[name]
        if depth is not None and s.depth > depth:
            continue
        leaf = not s.children
        if leaf or (depth is not None and s.depth == depth):
            rows.append(_row(_subtree(cap, name), s, False, cap.training))
        elif _has_own(s):
            rows.append(_row([s], s, True, cap.training))
    return rows


def totals(cap: Capture, model: nn.Module, optimizer: str = "adam") -> Totals:
    """The report's totals: the columns summed over every module, trainable parameters (each
    shared tensor once) and, in training, gradient and ``optimizer`` state bytes."""
    distinct = {id(p): p for p in model.parameters()}.values()
    trainable = [p for p in distinct if p.requires_grad]
    tot = Totals(trainable_params=sum(p.numel() for p in trainable),
                 peak_activation_bytes=cap.peak_activation_bytes, input_bytes=cap.input_bytes,
                 output_bytes=cap.output_bytes,
                 **_summed(list(cap.modules.values()), cap.training))
    tot.layer_output_bytes, tot.torchinfo_pass_bytes = _layer_outputs(cap)
    if cap.training:
        tot.gradient_bytes = sum(tensor_nbytes(p) for p in trainable)
        tot.optimizer_state_bytes = OPTIMIZER_STATE_FACTOR[optimizer] * tot.gradient_bytes
    return tot


def _layer_outputs(cap: Capture) -> tuple[int | None, int | None]:
    """(sum of layer outputs, torchinfo's forward/backward pass size), in bytes.

    Sum of layer outputs: the output bytes of every call of every leaf module, in-place results
    counted again (how people add up a summary's output shapes: AlexNet 4,392,864 B).
    torchinfo 1.8 (``ModelStatistics``): for every call of a leaf module that has parameters,
    2 x the bytes of its (first) output tensor, "x2 for gradients". Neither is the memory a
    forward pass needs; see activation_bytes and peak_activation_bytes for that."""
    leaves = [s for s in cap.modules.values() if not s.children]
    if any(s.output_bytes is None for s in leaves):
        return None, None
    return (sum(s.output_bytes for s in leaves),
            2 * sum(s.first_output_bytes for s in leaves if s.has_params))


def uncounted(cap: Capture) -> tuple[list[UncountedOp], float]:
    """Ops no handler counted, most frequent first, and the share of op calls that were counted."""
    ops = [UncountedOp(op, n) for op, n in cap.uncounted.most_common()]
    missing = sum(cap.uncounted.values())
    coverage = 1.0 if cap.op_calls == 0 else (cap.op_calls - missing) / cap.op_calls
    return ops, coverage
