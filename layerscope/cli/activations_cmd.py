"""layerscope activations MODEL --layers REGEX -o acts.npz: capture layer outputs. Every option
but the output's is a field of ``analysis.activations.ActivationsSettings``."""
from __future__ import annotations

import sys

from layerscope.analysis.activations import ActivationsSettings
from layerscope.cli.common import (
    add_all_settings,
    add_file_output,
    add_format,
    add_width,
    settings_from,
)

UNLIMITED_WIDTH = 10_000


def register(sub) -> None:
    p = sub.add_parser("activations", help="save the outputs of matching layers and print stats")
    add_all_settings(p, ActivationsSettings)
    add_file_output(p, "arrays", (".npz",), default=None, metavar="FILE.npz",
                    help="save arrays here")
    add_format(p)
    add_width(p, help="table width in characters (default: the terminal's; unlimited when "
                        "the output is not a terminal, so names are never cut)")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.activations import activations
    from layerscope.renderers import render
    from layerscope.renderers.activations_out import write_npz
    from layerscope.renderers.terminal import render_table

    capture = activations(settings=settings_from(ActivationsSettings, args))
    if args.output:
        write_npz(capture, args.output)
        if args.output != "-":
            print(f"wrote {args.output} ({len(capture.arrays)} arrays)", file=sys.stderr)
    if args.format == "json":
        sys.stdout.write(render(capture, "json"))
    else:
        from rich.console import Console

        # Not a terminal (a pipe, a file): as wide as the table needs; the table is not
        # expanded, so a large console width adds no padding.
        width = args.width or (None if sys.stdout.isatty() else UNLIMITED_WIDTH)
        Console(width=width, highlight=False).print(render_table(capture))
    return 0
