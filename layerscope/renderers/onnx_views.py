"""`analyze --view ops|attributes|bandwidth|memory`: other tables of the same Report.

Everything shown is in the Report (rows, totals, ``memory``); this module only shapes and
formats it. ``layers`` (the default view) is renderers/terminal.py's table.
"""
from __future__ import annotations

import io
from collections import defaultdict

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from layerscope.core.units import megabytes, si
from layerscope.renderers.view_settings import VIEWS

# Nodes that do no arithmetic and only hand on a value: the exporters write many (AlexNet's
# dynamo export holds more Constant/Identity nodes than real ops); --skip-trivial leaves them out.
TRIVIAL_OPS = ("Constant", "Identity")

# Shown in their own columns of the attributes view; everything else goes to "other".
CONV_ATTRIBUTES = ("kernel_shape", "strides", "pads", "dilations", "group")


def op_histogram(report) -> list[dict]:
    """Per op type: node count and summed costs, most frequent first (ties by name)."""
    by_type: dict[str, dict] = defaultdict(lambda: {"count": 0, "macs": 0, "flops": 0,
                                                    "bytes": 0})
    for row in report.layers:
        d = by_type[row.type]
        d["count"] += 1
        d["macs"] += row.macs
        d["flops"] += row.flops
        d["bytes"] += row.bytes_read + row.bytes_written
    return [{"type": t} | d for t, d in sorted(by_type.items(), key=lambda kv: (-kv[1]["count"],
                                                                               kv[0]))]


def select_rows(report, op_type: str | None = None, skip_trivial: bool = False):
    """A copy of ``report`` whose rows are the nodes whose op type fully matches ``op_type`` (a
    regular expression), without Constant/Identity nodes when ``skip_trivial``. Totals are
    the whole graph's; ``settings["rows_selected"]`` says what was left out."""
    import dataclasses

    from layerscope.core import values

    if op_type is None and not skip_trivial:
        return report
    rx = values.pattern(op_type, "--op-type") if op_type is not None else None
    rows = [r for r in report.layers if (rx is None or rx.fullmatch(r.type))
            and not (skip_trivial and r.type in TRIVIAL_OPS)]
    what = []
    if op_type is not None:
        what.append(f"op type matching {op_type!r}")
    if skip_trivial:
        what.append(f"without {'/'.join(TRIVIAL_OPS)}")
    settings = dict(report.settings, rows_selected=f"{len(rows)} of {len(report.layers)} nodes "
                                                   f"({', '.join(what)})")
    return dataclasses.replace(report, layers=rows, settings=settings)


def _selection_line(report) -> str:
    chosen = report.settings.get("rows_selected")
    return f"Showing {chosen}; totals are the whole graph's" if chosen else ""


def _ops(report) -> Group:
    hist = op_histogram(report)
    total = sum(h["count"] for h in hist)
    table = Table(title=f"{report.model}: operators", header_style="bold", pad_edge=False)
    for name, justify in [("Op type", "left"), ("Count", "right"), ("Share", "right"),
                          ("MACs", "right"), ("FLOPs", "right"), ("Bytes moved", "right")]:
        table.add_column(name, justify=justify, no_wrap=True)
    for h in hist:
        table.add_row(h["type"], str(h["count"]), f"{h['count'] / total:.1%}" if total else "-",
                      si(h["macs"]), si(h["flops"]), si(h["bytes"]))
    head = (f"Total operators: {total}; unique: {len(hist)} "
            f"({', '.join(sorted(h['type'] for h in hist))})")
    trivial = sum(h["count"] for h in hist if h["type"] in TRIVIAL_OPS)
    if trivial:
        head += (f"\nOf these, {trivial} are {'/'.join(TRIVIAL_OPS)} nodes (no arithmetic); "
                 f"{total - trivial} without them (--skip-trivial leaves them out)")
    if _selection_line(report):
        head += "\n" + _selection_line(report)
    return Group(Text(head), table)


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(_fmt(v) for v in value) if value else "[]"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _channels_hw(shape: list) -> tuple[str, str, str]:
    # (N, C, H, W) -> C, H, W; (N, C, L) -> C, -, L; (N, F) -> F, -, -
    if not shape or len(shape) < 2:
        return "-", "-", "-"
    c = str(shape[1])
    h = str(shape[2]) if len(shape) >= 4 else "-"
    w = str(shape[-1]) if len(shape) >= 3 else "-"
    return c, h, w


