"""layerscope export MODEL -o model.onnx: any model spec to ONNX, checked with onnxruntime."""
from __future__ import annotations

import sys

from layerscope.cli.common import add_model_inputs
from layerscope.core.values import arg, positive_int, seed


def register(sub) -> None:
    p = sub.add_parser("export", help="export a model to ONNX (atomically; verified with "
                                      "onnxruntime)")
    add_model_inputs(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE.onnx", help="where to write")
    p.add_argument("--opset", type=arg(positive_int), default=None,
                   help="ONNX opset (default: the exporter's; legacy: 17)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--dynamo", dest="exporter", action="store_const", const="dynamo",
                       help="torch.export-based exporter (default): nodes keep their module path")
    which.add_argument("--legacy", dest="exporter", action="store_const", const="legacy",
                       help="TorchScript-based exporter (folds BatchNorm into Conv)")
    p.add_argument("--fold-batchnorm", action="store_true",
                   help="dynamo: run the full onnxscript optimizer, folding BatchNorm into Conv")
    p.add_argument("--seed", type=arg(seed), default=0,
                   help="seed of a built-in model's random weights (default 0, the same in every "
                        "command, so 'verify' agrees)")
    p.add_argument("--no-verify", action="store_true",
                   help="do not load the result in an onnxruntime session")
    p.set_defaults(run=run, exporter="dynamo")


def run(args) -> int:
    from layerscope.analysis.onnx_export import export_onnx

    r = export_onnx(args.model, args.output, inputs=args.input, batch_size=args.batch_size,
                    opset=args.opset, exporter=args.exporter, fold_batchnorm=args.fold_batchnorm,
                    verify=not args.no_verify, seed=args.seed)
    bn = "BatchNorm folded into Conv" if r.batchnorm_folded else "BatchNorm kept"
    check = f"loads in {r.verified_with}" if r.verified_with else "not verified"
    print(f"wrote {r.path}: {r.nodes} nodes, {r.initializers} initializers, opset {r.opset}, "
          f"IR {r.ir_version}, {r.exporter} exporter, {bn}; {check} ({r.seconds:.1f} s)",
          file=sys.stderr)
    return 0
