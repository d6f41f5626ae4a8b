"""Bad ONNX input: one line on stderr naming the problem, exit code 2, no traceback."""
import os
import random

import pytest
from onnx import helper

from tests.helpers import run_cli
from tests.onnx_graphs import external_tensor, init, memory_graph, model, save, single, tensor


def _memory_model(tmp_path) -> str:
    return save(memory_graph(), tmp_path)


def _truncated(tmp_path):
    path = _memory_model(tmp_path)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    return ["analyze", path]


def _random_bytes(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(random.Random(0).randbytes(512))
    return ["analyze", str(path)]


def _empty(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"")
    return ["analyze", str(path)]


def _directory(tmp_path):
    path = tmp_path / "m.onnx"
    path.mkdir()
    return ["analyze", str(path)]


def _external(tmp_path, write_bytes: int | None):
    """A MatMul whose 4x2 float weight (32 B) lives in weights.bin."""
    w = external_tensor("w", [4, 2], "weights.bin")
    m = single("MatMul", [tensor("x", [1, 4]), "w"], [1, 2], [w])
    if write_bytes is not None:
        (tmp_path / "weights.bin").write_bytes(b"\0" * write_bytes)
    return ["analyze", save(m, tmp_path)]


def _undeclared_domain(tmp_path):
    node = helper.make_node("Mystery", ["x"], ["y"], name="odd", domain="acme")
    m = model([node], [tensor("x", [2])], [tensor("y", [2])])  # no opset import for 'acme'
    return ["analyze", save(m, tmp_path)]


def _symbolic(tmp_path, *extra):
    m = single("Relu", [tensor("x", ["batch", 8])], ["batch", 8])
    return ["analyze", save(m, tmp_path), *extra]


def _matmul(tmp_path, *extra):
    m = single("MatMul", [tensor("x", [1, 4]), "w"], [1, 2], [init("w", [4, 2])])
    return ["analyze", save(m, tmp_path), *extra]


def _cycle(tmp_path):
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
             helper.make_node("Relu", ["a"], ["b"], name="n2")]
    m = model(nodes, [tensor("x", [2])], [tensor("b", [2])])
    return ["analyze", save(m, tmp_path)]


CASES = [
    ("truncated", _truncated, "is not a readable ONNX model"),
    ("random-bytes", _random_bytes, "not a readable ONNX model"),
    ("empty", _empty, "is empty"),
    ("directory", _directory, "is a directory"),
    ("missing-file", lambda p: ["analyze", str(p / "nope.onnx")], "no such file"),
    ("missing-external-data", lambda p: _external(p, None),
     "external data file 'weights.bin' of initializer 'w' is missing"),
    ("short-external-data", lambda p: _external(p, 8), "is shorter than initializer 'w' needs"),
    ("undeclared-domain", _undeclared_domain,
     "node 'odd' (Mystery) is in domain 'acme', which the model does not import"),
    ("unbound-symbolic-dim", _symbolic,
     "input 'x' has symbolic dimension 'batch' (shape batchx8); bind it with --input x=1x8"),
    ("unknown-input-name", lambda p: _symbolic(p, "--input", "y=1x8"),
     "has no input 'y'; its inputs are x"),
    ("wrong-rank", lambda p: _symbolic(p, "--input", "x=1x8x1"), "input 'x' has rank 2"),
    ("wrong-dtype", lambda p: _symbolic(p, "--input", "x=1x8:int64"), "is float32 in the model"),
    ("malformed-named-input", lambda p: _symbolic(p, "--input", "x=1xq"), "malformed --input"),
    ("empty-name", lambda p: _symbolic(p, "--input", "=1x8"), "the name before '=' is empty"),
    ("shape-inference-fails", lambda p: _matmul(p, "--input", "x=1x5"),
     "shape inference failed for inputs x=1x5"),
    ("cycle", _cycle, "m.onnx"),
    ("depth-on-onnx", lambda p: _matmul(p, "--depth", "1"), "--depth needs a module hierarchy"),
    ("training-on-onnx", lambda p: _matmul(p, "--mode", "training"), "inference only"),
    ("dtype-on-onnx", lambda p: _matmul(p, "--dtype", "float16"), "--dtype does not apply"),
    ("functions-on-onnx", lambda p: _matmul(p, "--functions"),
     "--functions splits a PyTorch module's rows by torch function; ONNX rows are nodes already"),
    # NAME=SHAPE is a keyword argument for a PyTorch model; resnet20's forward has no 'image'
    ("unknown-keyword-for-pytorch", lambda p: ["analyze", "resnet20", "--input", "image=1x3x32x32"],
     "rejected input image=1x3x32x32: TypeError"),
    ("onnx-to-ops", lambda p: ["ops", _matmul(p)[1]], "this command needs a PyTorch model"),
    ("export-extension", lambda p: ["export", "mnist-cnn", "-o", str(p / "m.txt")],
     "give a name ending in .onnx"),
    ("export-unknown-model", lambda p: ["export", "resnt50", "-o", str(p / "m.onnx")],
     "Did you mean: resnet50"),
    ("export-missing-dir", lambda p: ["export", "mnist-cnn", "-o", str(p / "no" / "m.onnx")],
     "no such directory"),
]


@pytest.mark.parametrize("make,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_onnx_input_is_one_line(tmp_path, make, expected):
    argv = make(tmp_path)
    before = set(os.listdir(tmp_path))
    code, out, err = run_cli(*argv)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("layerscope: error: "), err
    assert expected in err, err
    assert "Traceback" not in err
    assert set(os.listdir(tmp_path)) == before  # nothing half-written


# (command, its words with FILE the bad file, GOOD a readable model): every command that reads
# an ONNX file checks it first with one function, in the same words
READS_ONNX = [
    ("analyze", ["analyze", "FILE"]),
    ("compare", ["compare", "GOOD", "FILE"]),
    ("rewrite", ["rewrite", "tile-linear", "FILE", "-o", "OUT"]),
    ("verify", ["verify", "GOOD", "FILE"]),
]
# (problem, how the file is made, the line that names it)
NOT_A_FILE = [
    ("empty", lambda p: p.write_bytes(b""),
     "is empty: expected an ONNX model (export one with 'layerscope export MODEL -o "
     "model.onnx')"),
    ("directory", lambda p: p.mkdir(), "is a directory, not an ONNX model file"),
]


@pytest.mark.parametrize("make,expected", [c[1:] for c in NOT_A_FILE],
                         ids=[c[0] for c in NOT_A_FILE])
@pytest.mark.parametrize("words", [c[1] for c in READS_ONNX], ids=[c[0] for c in READS_ONNX])
def test_every_command_reading_onnx_names_a_bad_file_alike(tmp_path, words, make, expected):
    good = save(single("Relu", [tensor("x", [1, 4])], [1, 4]), tmp_path)
    bad = tmp_path / "bad.onnx"
    make(bad)
    swap = {"FILE": str(bad), "GOOD": good, "OUT": str(tmp_path / "out.onnx")}
    code, out, err = run_cli(*[swap.get(w, w) for w in words])
    assert code == 2 and out == "", out
    assert err == f"layerscope: error: {bad} {expected}\n", err
