"""What `layerscope run` costs a training script: its steps bare vs under the global hooks.

Run:  .venv/bin/python benchmarks/run_overhead.py [--pairs 6] [--steps 60] [--batch-size 64]

A small CNN (two 3x3 convolutions, 32 and 64 channels, on 1x28x28 synthetic images, Adam,
DataLoader) written as an ordinary script that times its own steps (perf_counter from one
optimizer step to the next) and prints their median. Two measurements, both interleaved so that
load on the machine hits both sides alike:

Each side is timed by the wall clock and by the CPU time of the training thread (torch runs
with one thread here, so the step's work is all on it): on a shared, loaded machine the CPU time
is the steadier figure, the hooks' cost being CPU work on that thread.

- processes: the script bare (`python script.py`) and under `layerscope run`, alternating,
  ``--pairs`` times each (which goes first alternates too); the overhead is the median of the
  runs' median step times under `run` over the same for the bare runs;
- one process: the same script executed through `layerscope run`'s own code path, with and
  without the Watch, alternating (no process-to-process variation);
- in process: blocks of ``--block`` steps with a ``Watch`` installed and without, alternating
  in one loop (what the hooks cost, without process-to-process noise).

- hook cost: the same module structure at trivial sizes, alternating blocks with and without
  a Watch: the instrumentation's CPU microseconds per step, free of the step's own variation.

Writes benchmarks/results/run_overhead.json and prints the figures and the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""\
    import argparse, json, statistics, time
    import torch, torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    n = (a.steps + a.warmup) * a.batch_size
    data = TensorDataset(torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,)))
    loader = DataLoader(data, batch_size=a.batch_size, shuffle=True)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 12 * 12, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    loss_fn = nn.CrossEntropyLoss()
    times, cpu, last, last_cpu = [], [], time.perf_counter(), time.thread_time()
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        now, now_cpu = time.perf_counter(), time.thread_time()
        times.append(now - last)
        cpu.append(now_cpu - last_cpu)
        last, last_cpu = now, now_cpu
    print(json.dumps({"median_s": statistics.median(times[a.warmup:]),
                      "cpu_median_s": statistics.median(cpu[a.warmup:]),
                      "steps": len(times)}))
    """)


def _script_medians(argv: list[str], env: dict) -> tuple[float, float]:
    """The script's median step: wall time, and CPU time of its (only) training thread."""
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    d = json.loads(out.stdout.strip().splitlines()[-1])
    return d["median_s"], d["cpu_median_s"]


def _summary(bare: list[tuple[float, float]], inst: list[tuple[float, float]]) -> dict:
    out = {}
    for i, clock in enumerate(("wall", "cpu")):
        b = statistics.median(x[i] for x in bare)
        w = statistics.median(x[i] for x in inst)
        out[clock] = {"bare_median_s": b, "instrumented_median_s": w, "overhead": w / b - 1}
    return out


