"""The environment table every report shows (``layerscope env``, each HTML section's header).
A result's heading, key figures and row tables are its view's (``layerscope.views``)."""
from __future__ import annotations

from typing import Any


def environment_rows(env: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The environment table (``layerscope env``, every report's header). Keys an older report
    did not record are left out; a package recorded as None is shown as not installed."""
    from layerscope.core.environment import PACKAGES, gib

    env = env or {}
    if not env:
        return [("Environment", "not recorded")]
    cuda = env.get("cuda") or "none"
    if env.get("cuda") and env.get("cuda_available") is False:
        cuda += " (no GPU available)"
    cpu = env.get("cpu") or "-"
    if env.get("cores"):
        threads = env.get("torch_threads", "?")  # None: torch not loaded (the ONNX path)
        cpu += f" ({env['cores']} cores" + (f", {threads} torch threads)" if threads is not None
                                            else ")")
    gpus = env.get("gpus") or ([env["gpu"]] if env.get("gpu") else [])
    rows = [("layerscope", env["layerscope"])] if env.get("layerscope") else []
    rows.append(("CPU", cpu))
    if "ram_bytes" in env:
        rows.append(("RAM", gib(env["ram_bytes"]) if env["ram_bytes"] else "-"))
    rows.append(("GPU", ", ".join(gpus) or "none"))
    if env.get("os_name"):
        rows.append(("OS", f"{env['os_name']} ({env.get('os') or '-'})"))
    else:
        rows.append(("OS", env.get("os") or "-"))
    rows += [("Python", env.get("python") or "-"), ("torch", env.get("torch") or "-"),
             ("CUDA", cuda)]
    if "cudnn" in env:
        rows.append(("cuDNN", env["cudnn"] or "none"))
    rows += [(p, env[p] or "not installed") for p in PACKAGES if p in env]
    return rows


