"""analyze and profile (``Report``): the per-layer table with torchinfo's footer, latency per
layer with its hot rows, key figures, MACs/parameter/latency bars and the roofline."""
from __future__ import annotations

from dataclasses import replace

from layerscope.core.units import megabytes, shape_str, si
from layerscope.views.common import (
    by_type_colors,
    cell,
    efficiency_facts,
    efficiency_lines,
    exact,
    layer_bars,
    layer_tip,
    mean_mark_legend,
    mean_ms,
    ms,
    ms_cell,
    noise_facts,
    noise_lines,
    num,
    pct,
    row_label,
    type_of,
)
from layerscope.views.highlight import describe, hot_predicate, rule_of
from layerscope.views.kernels import kernel_lines, kernel_tables
from layerscope.views.lead import lead_section
from layerscope.views.sections import (
    Cell,
    Chart,
    Column,
    DataTable,
    Lines,
    Point,
    RowTable,
    Series,
    View,
    noise_warnings,
)


# ---- heading and key figures ------------------------------------------------------------
def _input_text(i: dict) -> str:
    """'1x3x224x224 float32', 'mask=1x128 bool', 'int' (a forward argument that is no tensor)."""
    name = f"{i['name']}=" if i.get("name") else ""
    if "shape" not in i:
        return name + str(i.get("type", "?"))
    return name + f"{shape_str([i.get('shape')])} {i.get('dtype') or ''}".strip()


def _heading(result, profiled: bool) -> tuple[str, str]:
    s = result.settings
    inputs = ", ".join(_input_text(i) for i in result.inputs)
    parts = [f"input {inputs}" if inputs else None, f"frontend {result.frontend}",
             f"mode {s.get('mode', 'inference')}",
             f"depth {s['depth']}" if s.get("depth") is not None else "leaf layers"]
    if profiled:
        e = result.end_to_end or {}
        parts += [f"device {s.get('device')}", f"batch {s.get('batch_size')}",
                  f"{s.get('threads')} threads", f"n={e.get('n')} runs"]
    title = f"{result.model} — {'per-layer latency' if profiled else 'static cost'}"
    return title, " · ".join(p for p in parts if p)


def analyze_heading(result) -> tuple[str, str]:
    return _heading(result, False)


def profile_heading(result) -> tuple[str, str]:
    return _heading(result, True)


def _cost_facts(r) -> list[tuple[str, str]]:
    t = r.totals
    out = [("Parameters", f"{exact(t.params)}; trainable {t.trainable_params:,}"),
           *_active_fact(t),
           ("Weight bytes", exact(t.weight_bytes)), ("Buffer bytes", exact(t.buffer_bytes)),
           ("MACs", exact(t.macs)), ("FLOPs", exact(t.flops)),
           ("Bytes read / written", f"{si(t.bytes_read)} / {si(t.bytes_written)}"),
           ("Intensity", "-" if t.intensity is None else f"{t.intensity:.2f} FLOP/B"),
           ("Activation bytes", exact(t.activation_bytes)),
           ("Peak activation bytes", exact(t.peak_activation_bytes)),
           ("Input / output bytes", f"{si(t.input_bytes)} / {si(t.output_bytes)}")]
    if t.layer_output_bytes is not None:
        out.append((_outputs_label(r), exact(t.layer_output_bytes)))
    if t.torchinfo_pass_bytes is not None:
        out.append(("Forward/backward pass (torchinfo)", exact(t.torchinfo_pass_bytes)))
    if t.backward_macs is not None:
        out += [("Backward MACs", exact(t.backward_macs)),
                ("Backward FLOPs", exact(t.backward_flops)),
                ("Gradient bytes", exact(t.gradient_bytes)),
                ("Optimizer state bytes",
                 f"{exact(t.optimizer_state_bytes)} ({r.settings.get('optimizer')})")]
    cov = pct(r.op_coverage)
    if r.uncounted_ops:
        cov += "; uncounted: " + ", ".join(f"{u.op} x{u.calls}" for u in r.uncounted_ops)
    out.append(("Op coverage", cov))
    return out


def _active_fact(t) -> list[tuple[str, str]]:
    if t.params_active is None or t.params_active == t.params:
        return []
    return [("Active parameters per token", f"{exact(t.params_active)} (expected routing k/E)")]


def analyze_facts(r) -> list[tuple[str, str]]:
    return _cost_facts(r) + [("Note", n) for n in r.notes] + noise_facts(r)


