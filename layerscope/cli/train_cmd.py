"""layerscope train RECIPE: the instrumented training loop."""
from __future__ import annotations

import sys

from layerscope.cli.common import (
    add_output,
    add_settings,
    check_outputs,
    emit,
    in_flags,
    settings_from,
)
from layerscope.cli.progress import add_quiet, progress_bar
from layerscope.core.errors import UserError


def register(sub) -> None:
    from layerscope.training.config import DISTRIBUTED, LaunchSettings, TrainConfig

    p = sub.add_parser("train", help="train a recipe with a per-phase time breakdown")
    add_settings(p, TrainConfig)  # every option of the run: training/config.py
    add_settings(p, LaunchSettings, DISTRIBUTED)  # how to launch it: this command's own
    add_settings(p, TrainConfig, DISTRIBUTED)
    add_output(p)
    add_quiet(p)
    p.set_defaults(run=run)


def config_from(args):
    from layerscope.training.config import TrainConfig

    return settings_from(TrainConfig, args)


def _launch(args, how) -> int:
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
        return distributed.launch(args.argv, how.nproc_per_node or 1, how.nnodes, how.node_rank,
                                  how.rdzv_endpoint)
    except distributed.FailedAfterFinishing as exc:  # the results are complete: exit 0
        print(f"layerscope: warning: {exc}", file=sys.stderr)
        return 0
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
    import warnings

    from rich.console import Console

    from layerscope.renderers import pick_format
    from layerscope.training import distributed
    from layerscope.training.config import LaunchSettings
    from layerscope.training.loop import AlreadyFinished, OutOfMemory, train
    from layerscope.views.memory import post_mortem_line
    from layerscope.views.training import epoch_line

    check_outputs(args)
    config = config_from(args)  # every setting checked before any work or launch
    how = settings_from(LaunchSettings, args)
    env = distributed.detect()
    if env is None and (how.nproc_per_node or how.nnodes > 1):
        return _launch(args, how)
    if env is not None:  # a rank: its process ends without finalizing (cli/ending.py says why)
        from layerscope.cli.ending import without_finalizing

        without_finalizing()
    err = Console(stderr=True, highlight=False)
    table = pick_format(args.format, args.output) == "table" and not args.output
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        quiet = args.quiet or (env is not None and env.rank != 0)
        with progress_bar(f"training {args.recipe}", quiet=quiet, unit="steps",
                          heartbeat=True) as bar:
            progress = None if bar is None else (
                lambda epoch, done, total: bar(done, total, f"epoch {epoch + 1}"))
            # validation and the other stages of the run: a line every few seconds too
            stages = None if bar is None else (
                lambda what, done, total: bar(done, total, what, unit="batches"))
            try:
                report = train(config, progress=progress, stages=stages,
                               on_epoch=(lambda row: err.print(epoch_line(row), soft_wrap=True)))
            except OutOfMemory as oom:  # the recipe's run is too big: the report, exit 1
                if env is None or env.rank == 0:
                    print(post_mortem_line(oom.post_mortem), file=sys.stderr)
                    emit(oom.report, args)
                return 1
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
    emit(report, args)  # --format, else -o's extension (-o run.csv: CSV), as every command
    return 0
