"""Training reports: the seed-style phase breakdown table and the per-epoch metrics."""
from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from layerscope.core.units import si
from layerscope.renderers.tables import phase_title, variant_label

PHASE_LABELS = {"data": "Data loading", "h2d": "Host-to-device", "forward": "Forward",
                "loss": "Loss", "backward": "Backward", "optimizer": "Optimizer", "other": "Other"}


def epoch_line(row: dict) -> str:
    parts = [f"epoch {row['epoch']:>3}", f"step {row['step']}",
             f"train loss {row['train_loss']:.4f}", f"train acc {row['train_top1']:.2%}"]
    if "val_loss" in row:
        parts += [f"val loss {row['val_loss']:.4f}", f"val top-1 {row['val_top1']:.2%}",
                  f"top-5 {row['val_top5']:.2%}"]
    parts += [f"lr {row['lr']:.3g}", f"{row['epoch_seconds']:.1f}s"]
    return " | ".join(parts)


def breakdown_table(breakdown: dict, title: str) -> Table:
    t = Table(title=title, header_style="bold", pad_edge=False)
    for name, justify in [("Phase", "left"), ("Seconds", "right"), ("Share", "right"),
                          ("ms / step", "right")]:
        t.add_column(name, justify=justify)
    wall = breakdown["wall_s"] or 0.0
    steps = breakdown["steps"] or 1
    for phase, seconds in breakdown["seconds"].items():
        t.add_row(PHASE_LABELS.get(phase, phase), f"{seconds:.3f}",
                  f"{seconds / wall:.1%}" if wall else "-", f"{seconds / steps * 1e3:.2f}")
    t.add_section()
    t.add_row("Total", f"{wall:.3f}", "100.0%" if wall else "-", f"{wall / steps * 1e3:.2f}")
    return t


def render_train(report) -> Group:
    b = report.breakdown
    lines = [
        f"{report.recipe}: {b['steps']} measured steps, {b['samples']} samples, "
        f"throughput {b['throughput_per_s'] or 0:.1f} samples/s",
        f"CPU utilisation {report.cpu_utilisation or 0:.2f} cores; peak RSS "
        f"{si(report.peak_rss_bytes)}B"
        + (f"; peak CUDA {si(report.peak_cuda_bytes)}B" if report.peak_cuda_bytes else ""),
        f"run directory: {report.run_dir}",
    ]
    if report.final:
        lines.insert(0, "final: " + epoch_line(report.final))
    lines += [f"note: {n}" for n in report.notes]
    title = phase_title((report.config or {}).get("warmup_steps") or 0)
    parts = [breakdown_table(b, title), Text("\n".join(lines))]
    if report.ops:
        from layerscope.core.optable import OpTable
        from layerscope.renderers.terminal import render_ops

        parts += [Text(""), render_ops(OpTable.from_dict(report.ops))]
    return Group(*parts)


def render_ablation(report) -> Group:
    t = Table(title=f"{report.recipe}: ablation on {report.device} ({report.steps} steps, "
                    f"{report.warmup_steps} warm-up steps excluded, {report.repeats} repeat(s); "
                    f"ms per step)", header_style="bold", pad_edge=False)
    t.add_column("Variant", justify="left")
    for p in PHASE_LABELS.values():
        t.add_column(p, justify="right")
    for name in ("Total", "Speed-up", "Beyond noise"):
        t.add_column(name, justify="right" if name != "Beyond noise" else "left")
    for v in report.variants:
        label = variant_label(v)
        if v.status != "ok":
            t.add_row(label, *["-"] * len(PHASE_LABELS), "-", "-",
                      Text(v.reason or v.status, style="yellow" if v.status == "n/a" else "red"))
            continue
        phases = [f"{v.phases_ms[p]:.2f}" for p in PHASE_LABELS]
        noise = "-" if v.beyond_noise is None else ("yes" if v.beyond_noise else "no")
        t.add_row(label, *phases, f"{v.step['median_s'] * 1e3:.2f}",
                  f"{v.speedup:.2f}x" if v.speedup else "-", noise)
    from layerscope.renderers.terminal import noise_lines

    lines = ["Speed-up: baseline step time / variant step time. Beyond noise: the variant's "
             "range (over repeats; p10-p90 of steps with one repeat) does not overlap the "
             "baseline's."] + noise_lines(report)
    return Group(t, Text("\n".join(lines)))


LOOP_TOP_LAYERS = 15


def render_loop(result) -> Group:
    """``profile --loop``: the phases of each batch, then the slowest layers."""
    b = result.phases
    title = (f"{result.model} on {result.dataset}: inference loop on {result.device} "
             f"({result.batches} batches of {result.batch_size}, {result.warmup} warm-up "
             f"batch{'es' if result.warmup != 1 else ''} excluded; ms per batch)")
    t = Table(title=f"Slowest layers (forward ms per batch; top {LOOP_TOP_LAYERS})",
              header_style="bold", pad_edge=False)
    for name, justify in [("Layer", "left"), ("Type", "left"), ("Median", "right"),
                          ("p10", "right"), ("p90", "right"), ("Share of forward", "right")]:
        t.add_column(name, justify=justify)
    for row in result.layers[:LOOP_TOP_LAYERS]:
        s = row.time
        t.add_row(row.name, row.type, f"{s['median_s'] * 1e3:.3f}", f"{s['p10_s'] * 1e3:.3f}",
                  f"{s['p90_s'] * 1e3:.3f}", "-" if row.share is None else f"{row.share:.1%}")
    lines = [f"throughput {b['throughput_per_s'] or 0:.1f} samples/s; batch time median "
             f"{result.batch_time['median_s'] * 1e3:.2f} ms (p10 "
             f"{result.batch_time['p10_s'] * 1e3:.2f}, p90 {result.batch_time['p90_s'] * 1e3:.2f})",
             "layer coverage: " + ("-" if result.coverage is None else f"{result.coverage:.0%}")
             + " of the forward phase (the rest is the model's own code between layers)"]
    return Group(breakdown_table(b, title), t, Text("\n".join(lines)))
