"""A ``Capture`` shaped into the report's layer rows, totals and uncounted ops."""
from __future__ import annotations

import torch.nn as nn

from layerscope.analysis.capture import Capture, ModuleStats, tensor_nbytes
from layerscope.core.cost import ZERO, Cost
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


def _minus(a: Cost, b: Cost) -> Cost:
    return Cost(a.macs - b.macs, a.flops - b.flops, a.bytes_read - b.bytes_read,
                a.bytes_written - b.bytes_written)


def _function_rows(s: ModuleStats, training: bool) -> list[LayerRow]:
    """A container's own ops split by function (``--functions``): one ``self_only`` row per
    function, named "MODULE (FUNCTION)" and typed FUNCTION, and one "(own ops)" row for what is
    left (own parameters and buffers, and ops run outside any torch function)."""
    rows = []
    rest = ModuleStats(s.name, s.type, s.depth, calls=s.calls, input_shapes=s.input_shapes,
                       output_shapes=s.output_shapes, params=s.params,
                       weight_bytes=s.weight_bytes, buffer_bytes=s.buffer_bytes,
                       forward=s.forward, backward=s.backward,
                       activation_bytes=s.activation_bytes, ops=s.ops)
    for fn, b in s.functions.items():
        row = _row([b], b, True, training)
        row.name = f"{s.name or '(root)'} ({fn})"
        rows.append(row)
        rest.forward = _minus(rest.forward, b.forward)
        rest.backward = _minus(rest.backward, b.backward)
        rest.activation_bytes -= b.activation_bytes
        rest.ops -= b.ops
    # ops left that cost nothing (prim.device queries around the backward call) make no row
    if (rest.params or rest.buffer_bytes or rest.activation_bytes or rest.forward != ZERO
            or rest.backward != ZERO):
        rows.append(_row([rest], rest, True, training))
    return rows


def layer_rows(cap: Capture, depth: int | None = None,
               functions: bool = False) -> list[LayerRow]:
    """Rows at ``depth`` (None: leaf modules). A container above the cut-off gets a
    ``self_only`` row for its own ops and parameters, so rows always sum to the totals;
    ``functions`` splits that row by the torch function that ran the ops (when the capture
    recorded them: ``capture(..., functions=True)``)."""
    rows = []
    for name in cap.order:
        s = cap.modules[name]
        if depth is not None and s.depth > depth:
            continue
        leaf = not s.children
        if leaf or (depth is not None and s.depth == depth):
            rows.append(_row(_subtree(cap, name), s, False, cap.training))
        elif functions and s.functions:
            rows.extend(_function_rows(s, cap.training))
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
        tot.gradient_bytes = sum(tensor_nbytes(p, cap.dtype) for p in trainable)
        tot.optimizer_state_bytes = OPTIMIZER_STATE_FACTOR[optimizer] * tot.gradient_bytes
        tot.recompute_flops = sum(s.recompute_flops for s in cap.modules.values()) or None
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
