"""layerscope sweep MODEL: latency over batch sizes, threads, devices, backends and dtypes.
Every option is a field of ``analysis.sweep.SweepSettings``."""
from __future__ import annotations

from layerscope.analysis.sweep import SweepSettings
from layerscope.cli.common import add_all_settings, add_output, emit, settings_from
from layerscope.cli.progress import add_quiet, progress_bar


def register(sub) -> None:
    p = sub.add_parser("sweep", help="latency grid over batch sizes, threads, devices, backends")
    add_all_settings(p, SweepSettings)
    add_output(p)
    add_quiet(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.sweep import sweep

    s = settings_from(SweepSettings, args)
    with progress_bar(f"sweeping {s.model}", quiet=args.quiet, unit="cells") as progress:
        report = sweep(settings=s, progress=progress)
    emit(report, args)
    return 0
