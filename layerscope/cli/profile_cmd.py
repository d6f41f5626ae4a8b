"""layerscope profile MODEL: measured per-layer latency with statistics and the roofline."""
from __future__ import annotations

from layerscope.cli.common import add_highlight, add_model_inputs, add_output, emit
from layerscope.cli.progress import progress_bar


def register(sub) -> None:
    p = sub.add_parser("profile", help="per-layer latency (median, p10, p90), overhead, coverage")
    add_model_inputs(p)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    runs = p.add_mutually_exclusive_group()
    runs.add_argument("--runs", type=int, default=None, help="measured runs (default 30)")
    runs.add_argument("--min-time", type=float, default=None, metavar="S",
                      help="measure for at least S seconds instead of a fixed count")
    p.add_argument("--warmup", type=int, default=5, help="unmeasured runs first (default 5)")
    p.add_argument("--depth", type=int, default=None, help="module depth (default: leaves)")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default=None)
    p.add_argument("--backward", action="store_true",
                   help="also time the backward pass, charged to the module whose forward made it")
    p.add_argument("--optimization", choices=["disabled", "basic", "extended", "all"],
                   default="disabled",
                   help="ONNX models: onnxruntime's graph optimisation level (fused nodes are "
                        "reported as such)")
    p.add_argument("--no-roofline", action="store_true",
                   help="do not place layers on the measured roofline")
    add_output(p)
    add_highlight(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.runtime import profile

    if args.model.lower().endswith(".onnx"):
        from layerscope.analysis.ort_profile import profile_onnx

        if args.device != "cpu" or args.backward or args.depth is not None or args.dtype:
            from layerscope.errors import UserError

            raise UserError("ONNX models are profiled with onnxruntime on the CPU: --device, "
                            "--backward, --depth and --dtype do not apply")
        with progress_bar(f"profiling {args.model}") as progress:
            report = profile_onnx(args.model, args.input, batch_size=args.batch_size,
                                  runs=args.runs, warmup=args.warmup, threads=args.threads,
                                  optimization=args.optimization,
                                  roofline=not args.no_roofline, progress=progress)
        emit(report, args)
        return 0
    with progress_bar(f"profiling {args.model}") as progress:
        report = profile(args.model, args.input, batch_size=args.batch_size, device=args.device,
                         threads=args.threads, runs=args.runs, min_time=args.min_time,
                         warmup=args.warmup, depth=args.depth, backward=args.backward,
                         dtype=args.dtype, roofline=not args.no_roofline, progress=progress)
    emit(report, args)
    return 0
