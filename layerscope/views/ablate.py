"""ablate (``AblationReport``): each variant's time per phase and per step, its speed-up
over the baseline and whether it is beyond noise."""
from __future__ import annotations

from dataclasses import replace

from layerscope.views.common import (
    PHASE_LABELS,
    cell,
    noise_facts,
    noise_lines,
    phase_stack,
    spent_phases,
)
from layerscope.views.lead import lead_section
from layerscope.views.sections import (
    Cell,
    Chart,
    Column,
    DataTable,
    Lines,
    RowTable,
    View,
)


def ablate_heading(result) -> tuple[str, str]:
    return (f"{result.recipe} — ablation",
            f"device {result.device} · {result.steps} steps ({result.warmup_steps} warm-up "
            f"excluded) · {result.repeats} repeat(s) · ms per step")


def ablate_facts(result) -> list[tuple[str, str]]:
    ok = [v for v in result.variants if v.step]
    out = [("Variants", f"{len(result.variants)} ({len(ok)} ran)"),
           ("Steps", f"{result.steps} per run, first {result.warmup_steps} excluded"),
           ("Repeats", str(result.repeats))]
    best = max(ok, key=lambda v: v.speedup or 0, default=None)
    if best and best.speedup:
        out.append(("Fastest", f"{best.variant}: {best.step['median_s'] * 1e3:.2f} ms per "
                               f"step, {best.speedup:.2f}x over baseline"))
    return out + noise_facts(result)


def variant_label(v) -> str:
    """An ablation variant's name, with what ``all`` stood for."""
    return f"{v.variant} = {v.expanded}" if v.expanded else v.variant


def _ablate_phases(a) -> dict[str, str]:
    return spent_phases(PHASE_LABELS, [v.phases_ms or {} for v in a.variants])


def _ablate_table(a) -> RowTable:
    labels = _ablate_phases(a)
    cols = [Column("Variant")] + [Column(p, True, priority=2) for p in labels.values()] + [
        Column("Total ms", True), Column("Speed-up", True), Column("Beyond noise", priority=1),
        Column("Status", wrap=True)]
    rows = []
    for v in a.variants:
        if v.status != "ok" or not v.phases_ms:
            rows.append([cell(variant_label(v))] + [Cell("-")] * (len(labels) + 3)
                        + [Cell(v.reason or v.status, v.status,
                                style="yellow" if v.status == "n/a" else "red")])
            continue
        noise = "-" if v.beyond_noise is None else ("yes" if v.beyond_noise else "no")
        rows.append([cell(variant_label(v))]
                    + [Cell(f"{v.phases_ms.get(p, 0.0):.2f}", v.phases_ms.get(p))
                       for p in labels]
                    + [Cell(f"{v.step['median_s'] * 1e3:.2f}", v.step["median_s"] * 1e3),
                       Cell("-" if not v.speedup else f"{v.speedup:.2f}x", v.speedup),
                       Cell(noise), Cell("ok")])
    return RowTable("variants", "Variants (ms per step; speed-up = baseline / variant)",
                    cols, rows)


def ablate_tables(a) -> list[RowTable]:
    return [_ablate_table(a)]


def ablate_csv(a) -> DataTable:
    """One row per variant: its ms per step in each phase, then the step's."""
    cols = (["variant", "status"] + [f"{p}_ms" for p in PHASE_LABELS]
            + ["step_ms", "speedup", "beyond_noise", "reason"])
    rows = []
    for v in a.variants:
        ms_of = v.phases_ms or {}
        step = (v.step or {}).get("median_s")
        rows.append([variant_label(v), v.status] + [ms_of.get(p) for p in PHASE_LABELS]
                    + [None if step is None else step * 1e3, v.speedup, v.beyond_noise,
                       v.reason])
    return DataTable(cols, rows)


def ablate_charts(a) -> list[Chart]:
    ran = [v for v in a.variants if v.status == "ok" and v.phases_ms]
    if not ran:
        return []
    tips = [f"{v.variant}: {v.step['median_s'] * 1e3:.2f} ms per step"
            + (f", {v.speedup:.2f}x over baseline" if v.speedup else "")
            + ("" if v.beyond_noise is None else
               (", beyond noise" if v.beyond_noise else ", within noise")) for v in ran]
    chart = phase_stack("ablate-phases", "Time per phase, per variant",
                         [v.variant for v in ran], [v.phases_ms for v in ran], tips, "variant")
    skipped = [f"{v.variant} ({v.reason or v.status})" for v in a.variants if v not in ran]
    if skipped:
        chart.note = "not run: " + ", ".join(skipped)
    return [chart]


def ablate_terminal(report) -> list:
    variants = replace(_ablate_table(report),
                       title=f"{report.recipe}: ablation on {report.device} ({report.steps} "
                             f"steps, {report.warmup_steps} warm-up steps excluded, "
                             f"{report.repeats} repeat(s); ms per step)")
    return [variants, Lines(["Speed-up: baseline step time / variant step time. Beyond noise: "
                             "the variant's range (over repeats; p10-p90 of steps with one "
                             "repeat) does not overlap the baseline's."] + noise_lines(report))]


ABLATE = View(heading=ablate_heading, terminal=ablate_terminal, facts=ablate_facts,
              tables=ablate_tables, charts=ablate_charts, csv=ablate_csv, lead=lead_section)
