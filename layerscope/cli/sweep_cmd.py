"""layerscope sweep MODEL: latency over batch sizes, threads, devices, backends and dtypes."""
from __future__ import annotations

from layerscope.cli.common import add_output, emit
from layerscope.cli.progress import add_quiet, progress_bar
from layerscope.core.values import arg, list_arg, non_negative_int, positive_int, thread_count


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def register(sub) -> None:
    p = sub.add_parser("sweep", help="latency grid over batch sizes, threads, devices, backends")
    p.add_argument("model")
    p.add_argument("--input", action="append", default=None, metavar="SHAPE[:DTYPE]")
    p.add_argument("--batch-sizes", type=list_arg(positive_int), default=[1],
                   help="e.g. 1,16,64")
    p.add_argument("--threads", type=list_arg(thread_count), default=None,
                   help="e.g. 1,2 (default: torch's setting)")
    p.add_argument("--devices", default="cpu", help="e.g. cpu,cuda")
    p.add_argument("--backends", default="eager",
                   help="from eager,compile,torchscript,onnxruntime")
    p.add_argument("--dtypes", default="float32", help="e.g. float32,bfloat16")
    p.add_argument("--runs", type=arg(positive_int), default=20)
    p.add_argument("--warmup", type=arg(non_negative_int), default=3)
    add_output(p)
    add_quiet(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.sweep import sweep

    with progress_bar(f"sweeping {args.model}", quiet=args.quiet, unit="cells") as progress:
        report = sweep(args.model, args.input,
                       batch_sizes=args.batch_sizes, threads=args.threads or [None],
                       devices=_names(args.devices), backends=_names(args.backends),
                       dtypes=_names(args.dtypes), runs=args.runs, warmup=args.warmup,
                       progress=progress)
    emit(report, args)
    return 0
