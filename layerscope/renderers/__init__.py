"""Turn results into text, JSON, CSV, HTML (renderers/html) and PNG plots (renderers/plot)."""
from __future__ import annotations

import os
import tempfile

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


def write_atomic(path: str, data, *, fsync: bool = False) -> None:
    """Write to a temporary file beside ``path`` and rename it: never a half-written file.

    ``data``: ``str`` (written as UTF-8), ``bytes``, or a function that writes to the open
    binary file (e.g. ``lambda f: torch.save(obj, f)``). ``fsync`` makes the content durable
    before the rename (checkpoints)."""
    from layerscope.errors import UserError

    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".layerscope-", dir=directory)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror} ({directory})") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, str):
                f.write(data.encode("utf-8"))
            elif isinstance(data, (bytes, bytearray)):
                f.write(data)
            else:
                data(f)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        _default_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _default_mode(path: str) -> None:
    """mkstemp creates 0600 files; give the result the permissions a plain open() would."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)
