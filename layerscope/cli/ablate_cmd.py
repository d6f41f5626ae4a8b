"""layerscope ablate RECIPE: optimisation variants, each in a fresh process."""
from __future__ import annotations

from layerscope.cli.common import add_device, add_output, emit
from layerscope.cli.progress import add_quiet, progress_bar
from layerscope.core.values import arg, non_negative_int, positive_int, seed, thread_count


def register(sub) -> None:
    p = sub.add_parser("ablate", help="phase breakdown per optimisation variant")
    p.add_argument("recipe")
    p.add_argument("--steps", type=arg(positive_int), default=30)
    p.add_argument("--variants", default="baseline,workers=2,compile,channels-last",
                   help="comma-separated; each from baseline,pin-memory,workers=N,compile,"
                        "torchscript,cudnn-benchmark,amp,channels-last, or several joined "
                        "with + (torchscript+channels-last), or all (every variant that "
                        "applies to the device, workers at most the cores)")
    p.add_argument("--repeats", type=arg(positive_int), default=1)
    p.add_argument("--warmup-steps", type=arg(non_negative_int), default=None,
                   help="steps left out of the breakdown (default 5, at most half of --steps)")
    add_device(p)
    p.add_argument("--batch-size", type=arg(positive_int))
    p.add_argument("--synthetic", action="store_true", help="generated data (no dataset needed)")
    p.add_argument("--data-dir")
    p.add_argument("--seed", type=arg(seed), default=0)
    p.add_argument("--threads", type=arg(thread_count))
    add_output(p)
    add_quiet(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.training.ablation import ablate

    with progress_bar(f"ablating {args.recipe}", quiet=args.quiet) as progress:
        report = ablate(args.recipe, steps=args.steps,
                        variants=[v.strip() for v in args.variants.split(",") if v.strip()],
                        repeats=args.repeats, warmup_steps=args.warmup_steps, device=args.device,
                        batch_size=args.batch_size, synthetic=args.synthetic,
                        data_dir=args.data_dir, seed=args.seed, threads=args.threads,
                        progress=progress)
    emit(report, args)
    return 0
