"""layerscope advise RESULT.json [--verify]: what the measured facts say to change, the
predicted gain and the command that tests it; --verify runs those commands. Every option is a
field of ``advice.AdviseSettings``."""
from __future__ import annotations

from layerscope.cli.common import add_all_settings, add_output, emit, settings_from
from layerscope.cli.progress import add_quiet, progress_bar


def register(sub) -> None:
    from layerscope.advice import AdviseSettings

    p = sub.add_parser("advise", help="what to change, by how much it should help, and the "
                                      "command that tests it (from a saved result)")
    add_all_settings(p, AdviseSettings)
    add_output(p)
    add_quiet(p)
    p.set_defaults(run=run)


def run(args) -> int:
    import sys

    from layerscope.advice import AdviseSettings, advise
    from layerscope.core.results import read_result
    from layerscope.views.lead import headline

    s = settings_from(AdviseSettings, args)
    with progress_bar("verifying the advice" if s.verify else "advising",
                      quiet=args.quiet or not s.verify) as progress:
        report = advise(settings=s, progress=progress,
                        announce=lambda line: print(f"layerscope: {line}", file=sys.stderr,
                                                    flush=True))
    # the headline of the result read, with the measured gains once verified
    report.headline = headline(read_result(s.result), report)
    emit(report, args)
    return 0
