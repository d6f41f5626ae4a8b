"""A Report as a plain HTML table (Jupyter's _repr_html_)."""
from __future__ import annotations

import html

from layerscope.core.units import shape_str, si


def render_html_table(report) -> str:
    head = ["Layer", "Type", "Output shape", "Params", "MACs", "FLOPs", "Read B", "Written B"]
    rows = []
    for r in report.layers:
        cells = [r.name + (" (own ops)" if r.self_only else ""), r.type,
                 shape_str(r.output_shapes), si(r.params), si(r.macs), si(r.flops),
                 si(r.bytes_read), si(r.bytes_written)]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    t = report.totals
    total = ["Total", "", "", si(t.params), si(t.macs), si(t.flops), si(t.bytes_read),
             si(t.bytes_written)]
    rows.append("<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in total) + "</tr>")
    return (f"<table><caption>{html.escape(report.model)}</caption><thead><tr>"
            + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")
