"""One rank of a ``layerscope scaling`` measurement, started by ``torch.distributed.run``.

    python -m torch.distributed.run --standalone --nproc-per-node N \\
        -m layerscope.training.scaling_worker RECIPE --steps K --warmup W --out DIR

Each rank trains the recipe's model under DDP (gloo on CPU, NCCL on CUDA) on its
``DistributedSampler`` share of the data, the per-rank batch being the recipe's (DDP's convention:
N ranks train N x batch samples per step), with the phase timer and a ``CommRecorder``, and writes
``DIR/rank<R>.json``: step times, median phase times and the communication summary. Internal:
``training.scaling`` is its one caller (and will call the distributed ``train`` in its place once
that lands; the measurement is the same).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from layerscope.core.io import write_file
from layerscope.training.comm import CommRecorder, gradient_bytes
from layerscope.training.data import datasets
from layerscope.training.phases import PHASES, PhaseTimer
from layerscope.training.recipes import lookup, loss_function, make_optimizer


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m layerscope.training.scaling_worker")
    p.add_argument("recipe")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--threads", type=int)
    p.add_argument("--device", default="cpu")
    p.add_argument("--synthetic", action="store_true")
    p.add_argument("--data-dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    return p


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """This rank's measurement (the process group is initialised)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = args.device == "cuda"
    device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(device)
    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = lookup(args.recipe)
    train_set, _, _ = datasets(recipe.data, synthetic=args.synthetic, data_dir=args.data_dir,
                               download=False,
                               augment=recipe.augment, seed=args.seed,
                               image_size=recipe.image_size)
    batch = args.batch_size or recipe.batch_size
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = recipe.build().to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if cuda else None)
    recorder = CommRecorder(world)
    recorder.attach(ddp)
    optimizer = make_optimizer(recipe.optimizer, ddp.parameters(), recipe.lr)
    loss_fn = loss_function(recipe)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed, drop_last=True)
    loader = DataLoader(train_set, batch_size=batch, sampler=sampler, drop_last=True)
    if len(loader) == 0:
        raise SystemExit(f"{args.recipe}: {len(train_set)} samples make no batch of {batch} "
                         f"per rank at {world} ranks")
    timer = PhaseTimer(cuda=cuda)
    step_s: list[float] = []
    phases: dict[str, list[float]] = {p: [] for p in PHASES}
    total, step, epoch = args.warmup + args.steps, 0, 0
    ddp.train()
    while step < total:
        sampler.set_epoch(epoch)
        it = iter(loader)
        while step < total:
            recorder.step_begin()
            timer.start()
            item = next(it, None)
            if item is None:
                break
            x, y = item
            timer.mark("data")
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            timer.mark("h2d")
            out = ddp(x)
            timer.mark("forward")
            loss = loss_fn(out, y)
            timer.mark("loss")
            loss.backward()
            recorder.backward_end()
            timer.mark("backward")
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            timer.mark("optimizer")
            step_phases, wall = timer.stop()
            recorder.step_end()
            if step >= args.warmup:
                step_s.append(wall)
                for p in PHASES:
                    phases[p].append(step_phases.get(p, 0.0))
            step += 1
        epoch += 1
    recorder.steps = recorder.steps[args.warmup:]  # as the step times: warm-up left out
    return {"rank": rank, "world_size": world, "batch_size": batch,
            "threads": torch.get_num_threads(), "step_s": step_s,
            "phases": {p: statistics.median(v) for p, v in phases.items() if v},
            "communication": recorder.summary(gradient_bytes(model)),
            "steps_comm": [{"communication_s": s["communication_s"], "exposed_s": s["exposed_s"]}
                           for s in recorder.steps]}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    rank = int(os.environ.get("RANK", 0))
    backend = "nccl" if args.device == "cuda" else "gloo"
    try:
        dist.init_process_group(backend)
        try:
            result = measure(args)
            result["finished"] = time.time()
            write_file(os.path.join(args.out, f"rank{rank}.json"), json.dumps(result))
        finally:
            dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - the launcher's caller reads this one line
        text = str(exc).strip().splitlines()
        line = text[0] if text else type(exc).__name__
        if not isinstance(exc, SystemExit):
            line = f"{type(exc).__name__}: {line}"
        write_file(os.path.join(args.out, f"rank{rank}.error"), line)
        raise
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
