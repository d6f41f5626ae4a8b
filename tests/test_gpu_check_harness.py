"""The CUDA check's harness (make test-gpu, .ci/gpu-check, tests/gpu/conftest.py) on the CPU:
without a CUDA device it says so in one line and exits 0; in a dry run (and when tests fail)
the conftest writes gpu-check.json with the device, each test's outcome and its figures."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # every test here starts a process or runs end to end

ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / "tests" / "gpu"


def _env(tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYERSCOPE_GPU_CHECK")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["LAYERSCOPE_GPU_CHECK"] = str(tmp_path / "gpu-check.json")
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    env.update(extra)
    return env


def test_without_cuda_one_line_and_exit_0(tmp_path):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: make test-gpu runs the check")
    proc = subprocess.run(["bash", str(ROOT / ".ci" / "gpu-check")], capture_output=True,
                          text=True, timeout=120, env=_env(tmp_path, PY=sys.executable))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "make test-gpu: no CUDA device (torch.cuda.is_available() is False); nothing run"]
    assert proc.stderr == ""
    assert not (tmp_path / "gpu-check.json").exists()


def _pytest(tmp_path: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-o", "addopts=", "-m", "cuda", *args], capture_output=True,
                          text=True, timeout=180, cwd=cwd,
                          env=_env(tmp_path, LAYERSCOPE_GPU_CHECK_DRYRUN="1"))


def test_dry_run_writes_the_figures_of_a_test(tmp_path):
    node = "tests/gpu/test_cli_cuda.py::test_llm_with_the_devices_own_gpu"
    proc = _pytest(tmp_path, ROOT, node)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "gpu-check.json").read_text())
    assert doc["kind"] == "gpu-check"
    assert {"name", "driver", "torch", "cuda", "cudnn", "dry_run"} <= set(doc["device"])
    assert doc["device"]["dry_run"] is True
    assert doc["summary"] == {"passed": 1}
    test = doc["tests"][node]
    assert test["outcome"] == "passed" and test["message"] is None
    assert test["figures"]["gpu_chosen"] == "h100-sxm"
    assert test["figures"]["peak_flops"] > 0


def test_a_failing_test_is_written_with_its_message(tmp_path):
    """The same conftest over two tests, one failing: both are in the JSON, the failure with its
    message, and pytest's exit status is kept."""
    here = tmp_path / "suite"
    here.mkdir()
    for name in ("conftest.py", "gpu_helpers.py"):
        shutil.copy(GPU / name, here / name)
    (here / "test_two.py").write_text(
        "def test_good(figures):\n    figures['x'] = 1.5\n\n"
        "def test_bad(figures):\n    figures['y'] = 2\n    assert 1 == 2, 'one is not two'\n")
    proc = _pytest(tmp_path, here, "test_two.py")
    assert proc.returncode == 1, proc.stdout[-3000:]
    doc = json.loads((tmp_path / "gpu-check.json").read_text())
    assert doc["exit_status"] == 1
    assert doc["summary"] == {"passed": 1, "failed": 1}
    good, bad = doc["tests"]["test_two.py::test_good"], doc["tests"]["test_two.py::test_bad"]
    assert good["outcome"] == "passed" and good["figures"] == {"x": 1.5}
    assert bad["outcome"] == "failed" and bad["figures"] == {"y": 2}
    assert "one is not two" in bad["message"]
