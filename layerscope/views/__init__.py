"""Views: what each kind of result shows, as sections (heading, key figures, row tables, charts,
the CSV's table, the terminal layout). Renderers draw ``view_for(result)`` and never ask which
kind of result they hold.

A new result kind is one module here (a ``View``) plus one registration line below.
"""
from __future__ import annotations

from layerscope.views.sections import View

VIEWS: dict[str, View] = {}


def register(kind: str, view: View) -> None:
    """Register the view of results whose ``kind`` is ``kind``; one per kind."""
    if kind in VIEWS:
        raise ValueError(f"a view for {kind!r} results is registered already")
    VIEWS[kind] = view


def view_for(result) -> View:
    """The registered view of ``result`` (by its ``kind``)."""
    kind = getattr(result, "kind", None)
    try:
        return VIEWS[kind]
    except (KeyError, TypeError):
        raise LookupError(f"no view for {kind!r} results ({type(result).__name__}); views are "
                          f"registered for {', '.join(sorted(VIEWS))} "
                          "(layerscope.views.register)") from None


from layerscope.views import (  # noqa: E402
    ablate,
    activations,
    advice,
    compare,
    decode,
    diff,
    graph,
    llm,
    loop,
    memory,
    ops,
    report,
    scaling,
    sweep,
    training,
)

register("analyze", report.ANALYZE)
register("profile", report.PROFILE)
register("ops", ops.VIEW)
register("sweep", sweep.VIEW)
register("train", training.TRAIN)
register("ablate", ablate.ABLATE)
register("loop", loop.LOOP)
register("activations", activations.VIEW)
register("compare", compare.VIEW)
register("graph", graph.VIEW)
register("scaling", scaling.VIEW)
register("llm", llm.LLM)
register("plan", llm.PLAN)
register("advice", advice.VIEW)
register("decode", decode.VIEW)
register("memory", memory.VIEW)
register("diff", diff.VIEW)