def profile_facts(r) -> list[tuple[str, str]]:
    out = _cost_facts(r)
    if r.end_to_end:
        e = r.end_to_end
        out += [("End-to-end median", f"{ms(e['median_s'])} ms (mean {ms(e.get('mean_s'))}, "
                                      f"p10 {ms(e['p10_s'])}, p90 {ms(e['p90_s'])}, "
                                      f"n={e['n']})"),
                ("Throughput", f"{num(e.get('throughput_per_s'), '.1f')} samples/s"),
                ("Overhead", "-" if r.overhead is None else
                 f"{r.overhead:+.1%} ({definitions(r)[0]})"),
                ("Coverage", f"{pct(r.coverage)} ({definitions(r)[1]})")]
        if r.backward:
            b = r.backward
            out.append(("Backward", f"median {ms(b['end_to_end']['median_s'])} ms, overhead "
                                    f"{pct(b.get('overhead'))}, attributed "
                                    f"{pct(b.get('coverage'))}"))
        if r.roofline:
            c = r.roofline
            out.append(("Roofline", f"peak {c['peak_flops'] / 1e9:.1f} GFLOP/s, bandwidth "
                                    f"{c['bandwidth'] / 1e9:.1f} GB/s, ridge "
                                    f"{c['ridge']:.1f} FLOP/B ({c.get('device')}, "
                                    f"{c.get('dtype')}{_measured(c)})"))
        out += efficiency_facts(r)
    return out + [("Note", n) for n in r.notes] + noise_facts(r)


def _measured(c) -> str:
    """', measured WHEN' for ceilings that record it (cached before, they do not)."""
    return f", measured {c['measured_at']}" if c.get("measured_at") else ""


def above_roof_line(report) -> str | None:
    """The remark on layers measured above 100% of their roof (``above_roof``), or None."""
    a = getattr(report, "above_roof", None)
    if not a:
        return None
    if a.get("measured_at"):
        load = a.get("loadavg")
        cpus = f" on {a['cpus']} CPUs" if a.get("cpus") else ""
        when = f"measured {a['measured_at']}" + (
            f" with load average {load:.2f}{cpus}" if load is not None else "")
    else:
        when = "when and under what load they were measured is not recorded"
    cached = ""
    if a.get("memory_bound"):
        cached = (f"; a memory-bound layer ({a['memory_bound']} of them) can also beat the large "
                  "copy's bandwidth when its data stays in the CPU caches")
    return (f"{a['layers']} of {a['of_layers']} layers above 100% of their roof (up to "
            f"{pct(a['max_pct_of_roof'], 0)}): the cached ceilings look stale ({when}){cached}. "
            f"Re-measure them on a quiet machine, then profile again: {a['command']}")


def profile_warnings(report) -> list[str]:
    line = above_roof_line(report)
    return noise_warnings(report) + ([line] if line else [])


def definitions(report) -> tuple[str, str]:
    """How ``overhead`` and ``coverage`` were computed. Reports saved before the noise section
    (and the rule that ratios come from the same runs) used ratios of medians from different
    samples."""
    if report.noise is None:
        return "instrumented / bare median - 1", "sum of row medians / bare median"
    return ("median of instrumented / bare over interleaved pairs, - 1",
            "median over runs of the rows' sum / that run's wall time")


# ---- row tables (HTML report, notebook) -----------------------------------------------
NAME_CHARS = 48  # a longer layer name is cut in the terminal tables (JSON, CSV keep it whole)


def _layer_cell(row) -> Cell:
    """The Layer cell: the name (and the own-ops note), indented by depth in the terminal."""
    return Cell(row_label(row), row.name, indent=max(row.depth - 1, 0))


# the Layer column: a tree indented by depth, a name of megabytes cut (it took the whole
# width and minutes to lay out)
LAYER = Column("Layer", min_width=24, max_chars=NAME_CHARS)


def analyze_table(r) -> RowTable:
    """The per-layer table: the terminal, the HTML report and the notebook draw this one."""
    training = r.totals.backward_macs is not None
    cols = [LAYER, Column("Type"), Column("Calls", True, priority=2),
            Column("Input shape", priority=2), Column("Output shape", priority=1),
            Column("Params", True), Column("MACs", True), Column("FLOPs", True, priority=1),
            Column("Read B", True, priority=3), Column("Written B", True, priority=3),
            Column("Act. B", True, priority=2), Column("FLOP/B", True, priority=3)]
    if training:
        cols += [Column("Bwd MACs", True, priority=1), Column("Bwd FLOPs", True, priority=2)]
    rows = []
    for row in r.layers:
        cells = [_layer_cell(row), cell(row.type), cell(row.calls, str(row.calls)),
                 cell(shape_str(row.input_shapes)), cell(shape_str(row.output_shapes)),
                 cell(row.params), cell(row.macs), cell(row.flops), cell(row.bytes_read),
                 cell(row.bytes_written), cell(row.activation_bytes),
                 Cell("-" if row.intensity is None else f"{row.intensity:.1f}", row.intensity)]
        if training:
            cells += [cell(row.backward_macs), cell(row.backward_flops)]
        rows.append(cells)
    t = r.totals
    foot = ["Total", "", "", "", "", si(t.params), si(t.macs), si(t.flops), si(t.bytes_read),
            si(t.bytes_written), si(t.activation_bytes),
            "-" if t.intensity is None else f"{t.intensity:.1f}"]
    if training:
        foot += [si(t.backward_macs), si(t.backward_flops)]
    return RowTable("layers", "Per layer", cols, rows, foot)


