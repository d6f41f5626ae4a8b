"""Out-of-memory errors a run ends with: recognising one (CUDA, ``MemoryError``, torch's CPU
allocator), the bytes it asked and where it was raised, the post-mortem of one raised without
``--memory-limit``, the CUDA allocator's snapshot, and the note for a refusal a script caught.
The guard that raises them under ``--memory-limit``: ``memory_limit.LimitGuard``."""
from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn as nn

_ASKED = ("tried to allocate", "Tried to allocate")
_CPU_OOM = "DefaultCPUAllocator: can't allocate memory"


def is_out_of_memory(exc: BaseException) -> bool:
    """A real allocation failure: ``torch.OutOfMemoryError`` (CUDA), ``MemoryError``, or the
    ``RuntimeError`` torch's CPU allocator raises."""
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(exc, RuntimeError) and _CPU_OOM in str(exc))


def error_name(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}".replace("builtins.", "")


def out_of_memory_in(exc: BaseException | None) -> BaseException | None:
    """The real out-of-memory error ``exc`` is, or has in its cause/context chain; None."""
    for _ in range(32):
        if exc is None or is_out_of_memory(exc):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def where_failed(exc: BaseException) -> tuple[str, str]:
    """(phase, module) of an error, read from its traceback once it was raised (nothing is
    tracked before): the innermost of ``optimizer.step()`` ("optimizer"), the autograd
    engine ("backward") and a module's call ("forward", "loss" for a loss module; the
    module named from the outermost module called, "" for that one); "other" outside them."""
    from torch.nn.modules.loss import _Loss

    sep = os.sep
    optim = f"torch{sep}optim{sep}"
    autograd = (f"torch{sep}autograd{sep}__init__.py", f"torch{sep}autograd{sep}graph.py")
    module_py = f"torch{sep}nn{sep}modules{sep}module.py"
    phase, calls = "other", []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if optim in code.co_filename:
            phase, calls = "optimizer", []
        elif code.co_filename.endswith(autograd):
            phase, calls = "backward", []
        elif code.co_filename.endswith(module_py) and code.co_name == "_call_impl":
            called = tb.tb_frame.f_locals.get("self")
            if isinstance(called, nn.Module):
                calls.append(called)
                phase = "loss" if isinstance(called, _Loss) else "forward"
        tb = tb.tb_next
    if not calls:
        return phase, ""
    names = {id(m): name for name, m in calls[0].named_modules(remove_duplicate=False)}
    return phase, names.get(id(calls[-1]), type(calls[-1]).__name__)


def untracked_post_mortem(exc: BaseException | None) -> dict[str, Any] | None:
    """The post-mortem of a real out-of-memory error in a run without ``--memory-limit``
    (None for any other end): the error, the bytes its message names and where it was raised
    (``where_failed``); nothing was tracked, so no live set (``live_bytes`` None)."""
    found = out_of_memory_in(exc)
    if found is None:
        return None
    phase, module = where_failed(found)
    return {"error": error_name(found), "limit_bytes": None,
            "asked_bytes": asked_bytes(str(found)), "op": None, "module": module,
            "phase": phase, "live_bytes": None, "by_module_kind": []}


def asked_bytes(message: str) -> int | None:
    """The bytes an allocator's message says were asked: CUDA's "Tried to allocate 20.00 MiB",
    the CPU allocator's "you tried to allocate 4096 bytes"."""
    import re

    found = re.search(r"[Tt]ried to allocate (\d+(?:\.\d+)?) ?(bytes|[KMGT]iB)", message)
    if found is None:
        return None
    scale = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}[found.group(2)]
    return round(float(found.group(1)) * scale)



def dump_cuda_snapshot(path: str) -> bool:
    """On CUDA (with allocation history recorded) torch's allocator snapshot for
    https://pytorch.org/memory_viz; False, and nothing written, on a machine without CUDA."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return False
    try:
        torch.cuda.memory._dump_snapshot(path)
    except Exception:  # history not recorded, an old torch: no snapshot
        return False
    return True


def caught_note(pm: dict[str, Any]) -> str:
    """The note for a refusal the run caught and went on from."""
    where = pm["module"] or "the top level"
    return (f"an out-of-memory error (--memory-limit {pm['limit_bytes']} bytes) was raised "
            f"in {where} ({pm['phase']}, {pm['op']} asking {pm['asked_bytes']} bytes with "
            f"{pm['live_bytes']} live) and caught by the script, which went on")
