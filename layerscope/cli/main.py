"""Entry point: parse, call the public API, render; errors become one line and exit code 2."""
from __future__ import annotations

import sys
import traceback

from layerscope.cli import (activations_cmd, analyze_cmd, models_cmd, ops_cmd, profile_cmd,
                            predict_cmd, roofline_cmd, sweep_cmd, train_cmd, ablate_cmd,
                            rewrite_cmd, verify_cmd, render_cmd, report_cmd, export_cmd,
                            compare_cmd, env_cmd, graph_cmd)
from layerscope.cli.common import Parser
from layerscope.core.io import Terminated, outputs
from layerscope.errors import UserError

COMMANDS = [analyze_cmd, profile_cmd, ops_cmd, sweep_cmd, roofline_cmd, train_cmd, ablate_cmd,
            predict_cmd, activations_cmd, models_cmd, rewrite_cmd, verify_cmd, render_cmd,
            report_cmd, export_cmd, compare_cmd, env_cmd, graph_cmd]


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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        if not getattr(args, "run", None):
            build_parser().print_help()
            return 2
        with outputs():  # every file the command writes through cli.common: all or none
            return args.run(args)
    except UserError as exc:
        if debug:
            traceback.print_exc()
        print(f"layerscope: error: {exc}", file=sys.stderr)
        return 2
    except Terminated:
        print("layerscope: terminated", file=sys.stderr)
        raise
    except KeyboardInterrupt:
        print("layerscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
