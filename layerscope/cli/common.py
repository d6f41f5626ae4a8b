"""Pieces every subcommand shares: the parser, output writing and input options."""
from __future__ import annotations

import argparse
import sys

from layerscope.errors import UserError
from layerscope.renderers import FORMATS, pick_format, render, write_atomic


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage mistake as one line and exit code 2."""

    def error(self, message):  # noqa: D401 - argparse API
        raise UserError(f"{self.prog}: {message} (see --help)")


def add_model_inputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="built-in name (resnet50, resnet20, mnist-cnn, ...), "
                                 "file.py:factory, package.module:factory or a TorchScript file")
    p.add_argument("--input", action="append", default=None, metavar="SHAPE[:DTYPE]",
                   help="input shape such as 1x3x224x224 or 1x128:int64; repeat for several inputs")
    p.add_argument("--batch-size", type=int, default=None, help="override the first dimension")


def add_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="table (default), json or csv; default from -o's extension")
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="write here (atomically) instead of standard output")
    p.add_argument("--width", type=int, default=None, help="table width in characters")


def emit(report, args) -> None:
    fmt = pick_format(args.format, args.output)
    if args.output:
        write_atomic(args.output, render(report, fmt, width=args.width or 160))
        print(f"wrote {args.output}", file=sys.stderr)
    elif fmt == "table":
        from rich.console import Console

        width = args.width or (None if sys.stdout.isatty() else 160)
        Console(width=width, highlight=False).print(report)
    else:
        sys.stdout.write(render(report, fmt))
