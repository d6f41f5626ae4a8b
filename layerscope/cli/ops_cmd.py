"""layerscope ops MODEL: torch.profiler's operator table and a trace with module ranges."""
from __future__ import annotations

from layerscope.cli.common import add_device, add_model_inputs, add_output, emit
from layerscope.core.values import arg, non_negative_int, positive_int, thread_count


def register(sub) -> None:
    p = sub.add_parser("ops", help="per-operator time (torch.profiler) and a Chrome/Perfetto trace")
    add_model_inputs(p)
    add_device(p)
    p.add_argument("--threads", type=arg(thread_count), default=None, help="torch intra-op threads")
    p.add_argument("--top", type=arg(positive_int), default=10, help="rows to show (default 10)")
    p.add_argument("--sort", choices=["self", "total"], default="self")
    p.add_argument("--group-by-shape", action="store_true", help="one row per op and input shapes")
    p.add_argument("--memory", action="store_true", help="add memory columns")
    p.add_argument("--trace", default=None, metavar="OUT.json[.gz]",
                   help="write a Chrome/Perfetto trace with one range per module forward")
    p.add_argument("--runs", type=arg(positive_int), default=5, help="profiled runs (default 5)")
    p.add_argument("--warmup", type=arg(non_negative_int), default=2)
    add_output(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.op_profile import ops

    table = ops(args.model, args.input, batch_size=args.batch_size, device=args.device,
                top=args.top, sort=args.sort, group_by_shape=args.group_by_shape,
                memory=args.memory, trace=args.trace, runs=args.runs, warmup=args.warmup,
                threads=args.threads)
    emit(table, args)
    return 0
