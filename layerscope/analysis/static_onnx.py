"""Static cost of an ONNX graph: walk the nodes in topological order, cost each with the
handlers of ``layerscope.ops.onnx``, and fill the same Report as the PyTorch analysis.

Per node (one row each, depth 1):
- ``params``/``weight_bytes``: elements/bytes of the initializers (or Constant outputs) it reads
  as weights, each shared initializer counted once, by its first reader. Not weights: inputs the
  op declares as constants (shapes, axes, pads, Clip bounds, Resize scales), one-element tensors
  (exporters' scales and epsilons; a one-element parameter such as PReLU's default slope is
  missed), and int32/int64/bool tensors. BatchNormalization's running mean and variance are buffers
  (``buffer_bytes``), as in PyTorch.
- ``bytes_read`` = bytes of every input it reads (activations and weights) except inputs that
  act as attributes (declared constant slots, resident one-element tensors); ``bytes_written``
  = bytes of its outputs, ``activation_bytes`` = bytes of the new tensors it creates. Views
  (Reshape, Flatten, Squeeze, Unsqueeze, Identity, inference Dropout) have all three at zero and
  share their input's buffer.
- Nodes without a handler (or whose shapes inference could not determine) are listed in
  ``uncounted_ops``; their traffic is still counted when their shapes are known.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from layerscope.analysis import memory
from layerscope.core.report import LayerRow, Report, Totals, UncountedOp
from layerscope.frontends.onnx_model import (
    BITS,
    DEFAULT_DOMAINS,
    NON_WEIGHT_TYPES,
    OnnxGraph,
    TensorInfo,
    dtype_name,
    load_onnx,
)
from layerscope.ops.onnx import CONSTANT, ONNX
from layerscope.ops.registry import VIEW, OpCost, TensorDesc

SCOPE_KEY = "pkg.torch.onnx.name_scopes"


@dataclass
class Walk:
    rows: list[LayerRow] = field(default_factory=list)
    steps: list[tuple[list[str], list[str]]] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)  # activation buffers (roots) -> bytes
    alias: dict[str, str] = field(default_factory=dict)  # view output -> its input
    claimed: set[str] = field(default_factory=set)  # initializers already counted
    uncounted: Counter = field(default_factory=Counter)
    unknown_shapes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def _attr_value(attr) -> Any:
    """A node attribute as a JSON-able value (tensors and graphs summarised)."""
    import onnx
    from onnx import helper

    if attr.type == onnx.AttributeProto.TENSOR:
        return f"tensor {dtype_name(attr.t.data_type)} {list(attr.t.dims)}"
    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        return [f"graph ({len(g.node)} nodes)" for g in graphs]
    if attr.type in (onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.TENSORS,
                     onnx.AttributeProto.SPARSE_TENSORS, onnx.AttributeProto.TYPE_PROTO,
                     onnx.AttributeProto.TYPE_PROTOS):
        return onnx.AttributeProto.AttributeType.Name(attr.type).lower()
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
    return value


def _scope(node) -> str | None:
    """The innermost module's path from the exporter's metadata: the value is a Python list
    literal, [root '', outer module, ..., innermost module, op name]."""
    for prop in node.metadata_props:
        if prop.key == SCOPE_KEY:
            names = re.findall(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"", prop.value)
            names = [a or b for a, b in names]
            return names[-2] if len(names) >= 2 else None
    return None


def _t(info: TensorInfo) -> TensorDesc:
    return TensorDesc(info.shape, dtype_name(info.elem_type),
                      max(BITS.get(info.elem_type, 8) // 8, 1))


def _shape_list(info: TensorInfo | None) -> list:
    return ["?"] if info is None or info.shape is None else list(info.shape)


def _root(walk: Walk, name: str) -> str:
    while name in walk.alias:
        name = walk.alias[name]
    return name


def _attribute_like(g: OnnxGraph, walk: Walk, entry, slot: int, name: str) -> bool:
    """Inputs that play the part of attributes: the op's declared constant slots (shape, axes,
    pads, Clip bounds, ...) and resident one-element tensors. PyTorch ops take these as Python
    numbers, so they are neither parameters nor memory traffic."""
    if entry is not None and slot in entry.constants:
        return True
    r = _root(walk, name)
    return r in g.initializers and _is_scalar(g.tensors.get(r))


def _is_scalar(info: TensorInfo | None) -> bool:
    # rank 0 or one element: exporters' constants (a scale, an epsilon, a Clip bound)
    return info is not None and info.shape is not None and math.prod(info.shape) == 1


def _claim_weights(g: OnnxGraph, walk: Walk, node, entry) -> tuple[int, int, int]:
    """(params, weight_bytes, buffer_bytes) of the initializers this node reads as weights."""
    params = weight_bytes = buffer_bytes = 0
    constants = entry.constants if entry else ()
    buffers = entry.buffers if entry else ()
    for slot, name in enumerate(node.input):
        r = _root(walk, name) if name else ""
        if not r or r not in g.initializers or r in walk.claimed:
            continue
        info = g.tensors.get(r)
        if (slot in constants or info is None or info.shape is None or _is_scalar(info)
                or info.elem_type in NON_WEIGHT_TYPES):
            continue
        walk.claimed.add(r)
        if slot in buffers:
            buffer_bytes += info.nbytes
        else:
            params += math.prod(info.shape)
            weight_bytes += info.nbytes
    return params, weight_bytes, buffer_bytes


def _op_key(domain: str, op_type: str) -> str:
    return op_type if domain == "" else f"{domain}::{op_type}"


def _cost_node(g: OnnxGraph, walk: Walk, index: int, node) -> None:
    domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
    entry = ONNX.lookup(domain, node.op_type, g.opsets.get(domain, 1))
    name = node.name or f"{node.op_type}_{index}"
    ins = [g.tensors.get(x) if x else None for x in node.input]
    outs = [g.tensors.get(o) if o else None for o in node.output]
    known = all(t is not None and t.shape is not None
                for t, n in zip(ins + outs, list(node.input) + list(node.output)) if n)
    attrs = {a.name: _attr_value(a) for a in node.attribute}
    kind = entry.kind if entry else "compute"
    cost = OpCost()
    if entry is None:
        walk.uncounted[_op_key(domain, node.op_type)] += 1
    elif not known:
        walk.uncounted[_op_key(domain, node.op_type)] += 1
        walk.unknown_shapes.append(name)
    elif kind not in (VIEW, CONSTANT):
        try:
            cost = entry.handler([_t(t) if t else None for t in ins],
                                 [_t(t) if t else None for t in outs], attrs)
        except (KeyError, IndexError, ValueError, TypeError, ZeroDivisionError) as exc:
            walk.uncounted[_op_key(domain, node.op_type)] += 1
            walk.failures.append(f"{name} ({node.op_type}): {type(exc).__name__}: {exc}")

    row = LayerRow(name=name, type=node.op_type, depth=1, calls=1,
                   input_shapes=[_shape_list(t) for t, n in zip(ins, node.input) if n],
                   output_shapes=[_shape_list(t) for t, n in zip(outs, node.output) if n],
                   macs=cost.macs, flops=cost.flops, attributes=attrs, scope=_scope(node))
    reads = [x for x in node.input if x] + g.implicit_inputs.get(index, [])
    writes = [o for o in node.output if o]
    if kind == VIEW:
        source = node.input[0] if node.input else ""
        for o in writes:
            if source:
                walk.alias[o] = source
    elif kind != CONSTANT:
        row.params, row.weight_bytes, row.buffer_bytes = _claim_weights(g, walk, node, entry)
        row.bytes_read = sum(
            t.nbytes for slot, (t, n) in enumerate(zip(ins, node.input))
            if n and t is not None and not _attribute_like(g, walk, entry, slot, n))
        row.bytes_written = sum(t.nbytes for t, n in zip(outs, node.output) if n and t is not None)
        row.activation_bytes = row.bytes_written
        for o, t in zip(node.output, outs):
            if o and t is not None:
                walk.sizes[o] = t.nbytes
    walk.rows.append(row)
    walk.steps.append((reads, writes))


def walk_graph(g: OnnxGraph) -> Walk:
    walk = Walk()
    for name in g.inputs:
        walk.sizes[name] = g.tensors[name].nbytes if name in g.tensors else 0
    for index, node in enumerate(g.nodes):
        _cost_node(g, walk, index, node)
    return walk


def node_output_bytes(g: OnnxGraph) -> int | None:
    """The sum of node outputs: the bytes of every output of every node (views and Constant
    nodes included, each output once), or None where a node output's shape is unknown. Unlike
    activation_bytes, a view's output (Reshape, Flatten, Identity) counts again."""
    total = 0
    for node in g.nodes:
        for o in node.output:
            if not o:
                continue
            info = g.tensors.get(o)
            if info is None or info.shape is None:
                return None
            total += info.nbytes
    return total


