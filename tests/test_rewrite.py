"""tile_linear: node counts derived by hand, numerics against the untiled graph (onnxruntime),
graph hygiene (checker, unique names, order, value_info, IR version), the CLI, and the
acceptance check on torchvision's AlexNet."""
import json
import os
import time
from collections import Counter

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from layerscope.core.errors import UserError  # noqa: E402
from layerscope.rewrite.linear import linear_model  # noqa: E402
from layerscope.rewrite.tile_linear import tile_linear, tile_sizes  # noqa: E402
from layerscope.rewrite.verify import verify  # noqa: E402
from tests.doc_examples import docs_root  # noqa: E402
from tests.helpers import run_cli  # noqa: E402

F32 = TensorProto.FLOAT


def make(nodes, inputs, outputs, inits=(), opset=17, ir_version=8, value_info=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits),
                              value_info=list(value_info))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def ops(model) -> dict:
    return dict(Counter(n.op_type for n in model.graph.node))


def check_equivalent(tmp_path, original, tiled, max_rel=1e-5):
    onnx.checker.check_model(tiled, full_check=True)
    assert tiled.ir_version <= 13
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(original, str(a))
    onnx.save(tiled, str(b))
    result = verify(str(a), str(b), runs=3)
    assert result.ok and result.max_rel_error <= max_rel, result
    return result


def check_hygiene(model):
    """Unique node and value names, every input defined before use (topological order)."""
    g = model.graph
    node_names = [n.name for n in g.node]
    assert len(node_names) == len(set(node_names)) and all(node_names)
    produced = [o for n in g.node for o in n.output]
    assert len(produced) == len(set(produced))
    defined = {i.name for i in g.input} | {t.name for t in g.initializer}
    assert not (set(produced) & defined)
    for n in g.node:
        assert all(i in defined for i in n.input if i), n.name
        defined.update(n.output)


# --- a Linear (MatMul + Add) of M x K @ K x N: counts derived by hand ---------------------
# kt = ceil(K/T) K-tiles, nt = ceil(N/T) N-tiles: one Split of A when kt > 1; kt*nt MatMuls;
# one Sum per N-tile when kt > 1; one Concat when nt > 1. The model's own Add stays.
LINEAR_CASES = [
    # id, M, K, N, T, bias, expected op counts after
    ("k130-n100-t64", 3, 130, 100, 64, True,  # kt 3 (64,64,2), nt 2 (64,36)
     {"Split": 1, "MatMul": 6, "Sum": 2, "Concat": 1, "Add": 1}),
    ("k128-n128-t64-exact", 2, 128, 128, 64, True,  # kt 2, nt 2
     {"Split": 1, "MatMul": 4, "Sum": 2, "Concat": 1, "Add": 1}),
    ("k200-n64-t64-k-only", 4, 200, 64, 64, True,  # kt 4 (64,64,64,8), nt 1
     {"Split": 1, "MatMul": 4, "Sum": 1, "Add": 1}),
    ("k32-n1000-t64-n-only", 1, 32, 1000, 64, True,  # kt 1, nt 16 (15 x 64 + 40)
     {"MatMul": 16, "Concat": 1, "Add": 1}),
    ("k3-n2-t1-no-bias", 2, 3, 2, 1, False,  # kt 3, nt 2, no Add
     {"Split": 1, "MatMul": 6, "Sum": 2, "Concat": 1}),
    ("k4096-n1000-t64-alexnet-fc8", 1, 4096, 1000, 64, True,  # kt 64, nt 16
     {"Split": 1, "MatMul": 1024, "Sum": 16, "Concat": 1, "Add": 1}),
]


@pytest.mark.parametrize("m,k,n,tile,bias,expected", [c[1:] for c in LINEAR_CASES],
                         ids=[c[0] for c in LINEAR_CASES])
def test_linear_node_counts_and_numerics(tmp_path, m, k, n, tile, bias, expected):
    model = linear_model(m, k, n, bias=bias)
    result = tile_linear(model, tile)
    assert result.changed and result.replaced == ["MatMul"]
    assert ops(result.model) == expected
    assert result.nodes_before == (2 if bias else 1)
    assert result.nodes_after == sum(expected.values())
    assert result.ops_after == dict(sorted(expected.items()))
    # weight tiles: every (K-tile, N-tile) block, ragged at the ends; the old weight is gone
    tiles = Counter(tuple(t.dims) for t in result.model.graph.initializer if "/W_k" in t.name)
    ks, ns = tile_sizes(k, tile), tile_sizes(n, tile)
    assert tiles == Counter((a, b) for a in ks for b in ns)
    assert "weight" not in {t.name for t in result.model.graph.initializer}
    check_hygiene(result.model)
    check_equivalent(tmp_path, model, result.model)


