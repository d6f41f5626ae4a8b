"""Any result as plain HTML tables, for Jupyter's ``_repr_html_``: the heading, the key figures
and the row tables of its view (the same as the HTML report's), without scripts
(notebooks may not run them) and without the page chrome."""
from __future__ import annotations

import html

from layerscope.views import view_for

_STYLE = ("<style>.ls-nb table{border-collapse:collapse;margin:4px 0 12px}"
          ".ls-nb th,.ls-nb td{padding:2px 8px;text-align:left;white-space:nowrap}"
          ".ls-nb td.num,.ls-nb th.num{text-align:right}.ls-nb tr.ls-hot td{font-weight:bold}"
          ".ls-nb tfoot td{font-weight:bold;border-top:1px solid #999}"
          ".ls-nb caption{text-align:left;font-weight:bold}</style>")


def render_html_table(result) -> str:
    from layerscope.renderers.html import kv_table, lead_html, row_table

    view = view_for(result)
    title, sub = view.heading(result)
    parts = [_STYLE, '<div class="ls-nb">', f"<h4>{html.escape(title)}</h4>",
             f"<p>{html.escape(sub)}</p>"]
    lead = lead_html(view.lead(result))
    if lead:
        parts.append(lead)
    summary = view.facts(result)
    if summary:
        parts.append(kv_table(view.facts_title, summary, cls="ls-kv"))
    for t in view.tables(result):
        parts.append(f"<p><b>{html.escape(t.title)}</b></p>")
        parts.append(row_table(t, interactive=False))
    parts.append("</div>")
    return "".join(parts)
