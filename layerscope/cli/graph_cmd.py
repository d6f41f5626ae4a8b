"""layerscope graph MODEL|FILE.onnx -o FILE.svg|.html|.dot: the data-flow graph, coloured."""
from __future__ import annotations

import os

from layerscope.cli.common import add_model_inputs, output
from layerscope.core.errors import UserError

LISTINGS = ("table", "json", "csv")  # through renderers.render, as every result


def register(sub) -> None:
    p = sub.add_parser("graph", help="draw a model's graph (ONNX nodes or PyTorch modules) "
                                     "coloured by a static metric: SVG, HTML or Graphviz DOT")
    add_model_inputs(p)
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="FILE.svg, FILE.html (self-contained, zoom and pan) or FILE.dot; "
                        "FILE.json, FILE.csv or FILE.txt: the nodes and their metrics; "
                        "without it, the top nodes by the metric are listed")
    p.add_argument("--format", choices=LISTINGS, default=None,
                   help="the node list as table (default), json or csv; default from -o's "
                        "extension")
    p.add_argument("--metric", default="flops",
                   help="colour by flops (default), macs, params, weight_bytes, bytes_read, "
                        "bytes_written, activation_bytes or intensity")
    p.add_argument("--nodes", default=None, metavar="REGEX",
                   help="draw only nodes whose name or type matches (paths through the others "
                        "become one edge)")
    p.add_argument("--all-nodes", action="store_true",
                   help="ONNX: also draw Constant nodes (hidden by default)")
    p.add_argument("--no-collapse", action="store_true",
                   help="draw every node: by default, repeated parallel nodes (same type and "
                        "output shape between the same nodes, e.g. a rewrite's tiles) are one "
                        "node with their count")
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
    g = graph(args.model, args.input, batch_size=args.batch_size, metric=args.metric,
              nodes=args.nodes, all_nodes=args.all_nodes, collapse=not args.no_collapse)
    text = picture(g) if picture else render(g, pick_format(args.format, args.output),
                                             width=160)
    output(text, args.output, f": {len(g.nodes)} nodes, {len(g.edges)} edges")
    return 0
