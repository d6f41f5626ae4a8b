"""``--plot FILE.png``: the result's charts (the same as the HTML report's, renderers/charts.py)
in one matplotlib figure of exactly the requested size in pixels. Headless (Agg); matplotlib is
imported only here."""
from __future__ import annotations

import io
import warnings

from layerscope.core import values
from layerscope.errors import UserError
from layerscope.renderers.charts import Chart, charts
from layerscope.renderers.tables import heading

DPI = 100
DEFAULT_SIZE = (1200, 800)


def parse_size(text: str | None) -> tuple[int, int]:
    """'1200x800' -> (1200, 800)."""
    if not text:
        return DEFAULT_SIZE
    return values.size_pair(text, "--plot-size", low=100, high=10000)


def _fmt(v, _pos=None) -> str:
    from layerscope.renderers.html.svg import fmt_tick

    return fmt_tick(v)


def _draw(ax, chart: Chart) -> None:
    from matplotlib.ticker import FuncFormatter

    hot_any = any(p.hot for s in chart.series for p in s.points)
    if chart.kind == "bars":
        for s in chart.series:
            xs = [p.x for p in s.points]
            ys = [p.y for p in s.points]
            alphas = [1.0 if (p.hot or not hot_any) else 0.55 for p in s.points]
            colors = [(*_rgb(s.color), a) for a in alphas]
            edges = ["#222222" if p.hot else "none" for p in s.points]
            ax.bar(xs, ys, width=0.8, color=colors, edgecolor=edges, linewidth=1.0, label=s.name)
            for p in s.points:
                if p.lo is not None and p.hi is not None and len(chart.categories) <= 200:
                    ax.plot([p.x, p.x], [p.lo, p.hi], color="#333333", linewidth=0.8)
                if p.label:
                    ax.annotate(p.label, (p.x, p.hi if p.hi is not None else p.y),
                                xytext=(2, 4), textcoords="offset points", rotation=30,
                                fontsize=7, fontweight="bold")
    elif chart.kind == "stacked":
        n = len(chart.categories)
        base = [0.0] * n
        for s in chart.series:
            ys = [0.0] * n
            for p in s.points:
                ys[int(p.x)] = p.y
            ax.bar(range(n), ys, bottom=base, width=0.7, color=s.color, label=s.name)
            base = [b + y for b, y in zip(base, ys)]
    else:
        for g in chart.guides:
            ax.plot([p.x for p in g.points], [p.y for p in g.points], color=g.color,
                    linestyle="--", linewidth=1.2, label=g.name)
        for s in chart.series:
            xs = [p.x for p in s.points]
            ys = [p.y for p in s.points]
            if chart.kind == "lines":
                ax.plot(xs, ys, color=s.color, marker="o", markersize=4, linewidth=1.8,
                        linestyle="--" if s.dashed else "-", label=s.name)
                for p in s.points:
                    if p.lo is not None and p.hi is not None:
                        ax.plot([p.x, p.x], [p.lo, p.hi], color=s.color, linewidth=1.2)
            else:
                ax.scatter(xs, ys, s=[40 if p.hot else 16 for p in s.points], color=s.color,
                           edgecolors=["#222222" if p.hot else "none" for p in s.points],
                           label=s.name, zorder=3)
            for p in s.points:
                if p.label:
                    ax.annotate(p.label, (p.x, p.y), xytext=(5, 2), textcoords="offset points",
                                fontsize=7, fontweight="bold")
    if chart.log_x:
        ax.set_xscale("log")
    if chart.log_y:
        ax.set_yscale("log")
    if chart.kind in ("bars", "stacked"):
        n = len(chart.categories)
        if 0 < n <= 40:
            ax.set_xticks(range(n))
            ax.set_xticklabels([c if len(c) <= 24 else c[:23] + "…" for c in chart.categories],
                               rotation=45 if (n > 8 or max(map(len, chart.categories)) > 10)
                               else 0, ha="right" if n > 8 else "center", fontsize=7)
        else:
            ax.set_xticks([])
        ax.set_xlim(-0.6, max(n, 1) - 0.4)
    elif chart.x_ticks:
        ax.set_xticks(chart.x_ticks)
        ax.xaxis.set_major_formatter(FuncFormatter(_fmt))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, p: ""))
    if not chart.log_y:
        ax.yaxis.set_major_formatter(FuncFormatter(_fmt))
        if chart.kind == "lines" and all(p.y >= 0 for s in chart.series for p in s.points):
            ax.set_ylim(bottom=0)  # as in the HTML charts
    ax.set_title(chart.title + (f"\n{chart.note}" if chart.note else ""), fontsize=8.5,
                 wrap=True)
    if any(p.label for s in chart.series for p in s.points) and not chart.log_y:
        ax.set_ylim(top=ax.get_ylim()[1] * 1.12)
    ax.set_xlabel(chart.x_label, fontsize=8)
    ax.set_ylabel(chart.y_label, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, axis="y", color="#eaeef2")
    ax.set_axisbelow(True)
    if len(chart.series) + len(chart.guides) > 1 or chart.guides or chart.kind == "stacked":
        # headroom above the highest mark, so the legend never hides one
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * 10 if chart.log_y else hi + (hi - lo) * 0.25)
        ax.legend(fontsize=6.5, ncol=3, loc="upper center", framealpha=0.9)


def _rgb(color: str) -> tuple[float, float, float]:
    c = color.lstrip("#")
    return tuple(int(c[i:i + 2], 16) / 255 for i in (0, 2, 4))  # type: ignore[return-value]


def render_png(result, size: tuple[int, int] = DEFAULT_SIZE) -> bytes:
    """PNG bytes of exactly ``size`` (width, height) pixels."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError("--plot needs matplotlib: pip install matplotlib") from None
    drawn = charts(result)
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
        _draw(ax, chart)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.suptitle(heading(result)[0], fontsize=11, fontweight="bold")
    buf = io.BytesIO()
    with warnings.catch_warnings():  # tiny sizes: constrained layout gives up, still the size
        warnings.simplefilter("ignore", UserWarning)
        fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()