def test_tile_sizes_are_ragged_at_the_end():
    assert tile_sizes(1000, 64) == [64] * 15 + [40]
    assert tile_sizes(9216, 64) == [64] * 144
    assert tile_sizes(130, 64) == [64, 64, 2]
    assert tile_sizes(5, 8) == [5]


# --- Gemm: transA, transB, alpha, beta, bias shapes, run-time B and C ----------------------
M, K, N, T = 5, 70, 90, 32  # kt 3 (32,32,6), nt 3 (32,32,26): 9 MatMuls, 3 Sums, 1 Concat


def gemm_model(trans_a=0, trans_b=0, alpha=1.0, beta=1.0, c_shape=(N,), b_input=False,
               c_input=False, opset=17):
    a_shape = (K, M) if trans_a else (M, K)
    b_shape = (N, K) if trans_b else (K, N)
    inputs = [helper.make_tensor_value_info("A", F32, a_shape)]
    inits = []
    if b_input:
        inputs.append(helper.make_tensor_value_info("B", F32, b_shape))
    else:
        inits.append(numpy_helper.from_array(rand(b_shape, 1), "B"))
    names = ["A", "B"]
    if c_shape is not None:
        names.append("C")
        if c_input:
            inputs.append(helper.make_tensor_value_info("C", F32, c_shape))
        else:
            inits.append(numpy_helper.from_array(rand(c_shape, 2), "C"))
    node = helper.make_node("Gemm", names, ["Y"], name="gemm", transA=trans_a, transB=trans_b,
                            alpha=alpha, beta=beta)
    relu = helper.make_node("Relu", ["Y"], ["Z"], name="relu")
    return make([node, relu], inputs, [helper.make_tensor_value_info("Z", F32, (M, N))], inits,
                opset=opset, value_info=[helper.make_tensor_value_info("Y", F32, (M, N))])


TILES = {"MatMul": 9, "Sum": 3, "Concat": 1, "Split": 1, "Relu": 1}
GEMM_CASES = [
    # id, gemm_model kwargs, expected op counts after (besides TILES)
    ("plain", {}, {"Add": 1}),
    ("transB", {"trans_b": 1}, {"Add": 1}),  # the weight is pre-transposed: no node
    ("transA", {"trans_a": 1}, {"Add": 1, "Transpose": 1}),
    ("transA-transB", {"trans_a": 1, "trans_b": 1}, {"Add": 1, "Transpose": 1}),
    ("alpha", {"alpha": 0.5}, {"Add": 1, "Mul": 1}),
    ("beta", {"beta": 2.5}, {"Add": 1}),  # constant C is pre-scaled: no node
    ("alpha-beta-transB", {"alpha": -1.5, "beta": 0.25, "trans_b": 1}, {"Add": 1, "Mul": 1}),
    ("beta-0", {"beta": 0.0}, {}),  # C is ignored
    ("no-bias", {"c_shape": None}, {}),
    ("bias-MxN", {"c_shape": (M, N)}, {"Add": 1}),
    ("bias-1xN", {"c_shape": (1, N)}, {"Add": 1}),
    ("bias-Mx1", {"c_shape": (M, 1)}, {"Add": 1}),
    ("bias-input-beta", {"c_input": True, "beta": 3.0}, {"Add": 1, "Mul": 1}),
    # B at run time: Split B's rows into 3, each row block into 3 columns -> 1 + 3 more Splits
    ("B-input", {"b_input": True}, {"Add": 1, "Split": 1 + 1 + 3}),
    ("B-input-transB-alpha", {"b_input": True, "trans_b": 1, "alpha": 2.0},
     {"Add": 1, "Split": 1 + 1 + 3, "Transpose": 1, "Mul": 1}),
    ("opset11-split-attribute", {"opset": 11, "trans_b": 1}, {"Add": 1}),
]


