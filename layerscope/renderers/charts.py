"""Which charts fit which result, as plain data (``Chart``): the HTML report draws them as inline
SVG (renderers/html/svg.py) and ``--plot`` with matplotlib (renderers/plot.py), so both always
show the same charts with the same colours and hover texts.

analyze  MACs per layer, parameters per layer (bars coloured by layer type)
profile  latency per layer (bars by type, p10-p90 whiskers, hot layers emphasised); roofline
ops      self time per operator
sweep    latency and throughput vs batch size, one line per device/backend/dtype/threads
train    phase breakdown per epoch (stacked); loss and accuracy per epoch
ablate   phase breakdown per variant (stacked)
compare  every total of B as a percentage of A
"""
from __future__ import annotations

from dataclasses import dataclass, field

from layerscope.core.units import shape_str, si
from layerscope.renderers.highlight import describe, hot_predicate, rule_of
from layerscope.renderers.tables import PHASE_LABELS, ms, num, pct

# Tableau 10: readable on white, distinct in print
PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac"]
PHASE_COLORS = {"data": "#4e79a7", "h2d": "#76b7b2", "forward": "#59a14f", "loss": "#edc948",
                "backward": "#e15759", "optimizer": "#b07aa1", "other": "#bab0ac"}


@dataclass
class Point:
    x: float  # bars / stacked: the category index
    y: float
    tip: str = ""
    lo: float | None = None  # whisker (e.g. p10)
    hi: float | None = None  # (p90)
    hot: bool = False
    label: str | None = None  # written beside a hot mark


@dataclass
class Series:
    name: str
    color: str
    points: list[Point] = field(default_factory=list)
    dashed: bool = False


@dataclass
class Chart:
    id: str
    kind: str  # bars | stacked | lines | scatter
    title: str
    x_label: str
    y_label: str
    series: list[Series]
    categories: list[str] = field(default_factory=list)  # bars/stacked: x labels by index
    log_x: bool = False
    log_y: bool = False
    x_ticks: list[float] | None = None  # lines: ticks at these x values
    guides: list[Series] = field(default_factory=list)  # lines without markers (ceilings)
    note: str | None = None  # under the title


def _by_type_colors(types) -> dict[str, str]:
    colors: dict[str, str] = {}
    for t in types:
        if t not in colors:
            colors[t] = PALETTE[len(colors) % len(PALETTE)] if len(colors) < len(PALETTE) \
                else "#7f7f7f"
    return colors


def layer_tip(row, *lines: str) -> str:
    head = f"{row.name}{' (own ops)' if row.self_only else ''} ({row.type})"
    shapes = f"in {shape_str(row.input_shapes)} → out {shape_str(row.output_shapes)}"
    return "\n".join([head, shapes, *[ln for ln in lines if ln]])


def _type_of(row) -> str:
    return row.type + (" (own ops)" if row.self_only else "")


def _layer_bars(report, id: str, title: str, y_label: str, value, tip, hot=None,
                whiskers=None) -> Chart:
    types = [_type_of(r) for r in report.layers]
    colors = _by_type_colors(types)
    series = {t: Series(t, colors[t]) for t in colors}
    for i, row in enumerate(report.layers):
        lo, hi = whiskers(row) if whiskers else (None, None)
        h = bool(hot and hot(row))
        series[types[i]].points.append(Point(i, value(row), tip(row), lo, hi, h,
                                             row.name if h else None))
    return Chart(id, "bars", title, f"layers in execution order ({len(report.layers)})",
                 y_label, list(series.values()), [r.name for r in report.layers])


def charts(result) -> list[Chart]:
    kind = result.kind
    if kind == "analyze":
        return _analyze(result)
    if kind == "profile":
        return _profile(result)
    if kind == "ops":
        return _ops(result)
    if kind == "sweep":
        return _sweep(result)
    if kind == "train":
        return _train(result)
    if kind == "ablate":
        return _ablate(result)
    if kind == "loop":
        return _loop(result)
    if kind == "compare":
        from layerscope.renderers.compare_out import charts as compare_charts

        return compare_charts(result)
    return []


