"""Memory on CUDA: ``layerscope memory --measure --device cuda`` (the tracked peak against the
static one, the caching allocator's and the driver's figures in the reconciliation), and a real
CUDA out-of-memory error under ``run --memory-limit`` (the post-mortem, the script's own exit
code and traceback, the allocator's snapshot file)."""
from __future__ import annotations

import json
import textwrap

import pytest
from gpu_helpers import DRY_RUN, cli_json, subprocess_cli

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_memory_measured_on_cuda_matches_the_static_peak(tmp_path, device, mode, figures):
    d = cli_json(tmp_path, f"memory-{mode}", "memory", "resnet18", "--batch-size", "8",
                 "--mode", mode, "--measure", "--device", device)
    rec = d["reconciliation"]
    figures.update(peak_bytes=d["peak_bytes"], peak_phase=d["peak_phase"],
                   measured_peak_bytes=d.get("measured_peak_bytes"), reconciliation=rec)
    assert sum(r["bytes"] for r in d["by_module_kind"]) == d["peak_bytes"]
    measured = d["measured_peak_bytes"]
    assert abs(measured - d["peak_bytes"]) <= 0.05 * d["peak_bytes"], (measured, d["peak_bytes"])
    if DRY_RUN:
        return
    # the allocator holds at least what the tracked storages held; the cache at least that
    assert rec["allocated_peak_bytes"] >= 0.95 * measured
    assert rec["reserved_peak_bytes"] >= rec["allocated_peak_bytes"]
    assert rec["fragmentation_bytes"] == rec["reserved_peak_bytes"] - rec["allocated_peak_bytes"]
    assert rec["driver_used_bytes"] >= rec["reserved_peak_bytes"]


OOM_SCRIPT = """
import sys
import torch
device = sys.argv[1]
model = torch.nn.Linear(256, 256).to(device)
x = torch.zeros(64, 256, device=device)
model(x).sum().backward()  # one step
print("before the allocation")
total = torch.cuda.get_device_properties(0).total_memory if device == "cuda" else 2**40
huge = torch.empty(2 * total, dtype=torch.uint8, device=device)  # more than the device has
print("not reached")
"""


def test_a_real_cuda_out_of_memory_error_leaves_a_post_mortem(tmp_path, device, figures):
    if DRY_RUN:
        pytest.skip("dry run: a real out-of-memory error needs the device")
    script = tmp_path / "oom.py"
    script.write_text(textwrap.dedent(OOM_SCRIPT))
    out = tmp_path / "run.json"
    # a limit above the device's memory: only the device's own error can end the run
    p = subprocess_cli("run", "--memory-limit", "10TB", "-o", str(out), "--", "python",
                       str(script), device, cwd=tmp_path)
    figures.update(exit_code=p.returncode, stderr_tail=p.stderr[-1500:])
    assert p.returncode == 1, p.stderr[-2000:]
    assert p.stdout == "before the allocation\n"
    assert "OutOfMemoryError" in p.stderr and "Traceback" in p.stderr
    d = json.loads(out.read_text())
    pm = d["post_mortem"]
    figures["post_mortem"] = pm
    assert "OutOfMemoryError" in pm["error"]
    assert pm["live_bytes"] == sum(r["bytes"] for r in pm["by_module_kind"]) > 0
    assert pm["asked_bytes"] is None or pm["asked_bytes"] > 10**9
    snapshot = tmp_path / "memory_snapshot.pickle"
    figures["snapshot_bytes"] = snapshot.stat().st_size if snapshot.exists() else None
    assert snapshot.exists() and snapshot.stat().st_size > 0
