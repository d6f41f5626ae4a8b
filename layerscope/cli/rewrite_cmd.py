"""layerscope rewrite PASS: one subcommand per registered ONNX rewrite pass (built from
``layerscope.rewrite.PASSES``), and linear-subgraph, a test graph to try tile-linear on."""
from __future__ import annotations

import os
import sys

from layerscope.core.errors import UserError


def register(sub) -> None:
    from layerscope.cli.common import (
        Parser,
        add_all_settings,
        add_file_output,
        add_output_folder,
    )
    from layerscope.rewrite import PASSES
    from layerscope.rewrite.settings import LinearSubgraphSettings, PassCheck, SubgraphCheck

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
        add_all_settings(t, PassCheck)
        t.set_defaults(run=run_pass, rewrite_info=info, verify_check=PassCheck)

    s = passes.add_parser("linear-subgraph", help="write a standalone Linear graph and its tiled "
                                                  "equivalent: DIR/linear.onnx, "
                                                  "DIR/linear_tiled.onnx")
    add_all_settings(s, LinearSubgraphSettings)
    add_output_folder(s, "-o", "--output", required=True,
                      help="the folder to write both graphs into (created if missing)")
    add_all_settings(s, SubgraphCheck)
    s.set_defaults(run=run_linear_subgraph, verify_check=SubgraphCheck)


def _no_pass(args) -> int:
    from layerscope.rewrite import PASSES

    raise UserError(f"rewrite needs a pass: {', '.join(PASSES)} or linear-subgraph "
                    "(see rewrite --help)")


def _verify(a: str, b: str, args) -> int:
    from layerscope.cli.common import settings_from
    from layerscope.cli.verify_cmd import print_result
    from layerscope.rewrite.verify import verify

    result = verify(a, b, **settings_from(args.verify_check, args).tolerances())
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
    from layerscope.cli.common import check_outputs, settings_from
    from layerscope.core.io import make_dir
    from layerscope.rewrite.base import summary
    from layerscope.rewrite.linear import linear_subgraph
    from layerscope.rewrite.onnx_io import save_onnx
    from layerscope.rewrite.settings import LinearSubgraphSettings

    check_outputs(args)  # the folder can be made, before any work
    g = settings_from(LinearSubgraphSettings, args)
    model, result = linear_subgraph(g)
    make_dir(args.output, "-o")
    plain = os.path.join(args.output, "linear.onnx")
    tiled = os.path.join(args.output, "linear_tiled.onnx")
    save_onnx(model, plain)
    save_onnx(result.model, tiled)
    sys.stdout.write(f"Linear {g.m}x{g.k} @ {g.k}x{g.n}"
                     f"{' + bias' if g.bias else ''}, tile {g.tile}\n")
    sys.stdout.write(summary(result))
    print(f"wrote {plain} and {tiled}", file=sys.stderr)
    return _verify(plain, tiled, args) if args.verify else 0
