"""verify: the error definitions on hand-made models, how inputs are made and matched, PyTorch
specs against ONNX files, exit codes and bad input."""
import json
import math
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from layerscope.core.errors import UserError  # noqa: E402
from layerscope.rewrite.verify import verify  # noqa: E402
from tests.helpers import run_cli  # noqa: E402

F32 = TensorProto.FLOAT


def save(tmp_path, name, nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return str(path)


def constants(tmp_path, name, **outputs):
    """A model with no inputs whose outputs are the given constant arrays."""
    nodes, outs = [], []
    for out, values in outputs.items():
        arr = np.asarray(values, dtype=np.float32)
        nodes.append(helper.make_node("Constant", [], [out], value=numpy_helper.from_array(arr)))
        outs.append(helper.make_tensor_value_info(out, F32, arr.shape))
    return save(tmp_path, name, nodes, [], outs)


def scale(tmp_path, name, factor, shape=(3, 4)):
    """Y = X * factor (factor 1: Identity)."""
    x = helper.make_tensor_value_info("X", F32, shape)
    y = helper.make_tensor_value_info("Y", F32, shape)
    if factor == 1:
        return save(tmp_path, name, [helper.make_node("Identity", ["X"], ["Y"])], [x], [y])
    f = numpy_helper.from_array(np.asarray(factor, np.float32), "f")
    return save(tmp_path, name, [helper.make_node("Mul", ["X", "f"], ["Y"])], [x], [y], [f])


# --- the error definitions, derived by hand ----------------------------------------------
CONSTANT_CASES = [
    # id, A's output, B's output, max_abs, mse, max_rel, ok (rtol 1e-5, atol 1e-8)
    ("equal", [1, -2, 4], [1, -2, 4], 0.0, 0.0, 0.0, True),
    ("one-off", [1, -2, 4], [1, -2, 3], 1.0, 1 / 3, 1 / 4, False),  # rel: 1 / max|A| = 1/4
    ("sign", [0.5, -2], [0.5, 2], 4.0, 8.0, 2.0, False),
    ("both-nan-and-inf-agree", [np.nan, 1, np.inf], [np.nan, 1, np.inf], 0.0, 0.0, 0.0, True),
    ("nan-on-one-side", [1, 2], [np.nan, 2], math.inf, math.inf, math.inf, False),
    ("zero-reference-zero-error", [0, 0], [0, 0], 0.0, 0.0, 0.0, True),
    # max|A| = 0: the relative error is infinite, but atol (1e-8) accepts 1e-9
    ("zero-reference-within-atol", [0, 0], [0, 1e-9], 1e-9, 1e-18 / 2, math.inf, True),
]


@pytest.mark.parametrize("a,b,max_abs,mse,max_rel,ok", [c[1:] for c in CONSTANT_CASES],
                         ids=[c[0] for c in CONSTANT_CASES])
def test_error_definitions(tmp_path, a, b, max_abs, mse, max_rel, ok):
    result = verify(constants(tmp_path, "a", Y=a), constants(tmp_path, "b", Y=b), runs=2)
    (out,) = result.outputs
    # B's float32 1e-9 is not exactly 1e-9: compare at float32 precision
    assert out.max_abs_error == pytest.approx(max_abs, rel=1e-7)
    assert out.mse == pytest.approx(mse, rel=1e-6)
    assert out.max_rel_error == pytest.approx(max_rel, rel=1e-7)
    assert out.ok is ok and result.ok is ok
    assert result.max_abs_error == out.max_abs_error and result.mse == out.mse


def test_several_outputs_overall(tmp_path):
    a = constants(tmp_path, "a", P=[1, 2], Q=[10, 10, 10, 10])
    b = constants(tmp_path, "b", P=[1, 3], Q=[10, 10, 10, 12])
    result = verify(a, b)
    p, q = result.outputs
    assert (p.name, p.max_abs_error, p.mse, p.max_rel_error) == ("P", 1.0, 0.5, 0.5)
    assert (q.name, q.max_abs_error, q.mse, q.max_rel_error) == ("Q", 2.0, 1.0, 0.2)
    assert result.max_abs_error == 2.0  # the largest of the outputs'
    assert result.max_rel_error == 0.5  # each output relative to its own scale
    assert result.mse == pytest.approx(5 / 6)  # (1 + 4) / 6 elements
    assert not result.ok


def test_inputs_are_seeded_normal_and_errors_cover_every_run(tmp_path):
    # A = X, B = 2X: |A - B| = |X|, so the errors are statistics of the inputs themselves
    result = verify(scale(tmp_path, "a", 1), scale(tmp_path, "b", 2), runs=5, seed=7)
    rng = np.random.default_rng(7)
    xs = np.stack([rng.standard_normal((3, 4)).astype(np.float32) for _ in range(5)])
    xs = xs.astype(np.float64)
    assert result.max_abs_error == np.abs(xs).max()
    assert result.mse == pytest.approx(np.mean(xs ** 2), rel=1e-12)
    assert result.max_rel_error == 1.0
    assert result.inputs == [{"name": "X", "shape": [3, 4], "dtype": "float32"}]
    other_seed = verify(scale(tmp_path, "a", 1), scale(tmp_path, "b", 2), runs=5, seed=8)
    assert other_seed.max_abs_error != result.max_abs_error


TOLERANCE_CASES = [
    # id, B = X * (1 + 1e-6): rel error ~1e-6, abs error ~4e-6 (max|X| ~ 3-4)
    ("rtol-1e-5-passes", {"rtol": 1e-5}, True),
    ("rtol-1e-7-fails", {"rtol": 1e-7}, False),
    ("atol-only-passes", {"rtol": 0.0, "atol": 1e-4}, True),
    ("atol-only-fails", {"rtol": 0.0, "atol": 1e-7}, False),
]


@pytest.mark.parametrize("tolerances,ok", [c[1:] for c in TOLERANCE_CASES],
                         ids=[c[0] for c in TOLERANCE_CASES])
def test_tolerances(tmp_path, tolerances, ok):
    result = verify(scale(tmp_path, "a", 1), scale(tmp_path, "b", 1 + 1e-6), **tolerances)
    assert 5e-7 < result.max_rel_error < 2e-6
    assert result.ok is ok


# --- how inputs are made and matched ------------------------------------------------------
def two_inputs(tmp_path, name, order):
    """Y = X - Z, with the graph inputs listed in ``order``."""
    vi = {n: helper.make_tensor_value_info(n, F32, (2, 3)) for n in "XZ"}
    return save(tmp_path, name, [helper.make_node("Sub", ["X", "Z"], ["Y"])],
                [vi[n] for n in order], [helper.make_tensor_value_info("Y", F32, (2, 3))])


def test_inputs_matched_by_name(tmp_path):
    result = verify(two_inputs(tmp_path, "a", "XZ"), two_inputs(tmp_path, "b", "ZX"))
    assert result.ok and result.max_abs_error == 0.0


SYMBOLIC_CASES = [
    # id, A's dims, B's dims, shape used
    ("both-symbolic", ("n", 5), ("m", 5), [1, 5]),
    ("a-fixed", (3, 5), ("m", 5), [3, 5]),
    ("b-fixed", ("n", 5), (4, 5), [4, 5]),
]


@pytest.mark.parametrize("a_dims,b_dims,shape", [c[1:] for c in SYMBOLIC_CASES],
                         ids=[c[0] for c in SYMBOLIC_CASES])
def test_symbolic_dimensions(tmp_path, a_dims, b_dims, shape):
    result = verify(scale(tmp_path, "a", 1, a_dims), scale(tmp_path, "b", 1, b_dims))
    assert result.inputs[0]["shape"] == shape and result.ok


def test_integer_inputs_are_zeros(tmp_path):
    x = helper.make_tensor_value_info("X", TensorProto.INT64, (2, 2))
    y = helper.make_tensor_value_info("Y", F32, (2, 2))
    path = save(tmp_path, "a", [helper.make_node("Cast", ["X"], ["Y"], to=F32)], [x], [y])
    zeros = numpy_helper.from_array(np.zeros((2, 2), np.float32))
    other = save(tmp_path, "b", [helper.make_node("Constant", [], ["Y"], value=zeros)], [x], [y])
    result = verify(path, other)  # B ignores its input and outputs zeros: A must see zeros
    assert result.inputs[0]["dtype"] == "int64" and result.ok and result.max_abs_error == 0


# --- PyTorch specs against ONNX -----------------------------------------------------------
FACTORY = '''
import torch
import torch.nn as nn


def build(seed=0):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
    return net, (torch.zeros(4, 8),)


def other():
    return build(seed=1)
'''


def export(module, path, example):
    import torch

    with torch.no_grad():
        torch.onnx.export(module.eval(), example, str(path), dynamo=False, opset_version=17,
                          input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    return str(path)


@pytest.fixture
def factory(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(FACTORY)
    ns = {}
    exec(FACTORY, ns)
    net, example = ns["build"]()
    return f"{path}:build", f"{path}:other", export(net, tmp_path / "net.onnx", example)


def test_spec_against_onnx_uses_the_spec_default_shape(factory):
    spec, other, onnx_path = factory
    result = verify(spec, onnx_path)
    assert result.a_kind == "torch" and result.ok, result
    assert result.max_rel_error <= 1e-6
    assert result.inputs[0]["shape"] == [4, 8]  # "batch" from the factory's example (4, 8)
    code, out, err = run_cli("verify", other, onnx_path)  # other weights: a mismatch
    assert code == 1 and "MISMATCH" in out, err


def test_module_train_flag_is_restored(tmp_path):
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 3), torch.nn.Dropout(0.9)).train()
    path = export(net, tmp_path / "net.onnx", (torch.zeros(2, 8),))
    net.train()
    result = verify(net, path)  # dropout would make a train-mode run differ
    assert result.ok and net.training


# --- CLI and bad input --------------------------------------------------------------------
def test_cli_formats_and_exit_codes(tmp_path):
    a, b = scale(tmp_path, "a", 1), scale(tmp_path, "b", 1 + 1e-6)
    code, out, err = run_cli("verify", a, b)
    assert code == 0, err
    assert f"{a} vs {b}: MATCH (5 random inputs, seed 0, rtol 1e-05, atol 1e-08)" in out
    assert "Max rel err" in out and "max|A-B| / max|A|" in out
    code, out, _ = run_cli("verify", a, b, "--rtol", "1e-7", "--format", "json", "--runs", "2")
    assert code == 1
    d = json.loads(out)
    assert d["ok"] is False and d["runs"] == 2 and d["outputs"][0]["name"] == "Y"
    assert set(d["outputs"][0]) == {"name", "shape", "max_abs_error", "mse", "max_rel_error",
                                    "ref_max_abs", "ok"}
    code, out, _ = run_cli("verify", constants(tmp_path, "c", Y=[1, 2]),
                           constants(tmp_path, "d", Y=[np.nan, 2]), "--format", "json")
    assert code == 1 and json.loads(out)["max_abs_error"] == "inf"  # valid JSON, no Infinity


def _bad(tmp_path, kind):
    good = scale(tmp_path, "good", 1)
    if kind == "missing-b":
        return [good, str(tmp_path / "nope.onnx")], "no such file"
    if kind == "b-not-onnx":
        (tmp_path / "t.onnx").write_text("hello\n")
        return [good, str(tmp_path / "t.onnx")], "cannot load it as an ONNX model"
    if kind == "b-empty":
        (tmp_path / "e.onnx").write_bytes(b"")
        return [good, str(tmp_path / "e.onnx")], "is empty"
    if kind == "input-shapes-differ":
        return [good, scale(tmp_path, "b", 1, (3, 5))], "input X: "
    if kind == "input-dtypes-differ":
        x = helper.make_tensor_value_info("X", TensorProto.DOUBLE, (3, 4))
        y = helper.make_tensor_value_info("Y", TensorProto.DOUBLE, (3, 4))
        b = save(tmp_path, "b", [helper.make_node("Identity", ["X"], ["Y"])], [x], [y])
        return [good, b], "takes 3x4 float32"
    if kind == "input-counts-differ":
        return [good, two_inputs(tmp_path, "b", "XZ")], "has 1 inputs"
    if kind == "output-counts-differ":
        return [constants(tmp_path, "a", P=[1]), constants(tmp_path, "b", P=[1], Q=[2])], \
            "has 1 outputs"
    if kind == "output-shapes-differ":
        return [constants(tmp_path, "a", Y=[1, 2]), constants(tmp_path, "b", Y=[1, 2, 3])], \
            "output Y: "
    if kind == "unknown-spec":
        return ["alexnett", good], "unknown model"
    if kind == "runs-0":
        return [good, good, "--runs", "0"], "--runs must be at least 1"
    if kind == "negative-rtol":
        return [good, good, "--rtol", "-1"], "--rtol must be a number of 0 or more"
    raise AssertionError(kind)


BAD_KINDS = ["missing-b", "b-not-onnx", "b-empty", "input-shapes-differ", "input-dtypes-differ",
             "input-counts-differ", "output-counts-differ", "output-shapes-differ", "unknown-spec",
             "runs-0", "negative-rtol"]


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_bad_input_is_one_line_exit_2(tmp_path, kind):
    argv, expected = _bad(tmp_path, kind)
    code, out, err = run_cli("verify", *argv)
    assert code == 2 and out == "", out
    assert err.count("\n") == 1 and err.startswith("layerscope: error: "), err
    assert expected in err and "Traceback" not in err


def test_api_raises_user_error(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        verify(str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"))
    assert not os.path.exists(tmp_path / "a.onnx")
