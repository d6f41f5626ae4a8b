"""layerscope export MODEL -o model.onnx: any model spec to ONNX, checked with onnxruntime.
Every option is a field of ``analysis.onnx_export.ExportSettings`` (-o: its ``path``)."""
from __future__ import annotations

import sys

from layerscope.analysis.onnx_export import ExportSettings
from layerscope.cli.common import add_file_output, add_settings, settings_from
from layerscope.core.options import PLAIN


def register(sub) -> None:
    p = sub.add_parser("export", help="export a model to ONNX (atomically; verified with "
                                      "onnxruntime)")
    add_settings(p, ExportSettings)  # the model and its inputs
    add_file_output(p, "an ONNX graph", (".onnx",), required=True, metavar="FILE.onnx",
                    help="where to write")
    add_settings(p, ExportSettings, PLAIN)  # how it is exported
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.onnx_export import export_onnx

    r = export_onnx(settings=settings_from(ExportSettings, args), path=args.output)
    bn = "BatchNorm folded into Conv" if r.batchnorm_folded else "BatchNorm kept"
    check = f"loads in {r.verified_with}" if r.verified_with else "not verified"
    print(f"wrote {r.path}: {r.nodes} nodes, {r.initializers} initializers, opset {r.opset}, "
          f"IR {r.ir_version}, {r.exporter} exporter, {bn}; {check} ({r.seconds:.1f} s)",
          file=sys.stderr)
    return 0