def profile_table(r) -> RowTable:
    backward = r.backward is not None
    cols = [LAYER, Column("Type"), Column("Input shape", priority=3),
            Column("Output shape", priority=3), Column("MACs", True, priority=1),
            Column("FLOPs", True, priority=3), Column("Median ms", True),
            Column("Mean ms", True, priority=1), Column("p10 ms", True, priority=2),
            Column("p90 ms", True, priority=2), Column("Share", True),
            Column("Rank", True, priority=1), Column("GFLOP/s", True, priority=2),
            Column("GB/s", True, priority=2), Column("FLOP/B", True, priority=3),
            Column("Bound", priority=1), Column("% roof", True, priority=1)]
    if backward:
        cols.append(Column("Bwd ms", True, priority=1))
    rows, hot = [], []
    is_hot_row = hot_predicate(rule_of(r))
    for row in r.layers:
        t = row.time or {}
        a = row.achieved or {}
        roof = row.roofline or {}
        cells = [_layer_cell(row), cell(row.type), cell(shape_str(row.input_shapes)),
                 cell(shape_str(row.output_shapes)), cell(row.macs), cell(row.flops),
                 ms_cell(t.get("median_s")), Cell(mean_ms(t), ms_cell(t.get("mean_s")).sort),
                 ms_cell(t.get("p10_s")),
                 ms_cell(t.get("p90_s")),
                 Cell(pct(row.share), row.share), Cell(str(row.rank or "-"), row.rank),
                 Cell(num(a.get("gflops_per_s"), ".1f"), a.get("gflops_per_s")),
                 Cell(num(a.get("gbytes_per_s"), ".1f"), a.get("gbytes_per_s")),
                 Cell("-" if row.intensity is None else f"{row.intensity:.1f}", row.intensity),
                 cell(roof.get("bound")),
                 Cell(pct(roof.get("pct_of_roof"), 0), roof.get("pct_of_roof"))]
        if backward:
            cells.append(ms_cell((row.backward_time or {}).get("median_s")))
        rows.append(cells)
        hot.append(is_hot_row(row))
    e = r.end_to_end or {}
    foot = ["End-to-end (bare)", "", "", "", si(r.totals.macs), si(r.totals.flops),
            ms(e.get("median_s")), ms(e.get("mean_s")), ms(e.get("p10_s")), ms(e.get("p90_s")),
            pct(r.coverage) + " covered", "", "", "", "", "", ""]
    if backward:
        foot.append(ms(r.backward["end_to_end"]["median_s"]))
    legend = mean_mark_legend(row.time for row in r.layers)
    return RowTable("layers", f"Per layer (highlighted: {describe(rule_of(r))}"
                              f"{'; ' + legend if legend else ''})", cols, rows, foot, hot)


def type_table(r) -> RowTable:
    cols = [("Type", False), ("Layers", True), ("Median ms", True), ("Mean ms", True),
            ("Share", True), ("MACs", True)]
    rows = [[cell(d["type"]), cell(d["layers"], str(d["layers"])),
             ms_cell(d["time"]["median_s"]), ms_cell(d["time"].get("mean_s")),
             Cell(pct(d["share"]), d["share"]), cell(d.get("macs"))] for d in r.by_type]
    return RowTable("by-type", "Time by layer type (shares: sums of the rows' shares)", cols,
                    rows)


def analyze_tables(r) -> list[RowTable]:
    return [analyze_table(r)]


def profile_tables(r) -> list[RowTable]:
    return [profile_table(r)] + ([type_table(r)] if r.by_type else []) + kernel_tables(r)


# ---- charts -----------------------------------------------------------------------------
def _cost_lines(row) -> str:
    return (f"params {si(row.params)}, MACs {si(row.macs)}, FLOPs {si(row.flops)}, "
            f"read {si(row.bytes_read)}B, written {si(row.bytes_written)}B")


