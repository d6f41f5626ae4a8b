"""layerscope graph MODEL|FILE.onnx -o FILE.svg|.html|.dot: the data-flow graph, coloured."""
from __future__ import annotations

import os

from layerscope.cli.common import add_model_inputs, output
from layerscope.core.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("graph", help="draw a model's graph (ONNX nodes or PyTorch modules) "
                                     "coloured by a static metric: SVG, HTML or Graphviz DOT")
    add_model_inputs(p)
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="FILE.svg, FILE.html (self-contained, zoom and pan) or FILE.dot; "
                        "without it, the top nodes by the metric are listed")
    p.add_argument("--metric", default="flops",
                   help="colour by flops (default), macs, params, weight_bytes, bytes_read, "
                        "bytes_written, activation_bytes or intensity")
    p.add_argument("--nodes", default=None, metavar="REGEX",
                   help="draw only nodes whose name or type matches (paths through the others "
                        "become one edge)")
    p.add_argument("--all-nodes", action="store_true",
                   help="ONNX: also draw Constant nodes (hidden by default)")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.graph import graph
    from layerscope.renderers import graph_out

    render = graph_out.to_text
    if args.output:
        ext = os.path.splitext(args.output)[1].lower()
        if ext not in graph_out.RENDERERS:
            raise UserError(f"-o {args.output}: give a file ending in .svg, .html or .dot")
        render = graph_out.RENDERERS[ext]
    g = graph(args.model, args.input, batch_size=args.batch_size, metric=args.metric,
              nodes=args.nodes, all_nodes=args.all_nodes)
    output(render(g), args.output, f": {len(g.nodes)} nodes, {len(g.edges)} edges")
    return 0
