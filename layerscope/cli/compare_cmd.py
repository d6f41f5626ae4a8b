"""layerscope compare A B: two reports joined layer by layer, every difference explained.
Every option but the output's is a field of ``analysis.compare.join.CompareSettings``."""
from __future__ import annotations

from layerscope.analysis.compare.join import CompareSettings
from layerscope.cli.common import add_all_settings, add_result_output, settings_from

FORMATS = ("table", "json", "csv", "html")


def register(sub) -> None:
    p = sub.add_parser("compare", help="join two reports of a model (PyTorch, TorchScript, ONNX, "
                                       "saved JSON) layer by layer and explain every difference",
                       description="A and B: a model spec (built-in name, file.py:factory, ...), "
                                   "a TorchScript file, an ONNX file or a saved report "
                                   "(layerscope analyze ... --format json -o FILE.json). Rows "
                                   "are joined by PyTorch module path; every difference gets a "
                                   "sentence saying why.")
    add_all_settings(p, CompareSettings)
    add_result_output(p, FORMATS, "table (default), json, csv or html; default from -o's "
                                  "extension",
                      all_help="table: show every joined row, not only the rows that differ")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.compare import compare
    from layerscope.cli.common import output_result, result_format

    fmt = result_format(args, FORMATS, "compare")
    result = compare(settings=settings_from(CompareSettings, args))
    output_result(result, fmt, args)
    return 0
