"""What the side-by-side benchmarks share: their command line and the versions they record."""
from __future__ import annotations

import argparse
from typing import Sequence


def versions(dists: Sequence[str]) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in dists:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def parse_models_and_repeats(doc: str, models: Sequence[str], repeats: int, argv=None):
    """``--models a,b`` (a subset of ``models``) and ``--repeats N``; returns (models, repeats)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--models", default=",".join(models),
                        help=f"comma-separated subset of: {', '.join(models)}")
    parser.add_argument("--repeats", type=int, default=repeats,
                        help="timed calls per tool (median)")
    args = parser.parse_args(argv)
    chosen = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in models]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(models)}")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return chosen, args.repeats
