"""How a result record shows itself in a terminal (rich's ``__rich__``) and in a notebook
(``_repr_html_``), without the layers that make records (core, analysis, training) importing the
renderers above them.

Every result class takes both hooks from one mixin, ``Displayed``. The renderers layer installs
the drawing functions (``renderers/display.py``) once, on the base of every result class
(``core.kinds.Result``), so a result kind that can be loaded can also be shown, with no list of
classes to keep; ``layerscope/__init__.py`` installs them when the package is imported, which
happens before any record can exist. A record's hooks look the drawing function up by class, the
most derived first.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")

_RICH: dict[type, Callable[[Any], Any]] = {}
_HTML: dict[type, Callable[[Any], str]] = {}
_TEXT: dict[type, Callable[[Any], str]] = {}


def install(rich: dict[type, Callable[[Any], Any]], html: dict[type, Callable[[Any], str]],
            text: dict[type, Callable[[Any], str]] | None = None) -> None:
    """Drawing functions keyed by record class (a subclass without one uses its base's):
    rich renderables, HTML, and the plain text ``str()`` gives."""
    _RICH.update(rich)
    _HTML.update(html)
    _TEXT.update(text or {})


def _drawer(table: dict[type, Callable[[Any], _T]], record: Any, hook: str) -> Callable[[Any], _T]:
    for cls in type(record).__mro__:
        if cls in table:
            return table[cls]
    raise TypeError(f"no {hook} display is installed for {type(record).__name__}")


class Displayed:
    """Mixin of every result class: ``rich.print(result)`` draws its terminal view, ``print``
    (``str``) the same tables as plain text, and Jupyter its HTML table, through the drawing
    functions installed for its class."""

    def __rich__(self) -> Any:
        return rich(self)

    def __str__(self) -> str:
        return _drawer(_TEXT, self, "text")(self).rstrip("\n")

    def _repr_html_(self) -> str:
        return html(self)


def rich(record: Any) -> Any:
    """What ``record.__rich__()`` returns: a rich renderable."""
    return _drawer(_RICH, record, "terminal")(record)


def html(record: Any) -> str:
    """What ``record._repr_html_()`` returns: an HTML table."""
    return _drawer(_HTML, record, "HTML")(record)