@pytest.mark.parametrize("kwargs,extra", [c[1:] for c in GEMM_CASES],
                         ids=[c[0] for c in GEMM_CASES])
def test_gemm_variants(tmp_path, kwargs, extra):
    model = gemm_model(**kwargs)
    result = tile_linear(model, T)
    assert result.changed and result.replaced == ["gemm"]
    expected = dict(TILES)
    for op, count in extra.items():
        expected[op] = count if op == "Split" else expected.get(op, 0) + count
    assert ops(result.model) == expected
    check_hygiene(result.model)
    # the Gemm's output name, its value_info and its consumer are untouched
    assert result.model.graph.node[-1].input == ["Y"]
    assert [v.name for v in result.model.graph.value_info] == ["Y"]
    if kwargs.get("opset") == 11:
        split = next(n for n in result.model.graph.node if n.op_type == "Split")
        assert len(split.input) == 1 and [a.name for a in split.attribute] == ["axis", "split"]
    check_equivalent(tmp_path, model, result.model)


def test_gemm_constants_replaced_are_removed_and_shared_ones_kept():
    result = tile_linear(gemm_model(beta=2.0), T)
    names = {t.name for t in result.model.graph.initializer}
    assert "B" not in names and "C" not in names  # B tiled, C replaced by beta * C
    assert "gemm/tile/C_beta" in names
    result = tile_linear(gemm_model(), T)
    assert "C" in {t.name for t in result.model.graph.initializer}  # still read by the Add


# --- MatMul with N-D and 1-D inputs, symbolic dims, opsets -------------------------------
def matmul_model(a_shape, k=100, n=70, opset=17):
    w = numpy_helper.from_array(rand((k, n), 3), "W")
    node = helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")
    out_shape = list(a_shape[:-1]) + [n]
    return make([node], [helper.make_tensor_value_info("X", F32, a_shape)],
                [helper.make_tensor_value_info("Y", F32, out_shape)], [w], opset=opset)


MATMUL_CASES = [
    # id, A shape, opset; K=100, N=70, tile 32: kt 4 (32,32,32,4), nt 3 (32,32,6)
    ("2d", (3, 100), 17),
    ("3d-batch", (2, 4, 100), 17),
    ("4d", (2, 3, 5, 100), 17),
    ("1d-vector", (100,), 17),
    ("symbolic-batch", ("batch", 7, 100), 17),
    ("opset9-positive-axes", (2, 4, 100), 9),
]


@pytest.mark.parametrize("a_shape,opset", [c[1:] for c in MATMUL_CASES],
                         ids=[c[0] for c in MATMUL_CASES])
def test_matmul_nd_inputs(tmp_path, a_shape, opset):
    model = matmul_model(a_shape, opset=opset)
    result = tile_linear(model, 32)
    assert ops(result.model) == {"Split": 1, "MatMul": 12, "Sum": 3, "Concat": 1}
    axis = {a.name: a.i for n in result.model.graph.node for a in n.attribute
            if n.op_type in ("Split", "Concat") and a.name == "axis"}
    assert axis["axis"] == (-1 if opset >= 11 else len(a_shape) - 1)
    check_hygiene(result.model)
    res = check_equivalent(tmp_path, model, result.model)
    expected_shape = [1 if isinstance(d, str) else d for d in a_shape]
    assert res.inputs[0]["shape"] == expected_shape


# --- nothing to rewrite, and what is left alone ------------------------------------------
def test_nothing_to_rewrite():
    conv = helper.make_node("Conv", ["X", "W"], ["C"], name="conv")
    mm = helper.make_node("MatMul", ["C", "C"], ["Y"], name="act_matmul")  # two activations
    model = make([conv, mm], [helper.make_tensor_value_info("X", F32, (1, 1, 4, 4))],
                 [helper.make_tensor_value_info("Y", F32, None)],
                 [numpy_helper.from_array(rand((1, 1, 1, 1), 0), "W")])
    before = model.SerializeToString()
    result = tile_linear(model, 2)
    assert not result.changed and result.replaced == [] and result.skipped == []
    assert result.nodes_before == result.nodes_after == 2
    assert result.model.graph == model.graph
    assert model.SerializeToString() == before


