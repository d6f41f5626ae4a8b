"""tile_linear: rewrite linear layers as grids of tile x tile matrix products.

Every ``Gemm``, and every ``MatMul`` whose second input is a 2-D initializer, of the main graph
becomes an equivalent subgraph (K = reduction size, N = output features, T = tile)::

    A ──(Transpose if transA)── Split along K into ceil(K/T) pieces  A_0 .. A_{kt-1}
    W (K x N, pre-transposed if transB) cut into initializers W_ij of at most T x T
    P_ij = MatMul(A_i, W_ij)                      kt x nt MatMuls
    S_j  = Sum(P_0j .. P_{kt-1,j})                nt Sums (none when kt == 1)
    Y    = Concat(S_0 .. S_{nt-1}, axis=-1)       one Concat (none when nt == 1)
    Y    = Mul(Y, alpha)                          Gemm with alpha != 1 only
    Y    = Add(Y, beta * C)                       Gemm with a bias only (C pre-scaled by beta)

The last tiles are ragged when T does not divide K or N (N = 1000, T = 64: 15 tiles of 64 and
one of 40). The M dimension (and any leading batch dimensions of a MatMul's N-D input) is not
split. A Gemm whose B is computed at run time is cut with Split nodes instead of initializers.
A node whose K and N both fit in one tile is already a single tile and is left alone (listed in
``skipped``); so are integer products (ONNX ``Sum`` is float-only).

The new nodes take the replaced node's place in the node list (so the order stays topological),
write its output name (so consumers, graph outputs and value_info stay valid), copy its
``metadata_props`` (the dynamo exporter's module scopes survive) and get names derived from its
name, made unique. Weights no longer used are removed. The IR version is capped at 13.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from layerscope.core import values
from layerscope.core.callable_module import make_callable
from layerscope.core.errors import UserError
from layerscope.rewrite.base import PassResult, copy_input, op_counts
from layerscope.rewrite.graph_utils import (
    LazyShapes,
    UniqueNames,
    add_initializers,
    all_names,
    cap_ir_version,
    default_opset,
    drop_unused_initializers,
    is_default_domain,
    is_float,
    node_label,
    np_dtype,
    replace_nodes,
)
from layerscope.rewrite.onnx_io import check_initializer_values

__all__ = ["tile_linear", "tile_sizes", "PassResult"]

# A guard against tiles so small that the graph would not fit in memory or in protobuf.
MAX_NEW_MATMULS = 1_000_000


def tile_sizes(total: int, tile: int) -> list[int]:
    """[tile, tile, ..., remainder]: ceil(total / tile) sizes summing to total."""
    full, rest = divmod(total, tile)
    return [tile] * full + ([rest] if rest else [])


def tile_linear(model, tile: int) -> PassResult:
    """Tile every Gemm and every MatMul with a 2-D initializer weight; see the module docstring."""
    tile = values.positive_int(tile, "the tile size")
    new = copy_input(model, "tile_linear")
    check_initializer_values(new)  # an initializer without its values: one line, named
    import onnx

    graph = new.graph
    opset = default_opset(new)
    names = UniqueNames(all_names(graph))
    graph_inputs = {i.name for i in graph.input}
    # Initializers that are also graph inputs can be overridden by the caller: not constants.
    constants = {t.name: t for t in graph.initializer if t.name not in graph_inputs}
    shapes = LazyShapes(new)

    nodes_before = len(graph.node)
    ops_before = op_counts(graph)
    out_nodes, new_inits, replaced, skipped = [], [], [], []
    maybe_unused: set[str] = set()
    budget = [MAX_NEW_MATMULS]
    for index, node in enumerate(graph.node):
        label = node_label(node, index)
        plan = None
        if is_default_domain(node) and node.op_type in ("Gemm", "MatMul"):
            plan = _plan(node, constants, shapes, opset, tile)
        if plan is None:
            out_nodes.append(node)
            continue
        if isinstance(plan, str):
            skipped.append((label, plan))
            out_nodes.append(node)
            continue
        kt, nt = math.ceil(plan.k / tile), math.ceil(plan.n / tile)
        budget[0] -= kt * nt
        if budget[0] < 0:
            raise UserError(f"tile {tile} is too small: this model would need more than "
                            f"{MAX_NEW_MATMULS:,} MatMul nodes")
        emit = _Emitter(onnx, names, label, node, opset)
        _emit_tiled(emit, plan, tile)
        out_nodes.extend(emit.nodes)
        new_inits.extend(emit.inits)
        maybe_unused.update(plan.consumed_constants)
        replaced.append(label)

    if replaced:
        replace_nodes(graph, out_nodes)
        add_initializers(new, new_inits)
        drop_unused_initializers(graph, maybe_unused)
    cap_ir_version(new)
    return PassResult(new, bool(replaced), replaced, nodes_before, len(graph.node), skipped,
                      ops_before, op_counts(graph), how=f"with {tile}x{tile} tiles",
                      nothing="no Gemm or MatMul with a 2-D initializer weight larger than one "
                              "tile")


# --- planning -------------------------------------------------------------------------------

@dataclass
class _Plan:
    a: str  # input activation (rows x K, or ... x K for MatMul)
    transpose_a: bool
    weight: np.ndarray | None  # K x N constant (already transposed), or None
    b: str | None  # run-time B when weight is None
    transpose_b: bool
    k: int
    n: int
    dtype: np.dtype
    axis: int  # axis of A to split and of the result to concatenate along
    alpha: float
    bias: str | None  # C
    bias_const: np.ndarray | None  # beta * C when C is a constant and beta != 1
    beta: float
    output: str
    consumed_constants: set[str] = field(default_factory=set)


def _plan(node, constants, shapes, opset, tile) -> _Plan | str | None:
    """A plan to tile ``node``; a reason string when it is a candidate left alone; None when not
    a candidate at all (a MatMul of two activations)."""
    from onnx import numpy_helper

    if node.op_type == "MatMul":
        if len(node.input) != 2 or node.input[1] not in constants:
            return None
        w_proto = constants[node.input[1]]
        if len(w_proto.dims) != 2:
            return None
        if not is_float(w_proto.data_type):
            return "integer MatMul (ONNX Sum is float-only)"
        k, n = w_proto.dims
        if k <= tile and n <= tile:
            return f"fits in one {tile}x{tile} tile"
        if opset >= 11:
            axis = -1
        else:  # negative axes need opset 11
            rank = shapes.rank(node.input[0])
            if rank is None:
                return "rank of the input unknown (opset < 11 needs positive axes)"
            axis = rank - 1
        w = numpy_helper.to_array(w_proto)
        return _Plan(node.input[0], False, w, None, False, int(k), int(n), w.dtype, axis, 1.0,
                     None, None, 1.0, node.output[0], {w_proto.name})

    # Gemm: Y = alpha * A' @ B' + beta * C, A' = A.T if transA, B' = B.T if transB
    attrs = {a.name: a for a in node.attribute}
    trans_a = bool(attrs["transA"].i) if "transA" in attrs else False
    trans_b = bool(attrs["transB"].i) if "transB" in attrs else False
    alpha = float(attrs["alpha"].f) if "alpha" in attrs else 1.0
    beta = float(attrs["beta"].f) if "beta" in attrs else 1.0
    a, b = node.input[0], node.input[1]
    c = node.input[2] if len(node.input) > 2 and node.input[2] else None
    consumed = set()
    if b in constants:
        b_proto = constants[b]
        if len(b_proto.dims) != 2:
            return "B is not 2-D"
        if not is_float(b_proto.data_type):
            return "integer Gemm (ONNX Sum is float-only)"
        weight = numpy_helper.to_array(b_proto)
        weight = weight.T if trans_b else weight  # a view: each tile is made contiguous
        k, n = weight.shape
        dtype = weight.dtype
        consumed.add(b)
        b_run = None
    else:
        info = shapes.get(b)
        if info is None or info[1] is None or len(info[1]) != 2 or None in info[1]:
            return "shape of B unknown"
        if not is_float(info[0]):
            return "integer Gemm (ONNX Sum is float-only)"
        rows, cols = info[1]
        k, n = (cols, rows) if trans_b else (rows, cols)
        dtype = np_dtype(info[0])
        weight, b_run = None, b
    if k <= tile and n <= tile:
        return f"fits in one {tile}x{tile} tile"
    bias, bias_const = None, None
    if c is not None and beta != 0.0:
        if beta != 1.0 and c in constants:
            c_arr = numpy_helper.to_array(constants[c])
            bias_const = (c_arr * np.asarray(beta, dtype=c_arr.dtype)).astype(c_arr.dtype)
            consumed.add(c)
        bias = c
    elif c is not None and c in constants:
        consumed.add(c)
    return _Plan(a, trans_a, weight, b_run, trans_b, int(k), int(n), np.dtype(dtype), 1, alpha,
                 bias, bias_const, beta, node.output[0], consumed)


# --- emitting -------------------------------------------------------------------------------

class _Emitter:
    """Makes the nodes and initializers of one replaced node, with unique derived names."""

    def __init__(self, onnx, names, label, node, opset):
        self.onnx, self.names, self.opset = onnx, names, opset
        self.prefix = f"{label}/tile"
        self.metadata = list(node.metadata_props)
        self.nodes, self.inits = [], []

    def value(self, stem: str) -> str:
        return self.names.fresh(f"{self.prefix}/{stem}")

    def node(self, op: str, inputs: list[str], outputs: list[str], stem: str, **attrs):
        node = self.onnx.helper.make_node(op, inputs, outputs, name=self.value(stem), **attrs)
        for prop in self.metadata:
            node.metadata_props.add().CopyFrom(prop)
        self.nodes.append(node)
        return outputs

    def init(self, array: np.ndarray, stem: str) -> str:
        name = self.value(stem)
        self.inits.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def split(self, x: str, sizes: list[int], axis: int, stem: str) -> list[str]:
        outs = [self.value(f"{stem}{i}") for i in range(len(sizes))]
        if self.opset >= 13:
            split = self.init(np.array(sizes, dtype=np.int64), f"{stem}_sizes")
            return self.node("Split", [x, split], outs, f"Split_{stem}", axis=axis)
        return self.node("Split", [x], outs, f"Split_{stem}", axis=axis, split=sizes)


def _emit_tiled(emit: _Emitter, p: _Plan, tile: int) -> None:
    ks, ns = tile_sizes(p.k, tile), tile_sizes(p.n, tile)
    a = p.a
    if p.transpose_a:
        a = emit.node("Transpose", [a], [emit.value("A_T")], "Transpose_A", perm=[1, 0])[0]
    a_parts = emit.split(a, ks, p.axis, "A_k") if len(ks) > 1 else [a]

    k_off = np.concatenate([[0], np.cumsum(ks)])
    n_off = np.concatenate([[0], np.cumsum(ns)])
    if p.weight is not None:
        w = [[emit.init(p.weight[k_off[i]:k_off[i + 1], n_off[j]:n_off[j + 1]], f"W_k{i}_n{j}")
              for j in range(len(ns))] for i in range(len(ks))]
    else:
        b = p.b
        if p.transpose_b:
            b = emit.node("Transpose", [b], [emit.value("B_T")], "Transpose_B", perm=[1, 0])[0]
        rows = emit.split(b, ks, 0, "B_k") if len(ks) > 1 else [b]
        w = [emit.split(r, ns, 1, f"B_k{i}_n") if len(ns) > 1 else [r] for i, r in enumerate(rows)]

    columns = []
    for j in range(len(ns)):
        partial = [emit.node("MatMul", [a_parts[i], w[i][j]], [emit.value(f"P_k{i}_n{j}")],
                             f"MatMul_k{i}_n{j}")[0] for i in range(len(ks))]
        if len(partial) > 1:
            partial = emit.node("Sum", partial, [emit.value(f"S_n{j}")], f"Sum_n{j}")
        columns.append(partial[0])
    y = columns[0]
    if len(columns) > 1:
        y = emit.node("Concat", columns, [emit.value("Y")], "Concat", axis=p.axis)[0]
    if p.alpha != 1.0:
        alpha = emit.init(np.asarray(p.alpha, dtype=p.dtype), "alpha")
        y = emit.node("Mul", [y, alpha], [emit.value("Y_alpha")], "Mul_alpha")[0]
    if p.bias is not None:
        bias = p.bias
        if p.bias_const is not None:
            bias = emit.init(p.bias_const, "C_beta")
        elif p.beta != 1.0:
            beta = emit.init(np.asarray(p.beta, dtype=p.dtype), "beta")
            bias = emit.node("Mul", [bias, beta], [emit.value("C_beta")], "Mul_beta")[0]
        y = emit.node("Add", [y, bias], [emit.value("Y_bias")], "Add_bias")[0]
    # The last node made computes the result: give it the replaced node's output name.
    emit.nodes[-1].output[0] = p.output


make_callable(__name__, "layerscope.rewrite.tile_linear:tile_linear")  # see core/callable_module.py
