"""What machine and software a result was measured on: ``layerscope env`` prints it, and every
report carries it in its header (JSON ``environment``, the HTML environment table)."""
from __future__ import annotations

import ast
import contextlib
import importlib.metadata
import importlib.util
import os
import platform
import sys
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from layerscope.core.version import __version__


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_bytes() -> int | None:
    """Physical memory: MemTotal of /proc/meminfo (kB), else sysconf pages x page size."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _os_name() -> str:
    """The distribution's name where there is one (Debian GNU/Linux 12 (bookworm)), else the
    system and release (Darwin 23.1.0, Windows 10)."""
    try:
        return platform.freedesktop_os_release()["PRETTY_NAME"]
    except (OSError, KeyError, AttributeError):
        pass
    if platform.system() == "Darwin" and platform.mac_ver()[0]:
        return f"macOS {platform.mac_ver()[0]}"
    return f"{platform.system()} {platform.release()}".strip()


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cudnn_version(v: int | None) -> str | None:
    """torch reports cuDNN as one integer: major*10000 + minor*100 + patch from cuDNN 9
    (92400 = 9.24.0), major*1000 + minor*100 + patch before (8902 = 8.9.2)."""
    if not v:
        return None
    if v >= 90000:
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


# Packages whose versions change results (analysis, export, ONNX runtime); None when absent.
PACKAGES = ("torchvision", "numpy", "onnx", "onnxruntime", "onnxscript")


@lru_cache(maxsize=2)
def environment(with_torch: bool = True) -> dict[str, Any]:
    """The machine and the software versions, probed once per process.

    ``with_torch=False`` (the ONNX path, which never loads PyTorch): torch's version is read
    from its package metadata and what only a loaded torch can tell (its threads, CUDA, cuDNN,
    GPUs) is None, unless torch is loaded already, when it is asked as usual."""
    if not with_torch and "torch" not in sys.modules:
        return _without_torch()
    try:
        import torch
    except ImportError:  # the ONNX path runs without PyTorch
        return _without_torch()

    env: dict[str, Any] = {
        "layerscope": __version__,
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "ram_bytes": _ram_bytes(),
        "os": platform.platform(),
        "os_name": _os_name(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": None,
        "cuda_available": torch.cuda.is_available(),
        "gpu": None,
        "gpus": [],
    }
    for package in PACKAGES:
        env[package] = _version(package)
    # torch.backends.cudnn's functions carry no annotations (third-party, untyped)
    if torch.backends.cudnn.is_available():  # type: ignore[no-untyped-call]
        env["cudnn"] = _cudnn_version(
            torch.backends.cudnn.version())  # type: ignore[no-untyped-call]
    if env["cuda_available"]:
        env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        env["gpu"] = env["gpus"][0]
    env["executable"] = sys.executable
    return env


def with_load(load: Sequence[float] | None) -> dict[str, Any]:
    """``environment()``, copied, with the load averages read when a run started
    (``core.noise.read_machine``: train and run results, which have no ``noise`` section):
    ``diff`` names two runs whose machines were busy apart."""
    env = dict(environment())
    env["loadavg"] = list(load) if load is not None else None
    return env


def _without_torch() -> dict[str, Any]:
    """torch's facts without loading it: its version and CUDA build as ``torch.version`` states
    them (None where torch is not installed); its threads and the GPUs unknown (CUDA is
    reported unavailable only where torch is not installed)."""
    version, cuda = _torch_build()
    env: dict[str, Any] = {"layerscope": __version__,
                           "cpu": _cpu_model(), "cores": os.cpu_count(), "torch_threads": None,
                           "ram_bytes": _ram_bytes(), "os": platform.platform(),
                           "os_name": _os_name(), "python": platform.python_version(),
                           "torch": version, "cuda": cuda, "cudnn": None,
                           "cuda_available": None if version else False,
                           "gpu": None, "gpus": []}
    env.update({package: _version(package) for package in PACKAGES})
    env["executable"] = sys.executable
    return env


def _torch_build() -> tuple[str | None, str | None]:
    """``torch.__version__`` and ``torch.version.cuda`` read from the installed
    ``torch/version.py`` (plain assignments) without importing torch; the package metadata's
    version where that file cannot be read; (None, None) where torch is not installed."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None, None
    values: dict[str, Any] = {}
    try:
        path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if isinstance(node, ast.Assign):
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                target, value = node.target, node.value
            else:
                continue
            if isinstance(target, ast.Name):
                with contextlib.suppress(ValueError, TypeError):  # not a literal
                    values[target.id] = ast.literal_eval(value)
    except (OSError, SyntaxError, IndexError):
        pass
    version = values.get("__version__")
    cuda = values.get("cuda")
    return (version if isinstance(version, str) else _version("torch"),
            cuda if isinstance(cuda, str) else None)


def gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB"
