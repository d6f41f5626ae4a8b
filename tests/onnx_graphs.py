"""Small ONNX graphs built with onnx.helper for the ONNX tests (ir_version set explicitly:
onnx 1.23 writes IR 14 by default, onnxruntime 1.31 reads up to 13)."""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 10
FLOAT = TensorProto.FLOAT


def tensor(name: str, shape, elem=FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def init(name: str, shape, value: float = 0.5, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.full(shape, value, dtype=dtype), name)


def model(nodes, inputs, outputs, initializers=(), opset: int = 18, extra_opsets=(),
          value_info=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers),
                              value_info=list(value_info))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)


def save(m: onnx.ModelProto, directory, name: str = "m.onnx") -> str:
    path = os.path.join(str(directory), name)
    onnx.save(m, path)
    return path


def single(op: str, inputs: list, output_shape, initializers=(), opset: int = 18,
           domain: str = "", output_value_info: bool = False, **attrs) -> onnx.ModelProto:
    """One node named 'n' reading graph inputs (ValueInfo) and initializers, writing 'y'.
    ``inputs``: ValueInfoProto for graph inputs, str names for initializers, '' for omitted."""
    names = [x if isinstance(x, str) else x.name for x in inputs]
    graph_inputs = [x for x in inputs if not isinstance(x, str)]
    node = helper.make_node(op, names, ["y"], name="n", domain=domain, **attrs)
    extra = [(domain, 1)] if domain else []
    y = tensor("y", output_shape)
    return model([node], graph_inputs, [y], initializers, opset, extra,
                 value_info=[y] if output_value_info else [])


def memory_graph() -> onnx.ModelProto:
    """The hand-worked graph of test_onnx_analyze (steps 0-5):
        0 A = Relu(X)               X: 1x8 (32 B)      A: 32 B
        1 B = Reshape(A, [2, 4])    view of A
        2 C = MatMul(B, W: 4x16)    C: 2x16 (128 B)
        3 S1, S2 = Split(C, axis 0) 1x16 each (64 B); S2 read by nobody
        4 D = Sigmoid(S1)           D: 64 B, graph output
        5 Z = MatMul(B, W2: 4x1)    Z: 2x1 (8 B), graph output
    """
    nodes = [
        helper.make_node("Relu", ["X"], ["A"], name="relu"),
        helper.make_node("Reshape", ["A", "shape"], ["B"], name="reshape"),
        helper.make_node("MatMul", ["B", "W"], ["C"], name="mm"),
        helper.make_node("Split", ["C"], ["S1", "S2"], name="split", axis=0, num_outputs=2),
        helper.make_node("Sigmoid", ["S1"], ["D"], name="sigmoid"),
        helper.make_node("MatMul", ["B", "W2"], ["Z"], name="mm2"),
    ]
    inits = [numpy_helper.from_array(np.array([2, 4], dtype=np.int64), "shape"),
             init("W", [4, 16]), init("W2", [4, 1])]
    return model(nodes, [tensor("X", [1, 8])], [tensor("D", [1, 16]), tensor("Z", [2, 1])],
                 inits)


def external_tensor(name: str, shape, location: str, elem=FLOAT) -> onnx.TensorProto:
    """An initializer whose bytes live in ``location`` (beside the model), offset 0."""
    t = onnx.TensorProto()
    t.name, t.data_type = name, elem
    t.dims.extend(shape)
    t.data_location = TensorProto.EXTERNAL
    nbytes = int(np.prod(shape)) * np.dtype(helper.tensor_dtype_to_np_dtype(elem)).itemsize
    for key, value in (("location", location), ("offset", "0"), ("length", str(nbytes))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t
