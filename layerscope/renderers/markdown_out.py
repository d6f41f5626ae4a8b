"""A result as GitHub-flavoured Markdown (a pull request's comment): its heading, the lead
sentence, warnings, key figures as a list, then every row table of its view as a Markdown
table. Generic over views: it draws ``view_for(result)``'s sections like the HTML report."""
from __future__ import annotations

from layerscope.views import view_for
from layerscope.views.sections import RowTable


def _cell(text: str) -> str:
    """A table cell's text: pipes escaped, line breaks as spaces."""
    return " ".join(str(text).split()).replace("|", "\\|")


def md_table(t: RowTable) -> str:
    """A RowTable as a Markdown table under a bold title; numeric columns right-aligned."""
    head = "| " + " | ".join(_cell(c.label) for c in t.columns) + " |"
    rule = "|" + "|".join("---:" if c.numeric else "---" for c in t.columns) + "|"
    body = []
    for i, cells in enumerate(t.rows):
        hot = i < len(t.hot) and t.hot[i]
        texts = [_cell(c.text) for c in cells]
        if hot and texts and texts[0]:
            texts[0] = f"**{texts[0]}**"
        body.append("| " + " | ".join(texts) + " |")
    foot = ["| " + " | ".join(_cell(x) for x in t.foot) + " |"] if t.foot else []
    return "\n".join([f"**{_cell(t.title)}**", "", head, rule, *body, *foot])


def to_markdown(result) -> str:
    """The result's heading, lead, warnings, key figures and row tables as Markdown."""
    view = view_for(result)
    title, settings = view.heading(result)
    out = [f"### {title}", "", settings, ""]
    lead = view.lead(result)
    if lead is not None:
        out += [f"**{lead.headline}**", ""] + [f"- {line}" for line in lead.lines]
        out += [lead.note, ""] if lead.note else []
    warnings = view.warnings(result)
    if warnings:
        out += [f"> **Warning:** {w}" for w in warnings] + [""]
    pairs = view.facts(result)
    if pairs:
        out += [f"**{view.facts_title}**", ""] + [f"- **{k}:** {v}" for k, v in pairs] + [""]
    for t in view.tables(result):
        out += [md_table(t), ""]
    return "\n".join(out).rstrip() + "\n"