def analyze_charts(r) -> list[Chart]:
    if not r.layers:
        return []
    return [
        layer_bars(r, "macs", "MACs per layer", "MACs", lambda x: x.macs,
                   lambda x: layer_tip(x, _cost_lines(x))),
        layer_bars(r, "params", "Parameters per layer", "parameters", lambda x: x.params,
                   lambda x: layer_tip(x, _cost_lines(x),
                                       f"weight bytes {si(x.weight_bytes)}B")),
    ]


def profile_charts(r) -> list[Chart]:
    if not r.layers:
        return []

    def tip(row):
        t = row.time or {}
        a = row.achieved or {}
        roof = row.roofline or {}
        return layer_tip(
            row,
            f"median {ms(t.get('median_s'))} ms, mean {ms(t.get('mean_s'))} ms (p10 "
            f"{ms(t.get('p10_s'))}, p90 {ms(t.get('p90_s'))}), share {pct(row.share)}, "
            f"rank {row.rank}",
            f"MACs {si(row.macs)}, FLOPs {si(row.flops)}, "
            f"{a.get('gflops_per_s', 0):.1f} GFLOP/s, {a.get('gbytes_per_s', 0):.1f} GB/s"
            if a else f"MACs {si(row.macs)}, FLOPs {si(row.flops)}",
            f"{roof['bound']}-bound, {pct(roof.get('pct_of_roof'), 0)} of roof"
            if roof.get("bound") else "")

    def median_ms(row):
        return ((row.time or {}).get("median_s") or 0.0) * 1e3

    def whiskers(row):
        t = row.time or {}
        if t.get("p10_s") is None:
            return None, None
        return t["p10_s"] * 1e3, t["p90_s"] * 1e3

    rule = rule_of(r)
    is_hot = hot_predicate(rule)
    out = [layer_bars(r, "latency", "Latency per layer (median; whiskers p10-p90)",
                      "ms", median_ms, tip, hot=is_hot, whiskers=whiskers)]
    out[0].note = f"{describe(rule)} are outlined and named"
    noise = r.noise or {}
    if noise.get("warnings"):  # the PNG has no warning line of its own
        out[0].note += (f"; noisy: p90/p10 {num(noise.get('p90_over_p10'))}, mean/median "
                        f"{num(noise.get('mean_over_median'))}")
    roof = _roofline(r, tip, is_hot)
    if roof:
        out.append(roof)
    return out


def _roofline(r, tip, is_hot) -> Chart | None:
    c = r.roofline
    if not c:
        return None
    types = [type_of(x) for x in r.layers]
    colors = by_type_colors(types)
    series = {t: Series(t, colors[t]) for t in colors}
    skipped = 0
    for row, t in zip(r.layers, types):
        roof = row.roofline or {}
        x, y = roof.get("intensity"), roof.get("achieved_flops")
        if not x or not y or x <= 0 or y <= 0:
            skipped += 1
            continue
        h = is_hot(row)
        series[t].points.append(Point(x, y, tip(row), hot=h, label=row.name if h else None))
    shown = [s for s in series.values() if s.points]
    if not shown:
        return None
    xs = [p.x for s in shown for p in s.points]
    peak, bw, ridge = c["peak_flops"], c["bandwidth"], c["ridge"]
    x0, x1 = min(min(xs), ridge) / 2, max(max(xs), ridge) * 2
    ceiling = Series(f"roof: {bw / 1e9:.1f} GB/s × intensity, peak {peak / 1e9:.1f} GFLOP/s",
                     "#333333", [Point(x0, bw * x0), Point(ridge, peak), Point(x1, peak)],
                     dashed=True)
    note = f"ridge point {ridge:.1f} FLOP/B ({c.get('device')}, {c.get('dtype')}, " \
           f"{c.get('threads')} threads)"
    if skipped:
        note += f"; {skipped} layer(s) without FLOPs or bytes not shown"
    if r.above_roof:  # the PNG has no warning line of its own
        note += f"; {r.above_roof['layers']} layer(s) above the roof: stale ceilings?"
    return Chart("roofline", "scatter", "Roofline: achieved FLOP/s vs arithmetic intensity",
                 "arithmetic intensity (FLOP/byte)", "FLOP/s", shown, log_x=True, log_y=True,
                 guides=[ceiling], note=note)


# ---- CSV ---------------------------------------------------------------------------------
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


