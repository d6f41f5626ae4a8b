"""Views: one per result kind, registered once; renderers draw any registered kind."""
from __future__ import annotations

import json

import pytest

from layerscope.core.results import KINDS
from layerscope.renderers import render
from layerscope.views import VIEWS, View, register, view_for
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
    from rich.text import Text

    from layerscope.views.sections import Cell, DataTable, RowTable

    class Tally:
        kind = "tally"
        counts = {"a": 1, "b": 2}

        def to_dict(self):
            return {"kind": self.kind, "counts": self.counts}

    monkeypatch.setitem(VIEWS, "tally", View(
        heading=lambda r: ("tally", "two counts"),
        terminal=lambda r: Text(", ".join(f"{k}={v}" for k, v in r.counts.items())),
        tables=lambda r: [RowTable("counts", "Counts", [("Name", False), ("Count", True)],
                                   [[Cell(k, k), Cell(str(v), v)] for k, v in r.counts.items()])],
        csv=lambda r: DataTable(["name", "count"], [list(kv) for kv in r.counts.items()])))
    assert render(Tally(), "table") == "a=1, b=2\n"
    assert render(Tally(), "csv") == "name,count\na,1\nb,2\n"
    assert json.loads(render(Tally(), "json"))["counts"] == {"a": 1, "b": 2}
    assert "<td class=\"num\" data-sort=\"2\">2</td>" in render(Tally(), "html")
