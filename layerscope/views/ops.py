"""ops (``OpTable``): the operator table of ``layerscope ops`` (and of a training run)."""
from __future__ import annotations

from dataclasses import asdict, fields, replace

from layerscope.views.common import cell, ms, ms_cell, noise_facts, noise_lines, pct
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
    # a CUDA kernel's name runs to hundreds of characters: the names give way, the figures
    # keep their width
    cols = [Column("Operator", shrink=True)] + (
        [Column("Input shapes", shrink=True, wrap=True)] if shapes else []) + [
        Column("Self ms", True, min_width=7), Column("Total ms", True, min_width=8),
        Column("Calls", True, min_width=5), Column("Mean ms", True, min_width=7),
        Column("Share", True, min_width=6)] + (
        [Column("Self mem", True, min_width=8), Column("Mem", True, min_width=7)]
        if memory else [])
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


def ops_terminal(table) -> list:
    """The operator table, titled with the run's settings, then the total and the noise."""
    unit = table.settings.get("unit", "run")  # "step" for a training run's table
    ops = replace(_ops_table(table), foot=[],
                  title=f"{table.model}: top {len(table.rows)} of {table.ops_total} operators "
                        f"by {table.sort} time ({table.device}{_threads(table, ', ')}, per "
                        f"{unit}, {table.runs} {unit}s)")
    foot = f"All operators: {ms(table.total_self_s)} ms self time per {unit}"
    if table.trace:
        foot += f"; trace written to {table.trace} (open in ui.perfetto.dev or chrome://tracing)"
    return [ops, Lines([foot] + noise_lines(table))]


VIEW = View(heading=heading, terminal=ops_terminal, facts=facts, tables=tables, charts=charts,
            csv=csv)
