"""layerscope scaling RECIPE --nproc 1,2,4: data-parallel throughput per world size."""
from __future__ import annotations

from layerscope.cli.common import add_device, add_output, check_outputs, emit
from layerscope.cli.progress import add_quiet, progress_bar
from layerscope.core.values import arg, list_arg, non_negative_int, positive_int, seed, thread_count


def register(sub) -> None:
    p = sub.add_parser("scaling", help="data-parallel (DDP) throughput, speed-up and "
                                       "communication share per number of processes",
                       description="Each world size is a DDP run: gloo on --device cpu, NCCL "
                                   "with one GPU per rank on --device cuda.")
    p.add_argument("recipe", help="a training recipe (digits-cnn, mnist-cnn, ...)")
    p.add_argument("--nproc", type=list_arg(positive_int), default=[1, 2],
                   help="world sizes, e.g. 1,2,4 (default 1,2); each is launched with "
                        "torch.distributed.run")
    p.add_argument("--steps", type=arg(positive_int), default=20,
                   help="measured steps per world size (default 20)")
    p.add_argument("--warmup", type=arg(non_negative_int), default=3,
                   help="steps before them, left out (default 3)")
    p.add_argument("--batch-size", type=arg(positive_int), help="per rank (default: the recipe's)")
    p.add_argument("--threads", type=arg(thread_count), default=1,
                   help="intra-op threads per rank (default 1)")
    add_device(p)  # gloo on cpu, NCCL with one GPU per rank on cuda
    p.add_argument("--synthetic", action="store_true", help="generated data (no dataset needed)")
    p.add_argument("--data-dir")
    p.add_argument("--seed", type=arg(seed), default=0)
    add_output(p)
    add_quiet(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.training.scaling import scaling

    check_outputs(args)
    with progress_bar(f"scaling {args.recipe}", quiet=args.quiet, unit="world sizes") as bar:
        report = scaling(args.recipe, args.nproc, steps=args.steps, warmup=args.warmup,
                         device=args.device, batch_size=args.batch_size,
                         synthetic=args.synthetic, data_dir=args.data_dir, seed=args.seed,
                         threads=args.threads, progress=bar)
    emit(report, args)
    return 0