def _cost_lines(row) -> str:
    return (f"params {si(row.params)}, MACs {si(row.macs)}, FLOPs {si(row.flops)}, "
            f"read {si(row.bytes_read)}B, written {si(row.bytes_written)}B")


def _analyze(r) -> list[Chart]:
    if not r.layers:
        return []
    return [
        _layer_bars(r, "macs", "MACs per layer", "MACs", lambda x: x.macs,
                    lambda x: layer_tip(x, _cost_lines(x))),
        _layer_bars(r, "params", "Parameters per layer", "parameters", lambda x: x.params,
                    lambda x: layer_tip(x, _cost_lines(x),
                                        f"weight bytes {si(x.weight_bytes)}B")),
    ]


def _profile(r) -> list[Chart]:
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
    out = [_layer_bars(r, "latency", "Latency per layer (median; whiskers p10-p90)",
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
    types = [_type_of(x) for x in r.layers]
    colors = _by_type_colors(types)
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
    return Chart("roofline", "scatter", "Roofline: achieved FLOP/s vs arithmetic intensity",
                 "arithmetic intensity (FLOP/byte)", "FLOP/s", shown, log_x=True, log_y=True,
                 guides=[ceiling], note=note)


def _ops(t) -> list[Chart]:
    if not t.rows:
        return []
    s = Series("self time", PALETTE[0])
    for i, r in enumerate(t.rows):
        tip = "\n".join(x for x in [
            r.name, f"input shapes {r.input_shapes}" if r.input_shapes else "",
            f"self {ms(r.self_s)} ms, total {ms(r.total_s)} ms, {r.calls:g} calls, "
            f"mean {ms(r.mean_s)} ms, share {pct(r.share)}"] if x)
        s.points.append(Point(i, r.self_s * 1e3, tip))
    return [Chart("operators", "bars", f"Self time per operator (top {len(t.rows)}, per run)",
                  "operator", "ms", [s], [r.name for r in t.rows])]


def _threads(n) -> str:
    return f"{n} thread{'' if n == 1 else 's'}" if n else "default threads"


def _sweep(s) -> list[Chart]:
    ok = [c for c in s.cells if c.status == "ok" and c.latency]
    if not ok:
        return []
    dims = ("device", "backend", "dtype", "threads")
    varying = [d for d in dims if len({getattr(c, d) for c in ok}) > 1]

    def key(c):
        return tuple(getattr(c, d) for d in dims)

    def name(c):
        parts = [_threads(c.threads) if d == "threads" else str(getattr(c, d))
                 for d in varying]
        return " ".join(parts) or f"{c.device} {c.backend} {c.dtype}"

    groups: dict[tuple, list] = {}
    for c in ok:
        groups.setdefault(key(c), []).append(c)
    lat, thr = [], []
    for i, cells in enumerate(groups.values()):
        cells.sort(key=lambda c: c.batch_size)
        color = PALETTE[i % len(PALETTE)]
        a, b = Series(name(cells[0]), color), Series(name(cells[0]), color)
        for c in cells:
            L = c.latency
            tip = (f"{c.device} {c.backend} {c.dtype}"
                   f"{', ' + _threads(c.threads) if c.threads else ''}, batch {c.batch_size}\n"
                   f"median {ms(L['median_s'])} ms (p10 {ms(L['p10_s'])}, p90 {ms(L['p90_s'])})"
                   f"\n{c.throughput_per_s:.1f} samples/s"
                   + (f", {c.speedup:.2f}x" if c.speedup else "")
                   + (" (within noise)" if c.within_noise and c.speedup != 1.0 else ""))
            a.points.append(Point(c.batch_size, L["median_s"] * 1e3, tip,
                                  L["p10_s"] * 1e3, L["p90_s"] * 1e3))
            b.points.append(Point(c.batch_size, c.throughput_per_s or 0.0, tip))
        lat.append(a)
        thr.append(b)
    batches = sorted({c.batch_size for c in ok})
    log_x = batches[-1] / batches[0] >= 8
    return [Chart("sweep-latency", "lines", "Latency vs batch size (median; p10-p90 bars)",
                  "batch size", "ms", lat, log_x=log_x, x_ticks=batches),
            Chart("sweep-throughput", "lines", "Throughput vs batch size", "batch size",
                  "samples/s", thr, log_x=log_x, x_ticks=batches)]


def _phase_stack(id: str, title: str, categories: list[str], per_cat: list[dict[str, float]],
                 tips: list[str], x_label: str) -> Chart:
    series = []
    for p, label in PHASE_LABELS.items():
        s = Series(label, PHASE_COLORS[p])
        for i, d in enumerate(per_cat):
            v = d.get(p, 0.0) or 0.0
            total = sum(x or 0.0 for x in d.values())
            s.points.append(Point(i, v, f"{categories[i]}: {label} {v:.2f} ms per step "
                                        f"({pct(v / total if total else None)})\n{tips[i]}"))
        series.append(s)
    return Chart(id, "stacked", title, x_label, "ms per step", series, categories)


def _train(r) -> list[Chart]:
    out = []
    cats, per, tips = [], [], []
    for i, b in enumerate(r.epoch_breakdown):
        steps = b.get("steps") or 0
        cats.append(f"epoch {r.epochs[i]['epoch'] if i < len(r.epochs) else i + 1}")
        per.append({p: (s / steps * 1e3 if steps else 0.0) for p, s in b["seconds"].items()})
        tips.append(f"{steps} measured steps, {ms(b['wall_s'] / steps if steps else None, 2)} "
                    f"ms per step")
    if cats:
        out.append(_phase_stack("train-phases", "Time per phase, per epoch", cats, per, tips,
                                "epoch"))
    epochs = [e["epoch"] for e in r.epochs]
    if r.epochs:
        loss = []
        for key, label, color in (("train_loss", "train loss", PALETTE[0]),
                                  ("val_loss", "validation loss", PALETTE[1])):
            pts = [Point(e["epoch"], e[key], f"epoch {e['epoch']}: {label} {e[key]:.4f}")
                   for e in r.epochs if e.get(key) is not None]
            if pts:
                loss.append(Series(label, color, pts))
        acc = []
        for key, label, color in (("train_top1", "train accuracy", PALETTE[0]),
                                  ("val_top1", "validation top-1", PALETTE[1]),
                                  ("val_top5", "validation top-5", PALETTE[4])):
            pts = [Point(e["epoch"], e[key] * 100, f"epoch {e['epoch']}: {label} "
                                                   f"{e[key]:.2%}")
                   for e in r.epochs if e.get(key) is not None]
            if pts:
                acc.append(Series(label, color, pts))
        out.append(Chart("loss", "lines", "Loss per epoch", "epoch", "loss", loss,
                         x_ticks=epochs))
        out.append(Chart("accuracy", "lines", "Accuracy per epoch", "epoch", "%", acc,
                         x_ticks=epochs))
    return out


def _loop(r) -> list[Chart]:
    b = r.phases
    steps = b.get("steps") or 0
    per = {p: (s / steps * 1e3 if steps else 0.0) for p, s in b["seconds"].items()}
    tip = f"{steps} measured batches of {r.batch_size}"
    return [_phase_stack("loop-phases", "Time per phase, per batch", [r.dataset], [per], [tip],
                         "data set")]


def _ablate(a) -> list[Chart]:
    ran = [v for v in a.variants if v.status == "ok" and v.phases_ms]
    if not ran:
        return []
    tips = [f"{v.variant}: {v.step['median_s'] * 1e3:.2f} ms per step"
            + (f", {v.speedup:.2f}x over baseline" if v.speedup else "")
            + ("" if v.beyond_noise is None else
               (", beyond noise" if v.beyond_noise else ", within noise")) for v in ran]
    chart = _phase_stack("ablate-phases", "Time per phase, per variant",
                         [v.variant for v in ran], [v.phases_ms for v in ran], tips, "variant")
    skipped = [f"{v.variant} ({v.reason or v.status})" for v in a.variants if v not in ran]
    if skipped:
        chart.note = "not run: " + ", ".join(skipped)
    return [chart]
