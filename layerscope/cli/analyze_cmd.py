"""layerscope analyze MODEL: static cost per layer (PyTorch modules) or per node (ONNX)."""
from __future__ import annotations

from layerscope.cli.common import (
    add_llm_options,
    add_mode,
    add_model_inputs,
    add_optimizer,
    add_output,
    emit,
    output,
    write_report_files,
)
from layerscope.core.values import arg, non_negative_int

VIEWS = ("layers", "ops", "attributes", "bandwidth", "memory")


def register(sub) -> None:
    p = sub.add_parser("analyze", help="parameters, memory, MACs/FLOPs and bytes per layer")
    add_model_inputs(p)
    for action in p._actions:  # ONNX inputs are bound by name; the shared option says shapes only
        if action.dest == "input":
            action.metavar = "[NAME=]SHAPE[:DTYPE]"
            action.help += "; for an ONNX model NAME=SHAPE binds the input NAME"
        elif action.dest == "model":
            action.help = action.help.replace(" or a TorchScript file",
                                              ", a TorchScript file or an ONNX file (.onnx)")
    p.add_argument("--depth", type=arg(non_negative_int), default=None,
                   help="module depth to show (0 = whole model); default: leaf layers")
    p.add_argument("--functions", action="store_true",
                   help="split each container's '(own ops)' row into one row per torch function "
                        "its forward calls (residual add, F.relu, flatten): 'layer1.0 (add)'")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default=None,
                   help="analyse with parameters and inputs in this dtype")
    add_mode(p)
    add_llm_options(p)
    add_optimizer(p, "optimizer whose state --mode training counts")
    p.add_argument("--view", choices=VIEWS, default="layers",
                   help="table to show: layers (default), ops (op histogram), attributes (per "
                        "node), bandwidth (bytes per node, sorted), memory (activation sum, "
                        "live-set peak, arena); JSON and CSV output stay the full report")
    p.add_argument("--op-type", default=None, metavar="REGEX",
                   help="views ops, attributes and bandwidth: only nodes whose op type fully "
                        "matches, e.g. 'Conv|Gemm'")
    p.add_argument("--skip-trivial", action="store_true",
                   help="views ops, attributes and bandwidth: leave out Constant and Identity "
                        "nodes (no arithmetic; exporters write many)")
    add_output(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.analyze import analyze
    from layerscope.core.errors import UserError
    from layerscope.renderers import pick_format
    from layerscope.renderers.onnx_views import FILTERED_VIEWS, select_rows

    selecting = args.op_type is not None or args.skip_trivial
    if selecting and args.view not in FILTERED_VIEWS:
        raise UserError(f"--op-type and --skip-trivial select the rows of the views "
                        f"{', '.join(FILTERED_VIEWS)} (--view {args.view} shows the whole report)")
    # an ONNX file is analysed without loading torch (analyze routes it)
    report = analyze(args.model, args.input, batch_size=args.batch_size, depth=args.depth,
                     dtype=args.dtype, mode=args.mode, optimizer=args.optimizer,
                     functions=args.functions, seq_len=args.seq_len, attention=args.attention)
    if args.view == "layers" or pick_format(args.format, args.output) != "table":
        if selecting:
            raise UserError("--op-type and --skip-trivial select table rows; JSON, CSV, HTML "
                            "and PNG output stay the full report")
        emit(report, args)
        return 0
    from layerscope.renderers.onnx_views import to_text

    output(to_text(select_rows(report, args.op_type, args.skip_trivial), args.view,
                   width=args.width or 160), args.output)
    write_report_files(report, args)
    return 0
