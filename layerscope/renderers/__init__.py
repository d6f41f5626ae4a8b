"""Turn results into text, JSON, CSV, HTML (renderers/html), Markdown (``md``: any result's
tables as GitHub Markdown, for a pull request's comment; not in ``FORMATS``, which the
commands' --format choices read: a command offers it by naming it) and PNG plots
(renderers/plot).

Every renderer draws the sections of ``layerscope.views.view_for(result)``; none asks which kind
of result it was given."""
from __future__ import annotations

import os

FORMATS = ("table", "json", "csv", "html", "png")
_EXT = {".json": "json", ".csv": "csv", ".txt": "table", ".html": "html", ".htm": "html",
        ".png": "png", ".md": "md"}


def format_of(path: str) -> str | None:
    """The format a file name's extension names (r.csv: csv), or None."""
    return _EXT.get(os.path.splitext(path)[1].lower())


def pick_format(fmt: str | None, output: str | None) -> str:
    """--format wins; else the output file's extension; else a table."""
    if fmt:
        return fmt
    return (format_of(output) if output else None) or "table"


def render(report, fmt: str, width: int | None = None, **options) -> str:
    """Text formats; "png" is bytes: renderers.plot.render_png. ``options`` go to the terminal
    layout (compare: ``show_all``)."""
    if fmt == "html":
        from layerscope.renderers.html import render_html

        return render_html(report)
    if fmt == "png":
        raise ValueError("png is binary: use layerscope.renderers.plot.render_png")
    if fmt == "md":
        from layerscope.renderers.markdown_out import to_markdown

        return to_markdown(report)
    if fmt == "csv":
        from layerscope.renderers.csv_out import to_csv

        return to_csv(report)
    if fmt == "json":
        from layerscope.renderers.json_out import to_json

        return to_json(report)
    from layerscope.renderers.terminal import to_text

    return to_text(report, width=width, **options)
