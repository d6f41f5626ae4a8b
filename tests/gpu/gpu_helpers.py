"""Helpers of the CUDA check: the CLI in this process or as ``python -m layerscope``, the
datasheet key of the device, and the dry-run switch."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from layerscope.core.phases import STEP_PHASES as DECLARED_PHASES

ROOT = Path(__file__).resolve().parents[2]
DRY_RUN = os.environ.get("LAYERSCOPE_GPU_CHECK_DRYRUN", "") not in ("", "0")
TIMEOUT = 90  # seconds a CLI subprocess may take: one hang must not eat the device time

# phases of a training step in the breakdown (core.phases: the named ones and other sum to the
# wall time); "communication" is the collectives' whole time, overlapped or not, so not one of them
STEP_PHASES = tuple(p.name for p in DECLARED_PHASES)


def cli(*argv: str) -> tuple[int, str, str]:
    """``layerscope ARGV`` in this process (torch imported once): exit code, stdout, stderr."""
    from layerscope.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def cli_json(tmp_path: Path, name: str, *argv: str) -> dict:
    """``layerscope ARGV -o tmp/NAME.json`` in this process; its JSON (fails with stderr)."""
    out = tmp_path / f"{name}.json"
    code, _, err = cli(*argv, "-o", str(out))
    assert code == 0, f"layerscope {' '.join(argv)} exited {code}: {err[-2000:]}"
    return json.loads(out.read_text())


def subprocess_cli(*argv: str, timeout: int = TIMEOUT, cwd: Path | None = None,
                   env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m layerscope ARGV`` (a fresh process: torchrun, scripts), with a timeout."""
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), environ.get("PYTHONPATH", "")) if p)
    environ.update(env or {})
    try:
        return subprocess.run([sys.executable, "-m", "layerscope", *argv], capture_output=True,
                              text=True, timeout=timeout, cwd=cwd, env=environ)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"layerscope {' '.join(argv)} took over {timeout} s: "
                    f"{(exc.stderr or b'')[-2000:]!r}")


def datasheet_key(name: str | None, memory_bytes: int | None = None) -> str | None:
    """layerscope's datasheet GPU (``layerscope.analysis.llm.GPUS``) for a CUDA device name as
    torch.cuda.get_device_name gives it, or None when layerscope has none for it."""
    if not name:
        return None
    n = name.lower()
    if "h200" in n:
        return "h200"
    if "h100" in n:
        return "h100-pcie" if "pcie" in n else "h100-sxm"  # "H100 80GB HBM3" is the SXM
    if "a100" in n:
        gb = (memory_bytes or 0) / 2**30
        return "a100-80gb" if ("80gb" in n or gb > 60) else "a100-40gb"
    if "4090" in n:
        return "rtx-4090"
    if n.endswith(" l4") or n == "l4" or "nvidia l4" in n:
        return "l4"
    return None


def step_phase_sum(seconds: dict) -> float:
    return sum(v for k, v in seconds.items() if k in STEP_PHASES)
