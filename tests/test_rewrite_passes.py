"""The rewrite pass registry and protocol (layerscope/rewrite/base.py, rewrite/__init__.py),
and the small passes registered beside tile-linear, checked numerically with onnxruntime."""
from __future__ import annotations

import subprocess
import sys

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from layerscope.core.errors import UserError  # noqa: E402
from layerscope.rewrite import PASSES, get_pass, register_pass  # noqa: E402
from layerscope.rewrite.base import PassInfo, PassResult  # noqa: E402
from layerscope.rewrite.linear import linear_model  # noqa: E402
from tests.helpers import run_cli  # noqa: E402


def test_registry_refuses_a_second_pass_under_a_taken_name():
    with pytest.raises(ValueError, match="already registered"):
        register_pass(PassInfo("tile-linear", "somewhere:else", "a second tile-linear"))
    assert PASSES["tile-linear"].target == "layerscope.rewrite.tile_linear:tile_linear"


def test_unknown_pass_is_a_user_error():
    with pytest.raises(UserError, match="unknown rewrite pass 'fuse-everything'"):
        get_pass("fuse-everything")


@pytest.mark.parametrize("name", sorted(PASSES))
def test_every_pass_follows_the_protocol(name):
    """Returns a PassResult that unpacks as (model, modified), never edits its input, and every
    pass has a subcommand."""
    model = linear_model(2, 130, 100)
    before = model.SerializeToString()
    result = PASSES[name](model)
    assert isinstance(result, PassResult)
    new, modified = result
    assert new is result.model and modified is result.changed is result.modified
    assert model.SerializeToString() == before
    code, _, err = run_cli("rewrite", name, "in.onnx")  # the subcommand exists, wants -o
    assert code == 2 and "-o/--output" in err, err


@pytest.mark.integration
def test_public_tile_linear_works_whichever_import_came_first():
    # Importing the submodule rebinds layerscope.rewrite.tile_linear to the module; the call
    # used to recurse forever.
    code = ("import layerscope.rewrite.tile_linear, layerscope.rewrite as r\n"
            "from layerscope.rewrite.linear import linear_model\n"
            "m = linear_model(2, 130, 100)\n"
            "assert r.tile_linear(m, 64).changed and r.tile_linear(m, 64).nodes_after == 11\n"
            "import layerscope.rewrite as r2\n"
            "assert r2.PassResult.__name__ == 'PassResult'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# --- fold-identity -------------------------------------------------------------------------
from onnx import helper  # noqa: E402

from layerscope.rewrite.fold_identity import fold_identity  # noqa: E402
from tests.onnx_graphs import init, model, save, tensor  # noqa: E402
from tests.test_rewrite import check_equivalent  # noqa: E402


def _node(op, ins, outs, name):
    return helper.make_node(op, ins, outs, name=name)


def _chain():
    """X -> id0 -> A -> Relu -> B -> id1 -> C -> MatMul(W_id) -> D -> id2 -> Y (graph output);
    W -> id3 -> W_id. All four Identities go: id2's input D is renamed Y at its MatMul."""
    nodes = [_node("Identity", ["X"], ["A"], "id0"), _node("Relu", ["A"], ["B"], "relu"),
             _node("Identity", ["B"], ["C"], "id1"), _node("Identity", ["W"], ["W_id"], "id3"),
             _node("MatMul", ["C", "W_id"], ["D"], "mm"), _node("Identity", ["D"], ["Y"], "id2")]
    return model(nodes, [tensor("X", [2, 4])], [tensor("Y", [2, 3])], [init("W", [4, 3])],
                 value_info=[tensor("A", [2, 4]), tensor("D", [2, 3])])


def _passthrough():
    """An input passed straight to an output, and an output passed to a second output: both
    Identities must stay (graph interface names), the Relu's Identity chain goes."""
    nodes = [_node("Identity", ["X"], ["Y1"], "in_to_out"), _node("Relu", ["X"], ["R"], "relu"),
             _node("Identity", ["R"], ["R1"], "a"), _node("Identity", ["R1"], ["Y2"], "b"),
             _node("Identity", ["Y2"], ["Y3"], "out_to_out")]
    return model(nodes, [tensor("X", [3])], [tensor(n, [3]) for n in ("Y1", "Y2", "Y3")])


def _no_identity():
    return model([_node("Relu", ["X"], ["Y"], "relu")], [tensor("X", [3])], [tensor("Y", [3])])


# (id, graph, removed, skipped node names, ops after) - hand-traced from the docstrings above
FOLD_CASES = [
    ("chain-to-output", _chain, ["id0", "id1", "id3", "id2"], [], {"Relu": 1, "MatMul": 1}),
    ("graph-interface-kept", _passthrough, ["a", "b"], ["in_to_out", "out_to_out"],
     {"Identity": 2, "Relu": 1}),
    ("nothing", _no_identity, [], [], {"Relu": 1}),
]


@pytest.mark.parametrize("build,removed,skipped,ops_after", [c[1:] for c in FOLD_CASES],
                         ids=[c[0] for c in FOLD_CASES])
def test_fold_identity(tmp_path, build, removed, skipped, ops_after):
    original = build()
    result = fold_identity(original)
    assert result.replaced == removed and [s[0] for s in result.skipped] == skipped
    assert result.changed == bool(removed) and result.ops_after == ops_after
    assert result.nodes_after == result.nodes_before - len(removed)
    out = result.model
    assert [o.name for o in out.graph.output] == [o.name for o in original.graph.output]
    assert {v.name for v in out.graph.value_info} <= {o for n in out.graph.node for o in n.output}
    check_equivalent(tmp_path, original, out, max_rel=0.0)  # checker + onnxruntime, bit-equal


def test_fold_identity_leaves_values_read_in_subgraphs():
    """Y = If(cond){then: Relu(A)} else {Neg(A)}, A = Identity(X): A is read inside the
    branches, so its Identity stays."""
    then_g = helper.make_graph([_node("Relu", ["A"], ["t"], "t")], "then", [], [tensor("t", [3])])
    else_g = helper.make_graph([_node("Neg", ["A"], ["e"], "e")], "else", [], [tensor("e", [3])])
    nodes = [_node("Identity", ["X"], ["A"], "id"),
             helper.make_node("If", ["cond"], ["Y"], name="if", then_branch=then_g,
                              else_branch=else_g)]
    m = model(nodes, [tensor("X", [3]), tensor("cond", [], onnx.TensorProto.BOOL)],
              [tensor("Y", [3])])
    result = fold_identity(m)
    assert not result.changed and result.skipped == [("id", "its value is read inside a "
                                                               "subgraph")]


def test_cli_fold_identity_with_verify(tmp_path):
    src = save(_chain(), tmp_path, "chain.onnx")
    out = tmp_path / "folded.onnx"
    code, stdout, err = run_cli("rewrite", "fold-identity", src, "-o", str(out), "--verify")
    assert code == 0, err
    assert stdout.splitlines()[0] == "removed 4 node(s): id0, id1, id3, id2"
    assert "nodes: 6 -> 2 (Identity 4 -> 0)" in stdout and out.exists()
