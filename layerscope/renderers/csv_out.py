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


PROFILE_COLUMNS = ["median_s", "p10_s", "p90_s", "mean_s", "n", "share", "rank", "gflops_per_s",
                   "gbytes_per_s", "bound", "pct_of_roof", "backward_median_s"]


def _profile_cells(row) -> dict:
    t = row.time or {}
    a = row.achieved or {}
    r = row.roofline or {}
    return {"median_s": t.get("median_s"), "p10_s": t.get("p10_s"), "p90_s": t.get("p90_s"),
            "mean_s": t.get("mean_s"), "n": t.get("n"), "share": row.share, "rank": row.rank,
            "gflops_per_s": a.get("gflops_per_s"), "gbytes_per_s": a.get("gbytes_per_s"),
            "bound": r.get("bound"), "pct_of_roof": r.get("pct_of_roof"),
            "backward_median_s": (row.backward_time or {}).get("median_s")}


def ops_to_csv(table) -> str:
    from dataclasses import asdict, fields

    from layerscope.core.optable import OpRow

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    names = [f.name for f in fields(OpRow)]
    writer.writerow(names)
    for row in table.rows:
        d = asdict(row)
        writer.writerow(["" if d[n] is None else d[n] for n in names])
    return buf.getvalue()


def sweep_to_csv(report) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    head = ["device", "backend", "dtype", "threads", "batch_size", "status", "error", "median_s",
            "p10_s", "p90_s", "mean_s", "n", "throughput_per_s", "speedup", "within_noise"]
    writer.writerow(head)
    for c in report.cells:
        lat = c.latency or {}
        values = [c.device, c.backend, c.dtype, c.threads, c.batch_size, c.status, c.error,
                  lat.get("median_s"), lat.get("p10_s"), lat.get("p90_s"), lat.get("mean_s"),
                  lat.get("n"), c.throughput_per_s, c.speedup, c.within_noise]
        writer.writerow(["" if v is None else v for v in values])
    return buf.getvalue()


def to_csv(report) -> str:
    if report.kind == "sweep":
        return sweep_to_csv(report)
    if report.kind == "ops":
        return ops_to_csv(report)
    training = report.totals.backward_macs is not None
    profiled = report.kind == "profile"
    columns = COLUMNS + (TRAINING_COLUMNS if training else []) + (
        PROFILE_COLUMNS if profiled else [])
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in report.layers:
        d = row.to_dict()
        d["input_shapes"] = shape_str(row.input_shapes)
        d["output_shapes"] = shape_str(row.output_shapes)
        d["intensity"] = "" if row.intensity is None else f"{row.intensity:.4g}"
        if profiled:
            d.update(_profile_cells(row))
        writer.writerow(["" if d[c] is None else d[c] for c in columns])
    return buf.getvalue()
