"""layerscope report RESULT.json... -o report.html: one HTML page, a section per result."""
from __future__ import annotations

import sys

from layerscope.renderers import write_atomic


def register(sub) -> None:
    p = sub.add_parser("report", help="one self-contained HTML page from saved JSON results")
    p.add_argument("results", nargs="+", metavar="RESULT.json")
    p.add_argument("-o", "--output", default=None, metavar="FILE.html",
                   help="write here (atomically); default: standard output")
    p.add_argument("--title", default=None, help="page title (default: 'layerscope report')")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.core.results import read_result
    from layerscope.renderers.html import render_html

    results = [read_result(path) for path in args.results]  # every file checked first
    page = render_html(results, title=args.title)
    if args.output:
        write_atomic(args.output, page)
        print(f"wrote {args.output} ({len(results)} result(s))", file=sys.stderr)
    else:
        sys.stdout.write(page)
    return 0