def _notes(g: OnnxGraph, walk: Walk) -> list[str]:
    notes = []
    if walk.unknown_shapes:
        named = ", ".join(repr(n) for n in walk.unknown_shapes[:5])
        more = ", ..." if len(walk.unknown_shapes) > 5 else ""
        notes.append(f"{len(walk.unknown_shapes)} node(s) have tensors whose shapes shape "
                     f"inference could not determine ({named}{more}); they are uncounted")
    notes += [f"could not cost {f}" for f in walk.failures[:5]]
    read = {x for reads, _ in walk.steps for x in reads}
    unread = [n for n in g.initializers if n not in read]
    if unread:
        nbytes = sum(g.tensors[n].nbytes for n in unread if n in g.tensors)
        notes.append(f"{len(unread)} initializer(s) ({nbytes:,} bytes) are read by no node and "
                     "not counted")
    return notes


def analyze_onnx(path: str, inputs: Sequence[str] | None = None, *,
                 batch_size: int | None = None) -> Report:
    """Parameters, MACs/FLOPs, bytes and activation memory of an ONNX model, per node.

    ``inputs``: 'NAME=1x3x224x224' strings (NAME= may be left out for the inputs in order);
    symbolic dimensions must all be bound. External data is never loaded."""
    from layerscope.core.environment import environment

    g = load_onnx(path, inputs, batch_size)
    walk = walk_graph(g)
    buffers = memory.lifetimes(walk.steps, walk.sizes, g.inputs, g.outputs, walk.alias)
    mem = memory.summarize(buffers, [r.name for r in walk.rows], g.inputs)
    mem["weight_bytes"] = sum(r.weight_bytes + r.buffer_bytes for r in walk.rows)
    rows = walk.rows
    params = sum(r.params for r in rows)
    totals = Totals(
        params=params, trainable_params=params,
        weight_bytes=sum(r.weight_bytes for r in rows),
        buffer_bytes=sum(r.buffer_bytes for r in rows),
        macs=sum(r.macs for r in rows), flops=sum(r.flops for r in rows),
        bytes_read=sum(r.bytes_read for r in rows),
        bytes_written=sum(r.bytes_written for r in rows),
        activation_bytes=sum(r.activation_bytes for r in rows),
        peak_activation_bytes=mem["peak_activation_bytes"],
        input_bytes=sum(g.tensors[n].nbytes for n in g.inputs if n in g.tensors),
        output_bytes=sum(g.tensors[n].nbytes for n in g.outputs if n in g.tensors),
        layer_output_bytes=node_output_bytes(g),
    )
    missing = sum(walk.uncounted.values())
    model = g.model
    return Report(
        model=g.name,
        frontend="onnx",
        inputs=[{"name": n, "shape": list(g.tensors[n].shape or []),
                 "dtype": dtype_name(g.tensors[n].elem_type)} for n in g.inputs],
        totals=totals,
        layers=rows,
        uncounted_ops=[UncountedOp(op, n) for op, n in walk.uncounted.most_common()],
        op_coverage=1.0 if not rows else (len(rows) - missing) / len(rows),
        settings={"mode": "inference", "depth": None, "batch_size": batch_size,
                  "ir_version": model.ir_version,
                  "opsets": {d or "ai.onnx": v for d, v in sorted(g.opsets.items())},
                  "producer": f"{model.producer_name} {model.producer_version}".strip()},
        environment=environment(with_torch=False),
        notes=_notes(g, walk),
        memory=mem,
    )


def analyze_onnx_spec(path: str, inputs: Any, batch_size: int | None) -> Report:
    """``layerscope.analyze`` of an ONNX file, ``inputs`` as the API and the CLI take them: one
    row per node, inference only (docs/onnx.md). ``analysis/analyze.py`` routes here and has
    refused the options that need PyTorch."""
    if isinstance(inputs, str):
        inputs = [inputs]
    elif isinstance(inputs, (tuple, list)) and inputs and all(isinstance(d, int) for d in inputs):
        inputs = ["x".join(map(str, inputs))]
    return analyze_onnx(path, [i if isinstance(i, str) else "x".join(map(str, i))
                               for i in inputs or []], batch_size=batch_size)
