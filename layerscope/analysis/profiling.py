"""``layerscope.profile``: measured latency per layer (PyTorch, ``runtime.py``) or per node
(an ONNX file, with onnxruntime: ``ort_profile.py``), routed by ``frontends.detect`` for the API
and the CLI alike."""
from __future__ import annotations

from typing import Any

from layerscope.core.errors import UserError
from layerscope.frontends.detect import detect


def profile(model: Any, inputs: Any = None, *, kwargs: dict[str, Any] | None = None,
            batch_size: int | None = None, device: str = "cpu", threads: int | None = None,
            runs: int | None = None, min_time: float | None = None, warmup: int = 5,
            depth: int | None = None, backward: bool = False, dtype: Any = None,
            roofline: bool = True, progress: Any = None, optimization: str = "disabled",
            functions: bool = False, kernels: bool = False, nvtx: bool = False,
            **testing: Any):
    """``runtime.profile``; an ONNX file is profiled on the CPU with onnxruntime (``optimization``:
    its graph optimisation level, for ONNX models only; a fixed count of runs: no ``min_time``)."""
    ref = detect(model)
    if ref.is_onnx:
        from layerscope.analysis.ort_profile import profile_onnx

        model = ref.spec  # a pathlib.Path as its text
        if (device != "cpu" or backward or depth is not None or dtype or kwargs or functions
                or kernels or nvtx):
            raise UserError("ONNX models are profiled with onnxruntime on the CPU: device, "
                            "backward, depth, dtype, functions, kernels and nvtx do not apply",
                            arguments=("device", "backward", "depth", "dtype", "functions",
                                       "kernels", "nvtx"))
        return profile_onnx(model, inputs, batch_size=batch_size, runs=runs, warmup=warmup,
                            threads=threads, optimization=optimization, roofline=roofline,
                            progress=progress)
    from layerscope.analysis.runtime import profile as profile_torch

    return profile_torch(model, inputs, kwargs=kwargs, batch_size=batch_size, device=device,
                         threads=threads, runs=runs, min_time=min_time, warmup=warmup,
                         depth=depth, backward=backward, dtype=dtype, roofline=roofline,
                         progress=progress, functions=functions, kernels=kernels,
                         nvtx=nvtx, **testing)
