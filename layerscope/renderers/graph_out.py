"""Draw a ``ModelGraph``: Graphviz DOT text, SVG and a self-contained HTML page.

Layout: Graphviz's ``dot`` when it is installed (the reference layered layout); otherwise
igraph's Sugiyama layout (compiled, a dependency: layers by longest path, barycentric crossing
reduction, dummy points for long edges; no recursion, so a chain of any length lays out). Both
are layered layouts of the same DOT-equivalent graph, so the pictures agree in structure. Nodes
are coloured by the graph's metric on a white-to-red scale of value / largest value; inputs and
outputs are grey ellipses. A collapsed group (``GraphNode.count`` > 1) is drawn as one box
labelled ``TYPE ×COUNT``; the HTML page lists its members under the picture (click the box).
"""
from __future__ import annotations

import html
import math
import shutil
import subprocess
from typing import Any

from layerscope.core.errors import UserError
from layerscope.core.units import si
from layerscope.views.graph import is_op, text_lines

# Above this many nodes (after collapsing) the picture is too large to read: ask for --nodes.
MAX_PYTHON_LAYOUT_NODES = 50_000
_CHAR_W, _LINE_H, _PAD = 7.0, 14.0, 8.0
_MAX_LABEL = 36


def _short(text: str) -> str:
    return text if len(text) <= _MAX_LABEL else "…" + text[-(_MAX_LABEL - 1):]


def _label_lines(g, node) -> list[str]:
    if not is_op(node):
        return [_short(node.name)] + ([node.shape] if node.shape else [])
    lines = [_short(node.name)]
    if node.count > 1:
        lines.append(f"{node.type} ×{node.count}")
    elif node.type != node.name:
        lines.append(node.type)
    if node.metrics:
        lines.append(f"{g.metric} {si(g.value(node))}")
    return lines


def _colour(g, node, top: float) -> str:
    """White (0) to red (the largest value); a square root keeps small values visible."""
    if not is_op(node):
        return "#e8e8e8"
    share = math.sqrt(g.value(node) / top) if top > 0 else 0.0
    other = int(round(255 - 175 * share))
    return f"#ff{other:02x}{other:02x}"


