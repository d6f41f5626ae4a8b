"""Views: one per result kind, registered once; renderers draw any registered kind."""
from __future__ import annotations

import json

import pytest

from layerscope.core.results import KINDS
from layerscope.renderers import graph_out, render
from layerscope.views import VIEWS, View, register, view_for
from tests.helpers import run_cli
from tests.onnx_graphs import memory_graph, save
from tests.sample_results import ALL


def test_every_saved_kind_has_a_view():
    assert set(KINDS) <= set(VIEWS)


def test_a_kind_is_registered_once():
    with pytest.raises(ValueError, match="registered already"):
        register("analyze", VIEWS["analyze"])


def test_an_unknown_kind_says_which_are_known():
    class Odd:
        kind = "odd"

    with pytest.raises(LookupError, match="no view for 'odd' results.*analyze"):
        view_for(Odd())


@pytest.mark.parametrize("kind", sorted(ALL))
def test_every_format_draws_every_sample(kind):
    result = ALL[kind]()
    for fmt in ("table", "json", "csv", "html"):
        assert render(result, fmt, width=150).strip()


def test_a_new_kind_is_one_view_and_one_registration(monkeypatch):
    """What adding a result kind takes: a View and register(); no renderer changes."""
    from layerscope.views.sections import Cell, DataTable, Lines, RowTable

    class Tally:
        kind = "tally"
        counts = {"a": 1, "b": 2}

        def to_dict(self):
            return {"kind": self.kind, "counts": self.counts}

    monkeypatch.setitem(VIEWS, "tally", View(
        heading=lambda r: ("tally", "two counts"),
        terminal=lambda r: [Lines([", ".join(f"{k}={v}" for k, v in r.counts.items())])],
        tables=lambda r: [RowTable("counts", "Counts", [("Name", False), ("Count", True)],
                                   [[Cell(k, k), Cell(str(v), v)] for k, v in r.counts.items()])],
        csv=lambda r: DataTable(["name", "count"], [list(kv) for kv in r.counts.items()])))
    assert render(Tally(), "table") == "a=1, b=2\n"
    assert render(Tally(), "csv") == "name,count\na,1\nb,2\n"
    assert json.loads(render(Tally(), "json"))["counts"] == {"a": 1, "b": 2}
    assert "<td class=\"num\" data-sort=\"2\">2</td>" in render(Tally(), "html")


@pytest.fixture
def hand(tmp_path):
    return save(memory_graph(), tmp_path, "hand.onnx")


def test_graph_is_a_registered_view(hand):
    from layerscope.analysis.graph import graph

    g = graph(hand, metric="macs")
    # mm: (2x4) @ (4x16) -> 2 * 4 * 16 = 128 MACs, the largest node: listed first
    assert render(g, "table", width=160) == graph_out.to_text(g)
    assert graph_out.to_text(g).splitlines()[1].split() == ["128", "mm", "(MatMul)"]
    lines = render(g, "csv").splitlines()
    assert lines[0].startswith("id,name,type,kind,shape,flops,macs")
    assert len(lines) == 1 + len(g.nodes)
    assert view_for(g).tables(g)[0].rows[0][0].text == "mm"


@pytest.mark.parametrize("argv, check", [
    (["--format", "json"], lambda out: json.loads(out)["kind"] == "graph"),
    (["--format", "csv"], lambda out: out.startswith("id,name,type,kind")),
    ([], lambda out: "top by flops" in out),
], ids=["json", "csv", "table"])
def test_graph_cli_lists_nodes_through_render(hand, argv, check):
    code, out, err = run_cli("graph", hand, *argv)
    assert code == 0 and check(out), err


def test_graph_cli_writes_the_node_list_by_extension(hand, tmp_path):
    out = tmp_path / "nodes.json"
    code, _, err = run_cli("graph", hand, "-o", str(out))
    assert code == 0 and json.loads(out.read_text())["kind"] == "graph", err
