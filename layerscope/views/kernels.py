"""``profile --kernels``: the window's rows per module and phase, and its steps (the report's
``kernels`` section, core/records/kernels.py)."""
from __future__ import annotations

from layerscope.core.records.kernels import OUTSIDE, UNATTRIBUTED
from layerscope.views.common import cell, ms, ms_cell, pct
from layerscope.views.sections import Cell, Column, RowTable


def _total(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) if xs else None


def kernel_table(k) -> RowTable:
    cols = [Column("Module", min_width=20), Column("Type"), Column("Phase"),
            Column("CPU ops", True), Column("CPU self ms", True), Column("Kernels", True),
            Column("Kernel ms", True), Column("Launch ms", True, priority=1),
            Column(f"Short % (<{k['short_kernel_us']:g} µs)", True, priority=1)]
    rows = []
    for r in k["rows"]:
        short = (r["short_kernels"] / r["kernels"]) if r.get("kernels") else None
        rows.append([cell(r["module"]), cell(r["type"] or "-"), cell(r["phase"]),
                     cell(r["cpu_ops"], str(r["cpu_ops"])), ms_cell(r["cpu_self_s"]),
                     cell(r.get("kernels"), "-" if r.get("kernels") is None
                          else str(r["kernels"])),
                     ms_cell(r.get("kernel_s")), ms_cell(r.get("launch_s")),
                     Cell(pct(short), short)])
    rs = k["rows"]
    foot = ["Window", "", "", str(sum(r["cpu_ops"] for r in rs)),
            ms(_total(r["cpu_self_s"] for r in rs)),
            str(_total(r.get("kernels") for r in rs) or "-"),
            ms(_total(r.get("kernel_s") for r in rs)),
            ms(_total(r.get("launch_s") for r in rs)), ""]
    phases = "with backward" if k["backward"] else "forward only"
    return _device_columns(k, RowTable(
        "kernels", f"Kernels per module ({k['steps']} profiled steps, {phases}; "
                   f"{OUTSIDE} and {UNATTRIBUTED} are shown, never dropped"
                   f"{'; ' + k['note'] if k.get('note') else ''})", cols, rows, foot), 5)


def _device_columns(k, table: RowTable, first: int) -> RowTable:
    """A run without device figures (CPU) keeps the first ``first`` columns only."""
    if not k.get("note"):
        return table
    table.columns = table.columns[:first]
    table.rows = [r[:first] for r in table.rows]
    table.foot = table.foot[:first]
    return table


def step_table(k) -> RowTable:
    cols = [Column("Step", True), Column("Wall ms", True), Column("CPU ops", True),
            Column("CPU op self ms", True), Column("Kernels", True), Column("Kernel ms", True),
            Column("GPU busy ms", True), Column("Idle: host ms", True),
            Column("Idle: other ms", True)]
    rows = [[cell(s["step"], str(s["step"])), ms_cell(s["wall_s"]),
             cell(s["cpu_ops"], str(s["cpu_ops"])), ms_cell(s["cpu_self_s"]),
             cell(s.get("kernels"), "-" if s.get("kernels") is None else str(s["kernels"])),
             ms_cell(s.get("kernel_s")), ms_cell(s.get("busy_s")),
             ms_cell(s.get("idle_host_s")), ms_cell(s.get("idle_other_s"))]
            for s in k["per_step"]]
    title = ("Profiled steps (busy + idle = wall; idle: host = the device waited for a "
             "launch call)") if not k.get("note") else f"Profiled steps ({k['note']})"
    return _device_columns(k, RowTable("kernel-steps", title, cols, rows), 4)


def kernel_tables(report) -> list[RowTable]:
    k = getattr(report, "kernels", None)
    return [] if k is None else [kernel_table(k), step_table(k)]


def kernel_lines(report) -> list[str]:
    k = getattr(report, "kernels", None)
    if k is None:
        return []
    walls = sum(s["wall_s"] for s in k["per_step"])
    ops = sum(s["cpu_self_s"] for s in k["per_step"])
    lines = [f"Kernels window: {k['steps']} steps, wall {ms(walls)} ms, CPU op self time "
             f"{ms(ops)} ms (the rest is host time outside ops: Python, hooks, waits)"]
    if k.get("note"):
        lines.append(f"Kernels: {k['note']}")
    return lines
