"""The terminal table (rich), with torchinfo's familiar footer."""
from __future__ import annotations

import io

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from layerscope.core.units import megabytes, shape_str, si
from layerscope.renderers.highlight import HOT_SHARE, describe, hot_predicate, rule_of  # noqa: F401


def _layer_table(report) -> Table:
    training = report.totals.backward_macs is not None
    table = Table(title=f"{report.model} ({report.frontend}, "
                        f"{report.settings.get('mode', 'inference')})",
                  show_lines=False, header_style="bold", pad_edge=False)
    for name, justify in [("Layer", "left"), ("Type", "left"), ("Input shape", "left"),
                          ("Output shape", "left"),
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
        cells = [label, row.type, shape_str(row.input_shapes), shape_str(row.output_shapes),
                 si(row.params), si(row.macs),
                 si(row.flops), si(row.bytes_read), si(row.bytes_written),
                 si(row.activation_bytes),
                 "-" if row.intensity is None else f"{row.intensity:.1f}"]
        if training:
            cells.append(si(row.backward_flops))
        table.add_row(*cells)
    t = report.totals
    cells = [Text("Total", style="bold"), "", "", "", si(t.params), si(t.macs), si(t.flops),
             si(t.bytes_read), si(t.bytes_written), si(t.activation_bytes),
             "-" if t.intensity is None else f"{t.intensity:.1f}"]
    if training:
        cells.append(si(t.backward_flops))
    table.add_section()
    table.add_row(*cells)
    return table


def footer_lines(report) -> list[str]:
    """torchinfo's summary, each size labelled with its definition. "Forward/backward pass size"
    is torchinfo's own (2 x the first output of every call of a leaf layer with parameters), so
    it matches what torchinfo prints; ours (2 x activation bytes: every tensor the forward
    creates, plus its gradient) and the plain sum of layer outputs follow it."""
    t = report.totals
    ours = 2 * t.activation_bytes
    pass_size = ours if t.torchinfo_pass_bytes is None else t.torchinfo_pass_bytes
    lines = [
        f"Total params: {t.params:,}",
        f"Trainable params: {t.trainable_params:,}",
        f"Non-trainable params: {t.params - t.trainable_params:,}",
        f"Total mult-adds (M): {t.macs / 1e6:.2f}",
        f"Input size (MB): {megabytes(t.input_bytes)}",
    ]
    if t.torchinfo_pass_bytes is not None:
        lines.append(f"Forward/backward pass size (MB): {megabytes(t.torchinfo_pass_bytes)}"
                     "   (torchinfo: 2 x output bytes of each call of a leaf layer with "
                     "parameters)")
    lines += [
        f"Created tensors x 2 (MB): {megabytes(ours)}   (2 x activation bytes: every tensor "
        "the forward creates, plus its gradient)",
    ]
    if t.layer_output_bytes is not None:
        lines.append(f"Sum of layer outputs: {t.layer_output_bytes:,} B "
                     f"({megabytes(t.layer_output_bytes)} MB)   (every call of every leaf layer, "
                     "in-place outputs counted again)")
    lines += [
        f"Params size (MB): {megabytes(t.weight_bytes)}",
        f"Estimated Total Size (MB): {megabytes(t.input_bytes + pass_size + t.weight_bytes)}"
        "   (input + forward/backward pass + params)",
        f"Peak activation memory (MB): {megabytes(t.peak_activation_bytes)}"
        f"   Buffers (MB): {megabytes(t.buffer_bytes)}",
    ]
    if t.gradient_bytes is not None:
        lines.append(f"Gradients (MB): {megabytes(t.gradient_bytes)}   Optimizer state (MB): "
                     f"{megabytes(t.optimizer_state_bytes)} ({report.settings.get('optimizer')})"
                     f"   Backward MACs (M): {t.backward_macs / 1e6:.2f}")
    cov = f"Coverage: {report.op_coverage:.1%} of op calls costed"
    if report.uncounted_ops:
        cov += "; uncounted: " + ", ".join(f"{u.op} x{u.calls}" for u in report.uncounted_ops)
    lines.append(cov)
    lines += [f"Note: {n}" for n in report.notes]
    return lines


def render_table(report) -> Group:
    if report.kind == "sweep":
        return render_sweep(report)
    if report.kind == "ops":
        return render_ops(report)
    if report.kind == "profile":
        return render_profile(report)
    return Group(_layer_table(report), Text("\n".join(footer_lines(report))))


def to_text(report, width: int | None = None) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width or 160, force_terminal=False, color_system=None,
                      highlight=False, soft_wrap=False)
    console.print(report if report.kind in ("train", "ablate", "loop")
                  else render_table(report))
    return buf.getvalue()


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def _profile_table(report) -> Table:
    backward = report.backward is not None
    table = Table(title=f"{report.model}: per-layer latency ({report.settings.get('device')}, "
                        f"batch {report.settings.get('batch_size')}, "
                        f"{report.settings.get('threads')} threads, n={report.end_to_end['n']})",
                  caption=f"red rows: {describe(rule_of(report))}", caption_justify="left",
                  header_style="bold", pad_edge=False)
    is_hot = hot_predicate(rule_of(report))
    cols = [("Layer", "left"), ("Type", "left"), ("MACs", "right"), ("Median ms", "right"),
            ("Mean ms", "right"), ("p10-p90 ms", "right"), ("Share", "right"),
            ("Rank", "right"), ("GFLOP/s", "right"), ("GB/s", "right"), ("Bound", "left"),
            ("% roof", "right")]
    if backward:
        cols.append(("Bwd ms", "right"))
    for name, justify in cols:
        table.add_column(name, justify=justify, no_wrap=True,
                         min_width=24 if name == "Layer" else None)
    for row in report.layers:
        t = row.time or {}
        hot = is_hot(row)
        label = Text("  " * max(row.depth - 1, 0) + row.name)
        if row.self_only:
            label.append(" (own ops)", style="dim")
        roof = row.roofline or {}
        cells = [label, row.type, si(row.macs), _ms(t.get("median_s")), _ms(t.get("mean_s")),
                 f"{_ms(t.get('p10_s'))}-{_ms(t.get('p90_s'))}",
                 "-" if row.share is None else f"{row.share:.1%}", str(row.rank or "-"),
                 "-" if not row.achieved else f"{row.achieved['gflops_per_s']:.1f}",
                 "-" if not row.achieved else f"{row.achieved['gbytes_per_s']:.1f}",
                 roof.get("bound", "-"),
                 "-" if roof.get("pct_of_roof") is None else f"{roof['pct_of_roof']:.0%}"]
        if backward:
            cells.append(_ms((row.backward_time or {}).get("median_s")))
        table.add_row(*cells, style="bold red" if hot else None)
    return table


