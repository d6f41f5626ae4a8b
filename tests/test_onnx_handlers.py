"""ONNX cost handlers: one single-node graph per case, numbers derived by hand beside each case.

Every case runs the whole path (load, shape inference, walk), so the shapes the handler sees are
the ones onnx infers.
"""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from layerscope.analysis.static_onnx import analyze_onnx
from layerscope.ops.onnx import ONNX
from layerscope.ops.registry import VersionedHandlerTable
from tests.onnx_graphs import init, save, single, tensor

I64 = TensorProto.INT64


def _i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _f32(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.float32), name)


def _scalar(name, value):
    return numpy_helper.from_array(np.array(value, dtype=np.float32), name)


CASES = [
    # Conv, groups 4, dilation 2: y = 1x16x6x6 (10 - 2*(3-1)); MACs = numel(y) * Cin/g * k*k
    # = 576 * 2 * 9 = 10,368; bias add 576; params 16*2*9 + 16 = 304
    ("conv-grouped-dilated",
     lambda: single("Conv", [tensor("x", [1, 8, 10, 10]), "w", "b"], [1, 16, 6, 6],
                    [init("w", [16, 2, 3, 3]), init("b", [16])], group=4, dilations=[2, 2]),
     dict(macs=10_368, flops=2 * 10_368 + 576, params=304)),
    # ConvTranspose stride 2: y = 1x3x11x11 ((5-1)*2 + 3); MACs = numel(x) * Cout/g * k*k
    # = 100 * 3 * 9 = 2,700
    ("conv-transpose",
     lambda: single("ConvTranspose", [tensor("x", [1, 4, 5, 5]), "w"], [1, 3, 11, 11],
                    [init("w", [4, 3, 3, 3])], strides=[2, 2]),
     dict(macs=2_700, flops=5_400, params=108)),
    # Gemm transB: (2x8) @ (5x8)^T + C(5): MACs 2*5*8 = 80; C add 10; params 40 + 5
    ("gemm-transB-bias",
     lambda: single("Gemm", [tensor("a", [2, 8]), "w", "c"], [2, 5],
                    [init("w", [5, 8]), init("c", [5])], transB=1),
     dict(macs=80, flops=170, params=45)),
    # Gemm transA, alpha 0.5, no C: MACs 80; alpha scaling 10
    ("gemm-transA-alpha",
     lambda: single("Gemm", [tensor("a", [8, 2]), "w"], [2, 5], [init("w", [8, 5])],
                    transA=1, alpha=0.5),
     dict(macs=80, flops=170, params=40)),
    # MatMul broadcast: (3,1,4,6) @ (5,6,2) -> (3,5,4,2) = 120 outputs x k=6 = 720
    ("matmul-broadcast",
     lambda: single("MatMul", [tensor("a", [3, 1, 4, 6]), tensor("b", [5, 6, 2])], [3, 5, 4, 2]),
     dict(macs=720, flops=1_440, params=0)),
    # MatMul 1-D by 2-D: (6) @ (6,3) -> (3): 3 x 6 = 18
    ("matmul-vector",
     lambda: single("MatMul", [tensor("a", [6]), "w"], [3], [init("w", [6, 3])]),
     dict(macs=18, flops=36, params=18)),
    # Einsum batched matmul: b*i*j*k = 2*3*4*5 = 120
    ("einsum-bmm",
     lambda: single("Einsum", [tensor("a", [2, 3, 4]), tensor("b", [2, 4, 5])], [2, 3, 5],
                    equation="bij,bjk->bik"),
     dict(macs=120, flops=240)),
    # Einsum Hadamard product: nothing summed -> 12 FLOPs, no MACs
    ("einsum-hadamard",
     lambda: single("Einsum", [tensor("a", [3, 4]), tensor("b", [3, 4])], [3, 4],
                    equation="ij,ij->ij"),
     dict(macs=0, flops=12)),
    # Einsum with ellipsis and implicit output: '...ij,...jk' = batched matmul, 2*3*4*5
    ("einsum-ellipsis",
     lambda: single("Einsum", [tensor("a", [2, 3, 4]), tensor("b", [2, 4, 5])], [2, 3, 5],
                    equation="...ij,...jk"),
     dict(macs=120, flops=240)),
    # MaxPool 3x3 stride 2 on 7x7: out 3x3 x 2 channels = 18 x 9 comparisons
    ("maxpool",
     lambda: single("MaxPool", [tensor("x", [1, 2, 7, 7])], [1, 2, 3, 3], kernel_shape=[3, 3],
                    strides=[2, 2]),
     dict(flops=162)),
    # AveragePool 2x2 stride 2 on 4x4: 8 outputs x 4 adds + 8 divides
    ("avgpool",
     lambda: single("AveragePool", [tensor("x", [1, 2, 4, 4])], [1, 2, 2, 2],
                    kernel_shape=[2, 2], strides=[2, 2]),
     dict(flops=40)),
    # GlobalAveragePool: 48 adds + 3 divides
    ("global-avgpool",
     lambda: single("GlobalAveragePool", [tensor("x", [1, 3, 4, 4])], [1, 3, 1, 1]),
     dict(flops=51)),
    # ReduceMean (opset 18, axes an int64 input): 48 + 3; the axes are not traffic
    ("reducemean-axes-input",
     lambda: single("ReduceMean", [tensor("x", [1, 3, 4, 4]), "axes"], [1, 3, 1, 1],
                    [_i64("axes", [2, 3])]),
     dict(flops=51, params=0, bytes_read=192, bytes_written=12)),
    # BatchNormalization (inference): 4 x 48; scale+B are params (6), mean+var buffers (24 B)
    ("batchnorm",
     lambda: single("BatchNormalization", [tensor("x", [1, 3, 4, 4]), "s", "b", "m", "v"],
                    [1, 3, 4, 4], [init("s", [3]), init("b", [3]), init("m", [3]),
                                   init("v", [3])]),
     dict(flops=192, params=6, weight_bytes=24, buffer_bytes=24)),
    # LayerNormalization: 8 x 80; scale + bias 16 params
    ("layernorm",
     lambda: single("LayerNormalization", [tensor("x", [2, 5, 8]), "s", "b"], [2, 5, 8],
                    [init("s", [8]), init("b", [8])], axis=-1),
     dict(flops=640, params=16)),
    # Softmax: 5 x 20
    ("softmax", lambda: single("Softmax", [tensor("x", [2, 10])], [2, 10]), dict(flops=100)),
    # Clip-11: bounds are inputs (scalars) -> not params, not traffic; 1 per element
    ("clip-11-inputs",
     lambda: single("Clip", [tensor("x", [1, 10]), "lo", "hi"], [1, 10],
                    [_scalar("lo", 0.0), _scalar("hi", 6.0)]),
     dict(flops=10, params=0, bytes_read=40)),
    # Clip-6: bounds are attributes
    ("clip-6-attributes",
     lambda: single("Clip", [tensor("x", [1, 10])], [1, 10], opset=6, min=0.0, max=6.0),
     dict(flops=10, params=0, bytes_read=40)),
    # Transpose: a real copy in onnxruntime: 0 FLOPs, 96 B read and written, a new tensor
    ("transpose-copies",
     lambda: single("Transpose", [tensor("x", [2, 3, 4])], [4, 3, 2], perm=[2, 1, 0]),
     dict(flops=0, bytes_read=96, bytes_written=96, activation_bytes=96)),
    # Reshape: a view: nothing moves, nothing new
    ("reshape-view",
     lambda: single("Reshape", [tensor("x", [2, 3, 4]), "s"], [6, 4], [_i64("s", [6, 4])]),
     dict(flops=0, bytes_read=0, bytes_written=0, activation_bytes=0, params=0)),
    # Resize linear 4x4 -> 8x8: 2 taps per resized axis -> 4 taps: 4 mul + 3 add per output
    ("resize-linear",
     lambda: single("Resize", [tensor("x", [1, 1, 4, 4]), "", "scales"], [1, 1, 8, 8],
                    [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")],
                    mode="linear"),
     dict(flops=64 * 7, params=0)),
    # Resize nearest: a copy, 0 FLOPs (aten's upsample_nearest*d)
    ("resize-nearest",
     lambda: single("Resize", [tensor("x", [1, 2, 4, 4]), "", "scales"], [1, 2, 8, 8],
                    [_f32("scales", [1, 1, 2, 2])], mode="nearest"),
     dict(flops=0)),
    # Resize cubic 4x4 -> 8x8: 4 taps per resized axis, 16 in all: 2*16 - 1 = 31 per output
    ("resize-cubic",
     lambda: single("Resize", [tensor("x", [1, 2, 4, 4]), "", "scales"], [1, 2, 8, 8],
                    [_f32("scales", [1, 1, 2, 2])], mode="cubic"),
     dict(flops=128 * 31)),
    # Resize linear with sizes, only W changes (4 -> 8): 2 taps, 3 per output
    ("resize-linear-one-axis-sizes",
     lambda: single("Resize", [tensor("x", [1, 2, 4, 4]), "", "", "sizes"], [1, 2, 4, 8],
                    [_i64("sizes", [1, 2, 4, 8])], mode="linear"),
     dict(flops=64 * 3, params=0)),
    # Resize-18 antialias, linear 8x8 -> 4x4: ceil(2 * 8/4) = 4 taps per axis, 16: 32 x 31
    ("resize-linear-antialias",
     lambda: single("Resize", [tensor("x", [1, 2, 8, 8]), "", "scales"], [1, 2, 4, 4],
                    [_f32("scales", [1, 1, 0.5, 0.5])], mode="linear", antialias=1),
     dict(flops=32 * 31)),
    # Upsample-9 linear 1-D 4 -> 8 on (1, 2, 4): 2 taps, 16 outputs x 3
    ("upsample-9-linear",
     lambda: single("Upsample", [tensor("x", [1, 2, 4]), "scales"], [1, 2, 8],
                    [_f32("scales", [1, 1, 2])], opset=9, mode="linear"),
     dict(flops=16 * 3, params=0)),
    # GridSample bilinear on a (1, 3, 5, 2) grid: 2 x 3 x 5 = 30 outputs x 7 (4 taps)
    ("gridsample-bilinear",
     lambda: single("GridSample", [tensor("x", [1, 2, 4, 4]), tensor("g", [1, 3, 5, 2])],
                    [1, 2, 3, 5], mode="bilinear"),
     dict(flops=30 * 7)),
    ("gridsample-20-cubic",
     lambda: single("GridSample", [tensor("x", [1, 2, 4, 4]), tensor("g", [1, 3, 5, 2])],
                    [1, 2, 3, 5], opset=20, mode="cubic"),
     dict(flops=30 * 31)),
    # AffineGrid theta (2, 2, 3), size (2, 1, 3, 5) -> grid (2, 3, 5, 2): 60 x 3 MACs
    ("affinegrid",
     lambda: single("AffineGrid", [tensor("t", [2, 2, 3]), "size"], [2, 3, 5, 2],
                    [_i64("size", [2, 1, 3, 5])], opset=20),
     dict(macs=180, flops=360, params=0)),
    # MaxUnpool: a scatter to the recorded indices (aten's max_unpool2d): 0 FLOPs, 32 B of
    # values and 64 B of int64 indices read, 128 B written
    ("maxunpool",
     lambda: single("MaxUnpool", [tensor("x", [1, 2, 2, 2]), tensor("i", [1, 2, 2, 2], I64)],
                    [1, 2, 4, 4], opset=11, kernel_shape=[2, 2], strides=[2, 2]),
     dict(flops=0, bytes_read=32 + 64, bytes_written=128)),
    # LayerNormalization without B: statistics 4 + normalise 2 + scale 1 = 7 per element
    ("layernorm-no-bias",
     lambda: single("LayerNormalization", [tensor("x", [2, 5, 8]), "s"], [2, 5, 8],
                    [init("s", [8])], axis=-1),
     dict(flops=7 * 80, params=8)),
    # LSTM T=5, B=2, I=3, H=4: MACs = 10 x (16*3 + 16*4) = 1,120; gates 10 x 4 x 13 = 520;
    # biases 10 x 2 x 16 = 320; params 48 + 64 + 32
    ("lstm",
     lambda: single("LSTM", [tensor("x", [5, 2, 3]), "W", "R", "B"], [5, 1, 2, 4],
                    [init("W", [1, 16, 3]), init("R", [1, 16, 4]), init("B", [1, 32])],
                    hidden_size=4),
     dict(macs=1_120, flops=2_240 + 520 + 320, params=144)),
    # Add of a scalar constant: 1 per element; the scalar is neither a parameter nor traffic
    ("add-scalar-constant",
     lambda: single("Add", [tensor("x", [1, 4]), "c"], [1, 4], [_scalar("c", 1.0)]),
     dict(flops=4, params=0, bytes_read=16)),
    # Attention (opset 23), 4-D: scores 1*2*3*5 = 30; MACs 30 x (E 4 + Ev 6) = 300;
    # FLOPs 600 + 6 per score (scale + softmax)
    ("attention-23",
     lambda: single("Attention", [tensor("q", [1, 2, 3, 4]), tensor("k", [1, 2, 5, 4]),
                                  tensor("v", [1, 2, 5, 6])], [1, 2, 3, 6], opset=23),
     dict(macs=300, flops=780)),
    # onnxruntime's FusedConv (com.microsoft) with Relu: conv MACs 1x4x4x4 outputs x 2x3x3 = 1,152;
    # bias 64 + activation 64. onnx cannot infer contrib shapes: the model declares y's shape.
    ("ms-fusedconv",
     lambda: single("FusedConv", [tensor("x", [1, 2, 4, 4]), "w", "b"], [1, 4, 4, 4],
                    [init("w", [4, 2, 3, 3]), init("b", [4])], domain="com.microsoft",
                    output_value_info=True, pads=[1, 1, 1, 1], activation="Relu"),
     dict(macs=1_152, flops=2 * 1_152 + 64 + 64, params=76)),
]


@pytest.mark.parametrize("build,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_single_node_costs(tmp_path, build, expected):
    report = analyze_onnx(save(build(), tmp_path))
    row = report.layers[0]
    assert report.uncounted_ops == [], report.uncounted_ops
    for key, value in expected.items():
        assert getattr(row, key) == value, key


def test_versions_resolve_to_the_newest_registration_not_above_the_opset():
    assert ONNX.lookup("", "Clip", 6).constants == ()
    assert ONNX.lookup("", "Clip", 11).constants == (1, 2)
    assert ONNX.lookup("", "Clip", 21).constants == (1, 2)
    assert ONNX.lookup("", "Attention", 22) is None  # Attention arrived in opset 23
    assert ONNX.lookup("com.microsoft", "FusedConv", 1) is not None
    assert ONNX.lookup("", "FusedConv", 18) is None  # the domain is part of the key


def test_table_refuses_duplicates():
    table = VersionedHandlerTable("t")
    table.register("Relu", 1, lambda i, o, a: None)
    table.register("Relu", 14, lambda i, o, a: None)
    with pytest.raises(ValueError, match="already registered"):
        table.register("Relu", 14, lambda i, o, a: None)
    with pytest.raises(ValueError, match="already registered"):
        from layerscope.ops import onnx as ops_onnx

        ops_onnx.register("Conv", 1, ops_onnx.conv)


def test_unknown_op_is_uncounted_and_lowers_coverage(tmp_path):
    # Hardmax is a valid ONNX op without a cost handler; the Relu after it is still costed
    nodes = [helper.make_node("Hardmax", ["x"], ["h"], name="hm"),
             helper.make_node("Relu", ["h"], ["y"], name="r")]
    from tests.onnx_graphs import model

    m = model(nodes, [tensor("x", [2, 5])], [tensor("y", [2, 5])])
    report = analyze_onnx(save(m, tmp_path))
    assert [(u.op, u.calls) for u in report.uncounted_ops] == [("Hardmax", 1)]
    assert report.op_coverage == 0.5
    assert report.layers[1].flops == 10
    assert report.layers[0].bytes_read == 40  # traffic is still counted when shapes are known


def test_custom_domain_op_without_shapes_is_uncounted(tmp_path):
    # a declared custom domain is fine; its op has no schema, so onnx infers no shape for 'c'
    # and the Relu reading it cannot be costed either: both uncounted, with a note
    from tests.onnx_graphs import model

    nodes = [helper.make_node("Mystery", ["x"], ["c"], name="custom", domain="acme"),
             helper.make_node("Relu", ["c"], ["y"], name="r")]
    m = model(nodes, [tensor("x", [2, 5])], [tensor("y", [2, 5])], extra_opsets=[("acme", 1)])
    report = analyze_onnx(save(m, tmp_path))
    assert sorted((u.op, u.calls) for u in report.uncounted_ops) == [("Relu", 1),
                                                                     ("acme::Mystery", 1)]
    assert report.op_coverage == 0.0
    assert any("shape inference could not determine" in n for n in report.notes)
