"""layerscope graph: nodes, edges and metrics from ONNX and PyTorch, and the drawings."""
from __future__ import annotations

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
    monkeypatch.setattr(graph_out.shutil, "which", lambda _: None)  # grandalf's layout
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
    g = graph(path, nodes="MatMul")
    expected = sum(1 for n in onnx.load(path).graph.node if n.op_type == "MatMul")
    assert expected > 1 and sum(n.type == "MatMul" for n in g.nodes) == expected


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
    (["--nodes", "("], "not a regular expression"),
    (["--metric", "speed"], "unknown metric"),
], ids=["bad-extension", "no-match", "bad-regex", "bad-metric"])
def test_cli_errors_are_one_line(hand, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("graph", hand, *argv)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "g.png").exists()


def test_python_layout_refuses_huge_graphs(hand, monkeypatch):
    monkeypatch.setattr(graph_out, "MAX_PYTHON_LAYOUT_NODES", 3)
    monkeypatch.setattr(graph_out.shutil, "which", lambda _: None)
    from layerscope.core.errors import UserError

    with pytest.raises(UserError, match="--nodes"):
        graph_out.to_svg(graph(hand))
