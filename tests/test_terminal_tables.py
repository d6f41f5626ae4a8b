"""The terminal draws the row tables the HTML report and the notebook draw (one declaration per
table): the same columns, and a terminal too narrow for a table leaves out columns by their
declared priority, never by a second table."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from layerscope.renderers.terminal import FittedTable, sections, to_text
from layerscope.views import VIEWS, View, view_for
from layerscope.views.sections import Cell, Column, Lines, RowTable
from tests.sample_results import ALL, analyze_report, profile_report


def _header(text: str) -> list[str]:
    """The column labels of the first table drawn in ``text``."""
    line = next(ln for ln in text.splitlines() if ln.startswith("┃"))
    return [label.strip() for label in line.strip("┃").split("┃")]


def _training_report():
    from layerscope import analyze

    return analyze("mnist-cnn", mode="training", optimizer="momentum")


@pytest.mark.parametrize("make, table", [
    (analyze_report, 0), (_training_report, 0), (profile_report, 0), (profile_report, 1),
], ids=["analyze", "analyze-training", "profile", "profile-by-type"])
def test_a_wide_terminal_shows_the_html_tables_columns(make, table):
    """The per-layer table lacked Calls and Bwd MACs in the terminal while the HTML had them."""
    result = make()
    html = view_for(result).tables(result)[table]
    drawn = [s for s in sections(result) if isinstance(s, RowTable)][table]
    assert [c.label for c in drawn.columns] == [c.label for c in html.columns]
    assert [[c.text for c in row] for row in drawn.rows] == [[c.text for c in row]
                                                             for row in html.rows]
    if table == 0:
        assert _header(to_text(result, width=400)) == [c.label for c in html.columns]


def test_the_training_table_has_calls_and_backward_macs():
    text = to_text(_training_report(), width=400)
    assert {"Calls", "Bwd MACs", "Bwd FLOPs"} <= set(_header(text))
    total = next(ln for ln in text.splitlines() if ln.startswith("│Total"))
    assert "23.79M" in total  # the backward MACs total: 2 x 11.99M less the first conv's input


def _letters(priorities: list[int]) -> RowTable:
    """Columns "aaaa", "bbbb", ... with cells as wide as their label: at pad_edge=False a table
    of n such columns is 4n characters + 2n - 2 of padding + n + 1 rules = 7n - 1 wide."""
    names = [chr(ord("a") + i) * 4 for i in range(len(priorities))]
    return RowTable("t", "", [Column(n, priority=p) for n, p in zip(names, priorities)],
                    [[Cell(n) for n in names]])


@pytest.mark.parametrize("width, shown", [
    (34, ["aaaa", "bbbb", "cccc", "dddd", "eeee"]),  # 7 x 5 - 1: everything fits
    (33, ["aaaa", "bbbb", "cccc", "eeee"]),  # level 2 first, its rightmost column first
    (27, ["aaaa", "bbbb", "cccc", "eeee"]),
    (26, ["aaaa", "bbbb", "eeee"]),  # then the other level-2 column
    (19, ["aaaa", "bbbb"]),  # then level 1, right to left
    (12, ["aaaa"]),
    (5, ["aaaa"]),  # level 0 is never left out (rich squeezes it instead)
])
def test_columns_are_left_out_by_priority(monkeypatch, width, shown):
    table = _letters([0, 1, 2, 2, 1])
    monkeypatch.setitem(VIEWS, "letters", View(heading=lambda r: ("letters", ""),
                                               terminal=lambda r: [table]))

    class Letters:
        kind = "letters"

    text = to_text(Letters(), width=width)
    got = _header(text)
    if width >= 12:
        assert got == shown
    assert len(got) == len(shown)
    left = [n for n in ("aaaa", "bbbb", "cccc", "dddd", "eeee") if n not in shown]
    if left and width >= 12:
        assert f"Left out at this width: {', '.join(left)}" in " ".join(text.split())
    else:
        assert "Left out" not in text


def test_columns_80_drops_the_declared_columns(monkeypatch):
    """A terminal of 80 columns (COLUMNS=80, as rich reads it) keeps Layer, Type, Output shape,
    Params and MACs of the per-layer table and names the others under it."""
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    Console(file=out, color_system=None).print(analyze_report())
    text = out.getvalue()
    assert _header(text) == ["Layer", "Type", "Output shape", "Params", "MACs"]
    assert max(len(line) for line in text.splitlines()) <= 80
    assert ("Left out at this width: Calls, Input shape, FLOPs, Read B, Written B, Act. B, "
            "FLOP/B") in " ".join(text.split())


def test_a_narrow_profile_keeps_the_hot_rows_and_the_median():
    text = to_text(profile_report(), width=80)
    assert {"Layer", "Type", "Median ms", "Share"} <= set(_header(text))
    assert "Input shape" not in _header(text)  # priority 3: the first to go
    assert max(len(line) for line in text.splitlines()) <= 80


def test_terminal_hints_indent_cut_and_empty_optional_columns(monkeypatch):
    table = RowTable("t", "T", [Column("Name", max_chars=6), Column("N", True),
                                Column("Note", optional=True)],
                     [[Cell("root", indent=0), Cell("1"), Cell("")],
                      [Cell("child-with-a-long-name", indent=1), Cell("22"), Cell("")]],
                     foot=["Total", "23", ""])
    monkeypatch.setitem(VIEWS, "hints", View(heading=lambda r: ("hints", ""),
                                             terminal=lambda r: [table, Lines(["done"])]))

    class Hints:
        kind = "hints"

    text = to_text(Hints(), width=60)
    assert "Note" not in text  # every cell empty
    assert "│root     │  1│" in text and "│  child… │ 22│" in text  # cut to 6, indented
    assert "│Total    │ 23│" in text and text.rstrip().endswith("done")


def test_a_view_without_a_terminal_layout_draws_its_sections(monkeypatch):
    """Heading, warnings, the row tables, then the key figures: what the HTML report shows."""
    table = RowTable("counts", "Counts", [("Name", False), ("Count", True)],
                     [[Cell("a"), Cell("1")], [Cell("b"), Cell("2")]])
    monkeypatch.setitem(VIEWS, "plain", View(
        heading=lambda r: ("plain — counts", "two counts"), tables=lambda r: [table],
        facts=lambda r: [("Total", "3")], warnings=lambda r: ["noisy"]))

    class Plain:
        kind = "plain"

    text = to_text(Plain(), width=60)
    lines = text.splitlines()
    assert lines[:3] == ["plain — counts", "two counts", "Warning: noisy"]
    assert "Counts" in lines[3] and lines[-1] == "Total: 3"
    assert any(ln.startswith("│b    │     2│") for ln in lines), text


@pytest.mark.parametrize("kind", sorted(ALL))
def test_every_sample_fits_80_columns(kind):
    """No table is cropped at 80 columns: what does not fit is left out by priority."""
    text = to_text(ALL[kind](), width=80)
    assert text.strip() and max(len(line) for line in text.splitlines()) <= 80


@pytest.mark.parametrize("make", [analyze_report, _training_report, profile_report],
                         ids=["analyze", "analyze-training", "profile"])
def test_a_table_is_left_whole_at_exactly_its_width(make):
    """The width a table is drawn at when nothing is left out is the width the fit needs: one
    character less leaves a column out."""
    result = make()
    wide = to_text(result, width=400)
    width = max(len(line) for line in wide.splitlines() if line.startswith("┃"))
    assert "Left out" not in to_text(result, width=width)
    assert "Left out" in to_text(result, width=width - 1)


@pytest.mark.parametrize("width", [120, 140, 160])
def test_numbers_are_never_cut_when_only_long_headers_overflow(width):
    """A per-rank table of two ranks printed at 160 characters cut its numbers ("0.…" for
    0.13): columns kept to one line could not wrap their long labels ("Exposed communication"),
    so the terminal shrank them below their numbers. A numeric column's label wraps onto more
    lines; its numbers stay whole."""
    labels = ["Rank", "Step ms", "Data loading", "Host-to-device", "Forward", "Loss",
              "Backward (compute)", "Exposed communication", "Optimizer", "Wait (barrier)",
              "Other", "Communication (overlaps)"]
    numbers = ["0", "39.04", "1.82", "0.01", "13.71", "0.13", "9.53", "7.34", "0.89", "5.61",
               "0.00", "7.34"]
    # every label's longest word and every number fit at these widths (at 90 they do not, and
    # the terminal has to cut something)
    table = RowTable("ranks", "", [Column(label, numeric=True) for label in labels],
                     [[Cell(n) for n in numbers]])
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(FittedTable(table))
    row = next(ln for ln in buf.getvalue().splitlines() if ln.startswith("│"))
    assert [c.strip() for c in row.strip("│").split("│")] == numbers
