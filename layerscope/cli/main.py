"""Entry point: parse, call the public API, render; errors become one line and exit code 2."""
from __future__ import annotations

import sys
import traceback
import warnings

from layerscope.cli import (activations_cmd, analyze_cmd, models_cmd, ops_cmd, profile_cmd,
                            predict_cmd, roofline_cmd, sweep_cmd, train_cmd, ablate_cmd,
                            rewrite_cmd, verify_cmd, render_cmd, report_cmd, export_cmd,
                            compare_cmd)
from layerscope.cli.common import Parser
from layerscope.errors import LayerscopeWarning, UserError

COMMANDS = [analyze_cmd, profile_cmd, ops_cmd, sweep_cmd, roofline_cmd, train_cmd, ablate_cmd,
            predict_cmd, activations_cmd, models_cmd, rewrite_cmd, verify_cmd, render_cmd,
            report_cmd, export_cmd, compare_cmd]


def build_parser() -> Parser:
    from layerscope import __version__

    parser = Parser(prog="layerscope",
                    description="Where a model's compute, memory and time go.")
    parser.add_argument("--version", action="version", version=f"layerscope {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS:
        command.register(sub)
    return parser


def _main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        if not getattr(args, "run", None):
            build_parser().print_help()
            return 2
        return args.run(args)
    except UserError as exc:
        if debug:
            traceback.print_exc()
        print(f"layerscope: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("layerscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def main(argv: list[str] | None = None) -> int:
    """``_main`` with layerscope's own warnings printed as one line each (every time: a test
    or a program calling main twice sees both)."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, LayerscopeWarning):
            print(f"layerscope: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always", LayerscopeWarning)
        warnings.showwarning = show
        return _main(argv)
