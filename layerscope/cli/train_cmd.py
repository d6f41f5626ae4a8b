"""layerscope train RECIPE: the instrumented training loop."""
from __future__ import annotations

import sys

from layerscope.cli.common import (
    add_output_folder,
    add_report_files,
    check_outputs,
    in_flags,
    input_options,
    write_output,
    write_report_files,
)
from layerscope.cli.progress import add_quiet, progress_bar
from layerscope.core.errors import UserError
from layerscope.core.values import (
    COMM_TIMEOUT_MAX,
    COMM_TIMEOUT_S,
    LR_MAX,
    NODES_MAX,
    NPROC_MAX,
    WORKERS_MAX,
    arg,
    endpoint,
    finite_positive_float,
    non_negative_int,
    positive_int,
    seed,
    thread_count,
)


def register(sub) -> None:
    p = sub.add_parser("train", help="train a recipe with a per-phase time breakdown")
    p.add_argument("recipe", nargs="?", default="digits-cnn",
                   help="digits-cnn (default, offline), mnist-cnn, cifar10-resnet20, "
                        "cifar100-resnet50")
    p.add_argument("--epochs", type=arg(positive_int))
    p.add_argument("--steps", type=arg(positive_int), help="stop after this many optimizer steps")
    p.add_argument("--batch-size", type=arg(positive_int))
    p.add_argument("--lr", type=arg(finite_positive_float, maximum=LR_MAX))
    p.add_argument("--optimizer", choices=["sgd", "adam", "adamw", "adadelta"])
    p.add_argument("--data-dir")
    p.add_argument("--download", action="store_true", help="download the dataset to --data-dir")
    p.add_argument("--synthetic", action="store_true",
                   help="deterministic generated data of the real shapes and class counts")
    p.add_argument("--device", default="cpu")
    p.add_argument("--num-workers", type=arg(non_negative_int, maximum=WORKERS_MAX), default=0)
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--torchscript", action="store_true", help="torch.jit.trace the model")
    p.add_argument("--cudnn-benchmark", action="store_true")
    p.add_argument("--amp", action="store_true", help="autocast (float16 on CUDA, bfloat16 on CPU)")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--profile", choices=["cprofile", "torch", "pyinstrument"])
    p.add_argument("--dry-run", action="store_true",
                   help="one small batch (8 samples unless --batch-size) through training, "
                        "validation, checkpoint and outputs")
    p.add_argument("--resume", metavar="CKPT", help="a checkpoint or a run directory")
    add_output_folder(p, "--out", help="run directory (default runs/RECIPE-TIME); -o, --html "
                                       "and --plot may go inside it")
    p.add_argument("--tensorboard", action="store_true", help="TensorBoard scalars in "
                                                               "RUN_DIR/tensorboard")
    p.add_argument("--seed", type=arg(seed), default=0)
    p.add_argument("--weights", help="ImageNet weights for cifar100-resnet50")
    input_options(p, "resume", "weights")
    p.add_argument("--threads", type=arg(thread_count), help="torch intra-op threads")
    p.add_argument("--warmup-steps", type=arg(non_negative_int), default=0,
                   help="steps left out of the phase breakdown")
    p.add_argument("--no-eval", action="store_true", help="skip validation")
    p.add_argument("--checkpoint-every", type=arg(positive_int), metavar="K",
                   help="also checkpoint every K optimizer steps (besides every epoch)")
    g = p.add_argument_group("several processes and machines (torch.distributed)")
    g.add_argument("--nproc-per-node", type=arg(positive_int, maximum=NPROC_MAX), metavar="N",
                   help="launch N processes on this machine through torchrun (data parallel; "
                        "--batch-size is per process)")
    g.add_argument("--nnodes", type=arg(positive_int, maximum=NODES_MAX), default=1,
                   help="machines taking part (run the same command on each)")
    g.add_argument("--node-rank", type=arg(non_negative_int, maximum=NODES_MAX - 1), default=0,
                   help="this machine's rank, 0 .. --nnodes - 1")
    g.add_argument("--rdzv-endpoint", type=arg(endpoint), metavar="HOST:PORT",
                   help="the machine of node rank 0 and a free port on it")
    g.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp",
                   help="DistributedDataParallel (default) or FSDP2 fully_shard")
    g.add_argument("--comm-timeout", type=arg(finite_positive_float, maximum=COMM_TIMEOUT_MAX),
                   default=COMM_TIMEOUT_S, metavar="SECONDS",
                   help="a collective waiting longer ends the run (a hung or dead rank)")
    p.add_argument("--format", choices=["table", "json", "csv"], default="table",
                   help="table (default), json, or csv: one row per phase of the run, each "
                        "epoch and each rank")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the report here (JSON; CSV with --format csv)")
    add_report_files(p)
    add_quiet(p)
    p.set_defaults(run=run)


