"""sweep (``SweepReport``): one cell per device/backend/dtype/threads/batch size, latency and
throughput against batch size."""
from __future__ import annotations

from dataclasses import replace

from layerscope.core.units import shape_str
from layerscope.views.common import cell, ms, ms_cell, noise_facts, noise_lines, num
from layerscope.views.lead import lead_section
from layerscope.views.sections import (
    PALETTE,
    Cell,
    Chart,
    Column,
    DataTable,
    Lines,
    Point,
    RowTable,
    Series,
    View,
)


def heading(result) -> tuple[str, str]:
    s = result.settings
    return (f"{result.model} — sweep",
            f"{len(result.cells)} cells · {s.get('runs')} runs per cell · "
            f"input {shape_str(s.get('inputs'))}")


def facts(result) -> list[tuple[str, str]]:
    ok = [c for c in result.cells if c.status == "ok"]
    out = [("Cells", f"{len(result.cells)} ({len(ok)} ran, "
                     f"{len(result.cells) - len(ok)} failed)"),
           ("Runs per cell", f"{result.settings.get('runs')} (warm-up "
                             f"{result.settings.get('warmup')})")]
    if ok:
        best = max(ok, key=lambda c: c.throughput_per_s or 0)
        out.append(("Best throughput", f"{best.throughput_per_s:.1f} samples/s "
                                       f"({_cell_name(best)}, batch {best.batch_size})"))
        low = min(ok, key=lambda c: c.latency["median_s"])
        out.append(("Lowest latency", f"{ms(low.latency['median_s'])} ms "
                                      f"({_cell_name(low)}, batch {low.batch_size})"))
    return out + noise_facts(result)


def _cell_name(c) -> str:
    return " ".join(str(p) for p in (c.device, c.backend, c.dtype,
                                     f"{c.threads} threads" if c.threads else None) if p)


def _sweep_table(s) -> RowTable:
    cols = [Column("Device"), Column("Backend"), Column("Dtype", priority=1),
            Column("Threads", True), Column("Batch", True), Column("Median ms", True),
            Column("p10 ms", True, priority=2), Column("p90 ms", True, priority=2),
            Column("Samples/s", True), Column("Speed-up", True, priority=1),
            Column("Noise", priority=1), Column("Time by layer type / error", wrap=True)]
    rows = []
    for c in s.cells:
        head = [cell(c.device), cell(c.backend), cell(c.dtype),
                Cell(str(c.threads or "-"), c.threads), Cell(str(c.batch_size), c.batch_size)]
        if c.status != "ok":
            rows.append(head + [Cell("-")] * 6 + [Cell(f"error: {c.error}", c.error,
                                                        style="red")])
            continue
        lat = c.latency
        types = ", ".join(f"{d['type']} {d['share']:.0%}" for d in (c.by_type or [])[:3]
                          if d.get("share") is not None)
        rows.append(head + [
            ms_cell(lat["median_s"]), ms_cell(lat["p10_s"]), ms_cell(lat["p90_s"]),
            Cell(num(c.throughput_per_s, ".1f"), c.throughput_per_s),
            Cell("-" if c.speedup is None else f"{c.speedup:.2f}x", c.speedup),
            Cell("within noise" if c.within_noise and c.speedup != 1.0 else ""),
            Cell(types or "-")])
    return RowTable("cells", "Cells (speed-up: throughput over the first cell)", cols, rows)


def tables(s) -> list[RowTable]:
    return [_sweep_table(s)]


def _threads(n) -> str:
    return f"{n} thread{'' if n == 1 else 's'}" if n else "default threads"


def charts(s) -> list[Chart]:
    ok = [c for c in s.cells if c.status == "ok" and c.latency]
    if not ok:
        return []
    dims = ("device", "backend", "dtype", "threads")
    varying = [d for d in dims if len({getattr(c, d) for c in ok}) > 1]

    def key(c):
        return tuple(getattr(c, d) for d in dims)

    def name(c):
        parts = [_threads(c.threads) if d == "threads" else str(getattr(c, d))
                 for d in varying]
        return " ".join(parts) or f"{c.device} {c.backend} {c.dtype}"

    groups: dict[tuple, list] = {}
    for c in ok:
        groups.setdefault(key(c), []).append(c)
    lat, thr = [], []
    for i, cells in enumerate(groups.values()):
        cells.sort(key=lambda c: c.batch_size)
        color = PALETTE[i % len(PALETTE)]
        a, b = Series(name(cells[0]), color), Series(name(cells[0]), color)
        for c in cells:
            L = c.latency
            tip = (f"{c.device} {c.backend} {c.dtype}"
                   f"{', ' + _threads(c.threads) if c.threads else ''}, batch {c.batch_size}\n"
                   f"median {ms(L['median_s'])} ms (p10 {ms(L['p10_s'])}, p90 {ms(L['p90_s'])})"
                   f"\n{c.throughput_per_s:.1f} samples/s"
                   + (f", {c.speedup:.2f}x" if c.speedup else "")
                   + (" (within noise)" if c.within_noise and c.speedup != 1.0 else ""))
            a.points.append(Point(c.batch_size, L["median_s"] * 1e3, tip,
                                  L["p10_s"] * 1e3, L["p90_s"] * 1e3))
            b.points.append(Point(c.batch_size, c.throughput_per_s or 0.0, tip))
        lat.append(a)
        thr.append(b)
    batches = sorted({c.batch_size for c in ok})
    log_x = batches[-1] / batches[0] >= 8
    return [Chart("sweep-latency", "lines", "Latency vs batch size (median; p10-p90 bars)",
                  "batch size", "ms", lat, log_x=log_x, x_ticks=batches),
            Chart("sweep-throughput", "lines", "Throughput vs batch size", "batch size",
                  "samples/s", thr, log_x=log_x, x_ticks=batches)]


CSV_COLUMNS = ["device", "backend", "dtype", "threads", "batch_size", "status", "error",
               "median_s", "p10_s", "p90_s", "mean_s", "n", "throughput_per_s", "speedup",
               "within_noise"]


def csv(report) -> DataTable:
    rows = []
    for c in report.cells:
        lat = c.latency or {}
        rows.append([c.device, c.backend, c.dtype, c.threads, c.batch_size, c.status, c.error,
                     lat.get("median_s"), lat.get("p10_s"), lat.get("p90_s"), lat.get("mean_s"),
                     lat.get("n"), c.throughput_per_s, c.speedup, c.within_noise])
    return DataTable(CSV_COLUMNS, rows)


def sweep_terminal(report) -> list:
    cells = replace(_sweep_table(report),
                    title=f"{report.model}: sweep ({report.settings.get('runs')} runs per cell)")
    return [cells, Lines(["Speed-up: throughput over the first cell; 'within noise': per-sample "
                          "p10-p90 ranges overlap with the first cell's."] + noise_lines(report))]


VIEW = View(heading=heading, terminal=sweep_terminal, facts=facts, tables=tables, charts=charts,
            csv=csv, lead=lead_section)
