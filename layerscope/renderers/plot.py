"""``--plot FILE.png``: the result's charts (the same as the HTML report's: its view's)
in one matplotlib figure of exactly the requested size in pixels. Headless (Agg); matplotlib is
imported only here."""
from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from layerscope.core import values
from layerscope.core.errors import UserError
from layerscope.renderers.html.svg import category_labels, names_its_category, with_thinning_note
from layerscope.renderers.label_layout import place_labels
from layerscope.views import view_for
from layerscope.views.sections import Chart

DPI = 100
DEFAULT_SIZE = (1200, 800)
TICK_PTS = (7.0, 6.5, 6.0, 5.5)  # x-axis names: the largest that fits, thinned below the last
LABEL_PT = 7.0  # scatter point names


def parse_size(text: str | None) -> tuple[int, int]:
    """'1200x800' -> (1200, 800)."""
    if not text:
        return DEFAULT_SIZE
    return values.size_pair(text, "--plot-size", low=100, high=10000)


def _fmt(v, _pos=None) -> str:
    from layerscope.renderers.html.svg import fmt_tick

    return fmt_tick(v)


def _band_pt(chart: Chart, ax_width_px: float) -> float:
    """Width of one bar's slot in points (the axes span n + 0.2 slots)."""
    return ax_width_px * 72 / DPI / (max(len(chart.categories), 1) + 0.2)


def _category_ticks(ax, chart: Chart, ax_width_px: float) -> None:
    """A name under every bar that fits (label_layout.axis_labels: rotated, shortened in the
    middle, thinned with every highlighted bar kept), in points as matplotlib draws them."""
    axis = category_labels(chart, _band_pt(chart, ax_width_px), TICK_PTS)
    kept = [i for i, t in enumerate(axis.texts) if t is not None]
    ax.set_xticks(kept)
    labels = ax.set_xticklabels([axis.texts[i] for i in kept], rotation=axis.rotation,
                                ha="center", va="top", fontsize=axis.font)
    for i, lab in zip(kept, labels):
        if axis.hot[i]:
            lab.set_fontweight("bold")


def _set_title(ax, chart: Chart, ax_width_px: float) -> None:
    note = with_thinning_note(chart, _band_pt(chart, ax_width_px), TICK_PTS) \
        if chart.categorical else chart.note
    ax.set_title(chart.title + (f"\n{note}" if note else ""), fontsize=8.5, wrap=True)


def _place_point_labels(fig, ax) -> None:
    """Move the scatter's point names (drawn at (5, 0) points) so that none overlaps another:
    real text sizes from the renderer, placement by label_layout.place_labels in pixels."""
    texts = [t for t in ax.texts if t.get_gid() == "ls-point-label"]
    if len(texts) < 2:
        return
    renderer = fig.canvas.get_renderer()
    height = fig.bbox.height
    anchors, sizes = [], []
    for t in texts:
        x, y = ax.transData.transform(t.xy)
        e = t.get_window_extent(renderer)
        anchors.append((x, height - y))
        sizes.append((e.width, e.height + 1))
    px = DPI / 72
    boxes = place_labels(anchors, sizes, dx=5 * px, x_max=ax.bbox.x1)
    for t, (x, y), b in zip(texts, anchors, boxes):
        dy = (b.y0 + b.y1) / 2 - y
        ox = (b.x0 - x) / px  # offset points to the label's left edge
        t.set_position((ox, -dy / px))  # offset points, y up
        if abs(dy) > 1 or ox < 0:
            line = ax.annotate("", t.xy, xytext=(ox if ox > 0 else ox + b.width / px, -dy / px),
                               textcoords="offset points",
                               arrowprops={"arrowstyle": "-", "color": "#8c959f",
                                           "linewidth": 0.6, "shrinkA": 0, "shrinkB": 3})
            line.set_in_layout(False)


def _draw_bars(ax, chart: Chart) -> None:
    hot_any = any(p.hot for s in chart.series for p in s.points)
    width = 0.8 / max(len(chart.series), 1)  # several series share each slot side by side
    for k, s in enumerate(chart.series):
        shift = (k - (len(chart.series) - 1) / 2) * width
        xs = [p.x + shift for p in s.points]
        ys = [p.y for p in s.points]
        alphas = [1.0 if (p.hot or not hot_any) else 0.55 for p in s.points]
        colors = [(*_rgb(s.color), a) for a in alphas]
        edges = ["#222222" if p.hot else "none" for p in s.points]
        ax.bar(xs, ys, width=width, color=colors, edgecolor=edges, linewidth=1.0, label=s.name)
        for p in s.points:
            if p.lo is not None and p.hi is not None and len(chart.categories) <= 200:
                ax.plot([p.x + shift, p.x + shift], [p.lo, p.hi], color="#333333", linewidth=0.8)
            if p.label and not names_its_category(p, chart.categories):
                ax.annotate(p.label, (p.x + shift, p.hi if p.hi is not None else p.y),
                            xytext=(2, 4), textcoords="offset points", rotation=30,
                            fontsize=7, fontweight="bold")


def _draw_stacked(ax, chart: Chart) -> None:
    n = len(chart.categories)
    base = [0.0] * n
    for s in chart.series:
        ys = [0.0] * n
        for p in s.points:
            ys[int(p.x)] = p.y
        ax.bar(range(n), ys, bottom=base, width=0.7, color=s.color, label=s.name)
        base = [b + y for b, y in zip(base, ys)]


def _draw_guides(ax, chart: Chart) -> None:
    for g in chart.guides:
        ax.plot([p.x for p in g.points], [p.y for p in g.points], color=g.color,
                linestyle="--", linewidth=1.2, label=g.name)