def processes(path: str, pairs: int, script_args: list[str], tmp: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    bare_cmd = [sys.executable, path, *script_args]
    run_cmd = [sys.executable, "-m", "layerscope", "run", "-o", os.path.join(tmp, "r.json"),
               path, *script_args]
    bare, run = [], []
    for i in range(pairs):
        order = [(bare, bare_cmd), (run, run_cmd)]
        for sink, cmd in (order if i % 2 == 0 else order[::-1]):
            sink.append(_script_medians(cmd, env))
    with open(os.path.join(tmp, "r.json"), encoding="utf-8") as f:
        b = json.load(f)["breakdown"]
    return {**_summary(bare, run), "bare_runs_s": bare, "run_runs_s": run,
            "last_report_phases_s": b["seconds"], "last_report_steps": b["steps"],
            "last_report_gap_s": b["wall_s"] - sum(b["seconds"].values())}


def same_process(path: str, runs: int, script_args: list[str]) -> dict:
    """The script run ``runs`` times each in this process, alternately bare and under a
    Watch, through the same ``layerscope run`` code path (``script_runner.execute``): the
    instrumentation alone, without the process-to-process variation of the step time (the
    median step of identical bare processes varies by several per cent)."""
    import contextlib
    import io

    from layerscope.training.script_runner import execute
    from layerscope.training.watch import Watch

    bare, inst = [], []
    for i in range(runs):
        for kind in (("bare", "run") if i % 2 == 0 else ("run", "bare")):
            watch = (Watch(name="small_cnn.py", argv=script_args) if kind == "run"
                     else contextlib.nullcontext())
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                execute(path, script_args, False, watch)
            d = json.loads(buf.getvalue().strip().splitlines()[-1])
            (inst if kind == "run" else bare).append((d["median_s"], d["cpu_median_s"]))
    return {**_summary(bare, inst), "bare_runs_s": bare, "run_runs_s": inst}


def hook_cost(blocks: int = 30, steps: int = 200) -> dict:
    """What the hooks cost per step, in CPU microseconds: the benchmark CNN's module structure
    (nine modules and a loss module) at a trivial size, so the compute is negligible and the
    difference is the instrumentation; alternating blocks, minimum and median."""
    import torch
    import torch.nn as nn

    from layerscope.training.watch import Watch

    torch.set_num_threads(1)
    model = nn.Sequential(nn.Conv2d(1, 1, 1), nn.ReLU(), nn.Conv2d(1, 1, 1), nn.ReLU(),
                          nn.MaxPool2d(1), nn.Flatten(), nn.Linear(1, 1), nn.ReLU(),
                          nn.Linear(1, 1))
    loss_fn = nn.MSELoss()
    opt = torch.optim.Adam(model.parameters(), 0.1)
    x, y = torch.randn(1, 1, 1, 1), torch.randn(1, 1)

    def block() -> float:
        t = time.thread_time()
        for _ in range(steps):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        return (time.thread_time() - t) / steps

    block()
    bare, watched = [], []
    for _ in range(blocks):
        bare.append(block())
        with Watch():
            watched.append(block())
    return {"bare_step_us": {"min": min(bare) * 1e6, "median": statistics.median(bare) * 1e6},
            "watched_step_us": {"min": min(watched) * 1e6,
                                "median": statistics.median(watched) * 1e6},
            "hooks_us_per_step": (statistics.median(watched) - statistics.median(bare)) * 1e6}


def in_process(steps: int, block: int, batch_size: int) -> dict:
    """Alternating blocks of steps with and without a Watch, in one loop."""
    import torch
    import torch.nn as nn

    from layerscope.training.watch import Watch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 12 * 12, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.randn(batch_size, 1, 28, 28), torch.randint(0, 10, (batch_size,))

    def block_of(n: int) -> list[tuple[float, float]]:
        times, last, last_cpu = [], time.perf_counter(), time.thread_time()
        for _ in range(n):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            now, now_cpu = time.perf_counter(), time.thread_time()
            times.append((now - last, now_cpu - last_cpu))
            last, last_cpu = now, now_cpu
        return times

    block_of(10)  # warm-up
    bare: list[tuple[float, float]] = []
    watched: list[tuple[float, float]] = []
    for i in range(max(steps // block, 1)):
        order = ["bare", "watched"] if i % 2 == 0 else ["watched", "bare"]
        for kind in order:
            if kind == "bare":
                bare += block_of(block)[1:]  # the first step of a block spans the switch
            else:
                with Watch(model, opt):
                    watched += block_of(block)[1:]
    return {**_summary(bare, watched), "steps_each": len(bare)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=6, help="bare/run process pairs")
    ap.add_argument("--steps", type=int, default=60, help="measured steps per process")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--block", type=int, default=3, help="in-process steps per block")
    args = ap.parse_args()

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "small_cnn.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(SCRIPT)
        script_args = ["--steps", str(args.steps), "--batch-size", str(args.batch_size)]
        proc = processes(path, args.pairs, script_args, tmp)
        same = same_process(path, args.pairs, script_args)
    inproc = in_process(args.steps * args.pairs, args.block, args.batch_size)
    hooks = hook_cost()
    import torch

    result = {"model": "small CNN (conv 32, conv 64, fc 128; 1x28x28 synthetic), Adam",
              "batch_size": args.batch_size, "steps": args.steps, "pairs": args.pairs,
              "threads": 1, "torch": torch.__version__, "processes": proc, "same_process": same,
              "in_process": inproc, "hook_cost": hooks, "load_average_before": load_before,
              "load_average_after": os.getloadavg()}
    out = os.path.join(os.path.dirname(__file__), "results", "run_overhead.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    rows = []
    for label, d in ((f"processes: script vs `layerscope run` ({args.pairs} pairs)", proc),
                     (f"one process: the script bare / under run's Watch ({args.pairs} each)",
                      same),
                     ("in process: blocks without / with Watch", inproc)):
        for clock in ("wall", "cpu"):
            c = d[clock]
            rows.append(f"| {label} | {clock} | {c['bare_median_s'] * 1e3:.2f} | "
                        f"{c['instrumented_median_s'] * 1e3:.2f} | {c['overhead']:+.2%} |")
    print("| measurement | clock | bare median step ms | instrumented median step ms | "
          "overhead |\n|---|---|---|---|---|\n" + "\n".join(rows))
    share = hooks["hooks_us_per_step"] / (proc["cpu"]["bare_median_s"] * 1e6)
    print(f"the hooks' own cost: {hooks['hooks_us_per_step']:.1f} us of CPU per step (same "
          f"modules, trivial sizes), {share:.3%} of the small CNN's bare step")
    print(f"phases of the last `run` report sum to its wall time (gap "
          f"{proc['last_report_gap_s']:.2e} s); load average {load_before} before, "
          f"{result['load_average_after']} after")


if __name__ == "__main__":
    main()