LEFT_ALONE = [
    # id, weight dtype, weight shape, reason
    ("fits-one-tile", np.float32, (64, 64), "fits in one 64x64 tile"),
    ("integer-weight", np.int32, (100, 100), "integer MatMul (ONNX Sum is float-only)"),
]


@pytest.mark.parametrize("dtype,shape,reason", [c[1:] for c in LEFT_ALONE],
                         ids=[c[0] for c in LEFT_ALONE])
def test_left_alone_with_a_reason(dtype, shape, reason):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = make([helper.make_node("MatMul", ["X", "W"], ["Y"])],
                 [helper.make_tensor_value_info("X", elem, (1, shape[0]))],
                 [helper.make_tensor_value_info("Y", elem, (1, shape[1]))],
                 [numpy_helper.from_array(np.ones(shape, dtype), "W")])
    result = tile_linear(model, 64)
    assert not result.changed and result.skipped == [("MatMul_0", reason)]


def test_input_model_is_not_modified_and_ir_version_capped():
    model = linear_model(2, 100, 100)
    model.ir_version = 14
    before = model.SerializeToString()
    result = tile_linear(model, 64)
    assert model.SerializeToString() == before
    assert result.model.ir_version == 13


def test_names_stay_unique_when_derived_names_are_taken(tmp_path):
    # a Relu whose output and name are exactly what the pass would name its first pieces
    relu = helper.make_node("Relu", ["X"], ["mm/tile/A_k0"], name="mm/tile/MatMul_k0_n0")
    mm = helper.make_node("MatMul", ["mm/tile/A_k0", "W"], ["Y"], name="mm")
    model = make([relu, mm], [helper.make_tensor_value_info("X", F32, (2, 100))],
                 [helper.make_tensor_value_info("Y", F32, (2, 70))],
                 [numpy_helper.from_array(rand((100, 70), 3), "W")])
    result = tile_linear(model, 32)
    check_hygiene(result.model)
    check_equivalent(tmp_path, model, result.model)


def test_shared_weight_and_metadata():
    w = numpy_helper.from_array(rand((100, 70), 3), "W")
    mm1 = helper.make_node("MatMul", ["X", "W"], ["Y1"], name="mm1")
    helper.set_metadata_props(mm1, {"pkg.torch.onnx.name_scopes": "['', 'fc']"})
    mm2 = helper.make_node("MatMul", ["X", "W"], ["Y2"], name="mm2")
    ident = helper.make_node("Identity", ["W"], ["W_out"], name="keep")
    outs = [helper.make_tensor_value_info(n, F32, s)
            for n, s in (("Y1", (2, 70)), ("Y2", (2, 70)), ("W_out", (100, 70)))]
    model = make([mm1, mm2, ident], [helper.make_tensor_value_info("X", F32, (2, 100))], outs, [w])
    result = tile_linear(model, 32)
    assert result.replaced == ["mm1", "mm2"]
    assert "W" in {t.name for t in result.model.graph.initializer}  # Identity still reads it
    tiled_mm1 = [n for n in result.model.graph.node if n.name.startswith("mm1/")]
    assert tiled_mm1 and all(
        {p.key: p.value for p in n.metadata_props} == {"pkg.torch.onnx.name_scopes": "['', 'fc']"}
        for n in tiled_mm1)
    check_hygiene(result.model)
    onnx.checker.check_model(result.model, full_check=True)


@pytest.mark.parametrize("tile", [0, -3, 1.5, True])
def test_bad_tile(tile):
    with pytest.raises(UserError, match="tile size"):
        tile_linear(linear_model(1, 8, 8), tile)


