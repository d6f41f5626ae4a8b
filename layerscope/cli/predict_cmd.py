"""layerscope predict RUN_DIR_OR_CHECKPOINT: top-1 and top-5 with class names.
Every option but --format is a field of ``training.predict.PredictSettings``."""
from __future__ import annotations

import json
import sys

from layerscope.cli.common import add_all_settings, add_format, settings_from
from layerscope.training.predict import PredictSettings


def register(sub) -> None:
    p = sub.add_parser("predict", help="top-1/top-5 of a trained model on one sample")
    add_all_settings(p, PredictSettings)
    add_format(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from layerscope.training.predict import predict

    result = predict(settings=settings_from(PredictSettings, args))
    if args.format == "json":
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return 0
    truth = "" if result.label is None else f" (true class {result.label})"
    print(f"{result.source}{truth}")
    for rank, t in enumerate(result.top, 1):
        print(f"  top-{rank}: {t['name']:<12} class {t['class']:<4} p={t['probability']:.4f}")
    return 0
