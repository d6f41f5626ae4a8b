"""The dtypes a model's weights can be stored in and the datasheet GPUs the roofline bounds
use (peak dense FLOP/s per dtype, memory bandwidth and size), or a GPU described in a JSON file."""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import Any

from layerscope.core import values
from layerscope.core.errors import UserError
from layerscope.core.llm_records import (
    DTYPE_BYTES,
)

WEIGHT_DTYPES = tuple(DTYPE_BYTES)
_DTYPE_ALIASES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16",
                  "half": "fp16", "float8": "fp8", "float8_e4m3fn": "fp8"}


@dataclass(frozen=True)
class GPU:
    """Peak dense FLOP/s per dtype, memory bandwidth (bytes/s) and memory size (bytes)."""

    name: str
    bf16_flops: float
    bandwidth: float
    memory: int
    fp8_flops: float | None = None
    fp32_flops: float | None = None


# Vendor datasheet figures, dense (the datasheets' headline tensor figures are "with sparsity",
# twice these). H100 SXM / PCIe: NVIDIA H100 Tensor Core GPU datasheet (BF16 1,979 / 1,513
# TFLOPS sparse, FP8 3,958 / 3,026 sparse, FP32 67 / 51 TFLOPS, HBM3 3.35 TB/s, HBM2e 2 TB/s,
# 80 GB). H200 SXM: NVIDIA H200 datasheet (same tensor cores as H100 SXM, 4.8 TB/s, 141 GB).
# A100 SXM: NVIDIA A100 datasheet (BF16 312 TFLOPS dense, FP32 19.5, 40 GB HBM2 1,555 GB/s,
# 80 GB HBM2e 2,039 GB/s; no FP8). L4: NVIDIA L4 datasheet (BF16 242 TFLOPS sparse, FP8 485
# sparse, FP32 30.3, 300 GB/s, 24 GB). RTX 4090: NVIDIA Ada GPU architecture whitepaper,
# appendix A (BF16 with FP32 accumulate 165.2 dense, FP8 with FP32 accumulate 330.3 dense, FP32
# 82.6 TFLOPS, 1,008 GB/s, 24 GB GDDR6X).
T = 1e12
GPUS: dict[str, GPU] = {g.name: g for g in (
    GPU("h100-sxm", 989.4 * T, 3.35e12, 80 * 10**9, fp8_flops=1978.9 * T, fp32_flops=67 * T),
    GPU("h100-pcie", 756.5 * T, 2.0e12, 80 * 10**9, fp8_flops=1513 * T, fp32_flops=51 * T),
    GPU("h200", 989.4 * T, 4.8e12, 141 * 10**9, fp8_flops=1978.9 * T, fp32_flops=67 * T),
    GPU("a100-40gb", 312 * T, 1.555e12, 40 * 10**9, fp32_flops=19.5 * T),
    GPU("a100-80gb", 312 * T, 2.039e12, 80 * 10**9, fp32_flops=19.5 * T),
    GPU("l4", 121 * T, 300e9, 24 * 10**9, fp8_flops=242.5 * T, fp32_flops=30.3 * T),
    GPU("rtx-4090", 165.2 * T, 1.008e12, 24 * 10**9, fp8_flops=330.3 * T, fp32_flops=82.6 * T),
)}
_GPU_ALIASES = {"h100": "h100-sxm", "a100": "a100-80gb", "4090": "rtx-4090"}
_GPU_FILE_KEYS = {"name": str, "bf16_flops": float, "bandwidth_bytes_per_s": float,
                  "memory_bytes": int, "fp8_flops": float, "fp32_flops": float}


def dtype_name(value: Any, name: str = "dtype") -> str:
    """'bf16', 'bfloat16', ... -> one of WEIGHT_DTYPES."""
    text = str(value).strip().lower().removeprefix("torch.")
    text = _DTYPE_ALIASES.get(text, text)
    if text not in DTYPE_BYTES:
        raise UserError(f"{name} must be one of {', '.join(WEIGHT_DTYPES)}, got {value!r}",
                        arguments=name)
    return text


