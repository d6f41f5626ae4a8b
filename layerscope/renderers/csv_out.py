"""Per-layer rows as CSV: one line per row, shapes written as 1x3x224x224."""
from __future__ import annotations

import csv
import io

from layerscope.core.units import shape_str

COLUMNS = ["name", "type", "depth", "calls", "input_shapes", "output_shapes", "params",
           "weight_bytes", "buffer_bytes", "macs", "flops", "bytes_read", "bytes_written",
           "activation_bytes", "intensity", "self_only"]
TRAINING_COLUMNS = ["backward_macs", "backward_flops", "backward_bytes_read",
                    "backward_bytes_written"]


def to_csv(report) -> str:
    training = report.totals.backward_macs is not None
    columns = COLUMNS + (TRAINING_COLUMNS if training else [])
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in report.layers:
        d = row.to_dict()
        d["input_shapes"] = shape_str(row.input_shapes)
        d["output_shapes"] = shape_str(row.output_shapes)
        d["intensity"] = "" if row.intensity is None else f"{row.intensity:.4g}"
        writer.writerow([d[c] for c in columns])
    return buf.getvalue()
