"""The CUDA check (``make test-gpu``): every test here is marked ``cuda`` and skipped without a
CUDA device. ``LAYERSCOPE_GPU_CHECK_DRYRUN=1`` runs them on the CPU instead (device ``cpu``
where they would use ``cuda``; assertions that only hold on a GPU are left out and say so), to
check the harness and the flags without a GPU.

At the end of the session every figure the tests measured (the ``figures`` fixture), each test's
outcome and failure message, and the device (name, driver, torch, CUDA and cuDNN versions) are
written as JSON to ``$LAYERSCOPE_GPU_CHECK`` (default ``gpu-check.json`` in the repository
root), also when tests fail.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gpu_helpers import DRY_RUN, ROOT

_FIGURES: dict[str, dict] = {}
_RESULTS: dict[str, dict] = {}
_STARTED = time.time()


def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    mine = [i for i in items if Path(str(i.fspath)).is_relative_to(here)]
    for item in mine:
        item.add_marker(pytest.mark.cuda)
    if mine and not DRY_RUN and not _cuda():
        skip = pytest.mark.skip(reason="no CUDA device (torch.cuda.is_available() is False)")
        for item in mine:
            item.add_marker(skip)


@pytest.fixture
def figures(request):
    """A dict the test fills with what it measured; written to gpu-check.json."""
    return _FIGURES.setdefault(request.node.nodeid, {})


@pytest.fixture
def device():
    """``cuda``, or ``cpu`` in a dry run."""
    return "cpu" if DRY_RUN else "cuda"


def pytest_runtest_logreport(report):
    if not Path(report.fspath).resolve().is_relative_to(Path(__file__).parent):
        return
    entry = _RESULTS.setdefault(report.nodeid, {"outcome": "passed", "duration_s": 0.0,
                                                "message": None})
    entry["duration_s"] += report.duration
    if report.skipped and report.when in ("setup", "call"):
        entry["outcome"] = "skipped"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        entry["message"] = reason
    elif report.failed:
        entry["outcome"] = "failed" if report.when == "call" else f"error ({report.when})"
        entry["message"] = (report.longreprtext or "")[-4000:]


def _driver() -> str | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def _device_info() -> dict:
    import torch
    info = {"dry_run": DRY_RUN, "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "python": platform.python_version(),
            "cuda_available": torch.cuda.is_available(), "driver": _driver(),
            "name": None, "capability": None, "memory_bytes": None, "device_count": 0}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(name=torch.cuda.get_device_name(0), capability=list(
            torch.cuda.get_device_capability(0)), memory_bytes=props.total_memory,
            multiprocessors=props.multi_processor_count, device_count=torch.cuda.device_count())
    return info


def pytest_sessionfinish(session, exitstatus):
    if not _RESULTS:  # no test of this folder ran (the normal suite deselects them)
        return
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller writes
        return
    path = Path(os.environ.get("LAYERSCOPE_GPU_CHECK") or ROOT / "gpu-check.json")
    tests = {}
    for nodeid, result in _RESULTS.items():
        tests[nodeid] = {**result, "figures": _FIGURES.get(nodeid, {})}
    counts: dict[str, int] = {}
    for t in tests.values():
        key = t["outcome"].split(" ")[0]
        counts[key] = counts.get(key, 0) + 1
    doc = {"kind": "gpu-check", "device": _device_info(), "exit_status": int(exitstatus),
           "wall_s": time.time() - _STARTED, "summary": counts, "argv": sys.argv, "tests": tests}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)
    print(f"\ngpu check: wrote {path} ({counts})", file=sys.stderr)
