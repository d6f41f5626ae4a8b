"""Kept for callers of the old names: a result's charts are its view's (layerscope/views), drawn
as SVG by renderers/html/svg.py and as PNG by renderers/plot.py."""
from __future__ import annotations

from layerscope.views import view_for
from layerscope.views.sections import PALETTE, PHASE_COLORS, Chart, Point, Series  # noqa: F401


def charts(result) -> list[Chart]:
    return view_for(result).charts(result)
