"""activations (``ActivationCapture``): statistics of the captured layer outputs."""
from __future__ import annotations

from dataclasses import replace

from layerscope.core.units import shape_str
from layerscope.views.common import cell, pct
from layerscope.views.sections import Cell, Column, DataTable, RowTable, View


def heading(result) -> tuple[str, str]:
    return f"{result.model} — activations", f"layers matching {result.pattern!r}"


def facts(result) -> list[tuple[str, str]]:
    return [("Layers captured", str(len(result.stats)))]


def _activations_table(c) -> RowTable:
    # a name too long for the width is folded onto more lines, never cut
    longest = max((len(s.name) for s in c.stats), default=5)
    cols = [Column("Layer", min_width=min(longest, 16), wrap=True), Column("Type"),
            Column("Shape", priority=1), Column("Mean", True), Column("Std", True),
            Column("Zeros", True)]
    rows = [[cell(s.name), cell(s.type), cell(shape_str([s.shape])), Cell(f"{s.mean:.4g}", s.mean),
             Cell(f"{s.std:.4g}", s.std), Cell(pct(s.zero_fraction), s.zero_fraction)]
            for s in c.stats]
    return RowTable("layers", "Captured outputs", cols, rows)


def tables(c) -> list[RowTable]:
    return [_activations_table(c)]


def activations_terminal(capture) -> list:
    return [replace(_activations_table(capture),
                    title=f"{capture.model}: outputs of layers matching {capture.pattern!r}")]


def csv(c) -> DataTable:
    """One row per captured layer: its output's shape (``1x16x32x32``) and statistics."""
    return DataTable(["layer", "type", "shape", "mean", "std", "zero_fraction"],
                     [[s.name, s.type, shape_str([s.shape]), s.mean, s.std,
                       s.zero_fraction] for s in c.stats])


VIEW = View(heading=heading, terminal=activations_terminal, facts=facts, tables=tables, csv=csv)