def _attributes(report):
    table = Table(title=f"{report.model}: node attributes", header_style="bold", pad_edge=False)
    for name, justify in [("Node", "left"), ("Op", "left"), ("In C", "right"), ("H", "right"),
                          ("W", "right"), ("kernel_shape", "left"), ("strides", "left"),
                          ("pads", "left"), ("dilations", "left"), ("group", "right"),
                          ("Other attributes", "left")]:
        table.add_column(name, justify=justify, no_wrap=(name != "Other attributes"))
    for row in report.layers:
        attrs = row.attributes or {}
        c, h, w = _channels_hw(row.input_shapes[0] if row.input_shapes else [])
        kernel = attrs.get("kernel_shape")
        if kernel is None and row.type in ("Conv", "ConvTranspose") and len(row.input_shapes) > 1:
            kernel = row.input_shapes[1][2:]  # from the weight's shape (Cout, Cin/g, *k)
        other = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(attrs.items())
                          if k not in CONV_ATTRIBUTES)
        table.add_row(row.name, row.type, c, h, w, _fmt(kernel), _fmt(attrs.get("strides")),
                      _fmt(attrs.get("pads")), _fmt(attrs.get("dilations")),
                      _fmt(attrs.get("group")), other or "")
    if _selection_line(report):
        return Group(table, Text(_selection_line(report)))
    return table


def _bandwidth(report) -> Group:
    rows = sorted(report.layers, key=lambda r: (-(r.bytes_read + r.bytes_written), r.name))
    t = report.totals
    moved = t.bytes_read + t.bytes_written
    table = Table(title=f"{report.model}: memory traffic per node (no on-chip reuse)",
                  header_style="bold", pad_edge=False)
    for name, justify in [("Node", "left"), ("Op", "left"), ("Read B", "right"),
                          ("Written B", "right"), ("Total B", "right"), ("Share", "right"),
                          ("FLOP/B", "right")]:
        table.add_column(name, justify=justify, no_wrap=True)
    for r in rows:
        total = r.bytes_read + r.bytes_written
        table.add_row(r.name, r.type, si(r.bytes_read), si(r.bytes_written), si(total),
                      f"{total / moved:.1%}" if moved else "-",
                      "-" if r.intensity is None else f"{r.intensity:.1f}")
    foot = (f"Total traffic: {t.bytes_read:,} B read + {t.bytes_written:,} B written = "
            f"{moved:,} B ({megabytes(moved)} MB)")
    if _selection_line(report):
        foot += "\n" + _selection_line(report)
    return Group(table, Text(foot))


def memory_lines(report) -> list[str]:
    t = report.totals
    m = report.memory or {}
    lines = [f"Activation sum (tensors the nodes create): {t.activation_bytes:,} B "
             f"({megabytes(t.activation_bytes)} MB)"]
    peak = f"Live-set peak: {t.peak_activation_bytes:,} B ({megabytes(t.peak_activation_bytes)} MB)"
    if m.get("peak_step") is not None:
        peak += (f" at step {m['peak_step']} (node {m['peak_node']}), "
                 f"{m['live_tensors_at_peak']} tensors live")
    lines.append(peak)
    if m.get("live_at_peak"):
        lines.append("Largest live at the peak: " + ", ".join(
            f"{d['tensor']} {d['bytes']:,} B" for d in m["live_at_peak"]))
    if m.get("arena_bytes") is not None:
        frag = m.get("fragmentation")
        lines.append(f"Packed arena (largest first, best fit): {m['arena_bytes']:,} B "
                     f"({megabytes(m['arena_bytes'])} MB); fragmentation (arena / peak): "
                     + ("-" if frag is None else f"{frag:.3f}"))
    else:
        lines.append("Packed arena: not computed for this report")
    lines.append(f"Weights (resident, apart): {t.weight_bytes + t.buffer_bytes:,} B "
                 f"({megabytes(t.weight_bytes + t.buffer_bytes)} MB); inputs {t.input_bytes:,} B, "
                 f"outputs {t.output_bytes:,} B")
    return lines


def _memory(report) -> Text:
    return Text(f"{report.model}: activation memory\n" + "\n".join(memory_lines(report)))


def render_view(report, view: str):
    """The rich renderable of one view (not ``layers``)."""
    builders = {"ops": _ops, "attributes": _attributes, "bandwidth": _bandwidth,
                "memory": _memory}
    if view not in builders:
        raise ValueError(f"unknown view {view!r}: use one of {', '.join(VIEWS)}")
    return builders[view](report)


def to_text(report, view: str, width: int | None = None) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width or 160, force_terminal=False, color_system=None,
                      highlight=False, soft_wrap=False)
    console.print(render_view(report, view))
    return buf.getvalue()
