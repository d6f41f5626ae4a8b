"""A result's CSV: the table of raw values its view names (``View.csv``), one line per row,
an empty field for a missing value."""
from __future__ import annotations

import csv
import io

from layerscope.views import view_for


def to_csv(result) -> str:
    """The CSV text of the result's ``View.csv`` table."""
    make = view_for(result).csv
    if make is None:  # every registered view declares one (tests/test_train_outputs.py)
        raise LookupError(f"{type(result).__name__} results have no CSV table")
    table = make(result)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(table.columns)
    for row in table.rows:
        writer.writerow(["" if v is None else v for v in row])
    return buf.getvalue()
