"""layerscope rewrite PASS: ONNX graph rewrites (tile-linear) and a test graph to try them on."""
from __future__ import annotations

import argparse
import os
import sys

from layerscope.core.values import arg, positive_int, seed
from layerscope.core.errors import UserError


def register(sub) -> None:
    from layerscope.cli.common import Parser
    from layerscope.cli.verify_cmd import add_tolerances

    p = sub.add_parser("rewrite", help="ONNX graph rewrites (tile-linear, linear-subgraph)")
    p.set_defaults(run=_no_pass)
    passes = p.add_subparsers(dest="rewrite_pass", metavar="PASS", parser_class=Parser)

    t = passes.add_parser("tile-linear", help="split every Gemm and constant-weight MatMul into "
                                              "tile x tile MatMuls",
                          description="Exit code 0 (1 with --verify when the outputs differ).")
    t.add_argument("input", metavar="IN.onnx")
    t.add_argument("-o", "--output", required=True, metavar="OUT.onnx")
    t.add_argument("--tile", type=arg(positive_int), default=64,
                   help="tile size along K and N (default 64)")
    t.add_argument("--verify", action="store_true",
                   help="run IN and OUT on random inputs and compare (exit 1 on mismatch)")
    add_tolerances(t)
    t.set_defaults(run=run_tile_linear)

    s = passes.add_parser("linear-subgraph", help="write a standalone Linear graph and its tiled "
                                                  "equivalent: DIR/linear.onnx, "
                                                  "DIR/linear_tiled.onnx")
    s.add_argument("--m", type=arg(positive_int), required=True, help="rows of the input")
    s.add_argument("--k", type=arg(positive_int), required=True, help="input features")
    s.add_argument("--n", type=arg(positive_int), required=True, help="output features")
    s.add_argument("--tile", type=arg(positive_int), default=64, help="tile size (default 64)")
    s.add_argument("--bias", action=argparse.BooleanOptionalAction, default=True,
                   help="add a bias (default: yes)")
    s.add_argument("--weight-seed", type=arg(seed), default=0, help="seed of the random weights")
    s.add_argument("-o", "--output", required=True, metavar="DIR")
    s.add_argument("--verify", action="store_true", help="compare the two graphs (exit 1 on "
                                                         "mismatch)")
    add_tolerances(s)
    s.set_defaults(run=run_linear_subgraph)


def _no_pass(args) -> int:
    raise UserError("rewrite needs a pass: tile-linear or linear-subgraph (see rewrite --help)")


def _summary(result, tile: int) -> str:
    lines = []
    if result.replaced:
        lines.append(f"replaced {len(result.replaced)} node(s) with {tile}x{tile} tiles: "
                     + ", ".join(result.replaced))
    else:
        lines.append("nothing to rewrite: no Gemm or MatMul with a 2-D initializer weight "
                     "larger than one tile")
    for name, why in result.skipped:
        lines.append(f"left {name}: {why}")
    changes = []
    for op in sorted(set(result.ops_before) | set(result.ops_after)):
        before, after = result.ops_before.get(op, 0), result.ops_after.get(op, 0)
        if before != after:
            changes.append(f"{op} {before} -> {after}")
    lines.append(f"nodes: {result.nodes_before} -> {result.nodes_after}"
                 + (f" ({', '.join(changes)})" if changes else ""))
    return "\n".join(lines) + "\n"


def _verify(a: str, b: str, args) -> int:
    from layerscope.cli.verify_cmd import print_result
    from layerscope.rewrite.verify import verify

    result = verify(a, b, runs=args.runs, rtol=args.rtol, atol=args.atol, seed=args.seed,
                    optimization=args.ort_optimization)
    print_result(result)
    return 0 if result.ok else 1


def run_tile_linear(args) -> int:
    from layerscope.rewrite.onnx_io import load_onnx, save_onnx
    from layerscope.rewrite.tile_linear import tile_linear

    if args.verify and os.path.abspath(args.input) == os.path.abspath(args.output):
        raise UserError("--verify compares IN with OUT: write OUT to another file")
    result = tile_linear(load_onnx(args.input), args.tile)
    save_onnx(result.model, args.output)
    sys.stdout.write(_summary(result, args.tile))
    print(f"wrote {args.output}", file=sys.stderr)
    return _verify(args.input, args.output, args) if args.verify else 0


def run_linear_subgraph(args) -> int:
    from layerscope.core.io import make_dir
    from layerscope.rewrite.linear import linear_model
    from layerscope.rewrite.onnx_io import save_onnx
    from layerscope.rewrite.tile_linear import tile_linear

    model = linear_model(args.m, args.k, args.n, bias=args.bias, seed=args.weight_seed)
    result = tile_linear(model, args.tile)
    make_dir(args.output, "-o")
    plain = os.path.join(args.output, "linear.onnx")
    tiled = os.path.join(args.output, "linear_tiled.onnx")
    save_onnx(model, plain)
    save_onnx(result.model, tiled)
    sys.stdout.write(f"Linear {args.m}x{args.k} @ {args.k}x{args.n}"
                     f"{' + bias' if args.bias else ''}, tile {args.tile}\n")
    sys.stdout.write(_summary(result, args.tile))
    print(f"wrote {plain} and {tiled}", file=sys.stderr)
    return _verify(plain, tiled, args) if args.verify else 0
