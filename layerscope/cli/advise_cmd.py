"""layerscope advise RESULT.json [--verify]: what the measured facts say to change, the
predicted gain and the command that tests it; --verify runs those commands."""
from __future__ import annotations

from layerscope.cli.common import add_output, emit
from layerscope.cli.progress import add_quiet, progress_bar
from layerscope.core.values import arg, positive_int


def register(sub) -> None:
    p = sub.add_parser("advise", help="what to change, by how much it should help, and the "
                                      "command that tests it (from a saved result)")
    p.add_argument("result", metavar="RESULT.json",
                   help="JSON written by train, run, profile, sweep, scaling or ablate "
                        "(--format json)")
    p.add_argument("--verify", action="store_true",
                   help="run each rule's command (ablate for train and ablate results, sweep "
                        "for profile and sweep results, the script again with run's what-if "
                        "options for run results; fresh processes, the result's seed) and mark "
                        "it confirmed, refuted or within the noise")
    p.add_argument("--steps", type=arg(positive_int), default=None,
                   help="steps per ablation or script run, runs per sweep cell (default 20)")
    p.add_argument("--repeats", type=arg(positive_int), default=1,
                   help="repeats per ablation variant")
    add_output(p)
    add_quiet(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.advice import advise
    from layerscope.core.results import read_result
    from layerscope.views.lead import headline

    with progress_bar("verifying the advice" if args.verify else "advising",
                      quiet=args.quiet or not args.verify) as progress:
        report = advise(args.result, verify=args.verify, steps=args.steps,
                        repeats=args.repeats, progress=progress)
    # the headline of the result read, with the measured gains once verified
    report.headline = headline(read_result(args.result), report)
    emit(report, args)
    return 0
