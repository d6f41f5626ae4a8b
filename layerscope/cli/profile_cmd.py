"""layerscope profile MODEL: measured per-layer latency with statistics and the roofline,
inference over a data loader (--loop) or a language model's decode steps (--decode). Every
option is a field of ``analysis.profiling.ProfileSettings``."""
from __future__ import annotations

from layerscope.analysis.profiling import ProfileSettings
from layerscope.cli.common import (
    add_all_settings,
    add_highlight,
    add_output,
    check_outputs,
    emit,
    settings_from,
)
from layerscope.cli.progress import add_quiet, progress_bar


def register(sub) -> None:
    p = sub.add_parser("profile", help="per-layer latency (median, p10, p90), overhead, coverage")
    add_all_settings(p, ProfileSettings)
    add_output(p)
    add_quiet(p)
    add_highlight(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.training.profiling import profile

    s = settings_from(ProfileSettings, args)
    check_outputs(args)  # every output can be written, before any work
    if s.decode is not None:
        title, unit = f"decoding {s.model}", "steps"
    elif s.loop is not None:
        title, unit = f"profiling {s.model} over {s.loop}", "batches"
    else:
        title, unit = f"profiling {s.model}", None
    with progress_bar(title, quiet=args.quiet, **({"unit": unit} if unit else {})) as progress:
        result = profile(settings=s, progress=progress)
    emit(result, args)
    return 0
