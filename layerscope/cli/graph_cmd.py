"""layerscope graph MODEL|FILE.onnx -o FILE.svg|.html|.dot: the data-flow graph, coloured.
Every option but the output's is a field of ``analysis.graph.GraphSettings``."""
from __future__ import annotations

import os

from layerscope.analysis.graph import GraphSettings
from layerscope.cli.common import add_format, add_settings, output, settings_from
from layerscope.core.errors import UserError
from layerscope.core.options import PLAIN

LISTINGS = ("table", "json", "csv")  # through renderers.render, as every result


def register(sub) -> None:
    p = sub.add_parser("graph", help="draw a model's graph (ONNX nodes or PyTorch modules) "
                                     "coloured by a static metric: SVG, HTML or Graphviz DOT")
    add_settings(p, GraphSettings)  # the model and its inputs
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="FILE.svg, FILE.html (self-contained, zoom and pan) or FILE.dot; "
                        "FILE.json, FILE.csv or FILE.txt: the nodes and their metrics; "
                        "without it, the top nodes by the metric are listed")
    add_format(p, LISTINGS, None, help="the node list as table (default), json or csv; "
                                       "default from -o's extension")
    add_settings(p, GraphSettings, PLAIN)  # what is drawn
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.graph import graph
    from layerscope.renderers import graph_out, pick_format, render

    picture = None  # -o FILE.svg|.html|.dot: the drawing; otherwise the node list
    if args.output and args.format is None:
        ext = os.path.splitext(args.output)[1].lower()
        picture = graph_out.RENDERERS.get(ext)
        if picture is None and ext not in (".json", ".csv", ".txt"):
            raise UserError(f"-o {args.output}: give a file ending in .svg, .html or .dot (the "
                            "picture), or .json, .csv or .txt (the node list)")
    g = graph(settings=settings_from(GraphSettings, args))
    text = picture(g) if picture else render(g, pick_format(args.format, args.output),
                                             width=160)
    output(text, args.output, f": {len(g.nodes)} nodes, {len(g.edges)} edges")
    return 0
