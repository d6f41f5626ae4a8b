"""layerscope profile MODEL: measured per-layer latency with statistics and the roofline."""
from __future__ import annotations

from layerscope.cli.common import (
    add_device,
    add_highlight,
    add_model_inputs,
    add_ort_level,
    add_output,
    add_profiler_flags,
    check_outputs,
    emit,
)
from layerscope.cli.progress import add_quiet, progress_bar
from layerscope.core.values import (
    MIN_TIME_MAX,
    WORKERS_MAX,
    arg,
    finite_positive_float,
    non_negative_int,
    positive_int,
    thread_count,
)

WARMUP_DEFAULT = 5  # runs
LOOP_WARMUP_DEFAULT = 1  # batches: a data set's split holds few of them


def register(sub) -> None:
    p = sub.add_parser("profile", help="per-layer latency (median, p10, p90), overhead, coverage")
    add_model_inputs(p)
    add_device(p)
    p.add_argument("--threads", type=arg(thread_count), default=None, help="torch intra-op threads")
    runs = p.add_mutually_exclusive_group()
    runs.add_argument("--runs", type=arg(positive_int), default=None,
                      help="measured runs (default 30)")
    runs.add_argument("--min-time",
                      type=arg(finite_positive_float, maximum=MIN_TIME_MAX), default=None,
                      metavar="S", help="measure for at least S seconds instead of a fixed "
                                        f"count (at most {MIN_TIME_MAX:g})")
    p.add_argument("--warmup", type=arg(non_negative_int), default=None,
                   help="unmeasured runs first (default 5; with --loop, 1 batch)")
    p.add_argument("--depth", type=arg(non_negative_int), default=None,
                   help="module depth (default: leaves)")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default=None)
    p.add_argument("--backward", action="store_true",
                   help="also time the backward pass, charged to the module whose forward made it")
    p.add_argument("--functions", action="store_true",
                   help="split each container's own-code row into one timed row per torch "
                        "function it calls (F.relu, the residual add, torch.cat), as analyze "
                        "--functions counts them; forward only")
    add_profiler_flags(
        p, kernels="after the timed runs, profile 3 steps with torch.profiler and join its "
                   "events to modules: CPU ops (backward ops to the module whose forward made "
                   "them), device kernels, launch time, short kernels; per step, device busy "
                   "and idle (CUDA)",
        nvtx="NVTX ranges named after layerscope's modules and phases, for Nsight Systems "
             "(CUDA; a note and nothing else without it)")
    add_ort_level(p, "--optimization", note="; ONNX models (fused nodes are reported as such)")
    p.add_argument("--no-roofline", action="store_true",
                   help="do not place layers on the measured roofline")
    loop = p.add_argument_group("inference over a data loader (--loop)")
    loop.add_argument("--loop", metavar="DATASET", default=None,
                      help="time inference over a data set's validation split, data loading "
                           "and copies included: digits, mnist, cifar10 or cifar100; per phase "
                           "(data wait, host-to-device, forward, other) and per layer; --runs "
                           "is the number of timed batches (default: the rest of one pass), "
                           "drawn from repeated passes over the data when it has fewer")
    loop.add_argument("--synthetic", action="store_true",
                      help="--loop: generated data of the data set's shapes")
    loop.add_argument("--data-dir", default=None, help="--loop: where the data set is")
    loop.add_argument("--num-workers", type=arg(non_negative_int, maximum=WORKERS_MAX), default=0,
                      help="--loop: loader workers")
    decode = p.add_argument_group("decode of a language model (--decode)")
    decode.add_argument("--decode", type=arg(positive_int), default=None, metavar="N",
                        help="hf:PATH/config.json only: build the model with random weights, "
                             "prefill --context tokens, then time N single-token decode steps "
                             "with the KV cache (after --warmup more, default 3); tokens/s, "
                             "bytes and FLOPs per step as layerscope llm counts them, MBU and "
                             "MFU against the measured roofline and a GPU's datasheet, and "
                             "llm's decode bound")
    decode.add_argument("--context", type=arg(positive_int), default=None, metavar="L",
                        help="--decode: tokens in the KV cache that every step attends "
                             "(default 128)")
    add_output(p)
    add_quiet(p)
    add_highlight(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.profiling import profile

    if args.decode is not None:
        return _run_decode(args)
    if args.context is not None:
        from layerscope.core.errors import UserError

        raise UserError("--context is the KV cache of --decode: give --decode N with it")
    if args.loop is not None:  # --loop "" is refused by the loop, not ignored
        return _run_loop(args)
    if args.warmup is None:
        args.warmup = WARMUP_DEFAULT

    with progress_bar(f"profiling {args.model}", quiet=args.quiet) as progress:
        report = profile(args.model, args.input, batch_size=args.batch_size, device=args.device,
                         threads=args.threads, runs=args.runs, min_time=args.min_time,
                         warmup=args.warmup, depth=args.depth, backward=args.backward,
                         dtype=args.dtype, roofline=not args.no_roofline, progress=progress,
                         optimization=args.optimization, functions=args.functions,
                         kernels=args.kernels, nvtx=args.nvtx)
    emit(report, args)
    return 0


def _run_loop(args) -> int:
    from layerscope.core.errors import UserError
    from layerscope.training.inference_loop import profile_loop

    if (args.input or args.backward or args.depth is not None or args.dtype or args.min_time
            or args.functions or args.kernels or args.nvtx):
        raise UserError("--loop takes its inputs from the data set: --input, --backward, "
                        "--depth, --dtype, --min-time, --functions, --kernels and --nvtx do "
                        "not apply")
    with progress_bar(f"profiling {args.model} over {args.loop}", quiet=args.quiet,
                      unit="batches") as progress:
        result = profile_loop(args.model, args.loop, synthetic=args.synthetic,
                              data_dir=args.data_dir, batch_size=args.batch_size,
                              batches=args.runs,
                              warmup=LOOP_WARMUP_DEFAULT if args.warmup is None else args.warmup,
                              device=args.device, num_workers=args.num_workers,
                              threads=args.threads, progress=progress)
    emit(result, args)
    return 0


def _run_decode(args) -> int:
    from layerscope.analysis.decode import DEFAULT_CONTEXT, DEFAULT_WARMUP, profile_decode
    from layerscope.core.errors import UserError

    others = [flag for flag, given in (
        ("--loop", args.loop is not None), ("--input", args.input), ("--runs", args.runs),
        ("--min-time", args.min_time), ("--depth", args.depth is not None),
        ("--backward", args.backward), ("--functions", args.functions),
        ("--kernels", args.kernels), ("--nvtx", args.nvtx),
        ("--no-roofline", args.no_roofline)) if given]
    if others:
        raise UserError(f"--decode times decode steps of a language model: {', '.join(others)} "
                        "do not apply (--decode N sets the timed steps, --context the KV "
                        "cache, --batch-size the sequences)")
    check_outputs(args)
    with progress_bar(f"decoding {args.model}", quiet=args.quiet, unit="steps") as progress:
        result = profile_decode(args.model, steps=args.decode,
                                context=args.context or DEFAULT_CONTEXT,
                                batch_size=args.batch_size or 1, device=args.device,
                                dtype=args.dtype, threads=args.threads,
                                warmup=DEFAULT_WARMUP if args.warmup is None else args.warmup,
                                progress=progress)
    emit(result, args)
    return 0
