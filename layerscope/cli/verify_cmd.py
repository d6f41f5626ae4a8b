"""layerscope verify A B: run two models on the same seeded random inputs and compare outputs."""
from __future__ import annotations

import sys

from layerscope.core.values import arg, finite_non_negative_float, positive_int, seed, width


def add_tolerances(p) -> None:
    from layerscope.cli.common import add_ort_level
    from layerscope.rewrite import DEFAULT_ATOL, DEFAULT_RTOL

    p.add_argument("--runs", type=arg(positive_int), default=5,
                   help="random inputs to compare on (default 5)")
    p.add_argument("--rtol", type=arg(finite_non_negative_float), default=DEFAULT_RTOL,
                   help=f"relative tolerance, of max|A| (default {DEFAULT_RTOL:g})")
    p.add_argument("--atol", type=arg(finite_non_negative_float), default=DEFAULT_ATOL,
                   help=f"absolute tolerance (default {DEFAULT_ATOL:g})")
    p.add_argument("--seed", type=arg(seed), default=0,
                   help="seed of the random inputs and of model A's random weights when A is a "
                        "built-in model or factory (default 0, as in export)")
    add_ort_level(p, "--ort-optimization")


def register(sub) -> None:
    p = sub.add_parser("verify", help="compare two models' outputs on seeded random inputs",
                       description="Exit code 0 when the outputs match, 1 when they do not, "
                                   "2 on bad input.")
    p.add_argument("a", metavar="A", help="reference: an ONNX file, or a model spec (built-in "
                                          "name, file.py:factory, ...) run in PyTorch")
    p.add_argument("b", metavar="B", help="an ONNX file")
    add_tolerances(p)
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--width", type=arg(width), default=None, help="table width in characters")
    p.set_defaults(run=run)


def print_result(result, fmt: str = "table", width: int | None = None) -> None:
    from layerscope.renderers.verify_out import to_json, to_text

    if fmt == "json":
        sys.stdout.write(to_json(result))
    else:
        sys.stdout.write(to_text(result, width=width or 160))


def run(args) -> int:
    from layerscope.rewrite.verify import verify

    result = verify(args.a, args.b, runs=args.runs, rtol=args.rtol, atol=args.atol,
                    seed=args.seed, optimization=args.ort_optimization)
    print_result(result, args.format, args.width)
    return 0 if result.ok else 1
