"""ops (``OpTable``): the operator table of ``layerscope ops`` (and of a training run)."""
from __future__ import annotations

from dataclasses import asdict, fields

from rich.console import Group
from rich.table import Table
from rich.text import Text

from layerscope.core.units import si
from layerscope.views.common import cell, ms, ms_cell, noise_facts, noise_lines, pct
from layerscope.views.sections import PALETTE, Cell, Chart, DataTable, Point, RowTable, Series, View


def heading(result) -> tuple[str, str]:
    return (f"{result.model} — operators",
            f"device {result.device}{_threads(result, ' · ')} · {result.runs} runs · top "
            f"{len(result.rows)} of "
            f"{result.ops_total} by {result.sort} time")


def _threads(result, sep: str) -> str:
    """The intra-op threads the runs used (saved before they were recorded: nothing)."""
    n = result.settings.get("threads")
    return f"{sep}{n} threads" if n else ""


def facts(result) -> list[tuple[str, str]]:
    out = [("Operators", f"{result.ops_total} distinct ({len(result.rows)} shown)"),
           ("Self time, all operators", f"{ms(result.total_self_s)} ms per run"),
           ("Runs", str(result.runs)), ("Sorted by", f"{result.sort} time")]
    if result.trace:
        out.append(("Trace", result.trace))
    return out + noise_facts(result)


def _ops_table(t) -> RowTable:
    memory = t.settings.get("memory")
    shapes = t.settings.get("group_by_shape")
    cols = [("Operator", False)] + ([("Input shapes", False)] if shapes else []) + [
        ("Self ms", True), ("Total ms", True), ("Calls", True), ("Mean ms", True),
        ("Share", True)] + ([("Self mem", True), ("Mem", True)] if memory else [])
    rows = []
    for r in t.rows:
        cells = [cell(r.name)] + ([cell(r.input_shapes or "")] if shapes else []) + [
            ms_cell(r.self_s), ms_cell(r.total_s), Cell(f"{r.calls:g}", r.calls),
            ms_cell(r.mean_s), Cell(pct(r.share), r.share)]
        if memory:
            cells += [cell(r.self_memory_bytes), cell(r.memory_bytes)]
        rows.append(cells)
    return RowTable("operators", "Operators (per run)", cols, rows,
                    ["All operators"] + ([""] if shapes else []) + [ms(t.total_self_s)]
                    + [""] * (4 + (2 if memory else 0)))


def tables(t) -> list[RowTable]:
    return [_ops_table(t)]


def charts(t) -> list[Chart]:
    if not t.rows:
        return []
    s = Series("self time", PALETTE[0])
    for i, r in enumerate(t.rows):
        tip = "\n".join(x for x in [
            r.name, f"input shapes {r.input_shapes}" if r.input_shapes else "",
            f"self {ms(r.self_s)} ms, total {ms(r.total_s)} ms, {r.calls:g} calls, "
            f"mean {ms(r.mean_s)} ms, share {pct(r.share)}"] if x)
        s.points.append(Point(i, r.self_s * 1e3, tip))
    return [Chart("operators", "bars", f"Self time per operator (top {len(t.rows)}, per run)",
                  "operator", "ms", [s], [r.name for r in t.rows])]


def csv(table) -> DataTable:
    from layerscope.core.optable import OpRow

    names = [f.name for f in fields(OpRow)]
    return DataTable(names, [[asdict(row)[n] for n in names] for row in table.rows])


class _FitWidth:
    """A table whose name column takes what the figure columns leave of the width it is
    drawn at (rich cuts a no-wrap column only by cropping the whole table otherwise)."""

    def __init__(self, build):
        self.build = build

    def __rich_console__(self, console, options):
        yield self.build(options.max_width)


def render_ops(table) -> Group:
    unit = table.settings.get("unit", "run")  # "step" for a training run's table
    memory = table.settings.get("memory")
    shapes = table.settings.get("group_by_shape")
    names = [("Operator", "left")] + ([("Input shapes", "left")] if shapes else [])
    figures = [("Self ms", 7), ("Total ms", 8), ("Calls", 5), ("Mean ms", 7), ("Share", 6)] + (
        [("Self mem", 8), ("Mem", 7)] if memory else [])

    def build(width: int) -> Table:
        t = Table(title=f"{table.model}: top {len(table.rows)} of {table.ops_total} operators "
                        f"by {table.sort} time ({table.device}{_threads(table, ', ')}, per "
                        f"{unit}, {table.runs} {unit}s)",
                  header_style="bold", pad_edge=False)
        # each column: its width, one space either side, one rule (the edges: no padding)
        left = width - sum(w + 3 for _, w in figures) - 3 * len(names) + 1
        name_width = max(12, left // len(names))
        for name, _ in names:  # a CUDA kernel's name runs to hundreds of characters
            t.add_column(name, no_wrap=(name == "Operator"), overflow="ellipsis",
                         max_width=name_width)
        for name, w in figures:  # the figures keep their width; the names give way
            t.add_column(name, justify="right", no_wrap=True, min_width=w)
        for r in table.rows:
            cells = [r.name] + ([r.input_shapes or ""] if shapes else []) + [
                ms(r.self_s), ms(r.total_s), str(r.calls), ms(r.mean_s), f"{r.share:.1%}"]
            if memory:
                cells += [si(r.self_memory_bytes), si(r.memory_bytes)]
            t.add_row(*cells)
        return t

    foot = f"All operators: {ms(table.total_self_s)} ms self time per {unit}"
    if table.trace:
        foot += f"; trace written to {table.trace} (open in ui.perfetto.dev or chrome://tracing)"
    return Group(_FitWidth(build), Text("\n".join([foot] + noise_lines(table))))


VIEW = View(heading=heading, terminal=render_ops, facts=facts, tables=tables, charts=charts,
            csv=csv)
