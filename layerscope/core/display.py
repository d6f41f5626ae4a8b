"""How a result record shows itself in a terminal (rich's ``__rich__``) and in a notebook
(``_repr_html_``), without the layers that make records (core, analysis, training) importing the
renderers above them.

The renderers layer installs one drawing function per record class (``renderers/display.py``);
``layerscope/__init__.py`` installs them when the package is imported, which happens before any
record can exist. A record's hooks look the drawing function up by class, the most derived first.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")

_RICH: dict[str, Callable[[Any], Any]] = {}
_HTML: dict[str, Callable[[Any], str]] = {}


def install(rich: dict[str, Callable[[Any], Any]], html: dict[str, Callable[[Any], str]]) -> None:
    """Drawing functions keyed by record class name (a subclass without one uses its base's)."""
    _RICH.update(rich)
    _HTML.update(html)


def _drawer(table: dict[str, Callable[[Any], _T]], record: Any, hook: str) -> Callable[[Any], _T]:
    for cls in type(record).__mro__:
        if cls.__name__ in table:
            return table[cls.__name__]
    raise TypeError(f"no {hook} display is installed for {type(record).__name__}")


def rich(record: Any) -> Any:
    """What ``record.__rich__()`` returns: a rich renderable."""
    return _drawer(_RICH, record, "terminal")(record)


def html(record: Any) -> str:
    """What ``record._repr_html_()`` returns: an HTML table."""
    return _drawer(_HTML, record, "HTML")(record)