# --- CLI --------------------------------------------------------------------------------
def test_cli_linear_subgraph_and_tile_linear(tmp_path):
    out = tmp_path / "sub"
    code, stdout, err = run_cli("rewrite", "linear-subgraph", "--m", "3", "--k", "130", "--n",
                                "100", "--tile", "64", "-o", str(out), "--verify")
    assert code == 0, err
    assert sorted(os.listdir(out)) == ["linear.onnx", "linear_tiled.onnx"]
    assert "nodes: 2 -> 11 (Concat 0 -> 1, MatMul 1 -> 6, Split 0 -> 1, Sum 0 -> 2)" in stdout
    assert "MATCH" in stdout
    tiled = onnx.load(str(out / "linear_tiled.onnx"))
    assert ops(tiled) == {"Split": 1, "MatMul": 6, "Sum": 2, "Concat": 1, "Add": 1}
    # the same seed gives the same file
    code, _, _ = run_cli("rewrite", "linear-subgraph", "--m", "3", "--k", "130", "--n", "100",
                         "-o", str(tmp_path / "again"))
    assert (tmp_path / "again" / "linear.onnx").read_bytes() == (out / "linear.onnx").read_bytes()

    code, stdout, err = run_cli("rewrite", "tile-linear", str(out / "linear.onnx"), "-o",
                                str(tmp_path / "t.onnx"), "--tile", "32", "--verify")
    assert code == 0, err
    assert "replaced 1 node(s) with 32x32 tiles: MatMul" in stdout
    assert "MatMul 1 -> 20" in stdout  # kt 5 (32 x 4 + 2), nt 4 (32 x 3 + 4)
    code, _, err = run_cli("rewrite", "linear-subgraph", "--m", "1", "--k", "8", "--n", "8",
                           "--no-bias", "-o", str(tmp_path / "nb"))
    assert code == 0 and ops(onnx.load(str(tmp_path / "nb" / "linear.onnx"))) == {"MatMul": 1}


def test_cli_nothing_to_rewrite_still_writes(tmp_path):
    src = tmp_path / "small.onnx"
    onnx.save(linear_model(2, 8, 8), str(src))
    code, stdout, _ = run_cli("rewrite", "tile-linear", str(src), "-o", str(tmp_path / "o.onnx"))
    assert code == 0 and "nothing to rewrite" in stdout and "left MatMul: fits in one" in stdout
    assert (tmp_path / "o.onnx").exists()


def _bad_file(tmp_path, kind):
    path = tmp_path / "in.onnx"
    if kind == "missing":
        pass
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "directory":
        path.mkdir()
    elif kind == "text":
        path.write_text("this is not a model\n" * 20)
    elif kind == "random-bytes":
        path.write_bytes(np.random.default_rng(0).bytes(512))
    return str(path)


@pytest.mark.parametrize("kind", ["missing", "empty", "directory", "text", "random-bytes"])
def test_cli_bad_input_file(tmp_path, kind):
    src = _bad_file(tmp_path, kind)
    out = tmp_path / "out" / "o.onnx"
    out.parent.mkdir()
    code, stdout, err = run_cli("rewrite", "tile-linear", src, "-o", str(out))
    assert code == 2 and err.count("\n") == 1 and err.startswith("layerscope: error: "), err
    assert "Traceback" not in err and not out.exists() and os.listdir(out.parent) == []


CLI_BAD_ARGS = [
    ("tile-0", ["rewrite", "linear-subgraph", "--m", "1", "--k", "8", "--n", "8", "--tile", "0",
                "-o", "{tmp}/x"], "--tile must be at least 1"),
    ("k-0", ["rewrite", "linear-subgraph", "--m", "1", "--k", "0", "--n", "8", "-o", "{tmp}/x"],
     "--k must be at least 1"),
    ("no-pass", ["rewrite"], "rewrite needs a pass"),
    ("unknown-pass", ["rewrite", "fuse-everything"], "invalid choice"),
    ("missing-output", ["rewrite", "tile-linear", "in.onnx"], "-o/--output"),
    ("verify-in-place", ["rewrite", "tile-linear", "{tmp}/a.onnx", "-o", "{tmp}/a.onnx",
                         "--verify"], "write OUT to another file"),
]


@pytest.mark.parametrize("argv,expected", [c[1:] for c in CLI_BAD_ARGS],
                         ids=[c[0] for c in CLI_BAD_ARGS])
def test_cli_bad_arguments(tmp_path, argv, expected):
    code, _, err = run_cli(*[a.format(tmp=tmp_path) for a in argv])
    assert code == 2 and err.count("\n") == 1 and expected in err, err
    assert not (tmp_path / "x").exists()


# --- acceptance: torchvision AlexNet ------------------------------------------------------
@pytest.fixture(scope="session")
def alexnet_onnx(tmp_path_factory):
    """AlexNet (weights=None, built under torch.manual_seed(0) like the built-in 'alexnet'),
    exported once per session with the legacy exporter: its Linears become Gemm (transB=1)."""
    import torch
    import torchvision

    path = tmp_path_factory.mktemp("alexnet") / "alexnet.onnx"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = torchvision.models.alexnet(weights=None).eval()
    with torch.no_grad():
        torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), str(path), dynamo=False,
                          opset_version=17)
    return path


