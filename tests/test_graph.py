"""layerscope graph: nodes, edges and metrics from ONNX and PyTorch, and the drawings."""
from __future__ import annotations

import csv
import io
import os
import xml.etree.ElementTree as ET

import pytest
import torch
import torch.nn as nn

from layerscope.analysis.graph import graph
from layerscope.renderers import graph_out
from tests.helpers import run_cli
from tests.onnx_graphs import init, memory_graph, model, save, single, tensor


@pytest.fixture
def hand(tmp_path):
    return save(memory_graph(), tmp_path, "hand.onnx")


def _edges(g):
    ids = {n.id: n.name for n in g.nodes}
    return sorted((ids[e.source], ids[e.target]) for e in g.edges)


def test_onnx_nodes_edges_and_metrics(hand):
    g = graph(hand)
    # memory_graph: X -> relu -> reshape -> mm -> split -> sigmoid -> D; reshape -> mm2 -> Z.
    # Initializers (shape, W, W2) are data, not nodes.
    assert [n.name for n in g.nodes] == ["X", "relu", "reshape", "mm", "split", "sigmoid",
                                         "mm2", "D", "Z"]
    assert _edges(g) == sorted([("X", "relu"), ("relu", "reshape"), ("reshape", "mm"),
                                ("mm", "split"), ("split", "sigmoid"), ("reshape", "mm2"),
                                ("sigmoid", "D"), ("mm2", "Z")])
    mm = {n.name: n for n in g.nodes}
    # mm: B 2x4 @ W 4x16 -> 2*4*16 = 128 MACs, 256 FLOPs; mm2: 2*4*1 = 8 MACs.
    assert (mm["mm"].metrics["macs"], mm["mm"].metrics["flops"]) == (128, 256)
    assert mm["mm2"].metrics["macs"] == 8
    assert mm["mm"].metrics["params"] == 64


def test_nodes_filter_joins_paths_through_dropped_nodes(hand):
    g = graph(hand, nodes="MatMul")
    assert [n.name for n in g.nodes] == ["X", "mm", "mm2", "D", "Z"]
    assert _edges(g) == sorted([("X", "mm"), ("X", "mm2"), ("mm", "D"), ("mm2", "Z")])
    assert any("left out" in note for note in g.notes)


def test_constant_nodes_hidden_unless_asked(tmp_path):
    from onnx import helper

    nodes = [helper.make_node("Constant", [], ["c"], name="const",
                              value=helper.make_tensor("v", 1, [1, 4], [1.0] * 4)),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    path = save(model(nodes, [tensor("x", [1, 4])], [tensor("y", [1, 4])]), tmp_path)
    assert [n.name for n in graph(path).nodes] == ["x", "add", "y"]
    assert [n.name for n in graph(path, all_nodes=True).nodes] == ["x", "const", "add", "y"]


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))) + x


def test_pytorch_graph_follows_data_flow():
    g = graph(Residual(), (2, 8))
    assert [n.name for n in g.nodes] == ["x", "a", "relu", "b", "add", "output"]
    # The skip connection is an edge from the input straight to the add.
    assert _edges(g) == sorted([("x", "a"), ("a", "relu"), ("relu", "b"), ("b", "add"),
                                ("x", "add"), ("add", "output")])
    a = next(n for n in g.nodes if n.name == "a")
    # Linear 8->8 on 2 rows: 2*8*8 = 128 MACs; params 8*8 + 8 = 72.
    assert (a.type, a.metrics["macs"], a.metrics["params"]) == ("Linear", 128, 72)
    assert any("function call" in note for note in g.notes)


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        y = self.a(x)
        return self.b(y) if y.sum() > 0 else y


def test_untraceable_model_falls_back_to_call_order():
    g = graph(DataDependent(), (1, 4))
    assert [n.name for n in g.nodes][0] == "input" and "a" in [n.name for n in g.nodes]
    assert any("call order" in note for note in g.notes)


