"""What CUDA's caching allocator and driver report around a measured step, beside the tracked
peak (``layerscope memory --measure --device cuda``, ``layerscope memory SCRIPT.py`` on a CUDA
model): the allocated and reserved peaks (``torch.cuda.max_memory_allocated`` /
``max_memory_reserved``), fragmentation (reserved - allocated: cached, not in use), what the
driver reports in use (``torch.cuda.mem_get_info``: total - free), and what the tracked storages
leave unexplained."""
from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from layerscope.core.records.memory import Reconciliation


@contextlib.contextmanager
def cuda_figures(device: torch.device, done: Callable[[dict[str, int]], None]):
    """Around a block on ``device``: reset the allocator's peaks, then give ``done`` the
    block's allocated and reserved peaks (``torch.cuda.max_memory_allocated`` / ``_reserved``)
    and the bytes the driver reports in use on the device (``mem_get_info``: total - free)."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    try:
        yield
    finally:
        torch.cuda.synchronize(device)
        figures = {"allocated_peak": int(torch.cuda.max_memory_allocated(device)),
                   "reserved_peak": int(torch.cuda.max_memory_reserved(device))}
        try:
            free, total = torch.cuda.mem_get_info(device)
            figures["driver_used"] = int(total - free)
        except RuntimeError:  # not every driver answers (some MIG set-ups)
            pass
        done(figures)


def fill_cuda(rec: Reconciliation, cuda: dict[str, int]) -> None:
    """Put ``cuda_figures``'s figures into ``rec`` and name what the tracked storages leave
    unexplained: the allocator's peak beyond the tracked peak (kernel workspaces, rounding to
    its blocks), then its cache (fragmentation), then what the driver holds beyond the cache
    (the CUDA context, cuBLAS/cuDNN handles, other processes' memory)."""
    rec.allocated_peak_bytes = cuda["allocated_peak"]
    rec.reserved_peak_bytes = cuda["reserved_peak"]
    rec.fragmentation_bytes = cuda["reserved_peak"] - cuda["allocated_peak"]
    rec.driver_used_bytes = cuda.get("driver_used")
    rec.cuda_unexplained_bytes = cuda["allocated_peak"] - rec.measured_peak_bytes
    rec.notes.append(
        f"CUDA: the caching allocator's peak ({cuda['allocated_peak']:,} bytes allocated) "
        f"minus the tracked peak is {rec.cuda_unexplained_bytes:,} bytes unexplained (kernel "
        "workspaces, the allocator's rounding, tensors made outside the step still alive); "
        f"reserved - allocated = {rec.fragmentation_bytes:,} bytes of fragmentation (cached, "
        "not in use)" + ("" if rec.driver_used_bytes is None else
                         f"; the driver reports {rec.driver_used_bytes:,} bytes in use on the "
                         f"device: {rec.driver_used_bytes - cuda['reserved_peak']:,} beyond "
                         "the reserved peak (the CUDA context, library handles, other "
                         "processes)"))
