"""Activation statistics as a table, and the arrays as an .npz file."""
from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from layerscope.core.units import shape_str


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


def to_text(capture, width: int = 120) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(activation_table(capture))
    return buf.getvalue()


def write_npz(capture, path: str) -> None:
    """Through core.io: atomic for files, written through for devices and FIFOs, ``-`` is
    standard output."""
    import numpy as np

    from layerscope.core.io import write_file

    write_file(path, lambda f: np.savez(f, **capture.arrays))
