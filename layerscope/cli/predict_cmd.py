"""layerscope predict RUN_DIR_OR_CHECKPOINT: top-1 and top-5 with class names."""
from __future__ import annotations

import json
import sys

from layerscope.cli.common import input_options
from layerscope.core.values import arg, non_negative_int


def register(sub) -> None:
    p = sub.add_parser("predict", help="top-1/top-5 of a trained model on one sample")
    p.add_argument("source", help="a run directory or a checkpoint file")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--index", type=arg(non_negative_int),
                       help="validation sample index (default 0)")
    which.add_argument("--image", help="an image file")
    p.add_argument("--data-dir")
    p.add_argument("--format", choices=["table", "json"], default="table")
    input_options(p, "image")
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.training.predict import predict

    result = predict(args.source, index=args.index, image=args.image, data_dir=args.data_dir)
    if args.format == "json":
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return 0
    truth = "" if result.label is None else f" (true class {result.label})"
    print(f"{result.source}{truth}")
    for rank, t in enumerate(result.top, 1):
        print(f"  top-{rank}: {t['name']:<12} class {t['class']:<4} p={t['probability']:.4f}")
    return 0
