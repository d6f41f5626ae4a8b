"""``train``, ``ablate`` (every variant, torch.compile included) and data-parallel training on
CUDA (``--nproc-per-node 1``: NCCL, ``cuda:LOCAL_RANK``, CUDA events in the communication
hook)."""
from __future__ import annotations

import json

import pytest
from gpu_helpers import DRY_RUN, cli_json, step_phase_sum, subprocess_cli

pytestmark = pytest.mark.cuda
RECIPE = "digits-cnn"  # offline, a few ms a step
VARIANTS_CUDA = "baseline,pin-memory,amp,cudnn-benchmark,channels-last,compile"
VARIANTS_CPU = "baseline,amp,channels-last,compile"  # pin-memory, cudnn-benchmark: CUDA only


def _check_breakdown(b: dict, figures: dict, prefix: str, device: str) -> None:
    """The phases sum to the measured steps' wall time (within 10%); data moved to the GPU
    took host-to-device time."""
    total = step_phase_sum(b["seconds"])
    figures[f"{prefix}phases_s"] = b["seconds"]
    figures[f"{prefix}wall_s"] = b["wall_s"]
    figures[f"{prefix}steps"] = b["steps"]
    assert b["steps"] > 0 and b["wall_s"] > 0
    assert total == pytest.approx(b["wall_s"], rel=0.1)
    assert all(v >= 0 for k, v in b["seconds"].items() if k != "other"), b["seconds"]
    assert b["seconds"]["forward"] > 0 and b["seconds"]["backward"] > 0
    if device == "cuda":
        assert b["seconds"]["h2d"] > 0, b["seconds"]


def test_train_on_cuda_phases_memory_and_flags(tmp_path, device, figures):
    import torch
    flags = ["--amp", "--channels-last"] + (["--pin-memory", "--cudnn-benchmark"]
                                            if device == "cuda" else [])
    d = cli_json(tmp_path, "train", "train", RECIPE, "--device", device, "--steps", "12",
                 "--warmup-steps", "4", "--synthetic", "--no-eval", "-q",
                 "--out", str(tmp_path / "run"), *flags)
    figures["flags"] = flags
    figures["config_device"] = d["config"]["device"]
    _check_breakdown(d["breakdown"], figures, "", device)
    assert d["config"]["device"] == device
    for flag in flags:
        assert d["config"][flag.removeprefix("--").replace("-", "_")] is True, flag
    figures["peak_cuda_bytes"] = d["peak_cuda_bytes"]
    figures["step_seconds"] = d["step_seconds"]
    figures["environment_gpu"] = d["environment"].get("gpu")
    if DRY_RUN:
        assert d["peak_cuda_bytes"] is None
        pytest.skip("dry run: no CUDA memory statistics")
    # the run happened in this process: its peak is at most this process's peak
    figures["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    assert 0 < d["peak_cuda_bytes"] <= torch.cuda.max_memory_allocated()


def test_ablate_every_variant(tmp_path, device, figures):
    variants = VARIANTS_CUDA if device == "cuda" else VARIANTS_CPU
    d = cli_json(tmp_path, "ablate", "ablate", RECIPE, "--device", device, "--steps", "12",
                 "--warmup-steps", "4", "--repeats", "1", "--synthetic", "--variants",
                 variants, "-q")
    rows = {v["variant"]: v for v in d["variants"]}
    figures["variants"] = {
        name: {"status": v["status"], "reason": v["reason"], "flags": v["flags"],
               "step_median_s": (v.get("step") or {}).get("median_s"),
               "phases_ms": v.get("phases_ms"), "speedup": v.get("speedup")}
        for name, v in rows.items()}
    assert set(rows) == set(variants.split(","))
    bad = {n: v["reason"] for n, v in rows.items() if v["status"] != "ok"}
    assert not bad, bad
    for name, v in rows.items():
        step = v["step"]["median_s"]
        phases = sum(v["phases_ms"].values()) / 1e3
        assert phases == pytest.approx(step, rel=0.1), (name, phases, step)
        for r in v["repeats"]:
            _check_breakdown(r, {}, "", device)


def test_train_data_parallel_one_process(tmp_path, device, figures):
    """torchrun with one process: NCCL on CUDA (distributed.py picks it from the device), the
    process on cuda:LOCAL_RANK, the gradient all-reduce timed by the communication hook."""
    out = tmp_path / "ddp.json"
    proc = subprocess_cli("train", RECIPE, "--nproc-per-node", "1", "--device", device,
                          "--steps", "8", "--warmup-steps", "2", "--synthetic", "--no-eval",
                          "-q", "--out", str(tmp_path / "run"), "-o", str(out), timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = json.loads(out.read_text())
    comm = d["communication"]
    figures.update(world_size=d["world_size"], communication=comm, ranks=d["ranks"],
                   peak_cuda_bytes=d["peak_cuda_bytes"], notes=d["notes"],
                   backend="nccl (the report does not name it; distributed.py picks nccl for "
                           "cuda)" if device == "cuda" else "gloo")
    assert d["world_size"] == 1 and len(d["ranks"]) == 1
    assert comm["buckets"] and comm["buckets"][0]["op"] == "all_reduce"
    assert comm["communication_s"] > 0 and comm["bytes_per_step"] > 0
    _check_breakdown(d["breakdown"], figures, "", device)
    if device == "cuda":
        assert d["peak_cuda_bytes"] and d["peak_cuda_bytes"] > 0
