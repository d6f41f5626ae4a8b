"""layerscope verify A B: run two models on the same seeded random inputs and compare outputs.
Every option but --format and --width is a field of ``rewrite.settings.VerifySettings`` (its
tolerances, ``Tolerances``, are rewrite --verify's too)."""
from __future__ import annotations

import sys

from layerscope.cli.common import add_all_settings, add_format, add_width, settings_from
from layerscope.rewrite.settings import VerifySettings


def register(sub) -> None:
    p = sub.add_parser("verify", help="compare two models' outputs on seeded random inputs",
                       description="Exit code 0 when the outputs match, 1 when they do not, "
                                   "2 on bad input.")
    add_all_settings(p, VerifySettings)
    add_format(p)
    add_width(p)
    p.set_defaults(run=run)


def print_result(result, fmt: str = "table", width: int | None = None) -> None:
    from layerscope.renderers.verify_out import to_json, to_text

    if fmt == "json":
        sys.stdout.write(to_json(result))
    else:
        sys.stdout.write(to_text(result, width=width or 160))


def run(args) -> int:
    from layerscope.rewrite.verify import verify

    result = verify(settings=settings_from(VerifySettings, args))
    print_result(result, args.format, args.width)
    return 0 if result.ok else 1
