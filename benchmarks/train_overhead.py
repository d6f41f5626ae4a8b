"""What the phase instrumentation of `layerscope train` costs, and whether the phases add up.

Run:  .venv/bin/python benchmarks/train_overhead.py [--steps 40] [--batch-size 128]

cifar10-resnet20 on synthetic data. In one process, after a warm-up, bare steps (the same
training step with no timer calls) and instrumented steps (layerscope.training.phases.PhaseTimer
exactly as the training loop uses it) alternate, so load on the machine hits both alike. Writes
benchmarks/results/train_overhead.json and prints the medians, the overhead and the worst gap
between the sum of the phases and the measured step time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from layerscope.training.data import SyntheticDataset
from layerscope.training.phases import PhaseTimer
from layerscope.training.recipes import lookup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="measured steps of each kind")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    args = ap.parse_args()

    torch.manual_seed(0)
    recipe = lookup("cifar10-resnet20")
    model = recipe.build()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = SyntheticDataset((3, 32, 32), 10, 50000, seed=0)
    batches = iter(DataLoader(data, batch_size=args.batch_size, shuffle=True))
    model.train()

    def bare_step() -> float:
        t0 = time.perf_counter()
        x, y = next(batches)
        x, y = x.to("cpu"), y.to("cpu")
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return time.perf_counter() - t0

    timer = PhaseTimer()

    def instrumented_step() -> tuple[float, float]:
        timer.start()
        x, y = next(batches)
        timer.mark("data")
        x, y = x.to("cpu"), y.to("cpu")
        timer.mark("h2d")
        out = model(x)
        timer.mark("forward")
        loss = F.cross_entropy(out, y)
        timer.mark("loss")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        timer.mark("backward")
        opt.step()
        timer.mark("optimizer")
        phases, wall = timer.stop()
        named = sum(v for k, v in phases.items() if k != "other")
        return wall, named

    for _ in range(args.warmup):
        bare_step()
        instrumented_step()
    bare, inst, gaps = [], [], []
    for i in range(args.steps):
        # alternate which goes first so neither always follows the other
        if i % 2 == 0:
            bare.append(bare_step())
        wall, named = instrumented_step()
        inst.append(wall)
        gaps.append(abs(wall - named) / wall)
        if i % 2 == 1:
            bare.append(bare_step())

    result = {
        "model": "cifar10-resnet20 (synthetic)", "batch_size": args.batch_size,
        "steps": args.steps, "threads": torch.get_num_threads(),
        "bare_median_s": statistics.median(bare), "instrumented_median_s": statistics.median(inst),
        "overhead": statistics.median(inst) / statistics.median(bare) - 1,
        "max_unnamed_share": max(gaps),  # time in no named phase ("other"), worst step
        "load_average": os.getloadavg(),
    }
    out = os.path.join(os.path.dirname(__file__), "results", "train_overhead.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    print(f"| loop | median step ms |\n|---|---|\n"
          f"| bare | {result['bare_median_s'] * 1e3:.1f} |\n"
          f"| instrumented | {result['instrumented_median_s'] * 1e3:.1f} |\n")
    print(f"instrumentation overhead: {result['overhead']:+.2%}; phases account for the step "
          f"time exactly ('other' = remainder); the largest 'other' share was "
          f"{result['max_unnamed_share']:.3%}; load average {result['load_average']}")


if __name__ == "__main__":
    main()
