"""layerscope compare A B: two reports joined layer by layer, every difference explained."""
from __future__ import annotations

from layerscope.cli.common import add_result_output

FORMATS = ("table", "json", "csv", "html")


def register(sub) -> None:
    p = sub.add_parser("compare", help="join two reports of a model (PyTorch, TorchScript, ONNX, "
                                       "saved JSON) layer by layer and explain every difference",
                       description="A and B: a model spec (built-in name, file.py:factory, ...), "
                                   "a TorchScript file, an ONNX file or a saved report "
                                   "(layerscope analyze ... --format json -o FILE.json). Rows "
                                   "are joined by PyTorch module path; every difference gets a "
                                   "sentence saying why.")
    p.add_argument("a", metavar="A", help="first model or report (the reference)")
    p.add_argument("b", metavar="B", help="second model or report")
    p.add_argument("--input", action="append", default=None, metavar="SHAPE[:DTYPE]",
                   help="input shape for both sides, e.g. 1x3x224x224 (repeat for several "
                        "inputs); default: each side's own, a TorchScript file takes the other "
                        "side's")
    add_result_output(p, FORMATS, "table (default), json, csv or html; default from -o's "
                                  "extension",
                      all_help="table: show every joined row, not only the rows that differ")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.compare import compare
    from layerscope.cli.common import output_result, result_format

    fmt = result_format(args, FORMATS, "compare")
    result = compare(args.a, args.b, inputs=args.input)
    output_result(result, fmt, args)
    return 0
