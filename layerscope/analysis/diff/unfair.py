"""What makes two timed results unfair to compare: a different machine, thread count, torch,
device, batch size, or a machine much busier on one side (the ``noise`` section's load
average). One line each; ``layerscope diff`` names them at the top."""
from __future__ import annotations

from typing import Any

from layerscope.analysis.diff.measures import Timed

# 1-minute load averages further apart than this: the machine was busier on one side
LOAD_APART = 1.0
# a run's batch size is its mean samples per step (an epoch's last partial batch lowers it):
# two such means count as different batch sizes when further apart than this share
BATCH_APART = 0.05


def _load(result: Any) -> tuple[float | None, bool | None, int | None]:
    noise = getattr(result, "noise", None) or {}
    # a profile's noise section; a train or run result's environment (read when it started)
    load = noise.get("loadavg") or (getattr(result, "environment", None) or {}).get("loadavg")
    return (load[0] if load else None), noise.get("oversubscribed"), noise.get("threads")


def threads_of(result: Any, t: Timed) -> int | None:
    """The torch threads a result ran with: its noise section's, its settings', else its
    environment's."""
    return _load(result)[2] or t.threads or (getattr(result, "environment", None) or {}).get(
        "torch_threads")


def batch_differs(a: float | None, b: float | None) -> bool:
    """Two batch sizes differ: exactly for whole numbers, beyond ``BATCH_APART`` for a run's
    mean samples per step."""
    if a is None or b is None:
        return False
    if isinstance(a, int) and isinstance(b, int):
        return a != b
    return abs(a - b) > BATCH_APART * max(a, b)


def unfair(base: Any, new: Any, tb: Timed, tn: Timed) -> list[str]:
    """The differences between the base result (one baseline file) and the new one."""
    out: list[str] = []
    ea, eb = base.environment or {}, new.environment or {}

    def differ(label: str, a: Any, b: Any) -> None:
        if a is not None and b is not None and a != b:
            out.append(f"{label}: {a} vs {b}")

    differ("CPU", ea.get("cpu"), eb.get("cpu"))
    differ("cores", ea.get("cores"), eb.get("cores"))
    differ("GPU", ea.get("gpu"), eb.get("gpu"))
    differ("torch", ea.get("torch"), eb.get("torch"))
    la, oa, _ = _load(base)
    lb, ob, _ = _load(new)
    differ("torch threads", threads_of(base, tb), threads_of(new, tn))
    differ("device", tb.device, tn.device)
    if batch_differs(tb.batch, tn.batch):
        out.append(f"batch size: {tb.batch:g} vs {tn.batch:g}")
    if la is not None and lb is not None and (abs(la - lb) > LOAD_APART or oa != ob):
        busy = " (oversubscribed on one side)" if oa != ob and None not in (oa, ob) else ""
        out.append(f"1-minute load average: {la:g} vs {lb:g}{busy}")
    return out
