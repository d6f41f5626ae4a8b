"""compare (``Comparison``, layerscope.analysis.compare): the header (both sides), the joined
rows that differ (``show_all``: every row) with each side's MACs, parameters and activation
bytes and a few words per explanation, the totals side by side, then every explanation as a
sentence; for the HTML report and the notebook the same as row tables and one chart.
"""
from __future__ import annotations

from dataclasses import replace

from layerscope.core.compare_records import LABELS, ROW_METRICS
from layerscope.core.units import shape_str, si
from layerscope.views.sections import (
    PALETTE,
    Cell,
    Chart,
    Column,
    DataTable,
    Lines,
    Point,
    RowTable,
    Series,
    View,
)


def describe_side(label: str, side: dict) -> str:
    inputs = ", ".join(f"{shape_str([i.get('shape')])}" for i in side.get("inputs") or [])
    parts = [side.get("frontend"), side.get("exporter") and f"{side['exporter']}",
             f"input {inputs}" if inputs else None, f"{side.get('layers')} rows"]
    source = side.get("source") or side.get("model")
    return f"{label}: {source} ({'; '.join(str(p) for p in parts if p)})"


def headline(c) -> str:
    if c.identical:
        verdict = "identical: every row and total is equal"
    else:
        n = len(c.differing_rows())
        verdict = (f"{n} of {len(c.rows)} rows differ; "
                   + (f"{c.unexplained} difference(s) left unexplained" if c.unexplained
                      else "every difference explained"))
    return verdict


def compare_terminal(c, show_all: bool = False) -> list:
    """Both sides, the verdict, the rows that differ (``show_all``: every row; unexplained ones
    in red), the totals, then every explanation as a sentence."""
    out: list = [Lines([f"Compare {c.model}", describe_side("A", c.a), describe_side("B", c.b),
                        headline(c)])]
    if c.unrelated is not None:
        out.append(Lines([f"Note: {c.unrelated.text}"], style="bold"))
    hidden = len(c.rows) - len(c.differing_rows())
    if c.differing_rows() or show_all:
        shown = [r for r in c.rows if r.diff or show_all]
        out.append(replace(_rows_table(c, shown),
                           title="Rows joined by module path (B - A explained below)",
                           hot=["unexplained" in r.rules for r in shown]))
        if hidden and not show_all:
            out.append(Lines([f"{hidden} equal row(s) not shown (--all shows every row)"]))
    out.append(_totals_table(c))
    if c.explanations:
        out.append(Lines(["Explanations:"] + [f"- {e}" for e in c.explanations]))
    out += [Lines([f"Note: {n}"]) for n in c.notes]
    return out


def heading(c) -> tuple[str, str]:
    return f"{c.model} — compare", f"{describe_side('A', c.a)} · {describe_side('B', c.b)}"


def facts(c) -> list[tuple[str, str]]:
    out = [("Result", headline(c))]
    if c.unrelated is not None:
        out.append(("Note", c.unrelated.text))
    for t in c.totals:
        value = f"{t.a:,} vs {t.b:,}" + (f" ({t.diff:+,})" if t.diff else " (equal)")
        out.append((LABELS.get(t.metric, t.metric).capitalize(), value))
    out += [("Note", n) for n in c.notes]
    return out


def _side_cell(side: dict | None, metric: str) -> Cell:
    return Cell("-", None) if side is None else Cell(si(side[metric]), side[metric])


def _module_label(r) -> str:
    """The module path, with "(A only)" or "(B only)" for a row of one side."""
    if r.a is None or r.b is None:
        return r.module + (" (B only)" if r.a is None else " (A only)")
    return r.module


def _rows_table(c, rows) -> RowTable:
    """The joined rows: each side's type and numbers, the rules in a few words, the sentence
    (written under the table in the terminal)."""
    cols = [Column("Module"), Column("A type", priority=2), Column("B type", priority=2),
            Column("A MACs", True), Column("B MACs", True), Column("A params", True),
            Column("B params", True), Column("A act. B", True, priority=1),
            Column("B act. B", True, priority=1),
            Column("Explanation", min_width=20, wrap=True),
            Column("In full", wrap=True, terminal=False)]
    return RowTable("rows", "Rows joined by module path (rows that differ in bold)", cols,
                    [[Cell(_module_label(r), r.module), Cell(r.a_type or "-", r.a_type),
                      Cell(r.b_type or "-", r.b_type), _side_cell(r.a, "macs"),
                      _side_cell(r.b, "macs"), _side_cell(r.a, "params"),
                      _side_cell(r.b, "params"), _side_cell(r.a, "activation_bytes"),
                      _side_cell(r.b, "activation_bytes"),
                      Cell(r.summary or ("" if not r.diff else "?")),
                      Cell(r.explanation or "", r.explanation or "")] for r in rows],
                    hot=[bool(r.diff) for r in rows])


def _totals_table(c) -> RowTable:
    cols = [Column("Metric"), Column("A", True), Column("B", True), Column("B - A", True),
            Column("Change", True), Column("Explanation", wrap=True, terminal=False)]
    rows = []
    for t in c.totals:
        change = "-" if not t.a else f"{t.diff / t.a:+.2%}"
        rows.append([Cell(LABELS.get(t.metric, t.metric), t.metric), Cell(f"{t.a:,}", t.a),
                     Cell(f"{t.b:,}", t.b), Cell(f"{t.diff:+,}" if t.diff else "=", t.diff),
                     Cell(change if t.diff else "", t.diff / t.a if t.a else None),
                     Cell(t.explanation or "", t.explanation or "")])
    return RowTable("totals", "Totals", cols, rows)


def tables(c) -> list:
    return [_rows_table(c, c.rows), _totals_table(c)]


def charts(c) -> list:
    """B as a percentage of A for every total (100 % = equal)."""
    s = Series("B / A", PALETTE[0])
    names = []
    for i, t in enumerate(c.totals):
        ratio = 100.0 * t.b / t.a if t.a else (100.0 if not t.b else 0.0)
        tip = (f"{LABELS.get(t.metric, t.metric)}\nA {t.a:,}\nB {t.b:,}\n"
               f"B - A {t.diff:+,}")
        s.points.append(Point(i, ratio, tip, hot=bool(t.diff),
                              label=f"{ratio:.1f}%" if t.diff else None))
        names.append(LABELS.get(t.metric, t.metric))
    return [Chart("compare-totals", "bars", "Totals: B as % of A (100 % = equal)", "total",
                  "% of A", [s], names)]


def csv(c) -> DataTable:
    """One line per joined row: both sides' numbers, B - A, the rules and the sentence."""
    columns = (["module", "a_type", "b_type"] + [f"a_{m}" for m in ROW_METRICS]
               + [f"b_{m}" for m in ROW_METRICS] + [f"diff_{m}" for m in ROW_METRICS]
               + ["rules", "explanation"])
    rows = []
    for r in c.rows:
        a = [("" if r.a is None else r.a[m]) for m in ROW_METRICS]
        b = [("" if r.b is None else r.b[m]) for m in ROW_METRICS]
        d = [r.diff.get(m, 0) for m in ROW_METRICS]
        rows.append([r.module, r.a_type, r.b_type] + a + b + d
                    + [" ".join(r.rules), r.explanation or ""])
    return DataTable(columns, rows)


VIEW = View(heading=heading, terminal=compare_terminal, facts=facts, tables=tables,
            charts=charts, csv=csv)
