"""What machine and software a result was measured on."""
from __future__ import annotations

import os
import platform
import sys
from functools import lru_cache
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@lru_cache(maxsize=1)
def environment() -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": None,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "gpu": None,
    }
    try:
        import torchvision

        env["torchvision"] = torchvision.__version__
    except ImportError:
        pass
    if env["cuda_available"]:
        env["gpu"] = torch.cuda.get_device_name(0)
    env["executable"] = sys.executable
    return env