def _point_labels(ax, s) -> None:
    for p in s.points:
        if p.label:  # placed clear of each other once the layout is known: _place
            a = ax.annotate(p.label, (p.x, p.y), xytext=(5, 0),
                            textcoords="offset points", fontsize=LABEL_PT,
                            fontweight="bold", va="center", gid="ls-point-label")
            a.set_in_layout(False)


def _draw_lines(ax, chart: Chart) -> None:
    _draw_guides(ax, chart)
    for s in chart.series:
        xs = [p.x for p in s.points]
        ys = [p.y for p in s.points]
        ax.plot(xs, ys, color=s.color, marker="o", markersize=4, linewidth=1.8,
                linestyle="--" if s.dashed else "-", label=s.name)
        for p in s.points:
            if p.lo is not None and p.hi is not None:
                ax.plot([p.x, p.x], [p.lo, p.hi], color=s.color, linewidth=1.2)
        _point_labels(ax, s)


def _draw_scatter(ax, chart: Chart) -> None:
    _draw_guides(ax, chart)
    for s in chart.series:
        xs = [p.x for p in s.points]
        ys = [p.y for p in s.points]
        ax.scatter(xs, ys, s=[40 if p.hot else 16 for p in s.points], color=s.color,
                   edgecolors=["#222222" if p.hot else "none" for p in s.points],
                   label=s.name, zorder=3)
        _point_labels(ax, s)


@dataclass(frozen=True)
class Drawer:
    """How one kind of chart is drawn in matplotlib: its marks, whether its y axis starts at
    zero when every value is positive (as in the HTML charts), and whether one series gets a
    legend."""
    marks: Callable
    floor_at_zero: bool = False
    always_legend: bool = False


DRAWERS = {
    "bars": Drawer(_draw_bars),
    "stacked": Drawer(_draw_stacked, always_legend=True),
    "lines": Drawer(_draw_lines, floor_at_zero=True),
    "scatter": Drawer(_draw_scatter),
}


def _draw(ax, chart: Chart, ax_width_px: float = 500.0) -> None:
    from matplotlib.ticker import FuncFormatter

    drawer = DRAWERS[chart.kind]
    drawer.marks(ax, chart)
    if chart.log_x:
        ax.set_xscale("log")
    if chart.log_y:
        ax.set_yscale("log")
    if chart.categorical:
        n = len(chart.categories)
        ax.set_xlim(-0.6, max(n, 1) - 0.4)
        _category_ticks(ax, chart, ax_width_px)
    elif chart.x_ticks:
        ax.set_xticks(chart.x_ticks)
        ax.xaxis.set_major_formatter(FuncFormatter(_fmt))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, p: ""))
    if not chart.log_y:
        ax.yaxis.set_major_formatter(FuncFormatter(_fmt))
        if drawer.floor_at_zero and all(p.y >= 0 for s in chart.series for p in s.points):
            ax.set_ylim(bottom=0)  # as in the HTML charts
    _set_title(ax, chart, ax_width_px)
    if any(p.label for s in chart.series for p in s.points) and not chart.log_y:
        ax.set_ylim(top=ax.get_ylim()[1] * 1.12)
    ax.set_xlabel(chart.x_label, fontsize=8)
    ax.set_ylabel(chart.y_label, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, axis="y", color="#eaeef2")
    ax.set_axisbelow(True)
    if len(chart.series) + len(chart.guides) > 1 or chart.guides or drawer.always_legend:
        # headroom above the highest mark, so the legend never hides one
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * 10 if chart.log_y else hi + (hi - lo) * 0.25)
        ax.legend(fontsize=6.5, ncol=3, loc="upper center", framealpha=0.9)


def _rgb(color: str) -> tuple[float, float, float]:
    c = color.lstrip("#")
    return tuple(int(c[i:i + 2], 16) / 255 for i in (0, 2, 4))  # type: ignore[return-value]


def figure(result, size: tuple[int, int] = DEFAULT_SIZE):
    """The matplotlib Figure of ``result``'s charts, laid out and labelled (not yet saved)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError("--plot needs matplotlib: pip install matplotlib") from None
    view = view_for(result)
    drawn = view.charts(result)
    if not drawn:
        raise UserError(f"a {result.kind} result has no chart to plot")
    width, height = size
    # Figure (not pyplot): no global state, no GUI backend, safe in threads
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    n = len(drawn)
    cols = n if n <= 3 else 2
    rows = -(-n // cols)
    if width < height and n > 1:
        cols, rows = 1, n
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, chart in zip(axes.flat, drawn):
        _draw(ax, chart, width / cols * 0.85)  # a first guess of the axes' width
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.suptitle(view.heading(result)[0], fontsize=11, fontweight="bold")
    with warnings.catch_warnings():  # tiny sizes: constrained layout gives up, still the size
        warnings.simplefilter("ignore", UserWarning)
        fig.canvas.draw()  # lays the axes out: now their widths and transforms are final
        for ax, chart in zip(axes.flat, drawn):
            if chart.categorical:
                _category_ticks(ax, chart, ax.bbox.width)
                _set_title(ax, chart, ax.bbox.width)
        fig.canvas.draw()
        for ax in list(axes.flat)[:n]:
            _place_point_labels(fig, ax)
    return fig


def render_png(result, size: tuple[int, int] = DEFAULT_SIZE) -> bytes:
    """PNG bytes of exactly ``size`` (width, height) pixels."""
    fig = figure(result, size)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()
