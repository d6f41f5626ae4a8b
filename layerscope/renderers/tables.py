"""What every result shows as tables, independent of the output: a heading, the environment,
key figures ("totals") and row tables whose cells carry a display text and a sort key.

The HTML report (sortable, filterable) and the notebook table (``_repr_html_``) both draw these,
so the two never disagree. Plain formatting only; no analysis.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerscope.core.units import shape_str, si
from layerscope.renderers.highlight import describe, hot_predicate, rule_of  # one rule for "hot"
from layerscope.renderers.terminal import definitions, noise_summary

PHASE_LABELS = {"data": "Data loading", "h2d": "Host-to-device", "forward": "Forward",
                "loss": "Loss", "backward": "Backward", "optimizer": "Optimizer", "other": "Other"}


@dataclass
class Cell:
    text: str
    sort: Any = None  # number or string; None sorts last


@dataclass
class RowTable:
    id: str
    title: str
    columns: list[tuple[str, bool]]  # (label, numeric)
    rows: list[list[Cell]]
    foot: list[str] = field(default_factory=list)  # a totals row, never sorted
    hot: list[bool] = field(default_factory=list)  # per row: emphasise


def is_hot(row) -> bool:
    """The default rule; a result's own rule: ``hot_predicate(rule_of(report))``."""
    return hot_predicate()(row)


# ---- small formatters -------------------------------------------------------------------
def ms(seconds: float | None, digits: int = 3) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.{digits}f}"


def pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}%}"


