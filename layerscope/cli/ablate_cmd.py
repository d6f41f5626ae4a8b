"""layerscope ablate RECIPE: optimisation variants, each in a fresh process. Every option is a
field of ``training.ablation.AblateSettings``."""
from __future__ import annotations

from layerscope.cli.common import add_all_settings, add_output, emit, settings_from
from layerscope.cli.progress import add_quiet, progress_bar


def register(sub) -> None:
    from layerscope.training.ablation import AblateSettings

    p = sub.add_parser("ablate", help="phase breakdown per optimisation variant")
    add_all_settings(p, AblateSettings)
    add_output(p)
    add_quiet(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.training.ablation import AblateSettings, ablate

    s = settings_from(AblateSettings, args)
    with progress_bar(f"ablating {s.recipe}", quiet=args.quiet) as progress:
        report = ablate(settings=s, progress=progress)
    emit(report, args)
    return 0