def _csv(report, profiled: bool) -> DataTable:
    training = report.totals.backward_macs is not None
    columns = COLUMNS + (TRAINING_COLUMNS if training else []) + (
        PROFILE_COLUMNS if profiled else [])
    rows = []
    for row in report.layers:
        d = row.to_dict()
        d["input_shapes"] = shape_str(row.input_shapes)
        d["output_shapes"] = shape_str(row.output_shapes)
        d["intensity"] = "" if row.intensity is None else f"{row.intensity:.4g}"
        if profiled:
            d.update(_profile_cells(row))
        rows.append([d[c] for c in columns])
    return DataTable(columns, rows)


def analyze_csv(report) -> DataTable:
    return _csv(report, False)


def profile_csv(report) -> DataTable:
    return _csv(report, True)


# ---- terminal ---------------------------------------------------------------------------
def _outputs_label(report) -> str:
    """``layer_output_bytes`` is the sum of leaf-layer outputs, or of node outputs (ONNX)."""
    return "Sum of node outputs" if report.frontend == "onnx" else "Sum of layer outputs"


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
        *[f"{k}: {v}" for k, v in _active_fact(t)],
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
        what = ("every output of every node, views counted again" if report.frontend == "onnx"
                else "every call of every leaf layer, in-place outputs counted again")
        lines.append(f"{_outputs_label(report)}: {t.layer_output_bytes:,} B "
                     f"({megabytes(t.layer_output_bytes)} MB)   ({what})")
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


def analyze_terminal(report) -> list:
    """The per-layer table, titled with the model, then torchinfo's summary."""
    title = f"{report.model} ({report.frontend}, {report.settings.get('mode', 'inference')})"
    return [replace(analyze_table(report), title=title), Lines(footer_lines(report))]


def profile_lines(report) -> list[str]:
    e = report.end_to_end
    overhead = "-" if report.overhead is None else f"{report.overhead:+.1%}"
    how_overhead, how_coverage = definitions(report)
    lines = [
        f"End-to-end (bare, no instrumentation): median {ms(e['median_s'])} ms, "
        f"mean {ms(e['mean_s'])}, p10 {ms(e['p10_s'])}, p90 {ms(e['p90_s'])}, "
        f"std {ms(e['std_s'])} ms, n={e['n']}; throughput {e['throughput_per_s']:.1f} samples/s",
        f"Overhead {overhead} ({how_overhead}); coverage {pct(report.coverage)} "
        f"({how_coverage})",
    ]
    if report.noise:
        lines += noise_lines(report)
    elif e["median_s"] and e["iqr_s"] > 0.1 * e["median_s"]:
        lines.append("Warning: IQR is above 10% of the median; the machine was noisy.")
    if report.backward:
        b = report.backward
        lines.append(f"Backward: median {ms(b['end_to_end']['median_s'])} ms, overhead "
                     f"{num(b.get('overhead'), '+.1%')}, attributed to modules "
                     f"{pct(b.get('coverage'))}")
    if report.roofline:
        r = report.roofline
        lines.append(f"Roofline ({r['device']}, {r['dtype']}, {r['threads']} threads"
                     f"{_measured(r)}): peak "
                     f"{r['peak_flops'] / 1e9:.1f} GFLOP/s, bandwidth {r['bandwidth'] / 1e9:.1f} "
                     f"GB/s, ridge {r['ridge']:.1f} FLOP/B")
        stale = above_roof_line(report)
        if stale:
            lines.append(f"Warning: {stale}")
    return lines + efficiency_lines(report)


def profile_terminal(report) -> list:
    """The per-layer latency table (hot rows in red), time by layer type, the key figures."""
    s = report.settings
    legend = mean_mark_legend(row.time for row in report.layers)
    layers = replace(profile_table(report),
                     title=f"{report.model}: per-layer latency ({s.get('device')}, batch "
                           f"{s.get('batch_size')}, {s.get('threads')} threads, "
                           f"n={report.end_to_end['n']})",
                     caption=f"red rows: {describe(rule_of(report))}"
                             f"{'; ' + legend if legend else ''}")
    return [layers] + ([type_table(report)] if report.by_type else []) + \
        kernel_tables(report) + [Lines(profile_lines(report) + kernel_lines(report))]


ANALYZE = View(heading=analyze_heading, terminal=analyze_terminal, facts=analyze_facts,
               tables=analyze_tables, charts=analyze_charts, csv=analyze_csv,
               facts_title="Totals")
PROFILE = View(heading=profile_heading, terminal=profile_terminal, facts=profile_facts,
               tables=profile_tables, charts=profile_charts, csv=profile_csv,
               warnings=profile_warnings, facts_title="Totals", lead=lead_section)
