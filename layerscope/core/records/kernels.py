"""``profile --kernels``: a short torch.profiler window joined to modules (the ``kernels``
section of a profile report; analysis/kernels.py fills it).

Every CPU op of the window lands in exactly one row: the innermost module whose forward was
running, or, for a backward op, the module of the forward op that made its autograd node; what
ran in no module is the "(outside modules)" row, and device work whose launching op is unknown
the "(unattributed)" row. So the rows' CPU self times sum to the window's, and on CUDA their
kernel times to the window's kernel time."""
from __future__ import annotations

from dataclasses import dataclass, field

from layerscope.core.document import DictRecord, omit_none

OUTSIDE = "(outside modules)"
UNATTRIBUTED = "(unattributed)"
SHORT_KERNEL_US = 10.0  # a kernel shorter than this is "short": its launch may cost more
_COUNT = {"minimum": 0}


@dataclass(eq=False)
class KernelRow(DictRecord):
    """One module in one phase, summed over the window's steps."""

    module: str = field(metadata={"description": "qualified module name, (root), "
                                                 f"{OUTSIDE} or {UNATTRIBUTED}"})
    type: str = field(metadata={"description": "the module's class; empty for the others"})
    phase: str = field(metadata={
        "schema": {"enum": ["forward", "backward", "other"]},
        "description": "other: ops in no module outside the backward (data, loss, optimizer, "
                       "gradient seeds), and unattributed device time"})
    cpu_ops: int = field(metadata={**_COUNT, "description": "CPU op events (all nesting "
                                                             "levels)"})
    cpu_self_s: float = field(metadata={"description": "the ops' self time (children "
                                                       "excluded)"})
    kernels: int | None = field(default=None, metadata={
        **_COUNT, "description": "device activities (kernels, copies, sets) its ops launched; "
                                 "null on a CPU run"})
    kernel_s: float | None = field(default=None, metadata={
        "description": "their summed device time; null on a CPU run"})
    launch_s: float | None = field(default=None, metadata={
        "description": "the CUDA runtime calls that enqueued them (cudaLaunchKernel, "
                       "cudaMemcpyAsync, ...); null on a CPU run"})
    short_kernels: int | None = field(default=None, metadata={
        **_COUNT, "description": "of the kernels, those shorter than short_kernel_us"})


@dataclass(eq=False)
class KernelStep(DictRecord):
    """One step of the window: its wall time and, on CUDA, how the device spent it
    (busy + idle_host_s + idle_other_s = wall_s)."""

    step: int = field(metadata=_COUNT)
    wall_s: float
    cpu_ops: int = field(metadata=_COUNT)
    cpu_self_s: float
    kernels: int | None = None
    kernel_s: float | None = None
    busy_s: float | None = field(default=None, metadata={
        "description": "the union of the device activities' intervals within the step"})
    idle_host_s: float | None = field(default=None, metadata={
        "description": "device idle before the next kernel's launch call had returned: "
                       "waiting on the host"})
    idle_other_s: float | None = field(default=None, metadata={
        "description": "the rest of the idle time (after the last kernel, or with the next "
                       "kernel already launched)"})


@dataclass(eq=False)
class KernelBreakdown(DictRecord):
    """The window: its steps (profile: a forward, plus a backward with ``backward``; train: whole
    training steps), rows per (module, phase) summed over them, and each step's figures."""

    steps: int = field(metadata=_COUNT)
    device: str
    backward: bool
    short_kernel_us: float
    rows: list[KernelRow]
    per_step: list[KernelStep]
    note: str | None = field(default=None, metadata=omit_none(
        description="why there are no device figures (a CPU run)"))
