"""layerscope render RESULT.json: any saved result again, in any format, without the model."""
from __future__ import annotations

from layerscope.cli.common import add_highlight, add_output, emit


def register(sub) -> None:
    p = sub.add_parser("render", help="render a saved JSON result again (table, csv, json, "
                                      "html, png)")
    p.add_argument("result", metavar="RESULT.json",
                   help="JSON written by analyze, profile, ops, sweep, train, ablate, "
                        "activations or compare (--format json)")
    add_output(p)
    add_highlight(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.core.results import read_result

    emit(read_result(args.result), args)
    return 0