def nbytes(elements: int, dtype: str) -> int:
    """Bytes of ``elements`` values stored as ``dtype`` (int4: two per byte, rounded up)."""
    return math.ceil(elements * DTYPE_BYTES[dtype])


# ---------------------------------------------------------------- GPUs
def gpu_spec(spec: str | GPU) -> GPU:
    """A built-in GPU by name (``h100-sxm``, ``a100-80gb``, ...) or a JSON file with ``name``,
    ``bf16_flops``, ``bandwidth_bytes_per_s``, ``memory_bytes`` and optionally ``fp8_flops``,
    ``fp32_flops``."""
    if isinstance(spec, GPU):
        return spec
    text = str(spec).strip()
    key = _GPU_ALIASES.get(text.lower().replace(" ", "-"), text.lower().replace(" ", "-"))
    if key in GPUS:
        return GPUS[key]
    if not text.lower().endswith(".json"):
        raise _gpu_error(f"gpu: unknown GPU {text!r}: use one of {', '.join(GPUS)} or a JSON "
                        "file (name, bf16_flops, bandwidth_bytes_per_s, memory_bytes)")
    return _gpu_file(text)


# an error about the ``gpu`` argument (the CLI shows --gpu)
_gpu_error = functools.partial(UserError, arguments="gpu")


def _gpu_file(path: str) -> GPU:
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except FileNotFoundError:
        raise _gpu_error(f"gpu {path}: no such file") from None
    except IsADirectoryError:
        raise _gpu_error(f"gpu {path}: is a directory, not a JSON file") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise _gpu_error(f"gpu {path}: not a JSON file") from None
    except OSError as exc:
        raise _gpu_error(f"gpu {path}: cannot read it ({exc.strerror})") from None
    if not isinstance(d, dict):
        raise _gpu_error(f"gpu {path}: expected a JSON object with name, bf16_flops, "
                        "bandwidth_bytes_per_s, memory_bytes")
    unknown = sorted(set(d) - set(_GPU_FILE_KEYS))
    if unknown:
        raise _gpu_error(f"gpu {path}: unknown key {unknown[0]!r}; the keys are "
                        f"{', '.join(_GPU_FILE_KEYS)}")
    for key in ("bf16_flops", "bandwidth_bytes_per_s", "memory_bytes"):
        if key not in d:
            raise _gpu_error(f"gpu {path}: {key} is missing")
    name = d.get("name", path)
    if not isinstance(name, str) or not name.strip():
        raise _gpu_error(f"gpu {path}: name must be a non-empty string")
    got = {k: values.finite_positive_float(d[k], f"gpu {path}: {k}")
           for k in ("bf16_flops", "bandwidth_bytes_per_s", "fp8_flops", "fp32_flops")
           if d.get(k) is not None}
    memory = values.byte_size(d["memory_bytes"], f"gpu {path}: memory_bytes")
    return GPU(name.strip(), got["bf16_flops"], got["bandwidth_bytes_per_s"], memory,
               fp8_flops=got.get("fp8_flops"), fp32_flops=got.get("fp32_flops"))


def peak_flops(gpu: GPU, dtype: str) -> tuple[float, str | None]:
    """The dense peak for arithmetic in ``dtype``, and a note when another peak stands in."""
    if dtype == "fp8":
        if gpu.fp8_flops:
            return gpu.fp8_flops, None
        return gpu.bf16_flops, f"{gpu.name} has no FP8 tensor cores: the bf16 peak is used"
    if dtype == "fp32":
        if gpu.fp32_flops:
            return gpu.fp32_flops, None
        return gpu.bf16_flops, f"{gpu.name}: no fp32 peak given; the bf16 peak is used"
    if dtype == "int4":
        return gpu.bf16_flops, ("int4 weights are dequantised to bf16 for the arithmetic "
                                "(weight-only quantisation): the bf16 peak is used")
    return gpu.bf16_flops, None
