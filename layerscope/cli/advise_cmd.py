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
                   help="run each rule's ablation (fresh processes, the result's seed) and mark "
                        "it confirmed, refuted or within the noise")
    p.add_argument("--steps", type=arg(positive_int), default=None,
                   help="steps per ablation run (default 20)")
    p.add_argument("--repeats", type=arg(positive_int), default=1,
                   help="repeats per ablation variant")
    add_output(p)
    add_quiet(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.advice import DEFAULT_STEPS, advise_result, verify
    from layerscope.advice.facts import facts_of
    from layerscope.core.errors import UserError
    from layerscope.core.results import read_result

    result = read_result(args.result)
    steps = args.steps or DEFAULT_STEPS
    report = advise_result(result, args.result, steps=steps, repeats=args.repeats)
    if args.verify:
        d = result.to_dict()
        facts = facts_of(d)
        if d["kind"] not in ("train", "ablate") or not facts.get("recipe") \
                or d.get("script") is not None:
            raise UserError(f"--verify runs ablate, which needs a training recipe: "
                            f"{args.result} is a {d['kind']} result of "
                            f"{facts.get('subject')!r}; leave out --verify")
        config = d.get("config") or {}
        verifiable = [a for a in report.advice if a.variant or a.threads]
        if verifiable:
            with progress_bar(f"verifying {len(verifiable)} rule(s)",
                              quiet=args.quiet) as progress:
                verify(report, recipe=facts["recipe"], device=facts.get("device", "cpu"),
                       steps=steps, repeats=args.repeats, seed=facts.get("seed", 0),
                       synthetic=facts.get("synthetic", True),
                       batch_size=config.get("batch_size"), threads=config.get("threads"),
                       progress=progress)
    emit(report, args)
    return 0
