"""Memory on CUDA: ``layerscope memory --measure --device cuda`` (the tracked peak against the
static one, the caching allocator's and the driver's figures in the reconciliation), and a real
CUDA out-of-memory error under ``run`` with and without ``--memory-limit`` (the post-mortem, the
script's own exit code and traceback, the allocator's snapshot file)."""
from __future__ import annotations

import json
import subprocess
import sys
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


def _traceback(stderr: str) -> tuple[list[str], str]:
    """The first traceback's lines before its error line, and the error's type."""
    lines = stderr.splitlines()
    start = lines.index("Traceback (most recent call last):")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    return lines[start:end], lines[end].split(":")[0]


@pytest.mark.parametrize("limit", ["10TB", None], ids=["memory-limit", "no-limit"])
def test_a_real_cuda_out_of_memory_error_leaves_a_post_mortem(tmp_path, device, figures, limit):
    if DRY_RUN:
        pytest.skip("dry run: a real out-of-memory error needs the device")
    script = tmp_path / "oom.py"
    script.write_text(textwrap.dedent(OOM_SCRIPT))
    out = tmp_path / "run.json"
    bare = subprocess.run([sys.executable, str(script), device], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    # a limit above the device's memory: only the device's own error can end the run;
    # without one nothing is tracked
    p = subprocess_cli("run", *(["--memory-limit", limit] if limit else []), "-o", str(out),
                       "--", "python", str(script), device, cwd=tmp_path)
    figures.update(exit_code=p.returncode, stderr_tail=p.stderr[-1500:])
    assert p.returncode == bare.returncode == 1, p.stderr[-2000:]
    assert p.stdout == bare.stdout == "before the allocation\n"
    # the bare script's traceback: the same frames (the guard's own and torch's around it left
    # out), the same error (its message's figures are the process's own)
    assert _traceback(p.stderr) == _traceback(bare.stderr)
    assert "OutOfMemoryError" in _traceback(p.stderr)[1]
    d = json.loads(out.read_text())
    pm = d["post_mortem"]
    figures["post_mortem"] = pm
    assert "OutOfMemoryError" in pm["error"]
    if limit:
        assert pm["live_bytes"] == sum(r["bytes"] for r in pm["by_module_kind"]) > 0
    else:  # nothing tracked: the line says how to see the live set
        assert pm["live_bytes"] is None and pm["by_module_kind"] == []
        assert "tracked only with --memory-limit SIZE" in p.stderr
    assert pm["asked_bytes"] is None or pm["asked_bytes"] > 10**9
    snapshot = tmp_path / "memory_snapshot.pickle"
    figures["snapshot_bytes"] = snapshot.stat().st_size if snapshot.exists() else None
    assert snapshot.exists() and snapshot.stat().st_size > 0