@pytest.mark.integration
def test_alexnet_tiled_by_64_matches(alexnet_onnx, tmp_path):
    out = tmp_path / "alexnet_tiled.onnx"
    t0 = time.perf_counter()
    code, stdout, err = run_cli("rewrite", "tile-linear", str(alexnet_onnx), "-o", str(out),
                                "--tile", "64")
    rewrite_s = time.perf_counter() - t0
    assert code == 0, err
    assert ("replaced 3 node(s) with 64x64 tiles: /classifier/classifier.1/Gemm, "
            "/classifier/classifier.4/Gemm, /classifier/classifier.6/Gemm") in stdout
    # Hand count. fc6 9216x4096: kt 144, nt 64; fc7 4096x4096: kt 64, nt 64;
    # fc8 4096x1000: kt 64, nt 16 (15 x 64 + 40). MatMuls 9216 + 4096 + 1024 = 14336;
    # Sums 64 + 64 + 16 = 144; 3 Splits, 3 Concats, 3 bias Adds. 20 - 3 + 14,489 = 14,506 nodes.
    assert ("nodes: 20 -> 14506 (Add 0 -> 3, Concat 0 -> 3, Gemm 3 -> 0, MatMul 0 -> 14336, "
            "Split 0 -> 3, Sum 0 -> 144)") in stdout
    tiled = onnx.load(str(out))
    onnx.checker.check_model(tiled)
    assert tiled.ir_version <= 13
    check_hygiene(tiled)

    t0 = time.perf_counter()
    code, stdout, err = run_cli("verify", str(alexnet_onnx), str(out), "--runs", "5",
                                "--format", "json")
    verify_s = time.perf_counter() - t0
    assert code == 0, err
    result = json.loads(stdout)
    assert result["ok"] and result["runs"] == 5
    assert result["max_rel_error"] <= 1e-5 and result["mse"] <= 1e-10
    # the ONNX page quotes these figures; they are float32 rounding of this CPU's kernels
    page = " ".join((docs_root() / "docs/onnx.md").read_text().split())
    e = {k: f"{result[k]:.1e}".replace("e-0", "e-")
         for k in ("max_abs_error", "max_rel_error", "mse")}
    assert (f"max abs error {e['max_abs_error']}, max relative error {e['max_rel_error']}, "
            f"MSE {e['mse']}") in page
    assert result["inputs"][0]["shape"] == [1, 3, 224, 224]
    assert [o["shape"] for o in result["outputs"]] == [[1, 1000]]
    print(f"\nalexnet tile 64: rewrite {rewrite_s:.1f} s, verify {verify_s:.1f} s "
          f"(sessions {result['seconds']['load_a']:.1f} s / {result['seconds']['load_b']:.1f} s);"
          f" max abs {result['max_abs_error']:.3e}, max rel {result['max_rel_error']:.3e}, "
          f"MSE {result['mse']:.3e}")


@pytest.mark.integration
def test_alexnet_spec_matches_its_onnx_export(alexnet_onnx):
    """The built-in 'alexnet' run in PyTorch against the ONNX file (same seed-0 weights)."""
    result = verify("alexnet", str(alexnet_onnx), runs=2)
    assert result.a_kind == "torch" and result.ok and result.max_rel_error <= 1e-5, result


@pytest.mark.parametrize("dtype", [np.float16, np.float64], ids=["float16", "float64"])
def test_other_float_types(tmp_path, dtype):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((100, 70)) * 0.1).astype(dtype), "W")
    c = numpy_helper.from_array(rng.standard_normal(70).astype(dtype), "C")
    node = helper.make_node("Gemm", ["X", "W", "C"], ["Y"], name="g", alpha=0.5, beta=2.0)
    model = make([node], [helper.make_tensor_value_info("X", elem, (3, 100))],
                 [helper.make_tensor_value_info("Y", elem, (3, 70))], [w, c])
    result = tile_linear(model, 32)
    assert {t.data_type for t in result.model.graph.initializer if "/W_k" in t.name} == {elem}
    check_equivalent(tmp_path, model, result.model, max_rel=1e-3 if dtype == np.float16 else 1e-12)
