"""compare (``Comparison``, layerscope.analysis.compare): the header (both sides), the joined
rows that differ (``show_all``: every row) with each side's MACs, parameters and activation
bytes and a few words per explanation, the totals side by side, then every explanation as a
sentence; for the HTML report and the notebook the same as row tables and one chart.
"""
from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from layerscope.core.compare_records import LABELS, ROW_METRICS
from layerscope.core.units import shape_str, si
from layerscope.views.sections import PALETTE, Cell, Chart, DataTable, Point, RowTable, Series, View


def _num(row_side: dict | None, metric: str) -> str:
    return "-" if row_side is None else si(row_side[metric])


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


def rows_table(c, show_all: bool = False) -> Table:
    table = Table(title="Rows joined by module path (B - A explained below)",
                  header_style="bold", pad_edge=False)
    for name, justify in [("Module", "left"), ("A MACs", "right"), ("B MACs", "right"),
                          ("A params", "right"), ("B params", "right"), ("A act. B", "right"),
                          ("B act. B", "right"), ("Explanation", "left")]:
        table.add_column(name, justify=justify, no_wrap=name != "Explanation",
                         min_width=20 if name == "Explanation" else None)
    for r in c.rows:
        if not (r.diff or show_all):
            continue
        label = Text(r.module)
        if r.a is None or r.b is None:
            label.append(" (B only)" if r.a is None else " (A only)", style="dim")
        table.add_row(label, _num(r.a, "macs"), _num(r.b, "macs"), _num(r.a, "params"),
                      _num(r.b, "params"), _num(r.a, "activation_bytes"),
                      _num(r.b, "activation_bytes"), r.summary or ("" if not r.diff else "?"),
                      style="bold red" if "unexplained" in r.rules else None)
    return table


def totals_table(c) -> Table:
    table = Table(title="Totals", header_style="bold", pad_edge=False)
    for name, justify in [("Metric", "left"), ("A", "right"), ("B", "right"),
                          ("B - A", "right"), ("Change", "right")]:
        table.add_column(name, justify=justify, no_wrap=True)
    for t in c.totals:
        change = "-" if not t.a else f"{t.diff / t.a:+.2%}"
        table.add_row(LABELS.get(t.metric, t.metric), f"{t.a:,}", f"{t.b:,}",
                      f"{t.diff:+,}" if t.diff else "=", change if t.diff else "")
    return table


def render_compare(c, show_all: bool = False) -> Group:
    parts: list = [Text(f"Compare {c.model}"), Text(describe_side("A", c.a)),
                   Text(describe_side("B", c.b)), Text(headline(c))]
    if c.unrelated is not None:
        parts.append(Text(f"Note: {c.unrelated.text}", style="bold"))
    hidden = len(c.rows) - len(c.differing_rows())
    if c.differing_rows() or show_all:
        parts.append(rows_table(c, show_all))
        if hidden and not show_all:
            parts.append(Text(f"{hidden} equal row(s) not shown (--all shows every row)"))
    parts.append(totals_table(c))
    if c.explanations:
        parts.append(Text("Explanations:\n" + "\n".join(f"- {e}" for e in c.explanations)))
    parts += [Text(f"Note: {n}") for n in c.notes]
    return Group(*parts)


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


def tables(c) -> list:
    def num(side, m):
        return Cell("-", None) if side is None else Cell(si(side[m]), side[m])

    cols = [("Module", False), ("A type", False), ("B type", False), ("A MACs", True),
            ("B MACs", True), ("A params", True), ("B params", True), ("A act. B", True),
            ("B act. B", True), ("Explanation", False)]
    rows, hot = [], []
    for r in c.rows:
        rows.append([Cell(r.module, r.module), Cell(r.a_type or "-", r.a_type),
                     Cell(r.b_type or "-", r.b_type), num(r.a, "macs"), num(r.b, "macs"),
                     num(r.a, "params"), num(r.b, "params"), num(r.a, "activation_bytes"),
                     num(r.b, "activation_bytes"),
                     Cell(r.explanation or "", r.explanation or "")])
        hot.append(bool(r.diff))
    totals = [[Cell(LABELS.get(t.metric, t.metric), t.metric), Cell(f"{t.a:,}", t.a),
               Cell(f"{t.b:,}", t.b), Cell(f"{t.diff:+,}" if t.diff else "=", t.diff),
               Cell(t.explanation or "", t.explanation or "")] for t in c.totals]
    return [RowTable("rows", "Rows joined by module path (rows that differ in bold)", cols, rows,
                     hot=hot),
            RowTable("totals", "Totals", [("Metric", False), ("A", True), ("B", True),
                                          ("B - A", True), ("Explanation", False)], totals)]


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


VIEW = View(heading=heading, terminal=render_compare, facts=facts, tables=tables,
            charts=charts, csv=csv)
