"""layerscope activations MODEL --layers REGEX -o acts.npz: capture layer outputs."""
from __future__ import annotations

import sys

from layerscope.cli.common import add_file_output, add_model_inputs
from layerscope.core.values import arg, seed, width

UNLIMITED_WIDTH = 10_000


def register(sub) -> None:
    p = sub.add_parser("activations", help="save the outputs of matching layers and print stats")
    add_model_inputs(p)
    p.add_argument("--layers", default=".*",
                   help="regular expression matched (fully) against layer names and types, "
                        "e.g. 'Conv2d|features.*'")
    p.add_argument("--seed", type=arg(seed), default=0,
                   help="seed of the random input and of a built-in model's random weights "
                        "(default 0, as in every command)")
    add_file_output(p, "arrays", (".npz",), default=None, metavar="FILE.npz",
                    help="save arrays here")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--width", type=arg(width), default=None,
                   help="table width in characters (default: the terminal's; unlimited when "
                        "the output is not a terminal, so names are never cut)")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.analysis.activations import activations
    from layerscope.renderers import render
    from layerscope.renderers.activations_out import write_npz
    from layerscope.renderers.terminal import render_table

    capture = activations(args.model, args.input, layers=args.layers,
                          batch_size=args.batch_size, seed=args.seed)
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
