"""Any result as terminal text (rich): the layout its view gives (``View.terminal``)."""
from __future__ import annotations

import io

from rich.console import Console

from layerscope.views import view_for


def render_table(result, **options):
    """The rich renderable of ``result`` (what ``print`` in a rich console shows)."""
    return view_for(result).terminal(result, **options)


def to_text(result, width: int | None = None, **options) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width or 160, force_terminal=False, color_system=None,
                      highlight=False, soft_wrap=False)
    console.print(render_table(result, **options))
    return buf.getvalue()
