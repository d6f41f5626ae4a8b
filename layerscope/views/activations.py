"""activations (``ActivationCapture``): statistics of the captured layer outputs."""
from __future__ import annotations

from rich.table import Table

from layerscope.core.units import shape_str
from layerscope.views.common import cell, pct
from layerscope.views.sections import Cell, DataTable, RowTable, View


def heading(result) -> tuple[str, str]:
    return f"{result.model} — activations", f"layers matching {result.pattern!r}"


def facts(result) -> list[tuple[str, str]]:
    return [("Layers captured", str(len(result.stats)))]


def _activations_table(c) -> RowTable:
    cols = [("Layer", False), ("Type", False), ("Shape", False), ("Mean", True), ("Std", True),
            ("Zeros", True)]
    rows = [[cell(s.name), cell(s.type), cell(shape_str([s.shape])), Cell(f"{s.mean:.4g}", s.mean),
             Cell(f"{s.std:.4g}", s.std), Cell(pct(s.zero_fraction), s.zero_fraction)]
            for s in c.stats]
    return RowTable("layers", "Captured outputs", cols, rows)


def tables(c) -> list[RowTable]:
    return [_activations_table(c)]


def activation_table(capture) -> Table:
    table = Table(title=f"{capture.model}: outputs of layers matching {capture.pattern!r}",
                  header_style="bold", pad_edge=False)
    longest = max((len(s.name) for s in capture.stats), default=5)
    for col, justify in [("Layer", "left"), ("Type", "left"), ("Shape", "left"),
                         ("Mean", "right"), ("Std", "right"), ("Zeros", "right")]:
        # a name too long for the width is folded onto more lines, never cut
        layer = col == "Layer"
        table.add_column(col, justify=justify, overflow="fold" if layer else "ellipsis",
                         min_width=min(longest, 16) if layer else None)
    for s in capture.stats:
        table.add_row(s.name, s.type, shape_str([s.shape]), f"{s.mean:.4g}", f"{s.std:.4g}",
                      f"{s.zero_fraction:.1%}")
    return table


def csv(c) -> DataTable:
    """One row per captured layer: its output's shape (``1x16x32x32``) and statistics."""
    return DataTable(["layer", "type", "shape", "mean", "std", "zero_fraction"],
                     [[s.name, s.type, shape_str([s.shape]), s.mean, s.std,
                       s.zero_fraction] for s in c.stats])


VIEW = View(heading=heading, terminal=activation_table, facts=facts, tables=tables, csv=csv)
