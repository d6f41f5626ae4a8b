"""The drawing functions behind every record's ``__rich__`` and ``_repr_html_`` (core/display.py).

Installed by ``layerscope/__init__.py``; each renderer module is imported only when a record is
first shown, so importing layerscope stays cheap."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from layerscope.core import display
from layerscope.core.results import RESULT_CLASSES


def _later(module: str, function: str) -> Callable[[Any], Any]:
    def draw(record: Any) -> Any:
        return getattr(importlib.import_module(f"layerscope.renderers.{module}"), function)(record)

    draw.target = (f"layerscope.renderers.{module}", function)  # checked by the tests
    return draw


# every result class of the kinds table (core/results.py) is drawn, so none can be forgotten:
# its terminal view (and its str()) is its view's layout (View.terminal), drawn by one
# renderer, and its notebook view the same HTML table renderer for every kind
RICH = {name: _later("terminal", "render_table") for name in RESULT_CLASSES}
HTML = {name: _later("html_table", "render_html_table") for name in RESULT_CLASSES}
# print(result): the terminal layout as plain text (no colour, a fixed width)
TEXT = {name: _later("terminal", "to_text") for name in RESULT_CLASSES}


def install() -> None:
    display.install(RICH, HTML, TEXT)
