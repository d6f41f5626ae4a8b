"""layerscope analyze MODEL: static cost per layer."""
from __future__ import annotations

from layerscope.cli.common import add_model_inputs, add_output, emit


def register(sub) -> None:
    p = sub.add_parser("analyze", help="parameters, memory, MACs/FLOPs and bytes per layer")
    add_model_inputs(p)
    p.add_argument("--depth", type=int, default=None,
                   help="module depth to show (0 = whole model); default: leaf layers")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default=None,
                   help="analyse with parameters and inputs in this dtype")
    p.add_argument("--mode", choices=["inference", "training"], default="inference")
    p.add_argument("--optimizer", choices=["sgd", "momentum", "adam", "adamw"], default="adam",
                   help="optimizer whose state --mode training counts")
    add_output(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.analyze import analyze

    report = analyze(args.model, args.input, batch_size=args.batch_size, depth=args.depth,
                     dtype=args.dtype, mode=args.mode, optimizer=args.optimizer)
    emit(report, args)
    return 0
