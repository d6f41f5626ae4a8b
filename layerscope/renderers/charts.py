"""A result's charts, as its view gives them (layerscope/views); drawn as SVG by
renderers/html/svg.py and as PNG by renderers/plot.py."""
from __future__ import annotations

from layerscope.views import view_for
from layerscope.views.sections import Chart


def charts(result) -> list[Chart]:
    return view_for(result).charts(result)
