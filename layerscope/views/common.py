"""Formatting and section pieces several views share: numbers as text, table cells, the noise
line, layer bars coloured by type and phase stacks. Plain formatting only; no analysis."""
from __future__ import annotations

from layerscope.core.noise import MEAN_LIMIT, ROW_MARK, mean_far_above_median
from layerscope.core.phases import BY_NAME, STEP_PHASES
from layerscope.core.units import shape_str, si
from layerscope.views.sections import PALETTE, PHASE_COLORS, Cell, Chart, Point, Series

# a single process's phases (core.phases), in step order
PHASE_LABELS = {p.name: p.label for p in STEP_PHASES if not p.distributed}


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


def cell(value, text: str | None = None) -> Cell:
    if text is None:
        text = si(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
            else ("-" if value is None else str(value))
    return Cell(text, value)


def ms_cell(seconds: float | None) -> Cell:
    return Cell(ms(seconds), None if seconds is None else seconds * 1e3)


def median(xs):
    if not xs:
        return None
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def own_ops_suffix(row) -> str:
    """" (own ops)" for a container's own-ops row; nothing for other rows, nor for an
    ``analyze --functions`` row, whose name "MODULE (FUNCTION)" already says it."""
    if not row.self_only or row.function() is not None:
        return ""
    return " (own ops)"


def row_label(row) -> str:
    return row.name + own_ops_suffix(row)


# ---- noise ------------------------------------------------------------------------------
def noise_summary(noise: dict) -> str:
    """One line: the spread and the machine readings of a ``noise`` section."""
    load = noise.get("loadavg")
    cpus = noise.get("cpus_available")
    affinity = "" if cpus is None or cpus == noise.get("cpu_count") else \
        f" ({cpus} usable by this process)"
    return (f"p90/p10 {num(noise.get('p90_over_p10'))}, CV {num(noise.get('cv'))}, "
            f"mean/median {num(noise.get('mean_over_median'))} (n={noise.get('n')}); "
            f"load average {'-' if not load else f'{load[0]:.2f}'} at start, "
            f"{noise.get('threads')} threads, {noise.get('cpu_count')} CPUs{affinity}")


def noise_lines(result) -> list[str]:
    """The noise line and its warnings; nothing for a result saved without a noise section."""
    noise = getattr(result, "noise", None)
    if not noise:
        return []
    return [f"Noise: {noise_summary(noise)}"] + [f"Warning: {w}" for w in noise.get("warnings")
                                                  or []]


def mean_ms(t) -> str:
    """A row's mean in ms, marked with ``ROW_MARK`` when it is far above the row's median
    (core.noise.mean_far_above_median: the test the noise section counts rows by)."""
    t = t or {}
    marked = mean_far_above_median(t.get("median_s"), t.get("mean_s"))
    return ms(t.get("mean_s")) + (ROW_MARK if marked else "")


def mean_mark_legend(times) -> str:
    """What the mark beside a mean says, when some row of ``times`` carries it; else ''."""
    if not any(mean_far_above_median((t or {}).get("median_s"), (t or {}).get("mean_s"))
               for t in times):
        return ""
    return f"{ROW_MARK} mean above {MEAN_LIMIT:g}x the median (a few much slower calls)"


def noise_facts(result) -> list[tuple[str, str]]:
    """The noise line of a timed result (none for one saved without a noise section); its
    warnings are drawn by ``View.warnings`` above the figures."""
    noise = getattr(result, "noise", None)
    return [("Noise", noise_summary(noise))] if noise else []


# ---- chart pieces -----------------------------------------------------------------------
def by_type_colors(types) -> dict[str, str]:
    colors: dict[str, str] = {}
    for t in types:
        if t not in colors:
            colors[t] = PALETTE[len(colors) % len(PALETTE)] if len(colors) < len(PALETTE) \
                else "#7f7f7f"
    return colors


def layer_tip(row, *lines: str) -> str:
    head = f"{row_label(row)} ({row.type})"
    shapes = f"in {shape_str(row.input_shapes)} → out {shape_str(row.output_shapes)}"
    return "\n".join([head, shapes, *[ln for ln in lines if ln]])


def type_of(row) -> str:
    return row.type + (" (own ops)" if row.self_only else "")


def layer_bars(report, id: str, title: str, y_label: str, value, tip, hot=None,
               whiskers=None) -> Chart:
    types = [type_of(r) for r in report.layers]
    colors = by_type_colors(types)
    series = {t: Series(t, colors[t]) for t in colors}
    for i, row in enumerate(report.layers):
        lo, hi = whiskers(row) if whiskers else (None, None)
        h = bool(hot and hot(row))
        series[types[i]].points.append(Point(i, value(row), tip(row), lo, hi, h,
                                             row.name if h else None))
    return Chart(id, "bars", title, f"layers in execution order ({len(report.layers)})",
                 y_label, list(series.values()), [r.name for r in report.layers])


def spent_phases(labels: dict[str, str], breakdowns: list[dict[str, float]]) -> dict[str, str]:
    """``labels`` without the phases shown only when spent (core.phases) that none of these
    breakdowns spent time in."""
    return {p: label for p, label in labels.items()
            if p not in BY_NAME or not BY_NAME[p].when_spent or any(b.get(p) for b in breakdowns)}


def phase_stack(id: str, title: str, categories: list[str], per_cat: list[dict[str, float]],
                tips: list[str], x_label: str,
                labels: dict[str, str] | None = None) -> Chart:
    series = []
    for p, label in spent_phases(labels or PHASE_LABELS, per_cat).items():
        s = Series(label, PHASE_COLORS[p])
        for i, d in enumerate(per_cat):
            v = d.get(p, 0.0) or 0.0
            total = sum(x or 0.0 for x in d.values())
            s.points.append(Point(i, v, f"{categories[i]}: {label} {v:.2f} ms per step "
                                        f"({pct(v / total if total else None)})\n{tips[i]}"))
        series.append(s)
    return Chart(id, "stacked", title, x_label, "ms per step", series, categories)


def _si(x: float | None) -> str:
    return "-" if x is None else si(x)


def efficiency_lines(result) -> list[str]:
    """The terminal's lines of efficiency_facts."""
    return [f"{name}: {text}" for name, text in efficiency_facts(result)]


def _against(ratio: float | None, peak: float | None, source: str, unit: str) -> str:
    """'12.3% of the measured peak 26.2 GFLOP/s' (refused: 'not given')."""
    where = f"{source} peak {si(peak)}{unit}" if peak else source
    return f"{pct(ratio, 2)} of the {where}" if ratio is not None else f"not given ({where})"


def efficiency_facts(result) -> list[tuple[str, str]]:
    """MFU, HFU and MBU of a timed result (its ``efficiency``), each beside both peaks it is
    taken against, and the notes of any ratio refused."""
    e = getattr(result, "efficiency", None)
    if not e:
        return []
    sheet = e.get("datasheet")

    def line(key: str, peak_key: str, unit: str, how: str) -> str:
        text = _against(e.get(key), e.get(peak_key), e["peak_source"], unit)
        if sheet and sheet.get(peak_key):
            text += "; " + _against(sheet.get(key), sheet.get(peak_key), sheet["peak_source"],
                                    unit)
        return f"{text} ({how})"

    per = "step" if e.get("hfu") is not None or e.get("hardware_flops_per_step") else "batch"
    flops = (f"{si(e['model_flops_per_step'])}FLOP per {per} at the median "
             f"{ms(e['step_s'], 2)} ms: {_si(e.get('achieved_flops_per_s'))}FLOP/s")
    out = [("MFU", line("mfu", "peak_flops_per_s", "FLOP/s", flops))]
    if e.get("hardware_flops_per_step"):
        out.append(("HFU", line("hfu", "peak_flops_per_s", "FLOP/s",
                                f"{si(e['hardware_flops_per_step'])}FLOP per step with the "
                                "recomputed forward")))
    elif e.get("hfu") is not None:
        out.append(("HFU", "the same as MFU (no activation checkpointing: nothing recomputed)"))
    if e.get("peak_bytes_per_s"):
        out.append(("MBU", line("mbu", "peak_bytes_per_s", "B/s",
                                f"{_si(e.get('bytes_per_step'))}B moved per batch")))
    return out + [("Note", n) for n in e.get("notes") or []]
