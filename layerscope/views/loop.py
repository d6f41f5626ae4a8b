"""loop (``profile --loop``, ``LoopProfile``): the phases of each inference batch and the
slowest layers."""
from __future__ import annotations

from dataclasses import replace

from layerscope.views.common import (
    cell,
    efficiency_facts,
    efficiency_lines,
    mean_mark_legend,
    mean_ms,
    ms_cell,
    noise_facts,
    noise_lines,
    num,
    pct,
    phase_stack,
)
from layerscope.views.lead import lead_section
from layerscope.views.phase_table import (
    PHASE_CSV,
    phase_csv_rows,
    phase_table,
)
from layerscope.views.sections import (
    Cell,
    Chart,
    Column,
    DataTable,
    Lines,
    RowTable,
    View,
)


def loop_heading(result) -> tuple[str, str]:
    warm = f"{result.warmup} warm-up batch{'es' if result.warmup != 1 else ''} excluded"
    return (f"{result.model} on {result.dataset} — inference loop",
            f"device {result.device} · {result.batches} batches of {result.batch_size} "
            f"({warm}) · ms per batch")


def loop_facts(result) -> list[tuple[str, str]]:
    b = result.phases
    return [("Data set", result.dataset),
            ("Batches", f"{result.batches} of {result.batch_size} ({result.warmup} warm-up "
                        "excluded)"),
            ("Throughput", f"{num(b.get('throughput_per_s'), '.1f')} samples/s"),
            ("Layer coverage", pct(result.coverage))] + [("Note", n) for n in result.notes] \
        + efficiency_facts(result) + noise_facts(result)


def _loop_layers_table(r, layers=None) -> RowTable:
    """Forward time per layer (``layers``: these rows of ``r.layers``, by default all)."""
    layers = r.layers if layers is None else layers
    cols = [Column("Layer", wrap=True), Column("Type"), Column("Median ms", True),
            Column("Mean ms", True, priority=1), Column("p10 ms", True, priority=2),
            Column("p90 ms", True, priority=2), Column("Share of forward", True)]
    rows = [[cell(row.name), cell(row.type), ms_cell(row.time["median_s"]),
             Cell(mean_ms(row.time), ms_cell(row.time.get("mean_s")).sort),
             ms_cell(row.time["p10_s"]), ms_cell(row.time["p90_s"]),
             Cell(pct(row.share), row.share)] for row in layers]
    legend = mean_mark_legend(row.time for row in layers)
    return RowTable("layers", "Forward time per layer, per batch"
                    + (f" ({legend})" if legend else ""), cols, rows)


def loop_tables(r) -> list[RowTable]:
    return [phase_table(r.phases), _loop_layers_table(r)]


def loop_csv(r) -> DataTable:
    return DataTable(PHASE_CSV, phase_csv_rows("batches", r.phases))


def loop_charts(r) -> list[Chart]:
    b = r.phases
    steps = b.get("steps") or 0
    per = {p: (s / steps * 1e3 if steps else 0.0) for p, s in b["seconds"].items()}
    tip = f"{steps} measured batches of {r.batch_size}"
    return [phase_stack("loop-phases", "Time per phase, per batch", [r.dataset], [per], [tip],
                         "data set")]


LOOP_TOP_LAYERS = 15


def loop_terminal(result) -> list:
    """``profile --loop``: the phases of each batch, then the slowest layers."""
    b = result.phases
    title = (f"{result.model} on {result.dataset}: inference loop on {result.device} "
             f"({result.batches} batches of {result.batch_size}, {result.warmup} warm-up "
             f"batch{'es' if result.warmup != 1 else ''} excluded; ms per batch)")
    top = result.layers[:LOOP_TOP_LAYERS]
    layers = replace(_loop_layers_table(result, top), caption=mean_mark_legend(
        row.time for row in top), title=f"Slowest layers (forward ms per batch; top "
                                        f"{LOOP_TOP_LAYERS})")
    lines = [f"throughput {b['throughput_per_s'] or 0:.1f} samples/s; batch time median "
             f"{result.batch_time['median_s'] * 1e3:.2f} ms (p10 "
             f"{result.batch_time['p10_s'] * 1e3:.2f}, p90 {result.batch_time['p90_s'] * 1e3:.2f})",
             "layer coverage: " + ("-" if result.coverage is None else f"{result.coverage:.0%}")
             + " of the forward phase (the rest: "
             + (getattr(result, "coverage_rest", None) or "the model's own code between layers")
             + ")"]
    lines += efficiency_lines(result)
    lines += [f"note: {n}" for n in result.notes] + noise_lines(result)
    return [replace(phase_table(b), title=title), layers, Lines(lines)]


LOOP = View(heading=loop_heading, terminal=loop_terminal, facts=loop_facts, tables=loop_tables,
            charts=loop_charts, csv=loop_csv, lead=lead_section)
