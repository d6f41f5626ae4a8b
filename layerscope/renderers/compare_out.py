"""Kept for callers of the old names: the compare layout lives in layerscope/views/compare.py."""
from __future__ import annotations

from layerscope.renderers.terminal import to_text as _to_text
from layerscope.views.compare import render_compare  # noqa: F401


def to_text(c, width: int | None = None, show_all: bool = False) -> str:
    return _to_text(c, width=width, show_all=show_all)
