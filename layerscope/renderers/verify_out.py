"""A VerifyResult (layerscope.rewrite.verify) as a terminal table or JSON."""
from __future__ import annotations

import io
import json

from rich.console import Console
from rich.table import Table


def _num(x: float) -> str:
    return f"{x:.3e}"


def headline(result) -> str:
    verdict = "MATCH" if result.ok else "MISMATCH"
    return (f"{result.a} vs {result.b}: {verdict} ({result.runs} random inputs, seed "
            f"{result.seed}, rtol {result.rtol:g}, atol {result.atol:g})")


def verify_table(result) -> Table:
    table = Table(header_style="bold", pad_edge=False)
    for col, justify in [("Output", "left"), ("Shape", "left"), ("Max abs err", "right"),
                         ("MSE", "right"), ("Max rel err", "right"), ("Max |A|", "right"),
                         ("OK", "left")]:
        table.add_column(col, justify=justify)
    for o in result.outputs:
        table.add_row(o.name, "x".join(map(str, o.shape)) or "scalar", _num(o.max_abs_error),
                      _num(o.mse), _num(o.max_rel_error), _num(o.ref_max_abs),
                      "yes" if o.ok else "NO")
    if len(result.outputs) > 1:
        table.add_section()
        table.add_row("overall", "", _num(result.max_abs_error), _num(result.mse),
                      _num(result.max_rel_error), "", "yes" if result.ok else "NO")
    return table


FOOTNOTE = "rel err = max|A-B| / max|A|; ok when max|A-B| <= atol + rtol * max|A|"


def to_text(result, width: int = 120) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, highlight=False)
    console.print(headline(result), soft_wrap=True)
    console.print(verify_table(result))
    console.print(FOOTNOTE, soft_wrap=True)
    return buf.getvalue()


def to_json(result) -> str:
    return json.dumps(result.to_dict(), indent=2) + "\n"
