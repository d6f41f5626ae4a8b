"""A standalone Linear layer as an ONNX graph: Y = X @ W (+ B), seeded random weights."""
from __future__ import annotations

from typing import Any

import numpy as np

from layerscope.core import values
from layerscope.core.errors import UserError
from layerscope.core.limits import check_input_bytes
from layerscope.rewrite.onnx_io import require_onnx

OPSET = 17
MAX_WEIGHT_ELEMENTS = 2**28  # 1 GiB of float32: well inside ONNX's 2 GiB protobuf limit
IR_VERSION = 8  # the IR version that goes with opset 17; onnxruntime 1.31 reads <= 13


def linear_model(m: int, k: int, n: int, *, bias: bool = True, seed: int = 0):
    """X (m x k, float32) -> MatMul with W (k x n) [-> Add B (n)] -> Y (m x n).

    Weights are uniform in +-1/sqrt(k) (nn.Linear's initialisation) from numpy's seeded
    generator, so the same arguments always give the same file.
    """
    onnx = require_onnx()
    from onnx import TensorProto, helper, numpy_helper

    m, k, n = (values.positive_int(v, f"--{name}") for name, v in (("m", m), ("k", k), ("n", n)))
    if k * n > MAX_WEIGHT_ELEMENTS or m * k > MAX_WEIGHT_ELEMENTS:
        raise UserError(f"Linear {m}x{k} @ {k}x{n} is too large for a test graph: the input and "
                        f"the weight may each have at most {MAX_WEIGHT_ELEMENTS:,} elements "
                        "(an ONNX file holds at most 2 GiB)")
    # the weights are drawn in float64 (8 B) and kept in float32 (4 B)
    check_input_bytes(f"linear-subgraph {m}x{k} @ {k}x{n}", [((k, n), 12)], "--k, --n",
                      noun="its weights")
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(k)
    w = rng.uniform(-bound, bound, size=(k, n)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "weight")]
    nodes = [helper.make_node("MatMul", ["X", "weight"], ["XW" if bias else "Y"], name="MatMul")]
    if bias:
        b = rng.uniform(-bound, bound, size=(n,)).astype(np.float32)
        inits.append(numpy_helper.from_array(b, "bias"))
        nodes.append(helper.make_node("Add", ["XW", "bias"], ["Y"], name="Add"))
    graph = helper.make_graph(
        nodes, "linear",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="layerscope")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def linear_subgraph(settings: Any = None, **overrides: Any) -> tuple[Any, Any]:
    """(the Linear graph, tile-linear's ``PassResult`` on it) for ``settings`` (a
    ``rewrite.settings.LinearSubgraphSettings``; keyword arguments override its fields):
    what ``rewrite linear-subgraph`` writes."""
    from layerscope.rewrite import get_pass
    from layerscope.rewrite.settings import LinearSubgraphSettings

    s = LinearSubgraphSettings.of(settings, **overrides)
    model = linear_model(s.m, s.k, s.n, bias=s.bias, seed=s.weight_seed)
    return model, get_pass("tile-linear")(model, tile=s.tile)
