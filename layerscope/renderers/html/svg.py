"""Charts (views/sections.py's ``Chart``) as inline SVG strings: no script, no library, no request.

Every bar, point and segment is an element of class ``ls-mark`` with a ``<title>`` (the
browser's own tooltip; report.js turns it into a faster one). Layout is in SVG user units; the
element scales to the page width through its viewBox.
"""
from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass

from layerscope.core.units import si
from layerscope.renderers.label_layout import AxisLabels, Box, axis_labels, place_labels, text_width
from layerscope.views.sections import Chart, Point

WIDTH = 960
PLOT_HEIGHT = 260
LEFT, RIGHT = 74, 18
CHAR = 6.2  # approximate width of a character at font-size 11


HOT_FONT = 10.0  # .ls-hot-label font-size (report.css)


def names_its_category(p: Point, cats: list[str]) -> bool:
    """A bar's label that only repeats its x-axis name (layer bars): not drawn again."""
    return bool(p.label) and 0 <= int(p.x) < len(cats) and cats[int(p.x)] == p.label


def category_labels(chart: Chart, band: float, fonts=(11.0, 10.0, 9.0, 8.0)) -> AxisLabels:
    """The x-axis names of a bar chart whose bars are ``band`` wide (see label_layout)."""
    hot = [False] * len(chart.categories)
    for s in chart.series:
        for p in s.points:
            if p.hot and 0 <= int(p.x) < len(hot):
                hot[int(p.x)] = True
    return axis_labels(chart.categories, hot, band, fonts)


def with_thinning_note(chart: Chart, band: float | None = None, fonts=None) -> str | None:
    """The chart's note, plus a word when not every bar could be named."""
    note = chart.note
    if chart.categorical and chart.categories:
        axis = category_labels(chart, band or (WIDTH - RIGHT - LEFT) / len(chart.categories),
                               *([fonts] if fonts else []))
        if axis.thinned:
            what = "every highlighted bar and " if any(axis.hot) else ""
            word = (f"names shown for {what}one bar in {axis.step} "
                    f"({sum(t is not None for t in axis.texts)} of {len(axis.texts)})")
            note = f"{note}; {word}" if note else word
    return note


def scatter_label_boxes(chart: Chart, sx, sy, font: float = HOT_FONT) -> dict[int, Box]:
    """id(point) -> the box of its label, placed so that no two overlap (label_layout)."""
    pts = [p for s in chart.series for p in s.points if p.label]
    anchors = [(sx(p.x), sy(p.y)) for p in pts]
    sizes = [(text_width(p.label, font) * 1.1, font * 1.2) for p in pts]  # bold: ~10% wider
    return {id(p): b for p, b in zip(pts, place_labels(anchors, sizes, x_max=WIDTH - 2))}


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)


def fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        text = si(v, 2)
        num, suffix = text[:-1], text[-1]
        if "." in num:
            num = num.rstrip("0").rstrip(".")
        return num + suffix
    return f"{v:.3g}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    n = max(int(math.ceil((hi - start) / step - 1e-9)), 1)
    return [round(start + i * step, 12) for i in range(n + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if a == b:
        b += 1
    return [10.0 ** k for k in range(a, b + 1)]


class _Scale:
    def __init__(self, lo, hi, a, b, log=False):
        self.log = log
        self.lo, self.hi = (math.log10(lo), math.log10(hi)) if log else (lo, hi)
        if self.hi == self.lo:
            self.hi = self.lo + 1
        self.a, self.b = a, b

    def __call__(self, v):
        if self.log:
            v = math.log10(max(v, 1e-300))
        return self.a + (v - self.lo) / (self.hi - self.lo) * (self.b - self.a)


def _legend(chart: Chart, top: float) -> tuple[list[str], float]:
    entries = [(s.name, s.color, s.dashed) for s in chart.series]
    if len(entries) == 1 and not chart.guides and not DRAWERS[chart.kind].one_series_legend:
        entries = []
    entries += [(g.name, g.color, True) for g in chart.guides]
    if not entries:
        return [], 0.0
    out, x, y = [], LEFT, top + 10
    for name, color, dashed in entries:
        w = 18 + CHAR * len(name) + 14
        if x + w > WIDTH - RIGHT and x > LEFT:
            x, y = LEFT, y + 16
        if dashed:
            out.append(f'<line x1="{x:.1f}" y1="{y - 4:.1f}" x2="{x + 12:.1f}" y2="{y - 4:.1f}" '
                       f'stroke="{color}" stroke-width="2" stroke-dasharray="4 2"/>')
        else:
            out.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" '
                       f'fill="{color}"/>')
        out.append(f'<text x="{x + 16:.1f}" y="{y:.1f}" class="ls-legend">{_e(name)}</text>')
        x += w
    return out, y - top + 8


def _title(tip: str) -> str:
    return f"<title>{_e(tip)}</title>" if tip else ""


@dataclass
class _Frame:
    """Where a chart's marks go: the plot area in SVG units and its y scale."""
    x0: float
    x1: float
    top: float
    bottom: float
    sy: _Scale
    hot_any: bool
    axis: AxisLabels | None


def svg_chart(chart: Chart) -> str:
    drawer = DRAWERS[chart.kind]
    parts: list[str] = []
    y = 22.0
    parts.append(f'<text x="{LEFT}" y="{y}" class="ls-chart-title">{_e(chart.title)}</text>')
    note = with_thinning_note(chart)
    if note:
        y += 16
        parts.append(f'<text x="{LEFT}" y="{y}" class="ls-note">{_e(note)}</text>')
    legend, lh = _legend(chart, y + 4)
    parts += legend
    hot_any = any(p.hot for s in chart.series for p in s.points)
    cats = chart.categories
    axis = category_labels(chart, (WIDTH - RIGHT - LEFT) / max(len(cats), 1)) if cats else None
    labels = any(p.label for s in chart.series for p in s.points
                 if not names_its_category(p, cats))
    top = y + 4 + lh + (drawer.label_room if labels else 12)
    if axis and axis.rotation:
        bottom_pad = 30 + max((b.y1 for b in axis.boxes if b), default=0.0)
    else:
        bottom_pad = 44
    plot_top, plot_bottom = top, top + PLOT_HEIGHT
    height = plot_bottom + bottom_pad
    x0, x1 = LEFT, WIDTH - RIGHT

    # y domain
    ys = drawer.y_values(chart)
    if chart.log_y:
        pos = [v for v in ys if v > 0] or [1.0]
        yt = log_ticks(min(pos), max(pos))
        sy = _Scale(yt[0], yt[-1], plot_bottom, plot_top, log=True)
    else:
        ymax = max(ys, default=1.0) or 1.0
        yt = nice_ticks(0.0, ymax * 1.04)
        sy = _Scale(0.0, yt[-1], plot_bottom, plot_top)
    # grid and y axis
    for t in yt:
        py = sy(t)
        parts.append(f'<line x1="{x0}" y1="{py:.1f}" x2="{x1}" y2="{py:.1f}" class="ls-grid"/>')
        parts.append(f'<text x="{x0 - 6}" y="{py + 4:.1f}" class="ls-tick" '
                     f'text-anchor="end">{_e(fmt_tick(t))}</text>')
    parts.append(f'<text transform="translate(16,{(plot_top + plot_bottom) / 2:.1f}) '
                 f'rotate(-90)" class="ls-axis-label" text-anchor="middle">'
                 f'{_e(chart.y_label)}</text>')
    parts.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{height - 8:.1f}" class="ls-axis-label" '
                 f'text-anchor="middle">{_e(chart.x_label)}</text>')
    parts += drawer.marks(chart, _Frame(x0, x1, plot_top, plot_bottom, sy, hot_any, axis))
    parts.append(f'<line x1="{x0}" y1="{plot_bottom}" x2="{x1}" y2="{plot_bottom}" '
                 f'class="ls-axis"/>')
    parts.append(f'<line x1="{x0}" y1="{plot_top}" x2="{x0}" y2="{plot_bottom}" '
                 f'class="ls-axis"/>')
    return (f'<svg class="ls-chart" data-chart="{_e(chart.id)}" role="img" '
            f'aria-label="{_e(chart.title)}" viewBox="0 0 {WIDTH} {height:.0f}" '
            f'xmlns="http://www.w3.org/2000/svg">' + "".join(parts) + "</svg>")


# ---- y domains --------------------------------------------------------------------------
def _point_values(chart: Chart) -> list[float]:
    ys = []
    for s in chart.series + chart.guides:
        for p in s.points:
            ys += [v for v in (p.y, p.lo, p.hi) if v is not None]
    return ys


