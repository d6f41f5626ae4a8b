"""scaling (``ScalingReport``): throughput per world size, speed-up and efficiency against
linear, communication share; one table, one chart (speed-up against the linear line)."""
from __future__ import annotations

from dataclasses import replace

from layerscope.core.units import si
from layerscope.views.common import ms, num, pct
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
    return (f"{result.recipe} — data-parallel scaling",
            f"{result.device} · {s.get('backend')} · world sizes "
            f"{', '.join(str(n) for n in s.get('nproc', []))} · {s.get('steps')} steps "
            f"({s.get('warmup')} warm-up) · {s.get('threads_per_rank')} thread(s) per rank")


def facts(result) -> list[tuple[str, str]]:
    pts = result.points
    out: list[tuple[str, str]] = []
    if pts:
        last = pts[-1]
        out.append(("Largest world size", f"{last.world_size} processes: "
                                          f"{last.throughput_per_s:.1f} samples/s, "
                                          f"{last.speedup:.2f}x, efficiency "
                                          f"{last.efficiency:.0%}"))
        out.append(("Gradient all-reduce", f"{si(last.bytes_per_step)}B per step in "
                                           f"{last.buckets} bucket(s); ring volume per rank "
                                           f"{si(last.theory_bytes_per_step)}B"))
    return out + [("Note", n) for n in result.notes]


COLUMNS = [Column("Procs", True), Column("Threads", True, priority=2),
           Column("Batch", True, priority=2), Column("Step ms", True),
           Column("p10-p90 ms", priority=2), Column("Samples/s", True), Column("Speed-up", True),
           Column("Efficiency", True), Column("Comm ms", True, priority=1),
           Column("Comm", True), Column("Exposed", True, priority=1),
           Column("Buckets", True, priority=3), Column("Bytes", True, priority=3),
           Column("MFU", True, priority=1, optional=True), Column("Note", optional=True)]


def _ms(seconds: float) -> Cell:
    return Cell(ms(seconds, 2), seconds * 1e3)


def _mfu(p) -> Cell:
    """MFU per GPU at the median step against the measured peak (empty in results saved
    before it: the column is left out)."""
    u = getattr(p, "utilisation", None)
    if not u:
        return Cell("")
    return Cell(pct(u.get("mfu"), 2), u.get("mfu"))


def _rows(result) -> list[list[Cell]]:
    rows = []
    for p in result.points:
        rows.append([
            Cell(str(p.world_size), p.world_size), Cell(str(p.threads_per_rank),
                                                         p.threads_per_rank),
            Cell(str(p.batch_per_rank), p.batch_per_rank), _ms(p.step_s),
            Cell(f"{ms(p.step_p10_s, 1)}-{ms(p.step_p90_s, 1)}", p.step_p10_s),
            Cell(num(p.throughput_per_s, ".1f"), p.throughput_per_s),
            Cell(f"{p.speedup:.2f}x", p.speedup), Cell(pct(p.efficiency, 0), p.efficiency),
            _ms(p.communication_s), Cell(pct(p.communication_share), p.communication_share),
            Cell(pct(p.exposed_share), p.exposed_share), Cell(str(p.buckets), p.buckets),
            Cell(f"{si(p.bytes_per_step)}B", p.bytes_per_step), _mfu(p),
            Cell("oversubscribed" if p.oversubscribed else "")])
    return rows


LEGEND = ("Threads and batch are per rank. Samples/s: all ranks together (each rank trains its own "
          "batch); speed-up: over the first world size; efficiency: speed-up x N0 / N (100% = "
          "linear); MFU: model FLOPs per second per rank over the measured peak; comm: share of "
          "the step inside the gradient all-reduces; exposed: the part "
          "of it after backward's last gradient, which nothing overlaps.")


def tables(result) -> list[RowTable]:
    return [RowTable("scaling", "Throughput per world size", COLUMNS, _rows(result),
                     hot=[p.oversubscribed for p in result.points])]


def charts(result) -> list[Chart]:
    pts = result.points
    if not pts:
        return []
    n0 = pts[0].world_size
    measured = Series("measured", PALETTE[0], [
        Point(p.world_size, p.speedup,
              f"{p.world_size} processes: {p.speedup:.2f}x ({p.efficiency:.0%} of linear), "
              f"{p.throughput_per_s:.1f} samples/s, communication {pct(p.communication_share)}"
              + (" (oversubscribed)" if p.oversubscribed else ""), hot=p.oversubscribed)
        for p in pts])
    linear = Series("linear", PALETTE[2], [Point(p.world_size, p.world_size / n0) for p in pts],
                    dashed=True)
    over = [str(p.world_size) for p in pts if p.oversubscribed]
    note = "dashed: linear scaling" + (
        f"; oversubscribed (ranks share CPU cores): {', '.join(over)} processes" if over else "")
    return [Chart("scaling-speedup", "lines", "Speed-up against the number of processes",
                  "processes", "speed-up (x)", [measured], x_ticks=[p.world_size for p in pts],
                  guides=[linear], note=note)]


CSV_COLUMNS = ["world_size", "threads_per_rank", "batch_per_rank", "steps", "step_s",
               "step_p10_s", "step_p90_s", "throughput_per_s", "speedup", "efficiency",
               "communication_s", "communication_share", "exposed_s", "exposed_share", "buckets",
               "bytes_per_step", "theory_bytes_per_step", "oversubscribed"]


def csv(result) -> DataTable:
    return DataTable(CSV_COLUMNS, [[getattr(p, c) for c in CSV_COLUMNS] for p in result.points])


def scaling_terminal(result) -> list:
    title, sub = heading(result)
    return [replace(tables(result)[0], title=f"{title} ({sub})"),
            Lines([LEGEND] + [f"note: {n}" for n in result.notes])]


VIEW = View(heading=heading, terminal=scaling_terminal, facts=facts, tables=tables, charts=charts,
            csv=csv, lead=lead_section)
