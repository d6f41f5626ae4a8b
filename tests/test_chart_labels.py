"""Chart labels never print over each other: bar names under the x axis (rotated, shortened in
the middle, thinned with highlighted bars kept) and the roofline's names of hot layers (nudged
apart). The layout is pure (renderers/label_layout.py); the SVG and PNG are checked as drawn."""
from __future__ import annotations

import re

import pytest

from layerscope.renderers.charts import charts
from layerscope.renderers.html.svg import HOT_FONT, LEFT, RIGHT, WIDTH, category_labels, svg_chart
from layerscope.renderers.label_layout import (
    Box,
    any_overlap,
    axis_labels,
    place_labels,
    shorten_middle,
    text_width,
)
from tests.sample_results import many_layer_profile, resnet20_names

TOP12 = {"rule": "top", "value": 12}  # the 12 slowest: all convolutions, clustered on the roof


@pytest.mark.parametrize("text, n, expected", [
    ("conv1", 24, "conv1"),
    ("layer3.2.conv2", 14, "layer3.2.conv2"),  # fits exactly
    # 10 chars: 9 kept around "…", the end gets (9+1)//2 + 9//4 = 7, the start 2
    ("layer3.2.conv2", 10, "la…2.conv2"),
    # 24: 23 kept, the end (23+1)//2 + 23//4 = 17 ("enselayer16.conv2"), the start 6
    ("features.denseblock4.denselayer16.conv2", 24, "featur…enselayer16.conv2"),
], ids=["short", "exact", "middle", "densenet"])
def test_shorten_middle(text, n, expected):
    got = shorten_middle(text, n)
    assert len(got) <= n
    assert got == expected
    assert got.endswith(text[-5:])  # the leaf name survives


@pytest.mark.parametrize("n, band, rotation, thinned", [
    (4, 200.0, 0, False),  # wide bands: horizontal names
    (60, 14.5, 90, False),  # the HTML chart's 60 bars: 868 px / 60, a 11-px line fits
    (60, 9.0, 90, False),  # 8-px font (9.6-px line) does not fit 9 px... see below
    (200, 4.3, 90, True),  # too many: every k-th, highlighted ones kept
], ids=["few", "sixty-html", "sixty-narrow", "two-hundred"])
def test_axis_labels_never_overlap(n, band, rotation, thinned):
    names = [resnet20_names()[i % 60] + ("" if i < 60 else f"#{i}") for i in range(n)]
    hot = [i % 17 == 5 for i in range(n)]
    axis = axis_labels(names, hot, band)
    assert axis.rotation == rotation
    assert not any_overlap(axis.boxes)
    assert all(axis.texts[i] is not None for i in range(n) if hot[i])  # highlighted: named
    if band == 9.0:  # 8 px · 1.2 = 9.6 px line + 1 px gap > 9 px: thinned to one in 2
        assert axis.step == 2 and axis.thinned
    else:
        assert axis.thinned == thinned
    for t, name in zip(axis.texts, names):
        assert t is None or len(t) <= 24 and t[-3:] == name[-3:]


def test_place_labels_keeps_an_unclashing_label_where_it_is():
    (b,) = place_labels([(100.0, 50.0)], [(40.0, 12.0)])
    assert b == Box(108.0, 44.0, 148.0, 56.0)


@pytest.mark.parametrize("n", [2, 12, 40], ids=["two", "twelve", "forty"])
def test_place_labels_separates_a_cluster(n):
    anchors = [(300.0 + (i % 3), 200.0 + 0.5 * i) for i in range(n)]  # all within 3 x 20 px
    sizes = [(90.0, 12.0)] * n
    naive = [Box(x + 8, y - 6, x + 98, y + 6) for x, y in anchors]
    assert any_overlap(naive)  # what the old code drew
    boxes = place_labels(anchors, sizes)
    assert not any_overlap(boxes)
    # and each stays near its point: within n label heights
    assert all(abs((b.y0 + b.y1) / 2 - y) <= 12 * n for b, (_, y) in zip(boxes, anchors))


def test_place_labels_flips_left_at_the_right_edge():
    (b,) = place_labels([(950.0, 50.0)], [(40.0, 12.0)], x_max=958.0)
    assert b.x1 <= 950.0


# ---- as drawn: the 60-layer ResNet-20 profile ------------------------------------------------
def test_svg_bar_chart_names_every_one_of_60_layers():
    bars = charts(many_layer_profile(TOP12))[0]
    svg = svg_chart(bars)
    axis = category_labels(bars, (WIDTH - RIGHT - LEFT) / 60)
    assert axis.texts == [shorten_middle(n, 24) for n in resnet20_names()]  # none thinned
    assert not any_overlap(axis.boxes)
    ticks = re.findall(r'rotate\(-90\)" class="ls-tick[^"]*"[^>]*>([^<]+)</text>', svg)
    assert ticks == axis.texts
    assert svg.count("ls-hot-tick") == 12  # the highlighted bars' names are bold
    assert "names shown" not in svg  # nothing thinned, so no word about it


def _svg_label_boxes(svg: str) -> list[Box]:
    out = []
    for x, y, text in re.findall(r'<text x="([\d.]+)" y="([\d.]+)" class="ls-hot-label">'
                                 r'([^<]+)</text>', svg):
        x0, top = float(x), float(y) - HOT_FONT * 0.95  # y is the baseline
        out.append(Box(x0, top, x0 + text_width(text, HOT_FONT) * 1.1, top + HOT_FONT * 1.2))
    return out


def test_svg_roofline_names_of_hot_layers_do_not_overlap():
    roof = charts(many_layer_profile(TOP12))[1]
    svg = svg_chart(roof)
    boxes = _svg_label_boxes(svg)
    assert len(boxes) == 12
    assert not any_overlap(boxes)
    assert "ls-leader" in svg  # moved labels point back at their layer


@pytest.mark.integration
def test_png_labels_do_not_overlap_as_matplotlib_draws_them():
    pytest.importorskip("matplotlib")
    from layerscope.renderers.plot import figure

    fig = figure(many_layer_profile(TOP12), (1200, 800))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    bars_ax, roof_ax = fig.axes[:2]

    def box(t):
        e = t.get_window_extent(renderer)
        return Box(e.x0, e.y0, e.x1, e.y1)

    ticks = [t for t in bars_ax.get_xticklabels() if t.get_text()]
    tick_boxes = [box(t) for t in ticks]
    assert not any_overlap(tick_boxes)
    names = {t.get_text() for t in ticks}
    slowest = sorted(many_layer_profile().layers, key=lambda r: r.rank)[:12]
    assert {shorten_middle(r.name, 24) for r in slowest} <= names  # highlighted: always named
    assert len(ticks) >= 24  # at this size one bar in 2 (and every highlighted one)
    assert "one bar in" in bars_ax.get_title()  # thinning is said in the note
    labels = [t for t in roof_ax.texts if t.get_gid() == "ls-point-label"]
    assert len(labels) == 12
    assert not any_overlap([box(t) for t in labels])


@pytest.mark.integration
def test_png_big_figure_names_every_bar():
    pytest.importorskip("matplotlib")
    from layerscope.renderers.plot import figure

    fig = figure(many_layer_profile(TOP12), (2400, 1000))
    fig.canvas.draw()
    ticks = [t for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert len(ticks) == 60
    renderer = fig.canvas.get_renderer()
    assert not any_overlap([Box(*t.get_window_extent(renderer).extents) for t in ticks])
