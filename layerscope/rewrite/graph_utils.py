"""Graph helpers every rewrite pass needs: names, subgraphs, initializers, types, shapes.

They work on the protobuf objects in place (a pass calls them on its own copy, see
``base.copy_input``).
"""
from __future__ import annotations

import numpy as np

from layerscope.rewrite.onnx_io import MAX_IR_VERSION

_FLOAT = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


def is_float(elem_type: int) -> bool:
    return elem_type in _FLOAT


def np_dtype(elem_type: int) -> np.dtype:
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def default_opset(model) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 1


def is_default_domain(node) -> bool:
    return node.domain in ("", "ai.onnx")


def node_label(node, index: int) -> str:
    """The node's name, or ``OpType_index`` for an unnamed one."""
    return node.name or f"{node.op_type}_{index}"


def subgraphs(node):
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.g
        yield from attr.graphs


def all_names(graph) -> set[str]:
    """Every node and value name in the graph and its subgraphs."""
    seen = set()
    for coll in (graph.input, graph.output, graph.value_info, graph.initializer):
        seen.update(v.name for v in coll)
    for node in graph.node:
        seen.add(node.name)
        seen.update(node.input)
        seen.update(node.output)
        for sub in subgraphs(node):
            seen |= all_names(sub)
    seen.discard("")
    return seen


def used_names(graph) -> set[str]:
    """Values read by a node (in the graph or any subgraph) or returned as graph outputs."""
    used = {o.name for o in graph.output}
    for node in graph.node:
        used.update(node.input)
        for sub in subgraphs(node):  # subgraphs may read outer-scope values
            used |= used_names(sub)
    return used


def drop_unused_initializers(graph, candidates: set[str]) -> list[str]:
    """Remove the initializers among ``candidates`` that nothing reads (and their value_info);
    return their names, in graph order."""
    unused = candidates - used_names(graph)
    if not unused:
        return []
    dropped = [t.name for t in graph.initializer if t.name in unused]
    for i in reversed(range(len(graph.initializer))):
        if graph.initializer[i].name in unused:
            del graph.initializer[i]
    for i in reversed(range(len(graph.value_info))):
        if graph.value_info[i].name in unused:
            del graph.value_info[i]
    return dropped


def add_initializers(model, inits) -> None:
    """Append initializers; before IR 4 every initializer must also be a graph input."""
    import onnx

    model.graph.initializer.extend(inits)
    if model.ir_version < 4:
        for t in inits:
            model.graph.input.append(
                onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims))


def cap_ir_version(model) -> None:
    """onnxruntime reads IR versions up to MAX_IR_VERSION; newer onnx writes higher ones."""
    if model.ir_version > MAX_IR_VERSION:
        model.ir_version = MAX_IR_VERSION


def replace_nodes(graph, nodes) -> None:
    """Make ``nodes`` (a topologically ordered list) the graph's node list."""
    del graph.node[:]
    graph.node.extend(nodes)


class UniqueNames:
    """Fresh names that collide with nothing in the graph: ``stem``, ``stem_1``, ..."""

    def __init__(self, taken: set[str]):
        self.taken = set(taken)

    def fresh(self, stem: str) -> str:
        name, i = stem, 1
        while name in self.taken:
            name, i = f"{stem}_{i}", i + 1
        self.taken.add(name)
        return name


class LazyShapes:
    """Element types and shapes from ONNX shape inference, computed on first use only. Large
    initializers are passed to shape inference as typed graph inputs, so their data is not
    copied."""

    SMALL = 4096  # elements; smaller initializers keep their data (Reshape targets and such)

    def __init__(self, model):
        self.model = model
        self._map: dict[str, tuple[int, list[int | None] | None]] | None = None

    def get(self, name: str):
        if self._map is None:
            self._map = self._infer()
        return self._map.get(name)

    def rank(self, name: str) -> int | None:
        info = self.get(name)
        return None if info is None or info[1] is None else len(info[1])

    def _infer(self):
        import onnx

        m = self.model
        light = onnx.ModelProto(ir_version=max(m.ir_version, 4), producer_name="layerscope")
        light.opset_import.extend(m.opset_import)
        g = light.graph
        g.node.extend(m.graph.node)
        g.input.extend(m.graph.input)
        g.output.extend(m.graph.output)
        g.value_info.extend(m.graph.value_info)
        inputs = {i.name for i in m.graph.input}
        for t in m.graph.initializer:
            if int(np.prod(t.dims)) <= self.SMALL:
                g.initializer.append(t)
            elif t.name not in inputs:
                g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims))
        try:
            inferred = onnx.shape_inference.infer_shapes(light)
        except Exception:
            inferred = light
        out = {}
        for v in list(inferred.graph.input) + list(inferred.graph.value_info) + list(
                inferred.graph.output):
            tt = v.type.tensor_type
            if not v.type.HasField("tensor_type"):
                continue
            dims = None
            if tt.HasField("shape"):
                dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            out[v.name] = (tt.elem_type, dims)
        for t in inferred.graph.initializer:
            out[t.name] = (t.data_type, list(t.dims))
        return out
