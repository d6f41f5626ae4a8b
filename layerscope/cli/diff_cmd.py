"""layerscope diff BASE.json NEW.json [MORE.json...]: did it get slower, and why."""
from __future__ import annotations

import sys

from layerscope.analysis.diff_settings import DiffSettings
from layerscope.cli.common import add_all_settings, add_result_output, settings_from

FORMATS = ("table", "json", "csv", "html", "md")


def register(sub) -> None:
    p = sub.add_parser(
        "diff", help="did it get slower, and why: two or more saved results of one kind, "
                     "figure by figure, with verdicts beyond the noise",
        description="Every file but the last together form the baseline; the last is the new "
                    "result. Reads profile, loop, train (and run), sweep, scaling and analyze "
                    "results. Each figure is judged by a rank test of the runs' own samples "
                    "(else the overlap of their p10-p90 ranges) and a minimum change of 3%%.")
    add_all_settings(p, DiffSettings)
    add_result_output(p, FORMATS, "table (default), json, csv, html or md (GitHub Markdown); "
                                  "default from -o's extension",
                      all_help="table: show every layer, also those within the noise")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.diff import diff_files, failed_checks, parse_check
    from layerscope.cli.common import output_result, result_format

    fmt = result_format(args, FORMATS, "diff")
    s = settings_from(DiffSettings, args)  # a malformed --fail-if: refused before any reading
    checks = [parse_check(e) for e in s.fail_if]
    result = diff_files(s.files)
    output_result(result, fmt, args)
    failed = failed_checks(result, checks)
    for line in failed:
        print(f"layerscope: diff failed: {line}", file=sys.stderr)
    return 1 if failed else 0