def _stack_sums(chart: Chart) -> list[float]:
    n = len(chart.categories)
    return [sum(s.points[i].y for s in chart.series if i < len(s.points)) for i in range(n)]


# ---- bars and stacks: one slot per category ---------------------------------------------
class _Bands:
    def __init__(self, chart: Chart, f: _Frame):
        n = max(len(chart.categories), 1)
        self.n = n
        self.band = (f.x1 - f.x0) / n
        self.width = min(max(self.band * 0.8, 0.6), 140.0)
        self.x0 = f.x0

    def x(self, i) -> float:
        return self.x0 + self.band * i + (self.band - self.width) / 2


def _category_ticks(b: _Bands, f: _Frame) -> list[str]:
    parts = []
    axis = f.axis
    for i, text in enumerate(axis.texts if axis else []):
        if text is None:
            continue
        cx = f.x0 + b.band * (i + 0.5)
        font = f' style="font-size:{axis.font:g}px"' if axis.font != 11 else ""
        cls = "ls-tick ls-hot-tick" if axis.hot[i] else "ls-tick"
        if axis.rotation:
            parts.append(f'<text transform="translate({cx + axis.font * 0.35:.1f},'
                         f'{f.bottom + 6}) rotate(-90)" class="{cls}"{font} '
                         f'text-anchor="end">{_e(text)}</text>')
        else:
            parts.append(f'<text x="{cx:.1f}" y="{f.bottom + 16}" class="{cls}"{font} '
                         f'text-anchor="middle">{_e(text)}</text>')
    return parts


def _draw_bars(chart: Chart, f: _Frame) -> list[str]:
    """One bar per point; several series share each slot side by side (diff: base, new)."""
    b = _Bands(chart, f)
    w = b.width / max(len(chart.series), 1)
    parts = [_bar(p, s.color, b.x(p.x) + k * w, w, f.sy, f.bottom, f.hot_any)
             for k, s in enumerate(chart.series) for p in s.points]
    return parts + _category_ticks(b, f)


def _draw_stacked(chart: Chart, f: _Frame) -> list[str]:
    b = _Bands(chart, f)
    parts = []
    base = [0.0] * b.n
    for s in chart.series:
        for p in s.points:
            i = int(p.x)
            ytop, ybot = f.sy(base[i] + p.y), f.sy(base[i])
            base[i] += p.y
            if p.y <= 0:
                continue
            parts.append(f'<rect class="ls-mark" x="{b.x(i):.2f}" y="{ytop:.2f}" '
                         f'width="{b.width:.2f}" height="{max(ybot - ytop, 0.5):.2f}" '
                         f'fill="{s.color}">{_title(p.tip)}</rect>')
    return parts + _category_ticks(b, f)


# ---- lines and points: a numeric x axis -------------------------------------------------
def _x_axis(chart: Chart, f: _Frame) -> tuple[_Scale, list[str]]:
    parts = []
    x0, x1 = f.x0, f.x1
    xs = [p.x for s in chart.series + chart.guides for p in s.points]
    if chart.log_x:
        pos = [v for v in xs if v > 0] or [1.0]
        lo, hi = min(pos), max(pos)
        pad = (hi / lo) ** 0.04 if hi > lo else 2.0
        sx = _Scale(lo / pad, hi * pad, x0, x1, log=True)
        xt = chart.x_ticks or log_ticks(lo, hi)
    else:
        lo, hi = min(xs), max(xs)
        pad = (hi - lo) * 0.04 or 0.5
        sx = _Scale(lo - pad, hi + pad, x0, x1)
        xt = chart.x_ticks or nice_ticks(lo, hi)
    for t in xt:
        px = sx(t)
        if x0 - 0.5 <= px <= x1 + 0.5:
            parts.append(f'<line x1="{px:.1f}" y1="{f.top}" x2="{px:.1f}" '
                         f'y2="{f.bottom}" class="ls-grid"/>')
            parts.append(f'<text x="{px:.1f}" y="{f.bottom + 16}" class="ls-tick" '
                         f'text-anchor="middle">{_e(fmt_tick(t))}</text>')
    for g in chart.guides:
        pts = " ".join(f"{sx(p.x):.1f},{f.sy(p.y):.1f}" for p in g.points)
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{g.color}" '
                     f'stroke-width="1.5" stroke-dasharray="6 3"/>')
    return sx, parts


