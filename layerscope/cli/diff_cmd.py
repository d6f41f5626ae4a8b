"""layerscope diff BASE.json NEW.json [MORE.json...]: did it get slower, and why."""
from __future__ import annotations

import sys

from layerscope.core.errors import UserError
from layerscope.core.values import arg, width

FORMATS = ("table", "json", "csv", "html", "md")


def register(sub) -> None:
    p = sub.add_parser(
        "diff", help="did it get slower, and why: two or more saved results of one kind, "
                     "figure by figure, with verdicts beyond the noise",
        description="Every file but the last together form the baseline; the last is the new "
                    "result. Reads profile, loop, train (and run), sweep, scaling and analyze "
                    "results. Each figure is judged by a rank test of the runs' own samples "
                    "(else the overlap of their p10-p90 ranges) and a minimum change of 3%%.")
    p.add_argument("files", nargs="+", metavar="FILE.json",
                   help="saved results: the base (one or more), then the new one")
    p.add_argument("--fail-if", action="append", default=[], metavar="EXPR",
                   help="exit 1 when a change beyond the noise passes this threshold, e.g. "
                        "'step>+5%%', 'layer:*.attn>+10%%', 'phase:backward>+10%%', "
                        "'end_to_end<-5%%' (repeatable); the failed lines go to stderr")
    p.add_argument("--all", action="store_true",
                   help="table: show every layer, also those within the noise")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="table (default), json, csv, html or md (GitHub Markdown); default "
                        "from -o's extension")
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="write here (atomically) instead of standard output")
    p.add_argument("--width", type=arg(width), default=None, help="table width in characters")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.diff import diff_files, failed_checks, parse_check
    from layerscope.cli.common import output
    from layerscope.renderers import pick_format, render

    fmt = pick_format(args.format, args.output)
    if fmt not in FORMATS:
        raise UserError(f"diff writes {', '.join(FORMATS)}; not {fmt}")
    if len(args.files) < 2:
        raise UserError("diff needs at least two files: the base (one or more), then the new "
                        "one")
    checks = [parse_check(e) for e in args.fail_if]  # a malformed one: before any reading
    result = diff_files(args.files)
    options = {"show_all": args.all} if fmt == "table" else {}
    output(render(result, fmt, width=args.width or 160, **options), args.output)
    failed = failed_checks(result, checks)
    for line in failed:
        print(f"layerscope: diff failed: {line}", file=sys.stderr)
    return 1 if failed else 0