def test_renderings(hand, monkeypatch):
    g = graph(hand, metric="macs")
    dot = graph_out.to_dot(g)
    assert dot.startswith('digraph "hand.onnx"') and dot.count(" -> ") == len(g.edges)
    # mm has the largest MACs: the full red, 255 - 175 = 0x50 in green and blue.
    assert 'fillcolor="#ff5050"' in dot
    monkeypatch.setattr(graph_out.shutil, "which", lambda _: None)  # igraph's layout
    svg = graph_out.to_svg(g)
    root = ET.fromstring(svg)
    groups = [e for e in root.iter("{http://www.w3.org/2000/svg}g")
              if e.get("class") == "ls-node"]
    assert len(groups) == len(g.nodes)
    assert len(list(root.iter("{http://www.w3.org/2000/svg}polyline"))) == len(g.edges)
    page = graph_out.to_html(g)
    assert "<svg" in page and "<script" in page
    # Self-contained: no address but the SVG namespace.
    assert page.count("http") == page.count("http://www.w3.org/2000/svg")


def test_graph_after_a_rewrite(tmp_path):
    import onnx

    from layerscope.rewrite.tile_linear import tile_linear

    m = single("Gemm", [tensor("a", [1, 8]), "w"], [1, 8], initializers=[init("w", [8, 8])])
    tiled = tile_linear(m, 4).model
    path = save(tiled, tmp_path, "tiled.onnx")
    g = graph(path, nodes="MatMul", collapse=False)
    expected = sum(1 for n in onnx.load(path).graph.node if n.op_type == "MatMul")
    assert expected > 1 and sum(n.type == "MatMul" for n in g.nodes) == expected
    # collapsed (the default): the 4 tiles are one node with count 4
    assert [(n.type, n.count) for n in graph(path, nodes="MatMul").nodes if n.kind == "op"] == [
        ("MatMul", expected)]


@pytest.mark.parametrize("ext", [".svg", ".html", ".dot"])
def test_cli_writes_each_format(hand, tmp_path, ext, monkeypatch):
    monkeypatch.setattr(graph_out.shutil, "which", lambda _: None)
    out = tmp_path / f"g{ext}"
    code, _, err = run_cli("graph", hand, "-o", str(out))
    assert code == 0 and "9 nodes" in err
    assert out.read_text().strip()


@pytest.mark.parametrize("argv, message", [
    (["-o", "g.png"], ".svg, .html or .dot"),
    (["--nodes", "Conv"], "matches no node"),
    (["--nodes", "("], "not a valid regular expression"),
    (["--metric", "speed"], "unknown --metric"),
], ids=["bad-extension", "no-match", "bad-regex", "bad-metric"])
def test_cli_errors_are_one_line(hand, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("graph", hand, *argv)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "g.png").exists()


# ---- repeated parallel nodes are collapsed into one node with a count ----------------------
def _parallel(n_tiles, widths=None, tail=None):
    """x (1x8) -> n_tiles MatMuls by 8xW weights (optionally each followed by ``tail``, e.g.
    Relu) -> Concat -> y. Every MatMul: 1*8*W MACs."""
    from onnx import helper

    widths = widths or [4] * n_tiles
    nodes, parts, inits = [], [], []
    for i, w in enumerate(widths):
        inits.append(init(f"w{i}", [8, w]))
        nodes.append(helper.make_node("MatMul", ["x", f"w{i}"], [f"m{i}"], name=f"tile{i}/mm"))
        last = f"m{i}"
        if tail:
            nodes.append(helper.make_node(tail, [last], [f"t{i}"], name=f"tile{i}/{tail}"))
            last = f"t{i}"
        parts.append(last)
    nodes.append(helper.make_node("Concat", parts, ["y"], name="cat", axis=1))
    return model(nodes, [tensor("x", [1, 8])], [tensor("y", [1, sum(widths)])], inits)


def _ops(g):
    return [(n.type, n.count) for n in g.nodes if n.kind == "op"]


# (id, model, expected (type, count) of the drawn op nodes, expected drawn edges)
COLLAPSE_CASES = [
    ("16-identical-tiles", lambda: _parallel(16), [("MatMul", 16), ("Concat", 1)], 3),
    ("tiles-of-two-nodes", lambda: _parallel(5, tail="Relu"),
     [("MatMul", 5), ("Relu", 5), ("Concat", 1)], 4),
    # a ragged last tile has another output shape: a group of 3 and a single node
    ("ragged-last-tile", lambda: _parallel(4, widths=[4, 4, 4, 2]),
     [("MatMul", 3), ("MatMul", 1), ("Concat", 1)], 5),
    ("no-repetition", lambda: _parallel(2, widths=[4, 3]),
     [("MatMul", 1), ("MatMul", 1), ("Concat", 1)], 5),
    # tile-linear of a 1x8 @ 8x8 Gemm by 4: Split -> 2x2 MatMuls -> 2 Sums -> Concat
    ("tile-linear", lambda: _tiled(), [("Split", 1), ("MatMul", 4), ("Sum", 2), ("Concat", 1)],
     5),
]


