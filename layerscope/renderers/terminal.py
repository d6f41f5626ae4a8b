"""The terminal table (rich), with torchinfo's familiar footer."""
from __future__ import annotations

import io

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from layerscope.core.units import megabytes, shape_str, si


def _layer_table(report) -> Table:
    training = report.totals.backward_macs is not None
    table = Table(title=f"{report.model} ({report.frontend}, "
                        f"{report.settings.get('mode', 'inference')})",
                  show_lines=False, header_style="bold", pad_edge=False)
    for name, justify in [("Layer", "left"), ("Type", "left"), ("Output shape", "left"),
                          ("Params", "right"), ("MACs", "right"), ("FLOPs", "right"),
                          ("Read B", "right"), ("Written B", "right"), ("Act. B", "right"),
                          ("FLOP/B", "right")]:
        table.add_column(name, justify=justify, no_wrap=True,
                         min_width=24 if name == "Layer" else None)
    if training:
        table.add_column("Bwd FLOPs", justify="right", no_wrap=True)
    for row in report.layers:
        indent = "  " * max(row.depth - 1, 0)
        label = Text(indent + row.name)
        if row.self_only:
            label.append(" (own ops)", style="dim")
        cells = [label, row.type, shape_str(row.output_shapes), si(row.params), si(row.macs),
                 si(row.flops), si(row.bytes_read), si(row.bytes_written),
                 si(row.activation_bytes),
                 "-" if row.intensity is None else f"{row.intensity:.1f}"]
        if training:
            cells.append(si(row.backward_flops))
        table.add_row(*cells)
    t = report.totals
    cells = [Text("Total", style="bold"), "", "", si(t.params), si(t.macs), si(t.flops),
             si(t.bytes_read), si(t.bytes_written), si(t.activation_bytes),
             "-" if t.intensity is None else f"{t.intensity:.1f}"]
    if training:
        cells.append(si(t.backward_flops))
    table.add_section()
    table.add_row(*cells)
    return table


def footer_lines(report) -> list[str]:
    """torchinfo's summary, our definitions: forward/backward pass size = 2 x activation bytes
    (every tensor the forward creates, kept for backward, plus its gradient)."""
    t = report.totals
    fwd_bwd = 2 * t.activation_bytes
    lines = [
        f"Total params: {t.params:,}",
        f"Trainable params: {t.trainable_params:,}",
        f"Non-trainable params: {t.params - t.trainable_params:,}",
        f"Total mult-adds (M): {t.macs / 1e6:.2f}",
        f"Input size (MB): {megabytes(t.input_bytes)}",
        f"Forward/backward pass size (MB): {megabytes(fwd_bwd)}",
        f"Params size (MB): {megabytes(t.weight_bytes)}",
        f"Estimated Total Size (MB): {megabytes(t.input_bytes + fwd_bwd + t.weight_bytes)}",
        f"Peak activation memory (MB): {megabytes(t.peak_activation_bytes)}"
        f"   Buffers (MB): {megabytes(t.buffer_bytes)}",
    ]
    if t.gradient_bytes is not None:
        lines.append(f"Gradients (MB): {megabytes(t.gradient_bytes)}   Optimizer state (MB): "
                     f"{megabytes(t.optimizer_state_bytes)} ({report.settings.get('optimizer')})"
                     f"   Backward MACs (M): {t.backward_macs / 1e6:.2f}")
    cov = f"Coverage: {report.coverage:.1%} of op calls costed"
    if report.uncounted_ops:
        cov += "; uncounted: " + ", ".join(f"{u.op} x{u.calls}" for u in report.uncounted_ops)
    lines.append(cov)
    return lines


def render_table(report) -> Group:
    return Group(_layer_table(report), Text("\n".join(footer_lines(report))))


def to_text(report, width: int | None = None) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width or 160, force_terminal=False, color_system=None,
                      highlight=False, soft_wrap=False)
    console.print(render_table(report))
    return buf.getvalue()