def config_from(args):
    from layerscope.training.loop import TrainConfig

    return TrainConfig(
        recipe=args.recipe, epochs=args.epochs, steps=args.steps, batch_size=args.batch_size,
        lr=args.lr, optimizer=args.optimizer, data_dir=args.data_dir, download=args.download,
        synthetic=args.synthetic, device=args.device, num_workers=args.num_workers,
        pin_memory=args.pin_memory, compile=args.compile, torchscript=args.torchscript,
        cudnn_benchmark=args.cudnn_benchmark, amp=args.amp, channels_last=args.channels_last,
        profile=args.profile, dry_run=args.dry_run, resume=args.resume, out=args.out,
        tensorboard=args.tensorboard, seed=args.seed, weights=args.weights,
        threads=args.threads, warmup_steps=args.warmup_steps, evaluate=not args.no_eval,
        checkpoint_every=args.checkpoint_every, strategy=args.strategy,
        comm_timeout=args.comm_timeout)


def _launch(args) -> int:
    """The parent of a --nproc-per-node run: check what can be checked once, then torchrun
    starts the ranks, each running this same command line."""
    from layerscope.core.io import check_dir
    from layerscope.training import checkpoint, distributed
    from layerscope.training.recipes import lookup

    lookup(args.recipe)
    if args.resume:
        checkpoint.resolve_checkpoint(args.resume)
    if args.out:
        check_dir(args.out, "--out")
    try:
        return distributed.launch(args.argv, args.nproc_per_node or 1, args.nnodes,
                                  args.node_rank, args.rdzv_endpoint)
    except distributed.RankFailed as exc:
        print(f"layerscope: error: {exc}", file=sys.stderr)
        return exc.code
    except distributed.Stopped as exc:
        print(f"layerscope: {exc}", file=sys.stderr)
        return exc.code


def _finished_line(done) -> str:
    """The one line for a resumed run with nothing left to do, naming the option that gives
    it more (``AlreadyFinished`` from ``training.loop``)."""
    flag = "--steps" if done.unit == "steps" else "--epochs"
    return (f"layerscope: {done.run_dir} {done.finished}; nothing to do (to train more: "
            f"--resume {done.run_dir} {flag} {done.done + 1} or more)")


def run(args) -> int:
    import json
    import warnings

    from rich.console import Console

    from layerscope.training import distributed
    from layerscope.training.loop import AlreadyFinished, train
    from layerscope.views.training import epoch_line

    check_outputs(args)
    env = distributed.detect()
    if env is None and (args.nproc_per_node or args.nnodes > 1):
        return _launch(args)
    err = Console(stderr=True, highlight=False)
    table = args.format == "table" and not args.output
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        quiet = args.quiet or (env is not None and env.rank != 0)
        with progress_bar(f"training {args.recipe}", quiet=quiet, unit="steps") as bar:
            progress = None if bar is None else (
                lambda epoch, done, total: bar(done, total, f"epoch {epoch + 1}"))
            try:
                report = train(config_from(args), progress=progress,
                               on_epoch=(lambda row: err.print(epoch_line(row), soft_wrap=True)))
            except AlreadyFinished as done:
                if env is None or env.rank == 0:
                    print(_finished_line(done), file=sys.stdout if table else sys.stderr)
                return 0
            except Exception as exc:
                if env is None:
                    raise
                # one line for the launcher to show (torchrun's error file), not a traceback,
                # in the command's words (cli.main translates only what reaches it)
                if isinstance(exc, UserError):
                    exc = in_flags(exc, args)
                return distributed.record_failure(env, exc, args.comm_timeout)
    if env is not None and env.rank != 0:
        return 0  # rank 0 reports for every rank
    for w in caught:  # re-shown through the CLI's one-line warning printer (cli/main.py)
        if "layerscope" in str(w.filename) or "no ImageNet weights" in str(w.message):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if args.format == "csv":
        from layerscope.renderers import render

        text = render(report, "csv")
    else:
        text = json.dumps(report.to_dict(), indent=2) + "\n"
    if args.output:
        write_output(args.output, text)
    if table:
        Console(highlight=False).print(report)
    elif not args.output:
        sys.stdout.write(text)
    write_report_files(report, args)
    return 0
