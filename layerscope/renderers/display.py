"""The drawing functions behind every record's ``__rich__`` and ``_repr_html_`` (core/display.py).

Installed by ``layerscope/__init__.py``, once for the base of every result class
(``core.kinds.Result``), so every kind of the kinds table is drawn and none can be forgotten;
each renderer module is imported only when a record is first shown, so importing layerscope stays
cheap."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from layerscope.core import display
from layerscope.core.kinds import Result


def _later(module: str, function: str) -> Callable[[Any], Any]:
    def draw(record: Any) -> Any:
        return getattr(importlib.import_module(f"layerscope.renderers.{module}"), function)(record)

    draw.target = (f"layerscope.renderers.{module}", function)  # checked by the tests
    return draw


# a result's terminal view (and its str()) is its view's layout (View.terminal), drawn by one
# renderer, and its notebook view the same HTML table renderer for every kind
RICH = {Result: _later("terminal", "render_table")}
HTML = {Result: _later("html_table", "render_html_table")}
# print(result): the terminal layout as plain text (no colour, a fixed width)
TEXT = {Result: _later("terminal", "to_text")}


def install() -> None:
    display.install(RICH, HTML, TEXT)
