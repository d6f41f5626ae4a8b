"""What makes two timed results unfair to compare: a different machine, thread count, torch,
device, batch size, or a machine much busier on one side (the ``noise`` section's load
average). One line each; ``layerscope diff`` names them at the top."""
from __future__ import annotations

from typing import Any

from layerscope.analysis.diff.measures import Timed

# 1-minute load averages further apart than this: the machine was busier on one side
LOAD_APART = 1.0


def _load(result: Any) -> tuple[float | None, bool | None, int | None]:
    noise = getattr(result, "noise", None) or {}
    load = noise.get("loadavg")
    return (load[0] if load else None), noise.get("oversubscribed"), noise.get("threads")


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
    la, oa, ta = _load(base)
    lb, ob, tnb = _load(new)
    differ("torch threads", ta or ea.get("torch_threads"), tnb or eb.get("torch_threads"))
    differ("device", tb.device, tn.device)
    differ("batch size", tb.batch, tn.batch)
    if la is not None and lb is not None and (abs(la - lb) > LOAD_APART or oa != ob):
        busy = " (oversubscribed on one side)" if oa != ob and None not in (oa, ob) else ""
        out.append(f"1-minute load average: {la:g} vs {lb:g}{busy}")
    return out
