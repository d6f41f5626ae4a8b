"""layerscope report RESULT.json... -o report.html: one HTML page, a section per result."""
from __future__ import annotations

from layerscope.cli.common import add_file_output, output


def register(sub) -> None:
    p = sub.add_parser("report", help="one self-contained HTML page from saved JSON results")
    p.add_argument("results", nargs="+", metavar="RESULT.json")
    add_file_output(p, "an HTML page", (".html", ".htm"), default=None, metavar="FILE.html",
                   help="write here (atomically); default: standard output")
    p.add_argument("--title", default=None, help="page title (default: 'layerscope report')")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.core.results import read_result
    from layerscope.renderers.html import render_html

    results = [read_result(path) for path in args.results]  # every file checked first
    page = render_html(results, title=args.title)
    output(page, args.output, f" ({len(results)} result(s))")
    return 0
