"""layerscope rewrite PASS: one subcommand per registered ONNX rewrite pass (built from
``layerscope.rewrite.PASSES``), and linear-subgraph, a test graph to try tile-linear on."""
from __future__ import annotations

import argparse
import os
import sys

from layerscope.core.errors import UserError
from layerscope.core.values import arg, positive_int, seed


def register(sub) -> None:
    from layerscope.cli.common import Parser, add_file_output, add_output_folder
    from layerscope.cli.verify_cmd import add_tolerances
    from layerscope.rewrite import PASSES

    p = sub.add_parser("rewrite", help=f"ONNX graph rewrites ({', '.join(PASSES)}, "
                                       "linear-subgraph)")
    p.set_defaults(run=_no_pass)
    passes = p.add_subparsers(dest="rewrite_pass", metavar="PASS", parser_class=Parser)

    for info in PASSES.values():  # one subcommand per registered pass, built from its options
        t = passes.add_parser(info.name, help=info.help,
                              description="Exit code 0 (1 with --verify when the outputs "
                                          "differ).")
        t.add_argument("input", metavar="IN.onnx")
        add_file_output(t, "an ONNX graph", (".onnx",), required=True, metavar="OUT.onnx")
        for opt in info.options:
            t.add_argument(opt.flag, type=opt.type, default=opt.default, help=opt.help)
        t.add_argument("--verify", action="store_true",
                       help="run IN and OUT on random inputs and compare (exit 1 on mismatch)")
        add_tolerances(t)
        t.set_defaults(run=run_pass, rewrite_info=info)

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
    add_output_folder(s, "-o", "--output", required=True,
                      help="the folder to write both graphs into (created if missing)")
    s.add_argument("--verify", action="store_true", help="compare the two graphs (exit 1 on "
                                                         "mismatch)")
    add_tolerances(s)
    s.set_defaults(run=run_linear_subgraph)


def _no_pass(args) -> int:
    from layerscope.rewrite import PASSES

    raise UserError(f"rewrite needs a pass: {', '.join(PASSES)} or linear-subgraph "
                    "(see rewrite --help)")


def _verify(a: str, b: str, args) -> int:
    from layerscope.cli.verify_cmd import print_result
    from layerscope.rewrite.verify import verify

    result = verify(a, b, runs=args.runs, rtol=args.rtol, atol=args.atol, seed=args.seed,
                    optimization=args.ort_optimization)
    print_result(result)
    return 0 if result.ok else 1


def run_pass(args) -> int:
    from layerscope.rewrite.base import summary
    from layerscope.rewrite.onnx_io import load_onnx, save_onnx

    info = args.rewrite_info
    options = {opt.dest: getattr(args, opt.dest) for opt in info.options}
    info.check_options(options)
    if args.verify and os.path.abspath(args.input) == os.path.abspath(args.output):
        raise UserError("--verify compares IN with OUT: write OUT to another file")
    result = info(load_onnx(args.input), **options)
    save_onnx(result.model, args.output)
    sys.stdout.write(summary(result))
    print(f"wrote {args.output}", file=sys.stderr)
    return _verify(args.input, args.output, args) if args.verify else 0


def run_linear_subgraph(args) -> int:
    from layerscope.cli.common import check_outputs
    from layerscope.core.io import make_dir
    from layerscope.rewrite import get_pass
    from layerscope.rewrite.base import summary
    from layerscope.rewrite.linear import linear_model
    from layerscope.rewrite.onnx_io import save_onnx

    check_outputs(args)  # the folder can be made, before any work
    tile_pass = get_pass("tile-linear")
    tile_pass.check_options({"tile": args.tile})
    model = linear_model(args.m, args.k, args.n, bias=args.bias, seed=args.weight_seed)
    result = tile_pass(model, tile=args.tile)
    make_dir(args.output, "-o")
    plain = os.path.join(args.output, "linear.onnx")
    tiled = os.path.join(args.output, "linear_tiled.onnx")
    save_onnx(model, plain)
    save_onnx(result.model, tiled)
    sys.stdout.write(f"Linear {args.m}x{args.k} @ {args.k}x{args.n}"
                     f"{' + bias' if args.bias else ''}, tile {args.tile}\n")
    sys.stdout.write(summary(result))
    print(f"wrote {plain} and {tiled}", file=sys.stderr)
    return _verify(plain, tiled, args) if args.verify else 0
