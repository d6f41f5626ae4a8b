"""A result's CSV: the table of raw values its view names (``View.csv``), one line per row,
an empty field for a missing value."""
from __future__ import annotations

import csv
import io

from layerscope.views import view_for


def to_csv(result) -> str | None:
    """The CSV text, or None when the result has no row table."""
    make = view_for(result).csv
    if make is None:
        return None
    table = make(result)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(table.columns)
    for row in table.rows:
        writer.writerow(["" if v is None else v for v in row])
    return buf.getvalue()
