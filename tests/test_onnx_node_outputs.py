"""The sum of node outputs of an ONNX graph (``totals.layer_output_bytes``): the bytes of every
output of every node, a view's output counted again, so a figure summed over an ONNX graph's node
outputs has its counterpart in the report."""
from __future__ import annotations

import json

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from layerscope.analysis.static_onnx import analyze_onnx
from tests.helpers import run_cli
from tests.onnx_graphs import memory_graph, model, save, tensor

# memory_graph: A = Relu(X) 1x8 (32 B), B = Reshape(A) 2x4 (a view, 32 B again), C = MatMul 2x16
# (128 B), S1, S2 = Split(C) 1x16 each (64 + 64 B), D = Sigmoid(S1) (64 B), Z = MatMul 2x1 (8 B)
MEMORY_GRAPH_OUTPUTS = 32 + 32 + 128 + 64 + 64 + 64 + 8
MEMORY_GRAPH_CREATED = MEMORY_GRAPH_OUTPUTS - 32  # activation_bytes: the view creates nothing


def _half_graph():
    # Cast X 1x4 float32 -> float16 (8 B), Constant 1x4 float16 (8 B), Add (8 B): 24 B
    nodes = [helper.make_node("Cast", ["X"], ["H"], name="cast", to=TensorProto.FLOAT16),
             helper.make_node("Constant", [], ["K"], name="k",
                              value=numpy_helper.from_array(np.ones((1, 4), np.float16))),
             helper.make_node("Add", ["H", "K"], ["Y"], name="add")]
    return model(nodes, [tensor("X", [1, 4])], [tensor("Y", [1, 4], TensorProto.FLOAT16)])


def test_hand_derived_sums(tmp_path):
    t = analyze_onnx(save(memory_graph(), tmp_path)).totals
    assert t.layer_output_bytes == MEMORY_GRAPH_OUTPUTS == 392
    assert t.activation_bytes == MEMORY_GRAPH_CREATED == 360
    assert analyze_onnx(save(_half_graph(), tmp_path, "h.onnx")).totals.layer_output_bytes == 24


def test_cli_shows_and_writes_it(tmp_path):
    path = save(memory_graph(), tmp_path)
    code, out, _ = run_cli("analyze", path, "--width", "200")
    assert code == 0
    assert "Sum of node outputs: 392 B" in out and "Sum of layer outputs" not in out
    code, out, _ = run_cli("analyze", path, "--format", "json")
    assert json.loads(out)["totals"]["layer_output_bytes"] == 392
