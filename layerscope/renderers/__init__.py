"""Turn results into text, JSON, CSV, HTML (renderers/html) and PNG plots (renderers/plot)."""
from __future__ import annotations

import os

FORMATS = ("table", "json", "csv", "html", "png")
_EXT = {".json": "json", ".csv": "csv", ".txt": "table", ".html": "html", ".htm": "html",
        ".png": "png"}


def pick_format(fmt: str | None, output: str | None) -> str:
    """--format wins; else the output file's extension; else a table."""
    if fmt:
        return fmt
    if output:
        return _EXT.get(os.path.splitext(output)[1].lower(), "table")
    return "table"


def render(report, fmt: str, width: int | None = None) -> str:
    """Text formats; "png" is bytes: renderers.plot.render_png."""
    if fmt == "csv" and report.kind in ("train", "ablate", "activations", "loop"):
        fmt = "json"  # these have no row table; their CSVs are written by the run itself
    if fmt == "html":
        from layerscope.renderers.html import render_html

        return render_html(report)
    if fmt == "png":
        raise ValueError("png is binary: use layerscope.renderers.plot.render_png")
    if report.kind == "compare" and fmt in ("table", "csv"):
        from layerscope.renderers import compare_out

        return compare_out.to_csv(report) if fmt == "csv" else compare_out.to_text(report, width)
    if fmt == "table" and report.kind == "activations":
        from layerscope.renderers.activations_out import to_text as activations_text

        return activations_text(report, width=width or 160)
    if fmt == "json":
        from layerscope.renderers.json_out import to_json

        return to_json(report)
    if fmt == "csv":
        from layerscope.renderers.csv_out import to_csv

        return to_csv(report)
    from layerscope.renderers.terminal import to_text

    return to_text(report, width=width)
