"""``watch()`` and ``layerscope run`` on a GPU training loop: CUDA events per phase, the
host-to-device copy, CUDA memory per phase, and AMP against float32 on a matmul-bound step."""
from __future__ import annotations

import json
import textwrap
import time

import pytest
from gpu_helpers import DRY_RUN, step_phase_sum, subprocess_cli

pytestmark = pytest.mark.cuda
DEVICE_PHASES = ("h2d", "forward", "loss", "backward", "optimizer")
# matmul-bound on a GPU (a step of ~10 ms there), small on the CPU of a dry run
WIDTH, BATCH = (256, 64) if DRY_RUN else (4096, 2048)
STEPS, WARMUP = 10, 3


def _mlp(device):
    import torch
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 10)).to(device)


class _Batches:
    """Four ready batches (no per-sample collation: the step stays GPU-bound)."""

    def __init__(self):
        import torch
        self.x = torch.randn(4, BATCH, WIDTH)
        self.y = torch.randint(0, 10, (4, BATCH))

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def _loader(device):
    import torch
    return torch.utils.data.DataLoader(_Batches(), batch_size=None,
                                       pin_memory=device == "cuda")


def _train(device, steps, autocast=None, memory=False, watched=True, alloc=0):
    """A plain training loop (as a user writes it) under ``watch()``; returns the Watch (or
    None) and the loop's own synchronised time per iteration (from the end of the one before,
    so the data wait is in it)."""
    import torch

    import layerscope
    model = _mlp(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    loader = _loader(device)
    own: list[float] = []

    def loop():
        done = 0
        t0 = time.perf_counter()
        while done < steps:
            for x, y in loader:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                with torch.autocast(device, dtype=autocast, enabled=autocast is not None):
                    out = model(x)
                    if alloc:  # a known allocation inside the forward phase
                        big = torch.ones(alloc // 4, device=device)
                        out = out + big[:1]
                        del big
                    loss = loss_fn(out.float(), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if device == "cuda":
                    torch.cuda.synchronize()
                now = time.perf_counter()
                own.append(now - t0)  # the data wait included, as in a step of watch's
                t0 = now
                done += 1
                if done == steps:
                    return

    if not watched:
        loop()
        return None, own
    with layerscope.watch(model, opt, warmup_steps=WARMUP, memory=memory) as w:
        loop()
    return w, own


def test_watch_cuda_events_match_a_synchronised_step(device, figures):
    w, own = _train(device, STEPS)
    r = w.report().to_dict()
    b = r["breakdown"]
    figures.update(breakdown=b, step_seconds=w.step_seconds, own_step_seconds=own,
                   step_phases=w.step_phases, cuda_used=w.cuda_used)
    assert b["steps"] == STEPS - WARMUP
    assert step_phase_sum(b["seconds"]) == pytest.approx(b["wall_s"], rel=0.1)
    if DRY_RUN:
        pytest.skip("dry run: no CUDA events, no host-to-device copy")
    assert w.cuda_used
    assert b["seconds"]["h2d"] > 0
    # the measured steps: watch's step (ended by a synchronisation) against the loop's own
    # synchronised iteration
    mine = sum(own[WARMUP:])
    figures["own_wall_s"] = mine
    assert b["wall_s"] == pytest.approx(mine, rel=0.1)
    # a GPU-bound step: the CUDA-event phases are the step less its data wait
    device_s = sum(b["seconds"][p] for p in DEVICE_PHASES)
    figures["device_phases_s"] = device_s
    assert device_s == pytest.approx(mine - b["seconds"]["data"], rel=0.1)


def test_amp_is_faster_than_float32_on_a_matmul_bound_step(device, figures):
    import statistics

    import torch
    medians = {}
    for name, dtype in (("float32", None), ("bfloat16", torch.bfloat16),
                        ("float16", torch.float16)):
        w, _ = _train(device, STEPS, autocast=dtype)
        medians[name] = statistics.median(w.step_seconds[WARMUP:])
    figures["step_median_s"] = medians
    figures["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
    if DRY_RUN:
        pytest.skip("dry run: autocast on the CPU need not be faster")
    figures["speedup_bf16"] = medians["float32"] / medians["bfloat16"]
    figures["speedup_fp16"] = medians["float32"] / medians["float16"]
    assert medians["bfloat16"] < medians["float32"]
    assert medians["float16"] < medians["float32"]


def test_watch_cuda_memory_per_phase(device, figures):
    import torch
    alloc = 256 * 2**20
    if DRY_RUN:
        w, _ = _train(device, 5, memory=True, alloc=alloc)
        figures["phase_memory"] = w.report().to_dict().get("phase_memory")
        pytest.skip("dry run: no CUDA memory statistics")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    _train(device, 5, watched=False, alloc=alloc)  # the same loop unwatched: its true peak
    peak = torch.cuda.max_memory_allocated()
    w, _ = _train(device, 5, memory=True, alloc=alloc)
    r = w.report().to_dict()
    rows = r["phase_memory"]
    figures.update(phase_memory=rows, unwatched_peak=peak, allocation=alloc,
                   peak_cuda_bytes=r.get("peak_cuda_bytes"))
    cuda_rows = {p: v["peak_cuda_bytes"] for p, v in rows.items() if "peak_cuda_bytes" in v}
    assert {"forward", "backward", "optimizer"} <= set(cuda_rows), rows
    assert all(v > 0 for v in cuda_rows.values())
    assert cuda_rows["forward"] >= alloc
    assert max(cuda_rows.values()) <= peak * 1.05  # no phase above the loop's real peak
    # the run's peak is at least every phase's (the per-phase resets must not hide it)
    assert r["peak_cuda_bytes"] >= max(cuda_rows.values()), (r["peak_cuda_bytes"], cuda_rows)


SCRIPT = textwrap.dedent("""\
    import sys
    import torch

    device = sys.argv[1]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.utils.data.TensorDataset(torch.randn(2048, 512), torch.randint(0, 10, (2048,)))
    loader = torch.utils.data.DataLoader(data, batch_size=128, shuffle=True,
                                         pin_memory=device == "cuda")
    for epoch in range(2):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    print("done")
    """)


def test_run_a_gpu_script(tmp_path, device, figures):
    script = tmp_path / "train_gpu.py"
    script.write_text(SCRIPT)
    out = tmp_path / "run.json"
    proc = subprocess_cli("run", "--warmup-steps", "3", "--memory", "-o", str(out),
                          str(script), device)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    b = r["breakdown"]
    figures.update(breakdown=b, phase_memory=r.get("phase_memory"),
                   peak_cuda_bytes=r.get("peak_cuda_bytes"))
    assert b["steps"] == 2 * 2048 // 128 - 3
    assert step_phase_sum(b["seconds"]) == pytest.approx(b["wall_s"], rel=0.1)
    if DRY_RUN:
        pytest.skip("dry run: no host-to-device copy or CUDA memory")
    assert b["seconds"]["h2d"] > 0
    cuda = [v.get("peak_cuda_bytes") for v in r["phase_memory"].values()]
    assert cuda and all(c and c > 0 for c in cuda), r["phase_memory"]
    assert r["peak_cuda_bytes"] and r["peak_cuda_bytes"] >= max(cuda)