def _tiled(k=8, n=8, tile=4):
    from layerscope.rewrite.tile_linear import tile_linear

    m = single("Gemm", [tensor("a", [1, k]), "w"], [1, n], initializers=[init("w", [k, n])])
    return tile_linear(m, tile).model


@pytest.mark.parametrize("build,expected,edges", [c[1:] for c in COLLAPSE_CASES],
                         ids=[c[0] for c in COLLAPSE_CASES])
def test_repeated_parallel_nodes_collapse_to_one_with_a_count(tmp_path, build, expected, edges):
    path = save(build(), tmp_path)
    full, drawn = graph(path, metric="macs", collapse=False), graph(path, metric="macs")
    assert _ops(drawn) == expected and len(drawn.edges) == edges
    # invariants: every op node is in exactly one drawn node; figures are summed, not lost
    assert sum(n.count for n in drawn.nodes if n.kind == "op") == sum(
        1 for n in full.nodes if n.kind == "op")
    for m in ("macs", "flops", "params", "bytes_read"):
        assert sum(n.metrics.get(m, 0) for n in drawn.nodes) == sum(
            n.metrics.get(m, 0) for n in full.nodes)
    for n in drawn.nodes:
        assert n.members == [] if n.count == 1 else len(n.members) == n.count
    if all(count == 1 for _, count in expected):
        assert drawn is full or [n.id for n in drawn.nodes] == [n.id for n in full.nodes]
        assert not any("drawn as" in note for note in drawn.notes)


def test_collapsed_group_figures_by_hand(tmp_path):
    g = graph(save(_parallel(16), tmp_path), metric="macs")
    mm = next(n for n in g.nodes if n.type == "MatMul")
    # each tile: 1x8 @ 8x4 = 32 MACs, 32 weights; 16 tiles
    assert (mm.count, mm.metrics["macs"], mm.metrics["params"]) == (16, 16 * 32, 16 * 32)
    assert [m.name for m in mm.members] == [f"tile{i}/mm" for i in range(16)]
    assert mm.name == "tile…" and mm.shape == "1x4"
    assert any("17 operation nodes drawn as 2" in note for note in g.notes)


def test_sequential_repeats_are_not_collapsed(tmp_path):
    from onnx import helper

    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"r{i}") for i in range(3)]
    path = save(model(nodes, [tensor("t0", [1, 4])], [tensor("t3", [1, 4])]), tmp_path)
    assert _ops(graph(path)) == [("Relu", 1)] * 3


def test_collapsed_graph_renders_the_count_and_a_member_list(tmp_path, monkeypatch):
    monkeypatch.setattr(graph_out.shutil, "which", lambda _: None)
    g = graph(save(_parallel(16), tmp_path), metric="macs")
    svg = graph_out.to_svg(g)
    assert "MatMul ×16" in svg
    page = graph_out.to_html(g)
    index = next(i for i, n in enumerate(g.nodes) if n.count == 16)
    # a click on the box (id ls-node-I) opens the list (id ls-members-I) with every member
    assert f'id="ls-node-{index}"' in page and f'<details id="ls-members-{index}">' in page
    assert all(f"<td>tile{i}/mm</td>" in page for i in range(16))
    assert 'id="ls-node-' in graph_out.to_dot(g)  # Graphviz's SVG keeps the same ids
    code, out, err = run_cli("graph", str(tmp_path / "m.onnx"), "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["type"], r["count"]) for r in rows if r["kind"] == "op"] == [("MatMul", "16"),
                                                                          ("Concat", "1")]


