"""Results as one self-contained HTML page: environment, key figures, inline SVG charts,
sortable and filterable tables, and each result's JSON embedded in the page.

The page makes no network request: the template, CSS and JS are package files inlined here,
charts are SVG drawn in Python (svg.py), fonts are the system's.
"""
from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any

from layerscope.renderers.html.svg import svg_chart
from layerscope.renderers.tables import environment_rows
from layerscope.views import view_for
from layerscope.views.sections import Lead, RowTable


def _asset(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _finite(obj: Any) -> Any:
    """NaN and infinities become null, so the embedded block is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def embedded_json(result) -> str:
    """The result's JSON, safe inside a <script> element (no '<', '>' or '&' left raw)."""
    text = json.dumps(_finite(result.to_dict()), ensure_ascii=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def kv_table(caption: str, rows: Sequence[tuple[str, str]], cls: str = "ls-kv") -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f'<table class="{cls}"><caption>{_e(caption)}</caption><tbody>{body}</tbody></table>'


def row_table(t: RowTable, table_id: str | None = None, interactive: bool = True) -> str:
    """A RowTable as <table>; cells carry data-sort keys for report.js."""
    num = [c.numeric for c in t.columns]
    num_attr = ' class="num"'
    head = "".join(f'<th scope="col"{num_attr if c.numeric else ""}>{_e(c.label)}</th>'
                   for c in t.columns)
    rows = []
    for i, cells in enumerate(t.rows):
        hot = i < len(t.hot) and t.hot[i]
        tds = []
        for cell, n in zip(cells, num):
            key = "" if cell.sort is None else (repr(cell.sort) if isinstance(cell.sort, float)
                                               else str(cell.sort))
            attrs = (num_attr if n else "") + (f' data-sort="{_e(key)}"' if interactive
                                                     else "")
            tds.append(f"<td{attrs}>{_e(cell.text)}</td>")
        rows.append(("<tr class=\"ls-hot\">" if hot else "<tr>") + "".join(tds) + "</tr>")
    foot = ""
    if t.foot:
        foot = "<tfoot><tr>" + "".join(
            f'<td{num_attr if n else ""}>{_e(v)}</td>' for v, n in zip(t.foot, num)
        ) + "</tr></tfoot>"
    ident = f' id="{_e(table_id)}"' if table_id else ""
    cls = "ls-table" if interactive else "ls-static"
    return (f'<table class="{cls}"{ident}><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody>{foot}</table>')


def lead_html(lead: Lead | None) -> str:
    """A result's lead (the headline and the advice rules that fired), drawn first."""
    if lead is None:
        return ""
    parts = ['<div class="ls-lead" role="doc-abstract">',
             f'<p class="ls-headline"><strong>Answer:</strong> {_e(lead.headline)}</p>']
    if lead.table is not None and lead.table.rows:
        parts.append(f'<div class="ls-scroll">{row_table(lead.table, interactive=False)}</div>')
    if lead.note:
        parts.append(f'<p class="ls-sub">{_e(lead.note)}</p>')
    return "\n".join(parts + ["</div>"])


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "result"


def section(result, index: int) -> str:
    sid = f"r{index}"
    view = view_for(result)
    title, sub = view.heading(result)
    parts = [f'<section class="ls-result" id="{sid}" data-kind="{_e(result.kind)}">',
             f"<h2>{_e(title)}</h2>", f'<p class="ls-sub">{_e(sub)}</p>']
    lead = lead_html(view.lead(result))
    if lead:
        parts.append(lead)
    parts += [f'<p class="ls-warning" role="note">Warning: {_e(w)}</p>'
              for w in view.warnings(result)]
    parts += ['<div class="ls-facts">',
              kv_table("Environment", environment_rows(view.environment(result))),
              kv_table(view.facts_title, view.facts(result)),
              "</div>"]
    drawn = view.charts(result)
    if drawn:
        parts.append('<div class="ls-charts">' + "".join(svg_chart(c) for c in drawn)
                     + "</div>")
    for t in view.tables(result):
        tid = f"{sid}-{t.id}"
        parts.append(f"<h3>{_e(t.title)}</h3>")
        parts.append(f'<div class="ls-table-tools"><input type="search" class="ls-filter" '
                     f'placeholder="filter rows (words, all must match)" '
                     f'aria-label="filter {_e(t.title)}" data-table="{tid}" '
                     f'data-count="{tid}-count"><span class="ls-count" id="{tid}-count">'
                     f'{len(t.rows)} rows</span></div>')
        parts.append(f'<div class="ls-scroll">{row_table(t, tid)}</div>')
    name = _slug(f"{view.name(result)}-{result.kind}") + ".json"
    parts.append(f'<script type="application/json" class="ls-json" id="{sid}-json" '
                 f'data-kind="{_e(result.kind)}">{embedded_json(result)}</script>')
    parts.append(f'<button type="button" class="ls-download" data-for="{sid}-json" '
                 f'data-name="{_e(name)}">Download JSON</button>')
    parts.append("</section>")
    return "\n".join(parts)


def _title(result) -> str:
    return view_for(result).heading(result)[0]


def render_html(results, title: str | None = None) -> str:
    """One page for one result or several (``layerscope report``), one section each."""
    from layerscope.core.version import __version__

    if not isinstance(results, (list, tuple)):
        results = [results]
    if title is None:
        title = _title(results[0]) if len(results) == 1 else "layerscope report"
    nav = ""
    if len(results) > 1:
        nav = '<nav class="ls-nav">' + "".join(
            f'<a href="#r{i}">{_e(_title(r))}</a>' for i, r in enumerate(results)) + "</nav>"
    values = {
        "title": _e(title), "version": _e(__version__), "count": str(len(results)),
        "nav": nav, "css": _asset("report.css"), "js": _asset("report.js"),
        "sections": "\n".join(section(r, i) for i, r in enumerate(results)),
    }
    # one pass, so text inside the values is never substituted again
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], _asset("template.html"))
