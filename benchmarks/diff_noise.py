"""How often `layerscope diff` calls two profiles of the same model "within noise", and whether
it still flags a real change: repeated pairs of real profiles on this machine.

Run:  .venv/bin/python benchmarks/diff_noise.py [--pairs 10] [--resnet-pairs 3]
          [--positive 3] [--runs 20] [--threads 1] [--busy] [--keep DIR] [--evaluate DIR]

- null pairs: ``layerscope profile MODEL --runs N --threads T`` twice, back to back, each in its
  own process (``--pairs`` of mnist-cnn, ``--resnet-pairs`` of resnet20); a pair passes when
  the end-to-end row and every row of the diff (layer types, layers) are within the noise;
- positive pairs: a small CNN whose conv2 gets an input twice as wide in the new profile (a
  MaxPool2d of kernel (2, 1) instead of 2 before it; an adaptive pool after it brings the rest
  back to the same shapes): conv2 must be flagged slower with its input growth as the
  explanation, and the forward pass slower too;
- several baseline files: for each null pair after the first of a model, the previous pair's
  new profile and this pair's base against this pair's new one (the docs' remedy for a drift
  between processes that no single run shows), judged by the current rule; for the positive
  pairs, the previous pair's base and this pair's base against this pair's new profile;
- ``--busy``: a busy loop (``python3 -c 'while 1: pass'``) runs during the profiles, to make
  the machine busier than it is.

Each pair is judged by the current rule ("after": the Holm-Bonferroni family over the rows and
the drift estimate from the blocks of each run) and by the rule before them ("before": a row is
beyond the noise when its own rank-test p is under 0.05 and its change at least 3%; recomputed
from the rows' raw p-values, which the diff keeps). The 1-minute load average is recorded before
each pair. ``--keep DIR`` keeps the profiles; ``--evaluate DIR`` judges profiles kept before
instead of taking new ones.

Writes benchmarks/results/diff_noise.json and prints the fractions and the load averages.
Kept results (benchmarks/results/diff_noise_*.json, each pair's 1-minute load average in it),
each judged by ``--evaluate`` on the profiles kept, with the rules of this commit: quiet1 and
quiet2 (nothing else of ours running, load 1.1-2.2), busy1 and busy2 (``--busy``, load
1.1-3.8), helpers (two other sessions' tests running, load 2.1-2.8), busy_helpers (both, load
2.5-5.3), busy_threads2 (``--busy --threads 0``: torch's 2 threads on the 2 cores, with
the other sessions, load 3.8-5.9), runs30_threads2 (``--runs 30 --threads 0``, load 0.9-2.1)
and runs30_busy (``--runs 30 --busy``, load 1.8-2.2).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from layerscope.analysis.diff import diff_files  # noqa: E402
from layerscope.analysis.diff.verdict import ALPHA, MIN_EFFECT  # noqa: E402
from layerscope.core.stats import block_drift  # noqa: E402

LAYERSCOPE = [sys.executable, "-m", "layerscope"]
RULE = ("rank test: the end to end p < 0.05, the other rows Holm-adjusted p < 0.05; and "
        "|ln(new/base)| > t(0.975; 6) sqrt(d_base^2 + d_new^2), d = sd of the logs of 4 block "
        "medians, a row's tolerance at least the median of the rows'; each layer, type or "
        "phase judged beyond its level's common shift (the median log ratio of its >= 8 "
        "rows); and |change| >= 3%")

MODELS = textwrap.dedent("""\
    from collections import OrderedDict

    import torch.nn as nn


    def _net(first_pool):
        return nn.Sequential(OrderedDict([
            ("conv1", nn.Conv2d(3, 32, 3, padding=1)), ("relu1", nn.ReLU()), ("pool1", first_pool),
            ("conv2", nn.Conv2d(32, 32, 3, padding=1)), ("relu2", nn.ReLU()),
            ("pool2", nn.AdaptiveAvgPool2d(16)), ("conv3", nn.Conv2d(32, 64, 3, padding=1)),
            ("relu3", nn.ReLU()), ("conv4", nn.Conv2d(64, 64, 3, padding=1)),
            ("relu4", nn.ReLU()), ("flatten", nn.Flatten()), ("fc", nn.Linear(64 * 16 * 16, 10))]))


    def base():
        return _net(nn.MaxPool2d(2))  # conv2 sees 1x32x32x32


    def wide():
        return _net(nn.MaxPool2d((2, 1)))  # conv2 sees 1x32x32x64: twice the input
    """)


def profile(model: str, path: str, runs: int, threads: int, extra: list[str]) -> None:
    subprocess.run(LAYERSCOPE + ["profile", model, "--runs", str(runs), "-o", path, "-q",
                                 *(["--threads", str(threads)] if threads else []), *extra],
                   check=True, capture_output=True)


def collect(folder: str, args: argparse.Namespace) -> list[dict]:
    """Take the profiles; one entry per pair (its files, its kind and the load before it)."""
    models = os.path.join(folder, "twomodels.py")
    with open(models, "w") as f:
        f.write(MODELS)
    plan = ([("null", "mnist-cnn", "mnist-cnn", [])] * args.pairs
            + [("null", "resnet20", "resnet20", [])] * args.resnet_pairs
            + [("positive", f"{models}:base", f"{models}:wide", ["--input", "1x3x64x64"])]
            * args.positive)
    pairs = []
    for i, (case, base, new, extra) in enumerate(plan):
        entry = {"case": case, "model": base.split(":")[-1] if case == "positive" else base,
                 "load_average": os.getloadavg()[0], "busy_loop": bool(args.busy),
                 "files": [os.path.join(folder, f"{i:02d}-{side}.json") for side in "ab"]}
        profile(base, entry["files"][0], args.runs, args.threads, extra)
        profile(new, entry["files"][1], args.runs, args.threads, extra)
        pairs.append(entry)
    with open(os.path.join(folder, "pairs.json"), "w") as f:
        json.dump(pairs, f, indent=1)
    return pairs


def before_beyond(row) -> bool:
    """The rule before the family and the drift: the row's own p under ALPHA, the change at
    least MIN_EFFECT."""
    return (row.p_value is not None and row.p_value < ALPHA and row.change is not None
            and abs(row.change) >= MIN_EFFECT)


def judge_pair(entry: dict) -> dict:
    d = diff_files(entry["files"])
    rows = d.all_rows()
    e2e = d.end_to_end
    with open(entry["files"][0]) as fa, open(entry["files"][1]) as fb:
        drifts = [block_drift(json.load(f)["end_to_end"]["samples_s"]) for f in (fa, fb)]
    out = {"case": entry["case"], "model": entry["model"],
           "load_average": entry["load_average"], "rows": len(rows),
           "end_to_end_change": e2e.change, "end_to_end_p": e2e.p_value,
           "end_to_end_block_drift": drifts,
           "after": {"beyond": [r.name for r in rows if r.beyond_noise],
                     "end_to_end": e2e.verdict, "summary": d.summary},
           "before": {"beyond": [r.name for r in rows if before_beyond(r)],
                      "end_to_end": ("slower" if e2e.change > 0 else "faster")
                      if before_beyond(e2e) else "within-noise"}}
    if entry["case"] == "positive":
        conv2 = next(r for r in d.rows if r.level == "layer" and r.name in ("conv2", "3"))
        out["conv2"] = {"change": conv2.change, "p": conv2.p_value, "verdict": conv2.verdict,
                        "before": "slower" if before_beyond(conv2) else "within-noise",
                        "explanation": conv2.explanation}
    return out


def fraction(xs: list[bool]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10, help="null pairs of mnist-cnn")
    parser.add_argument("--resnet-pairs", type=int, default=3, help="null pairs of resnet20")
    parser.add_argument("--positive", type=int, default=3, help="pairs with conv2's input 2x")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads of the profiles (0: torch's default)")
    parser.add_argument("--busy", action="store_true", help="a busy loop runs meanwhile")
    parser.add_argument("--keep", help="keep the profiles in this folder")
    parser.add_argument("--evaluate", help="judge the profiles kept in this folder")
    parser.add_argument("-o", default=os.path.join(ROOT, "benchmarks", "results",
                                                   "diff_noise.json"))
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    if args.evaluate:
        with open(os.path.join(args.evaluate, "pairs.json")) as f:
            pairs = json.load(f)
        busy_note = any(p.get("busy_loop") for p in pairs)
    else:
        folder = args.keep or tempfile.mkdtemp(prefix="diff-noise-")
        os.makedirs(folder, exist_ok=True)
        busy = subprocess.Popen([sys.executable, "-c", "while 1: pass"]) if args.busy else None
        try:
            pairs = collect(folder, args)
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
        busy_note = bool(args.busy)
    judged = [judge_pair(p) for p in pairs]
    with open(pairs[0]["files"][0]) as f:  # as the profiles ran (--evaluate: as kept)
        settings = json.load(f)["settings"]
    threads, runs = settings["threads"], settings["runs"]
    if args.evaluate:  # the loads that count are each pair's, taken when it was profiled
        report_load = {"load_average_at_evaluation": load_before}
    else:
        report_load = {"load_average_before": load_before, "load_average_after": os.getloadavg()}
    report = {"rule_after": RULE, "rule_before": "rank test p < 0.05 per row, |change| >= 3%",
              "runs": runs, "threads": threads, "busy_loop": busy_note, "alpha": ALPHA,
              "min_effect": MIN_EFFECT, **report_load, "pairs": judged, "fractions": {}}
    for model in dict.fromkeys(j["model"] for j in judged if j["case"] == "null"):
        mine = [j for j in judged if j["case"] == "null" and j["model"] == model]
        report["fractions"][model] = {
            rule: fraction([not j[rule]["beyond"] and j[rule]["end_to_end"] == "within-noise"
                            for j in mine]) for rule in ("before", "after")}
        # the layers and layer types only (the end to end left out)
        report["fractions"][model]["after_rows"] = fraction(
            [not [n for n in j["after"]["beyond"] if n != "end_to_end"] for j in mine])
        report["fractions"][model]["pairs"] = len(mine)
    # the remedy the docs give for a drift a run does not show: several baseline files, here
    # the previous pair's new profile and this pair's base against this pair's new one
    for model in dict.fromkeys(p["model"] for p in pairs if p["case"] == "null"):
        mine = [p for p in pairs if p["case"] == "null" and p["model"] == model]
        within = []
        for prev, entry in zip(mine, mine[1:]):
            d = diff_files([prev["files"][1], *entry["files"]])
            within.append(not any(r.beyond_noise for r in d.all_rows()))
        if within:
            report["fractions"][model]["two_baselines_after"] = fraction(within)
            report["fractions"][model]["two_baselines_diffs"] = len(within)
    positive = [j for j in judged if j["case"] == "positive"]
    if positive:
        report["fractions"]["positive_flagged"] = {
            rule: fraction([(j["conv2"]["verdict"] if rule == "after" else j["conv2"]["before"])
                            == "slower" and j[rule]["end_to_end"] == "slower"
                            for j in positive]) for rule in ("before", "after")}
        report["fractions"]["positive_flagged"]["pairs"] = len(positive)
        report["fractions"]["positive_layer_flagged"] = {
            rule: fraction([(j["conv2"]["verdict"] if rule == "after" else j["conv2"]["before"])
                            == "slower" for j in positive]) for rule in ("before", "after")}
        mine = [p for p in pairs if p["case"] == "positive"]
        both = []  # two base profiles (this pair's and the previous pair's) against the new one
        for prev, entry in zip(mine, mine[1:]):
            d = diff_files([prev["files"][0], *entry["files"]])
            conv2 = next(r for r in d.rows if r.level == "layer" and r.name in ("conv2", "3"))
            both.append(conv2.verdict == "slower" and d.end_to_end.verdict == "slower")
        if both:
            report["fractions"]["positive_flagged"]["two_baselines_after"] = fraction(both)
            report["fractions"]["positive_flagged"]["two_baselines_diffs"] = len(both)
    with open(args.o, "w") as f:
        json.dump(report, f, indent=1, default=lambda x: None if isinstance(x, float)
                  and math.isnan(x) else x)
    for j in judged:
        print(f"{j['case']:8} {j['model']:9} load {j['load_average']:.2f} e2e "
              f"{j['end_to_end_change']:+.1%} drift {j['end_to_end_block_drift'][0]:.3f}/"
              f"{j['end_to_end_block_drift'][1]:.3f}  before {len(j['before']['beyond'])} rows "
              f"e2e {j['before']['end_to_end']}; after {len(j['after']['beyond'])} rows e2e "
              f"{j['after']['end_to_end']}" + (f"; conv2 {j['conv2']['change']:+.0%} "
                                               f"{j['conv2']['verdict']}"
                                               if "conv2" in j else ""))
    print("fractions:", json.dumps(report["fractions"]))
    print("load averages:", {k: v for k, v in report_load.items()})


if __name__ == "__main__":
    main()