@pytest.mark.integration
def test_fifteen_thousand_nodes_draw_without_graphviz(tmp_path, monkeypatch):
    """tile-linear of a 1x120 @ 120x125 Gemm by 1: 15,000 MatMuls, 125 Sums, a Split and a
    Concat; drawn whole (igraph's layout) and collapsed, as SVG and HTML, with no `dot`."""
    from layerscope.analysis.graph_collapse import collapse

    monkeypatch.setattr(graph_out.shutil, "which", lambda _: None)
    full = graph(save(_tiled(120, 125, 1), tmp_path), collapse=False)
    assert len(full.nodes) == 15000 + 125 + 2 + 2
    svg = graph_out.to_svg(full)
    assert svg.count('class="ls-node"') == len(full.nodes)
    drawn = collapse(full)
    assert _ops(drawn) == [("Split", 1), ("MatMul", 15000), ("Sum", 125), ("Concat", 1)]
    root = ET.fromstring(graph_out.to_svg(drawn))
    assert sum(1 for e in root.iter("{http://www.w3.org/2000/svg}g")
               if e.get("class") == "ls-node") == 6
    page = graph_out.to_html(drawn)
    assert "15127 operation nodes drawn as 4" in page
    assert page.count("<tr><td>") == 15000 + 125


@pytest.mark.integration
def test_a_6000_node_chain_is_drawn(tmp_path, monkeypatch):
    """A 6,002-node graph (6,000 nodes, the input and the output) is drawn, not refused: since
    the layout is igraph's compiled Sugiyama (no recursion, seconds for thousands of nodes),
    the limit of the Python layout is MAX_PYTHON_LAYOUT_NODES boxes (50,000), and the
    1,500-node refusal of the first release is gone (docs/onnx.md, "Graph pictures")."""
    from onnx import helper

    assert graph_out.MAX_PYTHON_LAYOUT_NODES == 50_000
    monkeypatch.setattr(graph_out.shutil, "which", lambda _: None)
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"r{i}") for i in range(6000)]
    path = save(model(nodes, [tensor("t0", [1, 4])], [tensor("t6000", [1, 4])]), tmp_path)
    g = graph(path)
    assert len(g.nodes) == 6002
    lay = graph_out.layout(g)
    ys = [lay["boxes"][n.id][1] for n in g.nodes]
    assert ys == sorted(ys) and len(set(ys)) == 6002  # one layer per node, top to bottom
    out = tmp_path / "chain.html"
    code, _, err = run_cli("graph", path, "-o", str(out))
    assert code == 0, err
    assert out.read_text().count('class="ls-node"') == 6002


def test_python_layout_refuses_huge_graphs(hand, monkeypatch):
    monkeypatch.setattr(graph_out, "MAX_PYTHON_LAYOUT_NODES", 3)
    monkeypatch.setattr(graph_out.shutil, "which", lambda _: None)
    from layerscope.core.errors import UserError

    with pytest.raises(UserError, match="--nodes"):
        graph_out.to_svg(graph(hand))
    # from the command line: one line, exit 2, nothing written
    out = os.path.join(os.path.dirname(hand), "g.svg")
    code, _, err = run_cli("graph", hand, "-o", out)
    assert code == 2 and err.count("\n") == 1 and "nodes is too many to draw" in err, err
    assert not os.path.exists(out)


def test_branches_that_differ_in_work_are_not_drawn_as_copies(tmp_path):
    """Inception-like branches: a 1x1 and a 3x3 (padded) convolution of the same input, both
    1x4x8x8, into one Concat: same type and output shape, different weights and MACs."""
    from onnx import helper

    def convs(kernels):
        nodes = [helper.make_node("Conv", ["x", f"w{i}"], [f"o{i}"], name=f"conv{i}",
                                  pads=[k // 2] * 4) for i, k in enumerate(kernels)]
        nodes.append(helper.make_node("Concat", ["o0", "o1"], ["y"], name="cat", axis=1))
        return model(nodes, [tensor("x", [1, 3, 8, 8])], [tensor("y", [1, 8, 8, 8])],
                     [init(f"w{i}", [4, 3, k, k]) for i, k in enumerate(kernels)])

    assert _ops(graph(save(convs([1, 3]), tmp_path, "a.onnx"))) == [
        ("Conv", 1), ("Conv", 1), ("Concat", 1)]
    assert _ops(graph(save(convs([3, 3]), tmp_path, "b.onnx"))) == [("Conv", 2), ("Concat", 1)]