def _points(chart: Chart, f: _Frame, joined: bool, radius: float) -> list[str]:
    """Every series' points (circles with whiskers and placed names), joined by a line when
    ``joined``."""
    sx, parts = _x_axis(chart, f)
    sy = f.sy
    boxes = scatter_label_boxes(chart, sx, sy)
    for s in chart.series:
        if joined and len(s.points) > 1:
            pts = " ".join(f"{sx(p.x):.1f},{sy(p.y):.1f}" for p in s.points)
            dash = ' stroke-dasharray="6 3"' if s.dashed else ""
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{s.color}" '
                         f'stroke-width="2"{dash}/>')
        for p in s.points:
            cx, cy = sx(p.x), sy(p.y)
            if p.lo is not None and p.hi is not None:
                parts.append(f'<line x1="{cx:.1f}" y1="{sy(p.lo):.1f}" x2="{cx:.1f}" '
                             f'y2="{sy(p.hi):.1f}" stroke="{s.color}" stroke-width="1.5"/>')
            r = 6 if p.hot else radius
            stroke = ' stroke="#222" stroke-width="1.5"' if p.hot else \
                ' stroke="#fff" stroke-width="0.8"'
            parts.append(f'<circle class="ls-mark" cx="{cx:.1f}" cy="{cy:.1f}" r="{r}" '
                         f'fill="{s.color}"{stroke}>{_title(p.tip)}</circle>')
            b = boxes.get(id(p))
            if b is not None:
                left = b.x1 < cx  # written left of its point (no room on the right)
                if abs((b.y0 + b.y1) / 2 - cy) > 1:  # moved off its point: a leader line
                    lx = b.x1 + 1 if left else b.x0 - 1
                    parts.append(f'<line x1="{cx + (-r if left else r):.1f}" y1="{cy:.1f}" '
                                 f'x2="{lx:.1f}" y2="{(b.y0 + b.y1) / 2:.1f}" '
                                 f'class="ls-leader"/>')
                parts.append(f'<text x="{b.x0:.1f}" y="{b.y0 + HOT_FONT * 0.95:.1f}" '
                             f'class="ls-hot-label">{_e(p.label)}</text>')
    return parts


def _draw_lines(chart: Chart, f: _Frame) -> list[str]:
    return _points(chart, f, joined=True, radius=3.5)


def _draw_scatter(chart: Chart, f: _Frame) -> list[str]:
    return _points(chart, f, joined=False, radius=4)


@dataclass(frozen=True)
class Drawer:
    """How one kind of chart is drawn: its marks (and x axis), the values its y axis holds,
    the room above the plot for value labels, and whether one series gets a legend."""
    marks: Callable[[Chart, _Frame], list[str]]
    y_values: Callable[[Chart], list[float]] = _point_values
    label_room: float = 12
    one_series_legend: bool = True


DRAWERS = {
    "bars": Drawer(_draw_bars, label_room=26, one_series_legend=False),
    "stacked": Drawer(_draw_stacked, y_values=_stack_sums),
    "lines": Drawer(_draw_lines, one_series_legend=False),
    "scatter": Drawer(_draw_scatter),
}


def _bar(p: Point, color: str, x: float, w: float, sy, base: float, hot_any: bool,
         named: bool = True) -> str:
    top = sy(max(p.y, 0.0))
    h = max(base - top, 0.5 if p.y > 0 else 0.0)
    style = ' stroke="#222" stroke-width="1.2"' if p.hot else (
        ' fill-opacity="0.55"' if hot_any else "")
    out = (f'<rect class="ls-mark{" ls-hot" if p.hot else ""}" x="{x:.2f}" y="{base - h:.2f}" '
           f'width="{w:.2f}" height="{h:.2f}" fill="{color}"{style}>{_title(p.tip)}</rect>')
    if p.lo is not None and p.hi is not None and w >= 3:
        cx = x + w / 2
        out += (f'<line x1="{cx:.2f}" y1="{sy(p.lo):.2f}" x2="{cx:.2f}" y2="{sy(p.hi):.2f}" '
                f'class="ls-whisker"/>')
    if p.label and named:  # a value (compare); layer names are on the axis
        out += (f'<text transform="translate({x + w / 2:.1f},{base - h - 4:.1f}) rotate(-30)" '
                f'class="ls-hot-label">{_e(p.label)}</text>')
    return out
