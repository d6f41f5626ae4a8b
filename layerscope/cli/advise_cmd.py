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
    p.add_argument("--allow-code", action="store_true",
                   help="let --verify run Python code the result names that is not its own "
                        "recorded script (a model given as file.py:factory or "
                        "package.module:factory, a script outside the folder it ran in, a -m "
                        "module found elsewhere); without it such a result is refused, since a "
                        "result file, not you, chose that code")
    p.add_argument("--steps", type=arg(positive_int), default=None,
                   help="steps per ablation or script run, runs per sweep cell (default 20)")
    p.add_argument("--repeats", type=arg(positive_int), default=1,
                   help="repeats per ablation variant")
    add_output(p)
    add_quiet(p)
    p.set_defaults(run=run)


def run(args) -> int:
    import sys

    from layerscope.advice import advise
    from layerscope.core.results import read_result
    from layerscope.views.lead import headline

    with progress_bar("verifying the advice" if args.verify else "advising",
                      quiet=args.quiet or not args.verify) as progress:
        report = advise(args.result, verify=args.verify, steps=args.steps,
                        repeats=args.repeats, progress=progress, allow_code=args.allow_code,
                        announce=lambda line: print(f"layerscope: {line}", file=sys.stderr,
                                                    flush=True))
    # the headline of the result read, with the measured gains once verified
    report.headline = headline(read_result(args.result), report)
    emit(report, args)
    return 0
