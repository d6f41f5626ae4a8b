"""layerscope scaling RECIPE --nproc 1,2,4: data-parallel throughput per world size.
Every option is a field of ``training.scaling.ScalingSettings``."""
from __future__ import annotations

from layerscope.cli.common import add_all_settings, add_output, check_outputs, emit, settings_from
from layerscope.cli.progress import add_quiet, progress_bar
from layerscope.training.scaling import ScalingSettings


def register(sub) -> None:
    p = sub.add_parser("scaling", help="data-parallel (DDP) throughput, speed-up and "
                                       "communication share per number of processes",
                       description="Each world size is a DDP run: gloo on --device cpu, NCCL "
                                   "with one GPU per rank on --device cuda.")
    add_all_settings(p, ScalingSettings)
    add_output(p)
    add_quiet(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.training.scaling import scaling

    s = settings_from(ScalingSettings, args)
    check_outputs(args)
    with progress_bar(f"scaling {s.recipe}", quiet=args.quiet, unit="world sizes") as bar:
        report = scaling(settings=s, progress=bar)
    emit(report, args)
    return 0