def _top(g) -> float:
    return max((g.value(n) for n in g.nodes if is_op(n)), default=0.0)


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(g) -> str:
    top = _top(g)
    lines = [f"digraph {_dot_quote(g.model)} {{", "  rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
             '  edge [color="#666666", arrowsize=0.6];']
    for index, n in enumerate(g.nodes):
        label = "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"')
                           for line in _label_lines(g, n))
        shape = "" if is_op(n) else ", shape=ellipse"
        lines.append(f'  {_dot_quote(n.id)} [label="{label}", fillcolor="{_colour(g, n, top)}"'
                     f'{shape}, tooltip={_dot_quote(_tooltip(g, n))}, id="{_svg_id(index)}"];')
    for e in g.edges:
        lines.append(f"  {_dot_quote(e.source)} -> {_dot_quote(e.target)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _tooltip(g, node) -> str:
    parts = [f"{node.name} ({node.type} ×{node.count})" if node.count > 1
             else f"{node.name} ({node.type})"]
    if node.shape:
        parts.append(f"output {node.shape}" + (" each" if node.count > 1 else ""))
    parts += [f"{k} {si(v)}" for k, v in node.metrics.items() if v]
    if node.count > 1:
        parts.append(f"{node.count} nodes collapsed: click for the list")
    return "; ".join(parts)


def _svg_id(index: int) -> str:
    """The id of node ``index``'s SVG group, in our drawing and in Graphviz's."""
    return f"ls-node-{index}"


# ------------------------------------------------------------------------------------- SVG
def to_svg(g) -> str:
    """SVG text: Graphviz's when ``dot`` is on PATH, else igraph's layout drawn here."""
    dot = shutil.which("dot")
    if dot:
        done = subprocess.run([dot, "-Tsvg"], input=to_dot(g), capture_output=True, text=True,
                              check=False)
        if done.returncode == 0:
            return done.stdout[done.stdout.find("<svg"):]
    return _svg_from_layout(g, layout(g))


def _box(g, node) -> tuple[float, float]:
    lines = _label_lines(g, node)
    return (max(len(s) for s in lines) * _CHAR_W + 2 * _PAD, len(lines) * _LINE_H + 2 * _PAD)


def layout(g) -> dict[str, Any]:
    """Node centres and edge polylines from igraph's Sugiyama layout (top to bottom): each node
    on its layer's row, long edges bent through the layout's dummy points."""
    if len(g.nodes) > MAX_PYTHON_LAYOUT_NODES:
        raise UserError(f"{g.model}: {len(g.nodes)} nodes is too many to draw without Graphviz "
                        f"(limit {MAX_PYTHON_LAYOUT_NODES}); draw a part with --nodes REGEX, or "
                        "install Graphviz (apt install graphviz)")
    import igraph

    index = {n.id: i for i, n in enumerate(g.nodes)}
    sizes = [_box(g, n) for n in g.nodes]
    drawn = [e for e in g.edges
             if e.source in index and e.target in index and e.source != e.target]
    ig = igraph.Graph(n=len(g.nodes), edges=[(index[e.source], index[e.target]) for e in drawn],
                      directed=True)
    lay = ig.layout_sugiyama()
    # the layout's units: one column per node slot, one row per layer
    col = max((w for w, _ in sizes), default=0.0) + 24.0
    row = max((h for _, h in sizes), default=0.0) + 36.0
    boxes = {n.id: (x * col, y * row, w, h)
             for n, (x, y), (w, h) in zip(g.nodes, lay.coords, sizes)}
    paths = []
    for e, bends in zip(drawn, lay.edge_routing):
        sx, sy, _, sh = boxes[e.source]
        tx, ty, _, th = boxes[e.target]
        paths.append([(sx, sy + sh / 2)] + [(x * col, y * row) for x, y in bends]
                     + [(tx, ty - th / 2)])
    return {"boxes": boxes, "paths": paths}


def _svg_from_layout(g, lay: dict[str, Any]) -> str:
    boxes, paths = lay["boxes"], lay["paths"]
    margin = 20.0
    x0 = min((x - w / 2 for x, _, w, _ in boxes.values()), default=0.0) - margin
    y0 = min((y - h / 2 for _, y, _, h in boxes.values()), default=0.0) - margin
    x1 = max((x + w / 2 for x, _, w, _ in boxes.values()), default=0.0) + margin
    y1 = max((y + h / 2 for _, y, _, h in boxes.values()), default=0.0) + margin
    top = _top(g)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="ls-graph" '
           f'viewBox="{x0:.1f} {y0:.1f} {x1 - x0:.1f} {y1 - y0:.1f}" '
           f'width="{x1 - x0:.0f}" height="{y1 - y0:.0f}" font-family="Helvetica, Arial, '
           f'sans-serif" font-size="11">',
           '<defs><marker id="ls-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
           'markerWidth="6" markerHeight="6" orient="auto-start-reverse">'
           '<path d="M0,0 L10,5 L0,10 z" fill="#666"/></marker></defs>']
    for pts in paths:
        d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        out.append(f'<polyline points="{d}" fill="none" stroke="#666" stroke-width="1" '
                   'marker-end="url(#ls-arrow)"/>')
    for index, n in enumerate(g.nodes):
        x, y, w, h = boxes[n.id]
        fill = _colour(g, n, top)
        tip = html.escape(_tooltip(g, n))
        out.append(f'<g class="ls-node" id="{_svg_id(index)}" data-id="{html.escape(n.id)}">'
                   f'<title>{tip}</title>')
        if is_op(n):
            out.append(f'<rect x="{x - w / 2:.1f}" y="{y - h / 2:.1f}" width="{w:.1f}" '
                       f'height="{h:.1f}" rx="5" fill="{fill}" stroke="#444"/>')
        else:
            out.append(f'<ellipse cx="{x:.1f}" cy="{y:.1f}" rx="{w / 2:.1f}" ry="{h / 2:.1f}" '
                       f'fill="{fill}" stroke="#444"/>')
        lines = _label_lines(g, n)
        first = y - (len(lines) - 1) * _LINE_H / 2 + 4
        for i, line in enumerate(lines):
            weight = ' font-weight="bold"' if i == 0 else ""
            out.append(f'<text x="{x:.1f}" y="{first + i * _LINE_H:.1f}" '
                       f'text-anchor="middle"{weight}>{html.escape(line)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------ HTML
_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: Helvetica, Arial, sans-serif; margin: 0; }}
header {{ padding: 8px 16px; border-bottom: 1px solid #ccc; }}
header p {{ margin: 4px 0; font-size: 13px; color: #333; }}
#ls-view {{ width: 100vw; height: calc(100vh - 110px); overflow: hidden; cursor: grab; }}
#ls-view svg {{ transform-origin: 0 0; }}
.ls-node:hover rect, .ls-node:hover ellipse {{ stroke: #000; stroke-width: 2; }}
.ls-group {{ cursor: pointer; }}
#ls-groups {{ padding: 8px 16px; font-size: 13px; }}
#ls-groups details {{ margin: 4px 0; }}
#ls-groups table {{ border-collapse: collapse; margin: 4px 0 8px 16px; }}
#ls-groups td, #ls-groups th {{ padding: 1px 8px; text-align: left; }}
#ls-groups td.num {{ text-align: right; }}
</style></head><body>
<header><h1 style="font-size:18px;margin:0">{title}</h1>
<p>{summary}</p>{notes}
<p>Wheel to zoom, drag to pan, hover a node for its figures. For an interactive viewer of the
ONNX file itself: <code>pip install netron &amp;&amp; netron FILE.onnx</code>.</p></header>
<div id="ls-view">{svg}</div>{groups}
<script>
(function () {{
  // a collapsed group: a click on its box opens its member list below the picture
  document.querySelectorAll('[id^="ls-node-"]').forEach(function (node) {{
    var list = document.getElementById('ls-members-' + node.id.slice(8));
    if (!list) return;
    node.classList.add('ls-group');
    node.addEventListener('click', function () {{
      list.open = true; list.scrollIntoView({{block: 'start'}});
    }});
  }});
}})();
(function () {{
  var view = document.getElementById('ls-view'), svg = view.querySelector('svg');
  var s = 1, x = 0, y = 0, drag = null;
  function apply() {{
    svg.style.transform = 'translate(' + x + 'px,' + y + 'px) scale(' + s + ')';
  }}
  view.addEventListener('wheel', function (e) {{
    e.preventDefault();
    var k = e.deltaY < 0 ? 1.15 : 1 / 1.15, r = view.getBoundingClientRect();
    var px = e.clientX - r.left, py = e.clientY - r.top;
    x = px - (px - x) * k; y = py - (py - y) * k; s *= k; apply();
  }}, {{passive: false}});
  view.addEventListener('mousedown', function (e) {{ drag = [e.clientX - x, e.clientY - y]; }});
  window.addEventListener('mouseup', function () {{ drag = null; }});
  window.addEventListener('mousemove', function (e) {{
    if (drag) {{ x = e.clientX - drag[0]; y = e.clientY - drag[1]; apply(); }}
  }});
}})();
</script></body></html>
"""


def _groups_html(g) -> str:
    """One <details> per collapsed group: its members with their figures (click a box)."""
    parts = []
    for index, n in enumerate(g.nodes):
        if not n.members:
            continue
        rows = "".join(f"<tr><td>{html.escape(m.name)}</td><td>{html.escape(m.shape)}</td>"
                       f'<td class="num">{si(g.value(m))}</td></tr>' for m in n.members)
        parts.append(f'<details id="ls-members-{index}"><summary>{html.escape(n.name)}: '
                     f"{html.escape(n.type)} ×{n.count}, {g.metric} {si(g.value(n))} in all"
                     f"</summary><table><tr><th>Node</th><th>Output shape</th>"
                     f"<th>{html.escape(g.metric)}</th></tr>{rows}</table></details>")
    if not parts:
        return ""
    return ('\n<section id="ls-groups"><h2 style="font-size:15px">Collapsed groups (click a '
            "box with a count, or open a line)</h2>" + "".join(parts) + "</section>")


def to_html(g) -> str:
    ops = [n for n in g.nodes if is_op(n)]
    total = sum(g.value(n) for n in ops)
    count = sum(n.count for n in ops)
    drawn = (f"{count} operation nodes drawn as {len(ops)}" if count != len(ops)
             else f"{count} nodes")
    summary = (f"{drawn}, {len(g.edges)} edges ({g.frontend}); colour: {g.metric}, "
               f"total {si(total)}, white = 0, red = the largest node")
    notes = "".join(f"<p>Note: {html.escape(n)}</p>" for n in g.notes)
    return _PAGE.format(title=html.escape(f"layerscope graph: {g.model}"),
                        summary=html.escape(summary), notes=notes, svg=to_svg(g),
                        groups=_groups_html(g))


def to_text(g) -> str:
    """A list of the nodes by metric, for the terminal (the picture needs -o FILE)."""
    return "\n".join(text_lines(g)) + "\n"


RENDERERS = {".dot": to_dot, ".gv": to_dot, ".svg": to_svg, ".html": to_html, ".htm": to_html}