def _type_table(report) -> Table:
    table = Table(title="Time by layer type (shares: sums of the rows' shares)",
                  header_style="bold", pad_edge=False)
    for name, justify in [("Type", "left"), ("Layers", "right"), ("Median ms", "right"),
                          ("Mean ms", "right"), ("Share", "right"), ("MACs", "right")]:
        table.add_column(name, justify=justify, no_wrap=True)
    for d in report.by_type:
        table.add_row(d["type"], str(d["layers"]), _ms(d["time"]["median_s"]),
                      _ms(d["time"].get("mean_s")),
                      "-" if d["share"] is None else f"{d['share']:.1%}", si(d["macs"]))
    return table


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def _ratio(x, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def noise_summary(noise: dict) -> str:
    """One line: the spread and the machine readings of a ``noise`` section."""
    load = noise.get("loadavg")
    cpus = noise.get("cpus_available")
    affinity = "" if cpus is None or cpus == noise.get("cpu_count") else \
        f" ({cpus} usable by this process)"
    return (f"p90/p10 {_ratio(noise.get('p90_over_p10'))}, CV {_ratio(noise.get('cv'))}, "
            f"mean/median {_ratio(noise.get('mean_over_median'))} (n={noise.get('n')}); "
            f"load average {'-' if not load else f'{load[0]:.2f}'} at start, "
            f"{noise.get('threads')} threads, {noise.get('cpu_count')} CPUs{affinity}")


def noise_lines(result) -> list[str]:
    """The noise line and its warnings; nothing for a result saved without a noise section."""
    noise = getattr(result, "noise", None)
    if not noise:
        return []
    return [f"Noise: {noise_summary(noise)}"] + [f"Warning: {w}" for w in noise.get("warnings")
                                                  or []]


def definitions(report) -> tuple[str, str]:
    """How ``overhead`` and ``coverage`` were computed. Reports saved before the noise section
    (and the same-run rule, issue 10) used ratios of medians from different samples."""
    if report.noise is None:
        return "instrumented / bare median - 1", "sum of row medians / bare median"
    return ("median of instrumented / bare over interleaved pairs, - 1",
            "median over runs of the rows' sum / that run's wall time")


def profile_lines(report) -> list[str]:
    e = report.end_to_end
    overhead = "-" if report.overhead is None else f"{report.overhead:+.1%}"
    how_overhead, how_coverage = definitions(report)
    lines = [
        f"End-to-end (bare, no instrumentation): median {_ms(e['median_s'])} ms, "
        f"mean {_ms(e['mean_s'])}, p10 {_ms(e['p10_s'])}, p90 {_ms(e['p90_s'])}, "
        f"std {_ms(e['std_s'])} ms, n={e['n']}; throughput {e['throughput_per_s']:.1f} samples/s",
        f"Overhead {overhead} ({how_overhead}); coverage {_pct(report.coverage)} "
        f"({how_coverage})",
    ]
    if report.noise:
        lines += noise_lines(report)
    elif e["median_s"] and e["iqr_s"] > 0.1 * e["median_s"]:
        lines.append("Warning: IQR is above 10% of the median; the machine was noisy.")
    if report.backward:
        b = report.backward
        lines.append(f"Backward: median {_ms(b['end_to_end']['median_s'])} ms, overhead "
                     f"{_ratio(b.get('overhead'), '+.1%')}, attributed to modules "
                     f"{_pct(b.get('coverage'))}")
    if report.roofline:
        r = report.roofline
        lines.append(f"Roofline ({r['device']}, {r['dtype']}, {r['threads']} threads): peak "
                     f"{r['peak_flops'] / 1e9:.1f} GFLOP/s, bandwidth {r['bandwidth'] / 1e9:.1f} "
                     f"GB/s, ridge {r['ridge']:.1f} FLOP/B")
    return lines


def render_profile(report) -> Group:
    parts = [_profile_table(report), Text("\n".join(profile_lines(report)))]
    if report.by_type:
        parts.insert(1, _type_table(report))
    return Group(*parts)


def render_ops(table) -> Group:
    unit = table.settings.get("unit", "run")  # "step" for a training run's table
    t = Table(title=f"{table.model}: top {len(table.rows)} of {table.ops_total} operators by "
                    f"{table.sort} time ({table.device}, per {unit}, {table.runs} {unit}s)",
              header_style="bold", pad_edge=False)
    memory = table.settings.get("memory")
    shapes = table.settings.get("group_by_shape")
    cols = [("Operator", "left")] + ([("Input shapes", "left")] if shapes else []) + [
        ("Self ms", "right"), ("Total ms", "right"), ("Calls", "right"), ("Mean ms", "right"),
        ("Share", "right")] + ([("Self mem", "right"), ("Mem", "right")] if memory else [])
    for name, justify in cols:
        t.add_column(name, justify=justify, no_wrap=(name != "Input shapes"))
    for r in table.rows:
        cells = [r.name] + ([r.input_shapes or ""] if shapes else []) + [
            _ms(r.self_s), _ms(r.total_s), str(r.calls), _ms(r.mean_s), f"{r.share:.1%}"]
        if memory:
            cells += [si(r.self_memory_bytes), si(r.memory_bytes)]
        t.add_row(*cells)
    foot = f"All operators: {_ms(table.total_self_s)} ms self time per {unit}"
    if table.trace:
        foot += f"; trace written to {table.trace} (open in ui.perfetto.dev or chrome://tracing)"
    return Group(t, Text(foot))


def render_sweep(report) -> Group:
    t = Table(title=f"{report.model}: sweep ({report.settings.get('runs')} runs per cell)",
              header_style="bold", pad_edge=False)
    for name, justify in [("Device", "left"), ("Backend", "left"), ("Dtype", "left"),
                          ("Threads", "right"), ("Batch", "right"), ("Median ms", "right"),
                          ("p10-p90 ms", "right"), ("Samples/s", "right"), ("Speed-up", "right"),
                          ("Noise", "left"), ("Time by layer type", "left")]:
        t.add_column(name, justify=justify, no_wrap=(name != "Time by layer type"))
    for c in report.cells:
        head = [c.device, c.backend, c.dtype, str(c.threads or "-"), str(c.batch_size)]
        if c.status != "ok":
            t.add_row(*head, "-", "-", "-", "-", "-", Text(f"error: {c.error}", style="red"))
            continue
        lat = c.latency
        types = ", ".join(f"{d['type']} {d['share']:.0%}" for d in (c.by_type or [])[:3]
                          if d.get("share") is not None)
        t.add_row(*head, _ms(lat["median_s"]), f"{_ms(lat['p10_s'])}-{_ms(lat['p90_s'])}",
                  f"{c.throughput_per_s:.1f}", f"{c.speedup:.2f}x",
                  "within noise" if c.within_noise and c.speedup != 1.0 else "",
                  types or "-")
    lines = ["Speed-up: throughput over the first cell; 'within noise': per-sample p10-p90 "
             "ranges overlap with the first cell's."] + noise_lines(report)
    return Group(t, Text("\n".join(lines)))