def num(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def exact(n: int | None) -> str:
    """'40.81M (40,813,184)'."""
    if n is None:
        return "-"
    return f"{si(n)} ({n:,})" if abs(n) >= 1000 else f"{n:,}"


def _c(value, text: str | None = None) -> Cell:
    if text is None:
        text = si(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
            else ("-" if value is None else str(value))
    return Cell(text, value)


def _ms_cell(seconds: float | None) -> Cell:
    return Cell(ms(seconds), None if seconds is None else seconds * 1e3)


# ---- heading and environment ------------------------------------------------------------
def _input_text(i: dict) -> str:
    """'1x3x224x224 float32', 'mask=1x128 bool', 'int' (a forward argument that is no tensor)."""
    name = f"{i['name']}=" if i.get("name") else ""
    if "shape" not in i:
        return name + str(i.get("type", "?"))
    return name + f"{shape_str([i.get('shape')])} {i.get('dtype') or ''}".strip()


def heading(result) -> tuple[str, str]:
    """(title, one-line description of the settings)."""
    kind = result.kind
    if kind in ("analyze", "profile"):
        s = result.settings
        inputs = ", ".join(_input_text(i) for i in result.inputs)
        parts = [f"input {inputs}" if inputs else None, f"frontend {result.frontend}",
                 f"mode {s.get('mode', 'inference')}",
                 f"depth {s['depth']}" if s.get("depth") is not None else "leaf layers"]
        if kind == "profile":
            e = result.end_to_end or {}
            parts += [f"device {s.get('device')}", f"batch {s.get('batch_size')}",
                      f"{s.get('threads')} threads", f"n={e.get('n')} runs"]
        title = f"{result.model} — {'static cost' if kind == 'analyze' else 'per-layer latency'}"
        return title, " · ".join(p for p in parts if p)
    if kind == "ops":
        return (f"{result.model} — operators",
                f"device {result.device} · {result.runs} runs · top {len(result.rows)} of "
                f"{result.ops_total} by {result.sort} time")
    if kind == "sweep":
        s = result.settings
        return (f"{result.model} — sweep",
                f"{len(result.cells)} cells · {s.get('runs')} runs per cell · "
                f"input {shape_str(s.get('inputs'))}")
    if kind == "train":
        b = result.breakdown
        return (f"{result.recipe} — training",
                f"{len(result.epochs)} epoch(s) · {b['steps']} measured steps · "
                f"device {result.config.get('device')} · run directory {result.run_dir}")
    if kind == "ablate":
        return (f"{result.recipe} — ablation",
                f"device {result.device} · {result.steps} steps ({result.warmup_steps} warm-up "
                f"excluded) · {result.repeats} repeat(s) · ms per step")
    if kind == "activations":
        return f"{result.model} — activations", f"layers matching {result.pattern!r}"
    if kind == "compare":
        from layerscope.renderers.compare_out import heading as compare_heading

        return compare_heading(result)
    return f"{kind} result", ""


def environment_rows(env: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The environment table (``layerscope env``, every report's header). Keys an older report
    did not record are left out; a package recorded as None is shown as not installed."""
    from layerscope.core.environment import PACKAGES, gib

    env = env or {}
    if not env:
        return [("Environment", "not recorded")]
    cuda = env.get("cuda") or "none"
    if env.get("cuda") and env.get("cuda_available") is False:
        cuda += " (no GPU available)"
    cpu = env.get("cpu") or "-"
    if env.get("cores"):
        cpu += f" ({env['cores']} cores, {env.get('torch_threads', '?')} torch threads)"
    gpus = env.get("gpus") or ([env["gpu"]] if env.get("gpu") else [])
    rows = [("CPU", cpu)]
    if "ram_bytes" in env:
        rows.append(("RAM", gib(env["ram_bytes"]) if env["ram_bytes"] else "-"))
    rows.append(("GPU", ", ".join(gpus) or "none"))
    if env.get("os_name"):
        rows.append(("OS", f"{env['os_name']} ({env.get('os') or '-'})"))
    else:
        rows.append(("OS", env.get("os") or "-"))
    rows += [("Python", env.get("python") or "-"), ("torch", env.get("torch") or "-"),
             ("CUDA", cuda)]
    if "cudnn" in env:
        rows.append(("cuDNN", env["cudnn"] or "none"))
    rows += [(p, env[p] or "not installed") for p in PACKAGES if p in env]
    return rows


# ---- key figures ------------------------------------------------------------------------
def facts(result) -> list[tuple[str, str]]:
    kind = result.kind
    if kind in ("analyze", "profile"):
        return _report_facts(result)
    if kind == "ops":
        out = [("Operators", f"{result.ops_total} distinct ({len(result.rows)} shown)"),
               ("Self time, all operators", f"{ms(result.total_self_s)} ms per run"),
               ("Runs", str(result.runs)), ("Sorted by", f"{result.sort} time")]
        if result.trace:
            out.append(("Trace", result.trace))
        return out
    if kind == "sweep":
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
    if kind == "train":
        b = result.breakdown
        out = [("Measured steps", f"{b['steps']} ({b['samples']} samples)"),
               ("Step time", f"{ms(b['wall_s'] / b['steps'] if b['steps'] else None, 2)} ms "
                             f"(median {ms(_median(result.step_seconds), 2)} ms)"),
               ("Throughput", f"{num(b.get('throughput_per_s'), '.1f')} samples/s"),
               ("CPU utilisation", f"{num(result.cpu_utilisation)} cores"),
               ("Peak RSS", f"{si(result.peak_rss_bytes)}B")]
        if result.peak_cuda_bytes:
            out.append(("Peak CUDA memory", f"{si(result.peak_cuda_bytes)}B"))
        final = result.epochs[-1] if result.epochs else None
        if final:
            out.append(("Final train loss / acc",
                        f"{final['train_loss']:.4f} / {final['train_top1']:.2%}"))
            if "val_loss" in final:
                out.append(("Final val loss / top-1 / top-5",
                            f"{final['val_loss']:.4f} / {final['val_top1']:.2%} / "
                            f"{final['val_top5']:.2%}"))
        out += [("Note", n) for n in result.notes]
        return out
    if kind == "ablate":
        ok = [v for v in result.variants if v.step]
        out = [("Variants", f"{len(result.variants)} ({len(ok)} ran)"),
               ("Steps", f"{result.steps} per run, first {result.warmup_steps} excluded"),
               ("Repeats", str(result.repeats))]
        best = max(ok, key=lambda v: v.speedup or 0, default=None)
        if best and best.speedup:
            out.append(("Fastest", f"{best.variant}: {best.step['median_s'] * 1e3:.2f} ms per "
                                   f"step, {best.speedup:.2f}x over baseline"))
        return out + noise_facts(result)
    if kind == "loop":
        b = result.phases
        return [("Data set", result.dataset),
                ("Batches", f"{result.batches} of {result.batch_size} ({result.warmup} warm-up "
                            "excluded)"),
                ("Throughput", f"{num(b.get('throughput_per_s'), '.1f')} samples/s"),
                ("Layer coverage", pct(result.coverage))]
    if kind == "activations":
        return [("Layers captured", str(len(result.stats)))]
    if kind == "compare":
        from layerscope.renderers.compare_out import facts as compare_facts

        return compare_facts(result)
    return []


def _median(xs):
    if not xs:
        return None
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _cell_name(c) -> str:
    return " ".join(str(p) for p in (c.device, c.backend, c.dtype,
                                     f"{c.threads} threads" if c.threads else None) if p)


def _report_facts(r) -> list[tuple[str, str]]:
    t = r.totals
    out = [("Parameters", f"{exact(t.params)}; trainable {t.trainable_params:,}"),
           ("Weight bytes", exact(t.weight_bytes)), ("Buffer bytes", exact(t.buffer_bytes)),
           ("MACs", exact(t.macs)), ("FLOPs", exact(t.flops)),
           ("Bytes read / written", f"{si(t.bytes_read)} / {si(t.bytes_written)}"),
           ("Intensity", "-" if t.intensity is None else f"{t.intensity:.2f} FLOP/B"),
           ("Activation bytes", exact(t.activation_bytes)),
           ("Peak activation bytes", exact(t.peak_activation_bytes)),
           ("Input / output bytes", f"{si(t.input_bytes)} / {si(t.output_bytes)}")]
    if t.layer_output_bytes is not None:
        out += [("Sum of layer outputs", exact(t.layer_output_bytes)),
                ("Forward/backward pass (torchinfo)", exact(t.torchinfo_pass_bytes))]
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
    if r.kind == "profile" and r.end_to_end:
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
                                    f"{c.get('dtype')})"))
    out += [("Note", n) for n in r.notes]
    return out + noise_facts(r)


def noise_facts(result) -> list[tuple[str, str]]:
    """The noise line of a timed result (none for one saved without a noise section); its
    warnings are drawn by ``warnings`` above the figures."""
    noise = getattr(result, "noise", None)
    return [("Noise", noise_summary(noise))] if noise else []


def warnings(result) -> list[str]:
    return list((getattr(result, "noise", None) or {}).get("warnings") or [])


# ---- row tables -------------------------------------------------------------------------
def tables(result) -> list[RowTable]:
    kind = result.kind
    if kind == "analyze":
        return [_analyze_table(result)]
    if kind == "profile":
        out = [_profile_table(result)]
        if result.by_type:
            out.append(_type_table(result))
        return out
    if kind == "ops":
        return [_ops_table(result)]
    if kind == "sweep":
        return [_sweep_table(result)]
    if kind == "train":
        return [_epochs_table(result),
                _phase_table(result.breakdown, (result.config or {}).get("warmup_steps") or 0)]
    if kind == "ablate":
        return [_ablate_table(result)]
    if kind == "loop":
        return [_phase_table(result.phases), _loop_layers_table(result)]
    if kind == "activations":
        return [_activations_table(result)]
    if kind == "compare":
        from layerscope.renderers.compare_out import tables as compare_tables

        return compare_tables(result)
    return []


def _label(row) -> str:
    return row.name + (" (own ops)" if row.self_only else "")


def _analyze_table(r) -> RowTable:
    training = r.totals.backward_macs is not None
    cols = [("Layer", False), ("Type", False), ("Calls", True), ("Input shape", False),
            ("Output shape", False), ("Params", True), ("MACs", True), ("FLOPs", True),
            ("Read B", True), ("Written B", True), ("Act. B", True), ("FLOP/B", True)]
    if training:
        cols += [("Bwd MACs", True), ("Bwd FLOPs", True)]
    rows = []
    for row in r.layers:
        cells = [Cell(_label(row), row.name), _c(row.type), _c(row.calls, str(row.calls)),
                 _c(shape_str(row.input_shapes)), _c(shape_str(row.output_shapes)),
                 _c(row.params), _c(row.macs), _c(row.flops), _c(row.bytes_read),
                 _c(row.bytes_written), _c(row.activation_bytes),
                 Cell("-" if row.intensity is None else f"{row.intensity:.1f}", row.intensity)]
        if training:
            cells += [_c(row.backward_macs), _c(row.backward_flops)]
        rows.append(cells)
    t = r.totals
    foot = ["Total", "", "", "", "", si(t.params), si(t.macs), si(t.flops), si(t.bytes_read),
            si(t.bytes_written), si(t.activation_bytes),
            "-" if t.intensity is None else f"{t.intensity:.1f}"]
    if training:
        foot += [si(t.backward_macs), si(t.backward_flops)]
    return RowTable("layers", "Per layer", cols, rows, foot)


def _profile_table(r) -> RowTable:
    backward = r.backward is not None
    cols = [("Layer", False), ("Type", False), ("Input shape", False), ("Output shape", False),
            ("MACs", True), ("FLOPs", True), ("Median ms", True), ("Mean ms", True),
            ("p10 ms", True), ("p90 ms", True), ("Share", True), ("Rank", True), ("GFLOP/s", True),
            ("GB/s", True), ("FLOP/B", True), ("Bound", False), ("% roof", True)]
    if backward:
        cols.append(("Bwd ms", True))
    rows, hot = [], []
    is_hot_row = hot_predicate(rule_of(r))
    for row in r.layers:
        t = row.time or {}
        a = row.achieved or {}
        roof = row.roofline or {}
        cells = [Cell(_label(row), row.name), _c(row.type), _c(shape_str(row.input_shapes)),
                 _c(shape_str(row.output_shapes)), _c(row.macs), _c(row.flops),
                 _ms_cell(t.get("median_s")), _ms_cell(t.get("mean_s")), _ms_cell(t.get("p10_s")),
                 _ms_cell(t.get("p90_s")),
                 Cell(pct(row.share), row.share), Cell(str(row.rank or "-"), row.rank),
                 Cell(num(a.get("gflops_per_s"), ".1f"), a.get("gflops_per_s")),
                 Cell(num(a.get("gbytes_per_s"), ".1f"), a.get("gbytes_per_s")),
                 Cell("-" if row.intensity is None else f"{row.intensity:.1f}", row.intensity),
                 _c(roof.get("bound")),
                 Cell(pct(roof.get("pct_of_roof"), 0), roof.get("pct_of_roof"))]
        if backward:
            cells.append(_ms_cell((row.backward_time or {}).get("median_s")))
        rows.append(cells)
        hot.append(is_hot_row(row))
    e = r.end_to_end or {}
    foot = ["End-to-end (bare)", "", "", "", si(r.totals.macs), si(r.totals.flops),
            ms(e.get("median_s")), ms(e.get("mean_s")), ms(e.get("p10_s")), ms(e.get("p90_s")),
            pct(r.coverage) + " covered", "", "", "", "", "", ""]
    if backward:
        foot.append(ms(r.backward["end_to_end"]["median_s"]))
    return RowTable("layers", f"Per layer (highlighted: {describe(rule_of(r))})", cols, rows,
                    foot, hot)


def _type_table(r) -> RowTable:
    cols = [("Type", False), ("Layers", True), ("Median ms", True), ("Mean ms", True),
            ("Share", True), ("MACs", True)]
    rows = [[_c(d["type"]), _c(d["layers"], str(d["layers"])),
             _ms_cell(d["time"]["median_s"]), _ms_cell(d["time"].get("mean_s")),
             Cell(pct(d["share"]), d["share"]), _c(d.get("macs"))] for d in r.by_type]
    return RowTable("by-type", "Time by layer type (shares: sums of the rows' shares)", cols,
                    rows)


def _ops_table(t) -> RowTable:
    memory = t.settings.get("memory")
    shapes = t.settings.get("group_by_shape")
    cols = [("Operator", False)] + ([("Input shapes", False)] if shapes else []) + [
        ("Self ms", True), ("Total ms", True), ("Calls", True), ("Mean ms", True),
        ("Share", True)] + ([("Self mem", True), ("Mem", True)] if memory else [])
    rows = []
    for r in t.rows:
        cells = [_c(r.name)] + ([_c(r.input_shapes or "")] if shapes else []) + [
            _ms_cell(r.self_s), _ms_cell(r.total_s), Cell(f"{r.calls:g}", r.calls),
            _ms_cell(r.mean_s), Cell(pct(r.share), r.share)]
        if memory:
            cells += [_c(r.self_memory_bytes), _c(r.memory_bytes)]
        rows.append(cells)
    return RowTable("operators", "Operators (per run)", cols, rows,
                    ["All operators"] + ([""] if shapes else []) + [ms(t.total_self_s)]
                    + [""] * (4 + (2 if memory else 0)))


def _sweep_table(s) -> RowTable:
    cols = [("Device", False), ("Backend", False), ("Dtype", False), ("Threads", True),
            ("Batch", True), ("Median ms", True), ("p10 ms", True), ("p90 ms", True),
            ("Samples/s", True), ("Speed-up", True), ("Noise", False),
            ("Time by layer type / error", False)]
    rows = []
    for c in s.cells:
        head = [_c(c.device), _c(c.backend), _c(c.dtype),
                Cell(str(c.threads or "-"), c.threads), Cell(str(c.batch_size), c.batch_size)]
        if c.status != "ok":
            rows.append(head + [Cell("-")] * 6 + [Cell(f"error: {c.error}", c.error)])
            continue
        lat = c.latency
        types = ", ".join(f"{d['type']} {d['share']:.0%}" for d in (c.by_type or [])[:3]
                          if d.get("share") is not None)
        rows.append(head + [
            _ms_cell(lat["median_s"]), _ms_cell(lat["p10_s"]), _ms_cell(lat["p90_s"]),
            Cell(num(c.throughput_per_s, ".1f"), c.throughput_per_s),
            Cell("-" if c.speedup is None else f"{c.speedup:.2f}x", c.speedup),
            Cell("within noise" if c.within_noise and c.speedup != 1.0 else ""),
            Cell(types or "-")])
    return RowTable("cells", "Cells (speed-up: throughput over the first cell)", cols, rows)


def _epochs_table(r) -> RowTable:
    val = any("val_loss" in e for e in r.epochs)
    cols = [("Epoch", True), ("Step", True), ("Train loss", True), ("Train acc", True)]
    if val:
        cols += [("Val loss", True), ("Val top-1", True), ("Val top-5", True)]
    cols += [("LR", True), ("Seconds", True)]
    rows = []
    for e in r.epochs:
        cells = [Cell(str(e["epoch"]), e["epoch"]), Cell(str(e["step"]), e["step"]),
                 Cell(f"{e['train_loss']:.4f}", e["train_loss"]),
                 Cell(pct(e["train_top1"], 2), e["train_top1"])]
        if val:
            cells += [Cell(num(e.get("val_loss"), ".4f"), e.get("val_loss")),
                      Cell(pct(e.get("val_top1"), 2), e.get("val_top1")),
                      Cell(pct(e.get("val_top5"), 2), e.get("val_top5"))]
        cells += [Cell(f"{e['lr']:.3g}", e["lr"]),
                  Cell(f"{e['epoch_seconds']:.1f}", e["epoch_seconds"])]
        rows.append(cells)
    return RowTable("epochs", "Per epoch", cols, rows)


def phase_title(warmup_steps: int) -> str:
    """Say warm-up steps were left out only when some were."""
    if not warmup_steps:
        return "Time per phase"
    plural = "s" if warmup_steps != 1 else ""
    return f"Time per phase ({warmup_steps} warm-up step{plural} excluded)"


def _phase_table(b: dict, warmup_steps: int = 0) -> RowTable:
    cols = [("Phase", False), ("Seconds", True), ("Share", True), ("ms / step", True)]
    wall = b["wall_s"] or 0.0
    steps = b["steps"] or 1
    rows = [[Cell(PHASE_LABELS.get(p, p), p), Cell(f"{s:.3f}", s),
             Cell(pct(s / wall) if wall else "-", s / wall if wall else None),
             Cell(f"{s / steps * 1e3:.2f}", s / steps * 1e3)] for p, s in b["seconds"].items()]
    return RowTable("phases", phase_title(warmup_steps), cols, rows,
                    ["Total", f"{wall:.3f}", "100.0%" if wall else "-",
                     f"{wall / steps * 1e3:.2f}"])


def variant_label(v) -> str:
    """An ablation variant's name, with what ``all`` stood for."""
    return f"{v.variant} = {v.expanded}" if v.expanded else v.variant


def _loop_layers_table(r) -> RowTable:
    cols = [("Layer", False), ("Type", False), ("Median ms", True), ("p10 ms", True),
            ("p90 ms", True), ("Share of forward", True)]
    rows = [[_c(row.name), _c(row.type), _ms_cell(row.time["median_s"]),
             _ms_cell(row.time["p10_s"]), _ms_cell(row.time["p90_s"]),
             Cell(pct(row.share), row.share)] for row in r.layers]
    return RowTable("layers", "Forward time per layer, per batch", cols, rows)


def _ablate_table(a) -> RowTable:
    cols = [("Variant", False)] + [(p, True) for p in PHASE_LABELS.values()] + [
        ("Total ms", True), ("Speed-up", True), ("Beyond noise", False), ("Status", False)]
    rows = []
    for v in a.variants:
        if v.status != "ok" or not v.phases_ms:
            rows.append([_c(variant_label(v))] + [Cell("-")] * (len(PHASE_LABELS) + 3)
                        + [Cell(v.reason or v.status, v.status)])
            continue
        noise = "-" if v.beyond_noise is None else ("yes" if v.beyond_noise else "no")
        rows.append([_c(variant_label(v))]
                    + [Cell(f"{v.phases_ms.get(p, 0.0):.2f}", v.phases_ms.get(p))
                       for p in PHASE_LABELS]
                    + [Cell(f"{v.step['median_s'] * 1e3:.2f}", v.step["median_s"] * 1e3),
                       Cell("-" if not v.speedup else f"{v.speedup:.2f}x", v.speedup),
                       Cell(noise), Cell("ok")])
    return RowTable("variants", "Variants (ms per step; speed-up = baseline / variant)",
                    cols, rows)


def _activations_table(c) -> RowTable:
    cols = [("Layer", False), ("Type", False), ("Shape", False), ("Mean", True), ("Std", True),
            ("Zeros", True)]
    rows = [[_c(s.name), _c(s.type), _c(shape_str([s.shape])), Cell(f"{s.mean:.4g}", s.mean),
             Cell(f"{s.std:.4g}", s.std), Cell(pct(s.zero_fraction), s.zero_fraction)]
            for s in c.stats]
    return RowTable("layers", "Captured outputs", cols, rows)
