"""profile --kernels on CUDA: every device kernel of the profiled window lands in a module row
(the rows' kernel time is the window's), backward kernels included, and each step's device busy
and idle times add up to its wall time. In a dry run (CPU) the CPU-side join is checked and the
device figures are absent."""
from __future__ import annotations

import json

import pytest
from gpu_helpers import DRY_RUN, cli, cli_json

pytestmark = pytest.mark.cuda
MODEL = "resnet20"  # cuDNN convolutions, batch norms, a linear: many short kernels
UNATTRIBUTED = "(unattributed)"
OUTSIDE = "(outside modules)"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_profile_kernels_attributes_every_kernel(tmp_path, device, figures):
    d = cli_json(tmp_path, "kernels", "profile", MODEL, "--kernels", "--backward",
                 "--device", device, "--runs", "3", "--warmup", "2", "--no-roofline", "-q")
    _check_window(d["kernels"], device, figures)


# a CNN trained with SGD, in the shape of pytorch/examples' mnist (the device its argument)
SCRIPT = """\
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F

device = sys.argv[1]
model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.Flatten(), nn.Linear(8 * 28 * 28, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 1, 28, 28, device=device), torch.randint(0, 10, (64,), device=device)
for _ in range(6):
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()
"""


def test_run_kernels_attributes_every_kernel(tmp_path, device, figures):
    """run --kernels on the user's script: the same window, found at its optimizer's steps."""
    (tmp_path / "mnist.py").write_text(SCRIPT)
    out = tmp_path / "run-kernels.json"
    code, _, err = cli("run", "--kernels", "-o", str(out), str(tmp_path / "mnist.py"), device)
    assert code == 0, err[-2000:]
    d = json.loads(out.read_text())
    assert d["kernels"]["steps"] == 3
    _check_window(d["kernels"], device, figures)


def _check_window(k, device, figures):
    rows, steps = k["rows"], k["per_step"]
    wall = sum(s["wall_s"] for s in steps)
    figures.update(device=k["device"], steps=k["steps"], window_wall_s=wall,
                   short_kernel_us=k["short_kernel_us"], note=k.get("note"),
                   per_step=steps,
                   rows=[{f: r.get(f) for f in ("module", "phase", "cpu_ops", "cpu_self_s",
                                                "kernels", "kernel_s", "launch_s",
                                                "short_kernels")} for r in rows])
    assert k["device"] == device and k["steps"] == len(steps) >= 1 and k["backward"]
    # the CPU join: every op in one row, so the rows' op self time is the steps'
    assert sum(r["cpu_ops"] for r in rows) == sum(s["cpu_ops"] for s in steps) > 0
    assert sum(r["cpu_self_s"] for r in rows) == pytest.approx(
        sum(s["cpu_self_s"] for s in steps), rel=1e-6)
    phases = {r["phase"] for r in rows if r["module"] not in (OUTSIDE, UNATTRIBUTED)}
    assert phases == {"forward", "backward"}, rows
    if DRY_RUN:
        assert k["note"] == "no device kernels (CPU run)"
        assert all(r.get("kernels") is None for r in rows)
        return  # the device figures below exist on a GPU only
    window_kernel_s = sum(s["kernel_s"] for s in steps)
    attributed = sum(r["kernel_s"] for r in rows if r["module"] != UNATTRIBUTED)
    rows_kernel_s = sum(r["kernel_s"] or 0.0 for r in rows)
    busy = sum(s["busy_s"] for s in steps)
    idle = sum(s["idle_host_s"] + s["idle_other_s"] for s in steps)
    figures.update(window_kernel_s=window_kernel_s, attributed_kernel_s=attributed,
                   rows_kernel_s=rows_kernel_s, busy_s=busy, idle_s=idle,
                   kernels=sum(s["kernels"] for s in steps),
                   launch_s=sum(r["launch_s"] or 0.0 for r in rows),
                   backward_kernel_s=sum(r["kernel_s"] or 0.0 for r in rows
                                         if r["phase"] == "backward"))
    assert window_kernel_s > 0
    # every kernel attributed: the rows sum to the window's kernel time, the unknown rest < 1%
    assert rows_kernel_s == pytest.approx(window_kernel_s, rel=0.01)
    assert attributed == pytest.approx(window_kernel_s, rel=0.01)
    # backward kernels belong to the modules whose forward made them
    convs_back = [r for r in rows if r["phase"] == "backward" and r["type"] == "Conv2d"]
    assert convs_back and all(r["kernels"] > 0 for r in convs_back), convs_back
    # the device's time adds up: busy + idle = the window's wall
    assert busy + idle == pytest.approx(wall, rel=0.05)
    for s in steps:
        assert 0 < s["busy_s"] <= s["wall_s"] * 1.0001
