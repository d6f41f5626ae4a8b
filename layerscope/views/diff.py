"""diff (``DiffReport``, layerscope.analysis.diff): the summary sentence first, the unfair
differences, then one table of the end-to-end row, phases, types and layers (the terminal:
the layers within the noise and without a static change left out unless ``show_all``), each
with its medians, change, verdict and explanation; one chart of base and new per row, the rows
beyond the noise highlighted."""
from __future__ import annotations

from dataclasses import replace

from layerscope.views.common import ms
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

CHART_ROWS = 30  # the chart's rows at most: the largest |new - base| first
WORK_COMPARED = ("profile", "analyze")  # kinds whose layers' work is compared (static)


def heading(d) -> tuple[str, str]:
    base = [f.path for f in d.files if f.role == "base"]
    new = [f.path for f in d.files if f.role == "new"]
    how = ("static figures joined by module path (nothing timed)" if d.compared == "analyze"
           else f"verdicts: rank test at p < {d.alpha:g}, change of at least "
                f"{d.min_effect:.0%}")
    return (f"{d.model} — diff ({d.compared})",
            f"base {', '.join(base)} · new {', '.join(new)} · {how}")


def facts(d) -> list[tuple[str, str]]:
    out = [("Summary", d.summary)]
    out += [("Unfair", u) for u in d.unfair]
    out += [("Note", n) for n in d.notes]
    return out


def _label(r) -> str:
    return "end to end" if r.level == "end_to_end" else r.name


def _change(r) -> Cell:
    return Cell("-" if r.change is None else f"{r.change:+.1%}", r.change)


def _table(d, rows) -> RowTable:
    cols = [Column("Level"), Column("Name"), Column("Base ms", True), Column("New ms", True),
            Column("Change", True), Column("Verdict"), Column("Basis", priority=2),
            Column("p", True, priority=3, optional=True),
            Column("Explanation", min_width=20, wrap=True)]
    body = [[Cell(r.level.replace("_", " "), r.level), Cell(_label(r), r.name),
             Cell(ms(r.base_s), r.base_s), Cell(ms(r.new_s), r.new_s), _change(r),
             Cell(r.verdict, r.verdict), Cell(r.basis or "-", r.basis),
             Cell("" if r.p_value is None else f"{r.p_value:.3g}", r.p_value),
             Cell(r.explanation or "", r.explanation)] for r in rows]
    return RowTable("diff", "Base against new (beyond the noise in bold)", cols, body,
                    hot=[r.verdict in ("slower", "faster") for r in rows])


def _shown(r) -> bool:
    return r.level != "layer" or r.verdict != "within-noise" or bool(r.static)


def terminal(d, show_all: bool = False) -> list:
    title, settings = heading(d)
    out: list = [Lines([title]), Lines([d.summary], style="bold")]
    if d.unfair:
        out.append(Lines(["Unfair comparison:"] + [f"- {u}" for u in d.unfair], style="bold"))
    rows = d.all_rows()
    shown = rows if show_all else [r for r in rows if _shown(r)]
    if shown:
        out.append(replace(_table(d, shown), title_left=True))
    hidden = len(rows) - len(shown)
    if hidden:
        # only profile and analyze results keep each layer's work (shapes, MACs) to compare
        work = " and with the same work" if d.compared in WORK_COMPARED else ""
        out.append(Lines([f"{hidden} layer(s) within noise{work} not shown "
                          "(--all shows every row)"]))
    out.append(Lines([settings] + [f"Note: {n}" for n in d.notes]))
    return out


def tables(d) -> list:
    return [_table(d, d.all_rows())]


def charts(d) -> list:
    """Base and new side by side per timed row (the largest changes first), the rows beyond the
    noise highlighted and labelled with their change."""
    timed = [r for r in d.all_rows() if r.base_s is not None or r.new_s is not None]
    if not timed:
        return []
    timed.sort(key=lambda r: -abs((r.new_s or 0) - (r.base_s or 0)))
    timed = timed[:CHART_ROWS]
    base, new = Series("base", PALETTE[0]), Series("new", PALETTE[1])
    for i, r in enumerate(timed):
        tip = f"{_label(r)}\nbase {ms(r.base_s)} ms\nnew {ms(r.new_s)} ms\n{r.verdict}"
        hot = r.verdict in ("slower", "faster")
        base.points.append(Point(i, (r.base_s or 0) * 1e3, tip, hot=hot))
        new.points.append(Point(i, (r.new_s or 0) * 1e3, tip, hot=hot,
                                label=f"{r.change:+.0%}" if hot and r.change is not None
                                else None))
    return [Chart("diff-rows", "bars", "Base and new per row (beyond the noise highlighted)",
                  "row", "ms", [base, new], [_label(r) for r in timed])]


def csv(d) -> DataTable:
    columns = ["level", "name", "type", "base_s", "new_s", "change", "verdict", "basis",
               "p_value", "explanation"]
    return DataTable(columns, [[r.level, r.name, r.type, r.base_s, r.new_s, r.change,
                                r.verdict, r.basis, r.p_value, r.explanation]
                               for r in d.all_rows()])


VIEW = View(heading=heading, terminal=terminal, facts=facts, tables=tables, charts=charts,
            csv=csv, warnings=lambda d: [], facts_title="Diff")
