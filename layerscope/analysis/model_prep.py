"""What the static analysis does to a user's module before capturing it, without changing it:
unwrap data-parallel wrappers, materialise lazy modules on a private copy, tell whether forward
can run at all."""
from __future__ import annotations

import copy
import inspect
from typing import Any

import torch
import torch.nn as nn
from torch.nn.parameter import UninitializedTensorMixin

from layerscope.core.errors import UserError

# Wrappers whose ``.module`` is the model the user wrote (DataParallel's forward scatters over
# GPUs and refuses CPU-only runs; DistributedDataParallel needs a process group).
_WRAPPERS = ("DataParallel", "DistributedDataParallel")


def unwrap(module: nn.Module, name: str) -> tuple[nn.Module, list[str]]:
    """The module inside DataParallel / DistributedDataParallel, with a note saying so.

    Row names are those of the inner module: ``layer1.0.conv1``, not the wrapper's state_dict key
    ``module.layer1.0.conv1``."""
    notes = []
    while type(module).__name__ in _WRAPPERS and isinstance(getattr(module, "module", None),
                                                            nn.Module):
        notes.append(f"the model is wrapped in {type(module).__name__}: "
                     "analysed the wrapped module "
                     "(.module); row names are relative to it, without the 'module.' prefix of "
                     "the wrapper's state_dict")
        module = module.module
    if ("FullyShardedDataParallel" in type(module).__name__
            or hasattr(module, "_fsdp_wrapped_module")):
        raise UserError(f"{name} is wrapped in FullyShardedDataParallel, whose parameters are "
                        "sharded and flattened: analyse the model before wrapping it")
    return module, notes


def is_lazy(module: nn.Module) -> bool:
    return any(isinstance(t, UninitializedTensorMixin)
               for t in list(module.parameters()) + list(module.buffers()))


def materialized_copy(module: nn.Module, args: list[Any], kwargs: dict[str, Any],
                      name: str) -> tuple[nn.Module, list[str]]:
    """A private copy of a lazy module whose parameters got their shapes from one forward run on
    the meta device (no memory, no arithmetic). The user's module stays uninitialised.

    The copy shares the user's initialised tensors (the deep copy's memo maps them to themselves);
    only the module objects and the uninitialised tensors are new. For the run, the shared
    tensors are swapped out of the copy's slots for meta ones, and the uninitialised ones are
    re-created on meta so that they materialise there."""
    from layerscope.analysis.capture import InputSpec, map_inputs, swapped

    memo = {id(t): (type(t)(requires_grad=t.requires_grad, device="meta", dtype=t.dtype)
                    if isinstance(t, UninitializedTensorMixin) else t)
            for t in list(module.parameters()) + list(module.buffers())}
    try:
        work = copy.deepcopy(module, memo)
    except Exception as exc:
        raise UserError(f"{name} has lazy (uninitialised) parameters and cannot be copied to "
                        f"infer their shapes ({type(exc).__name__}); run it once on an example "
                        "input before analysing it") from None

    def on_meta(x):
        if isinstance(x, InputSpec):
            return torch.empty(x.shape, dtype=x.dtype, device="meta")
        return x.detach().to("meta")

    def meta_like(t):
        meta = torch.empty_like(t, device="meta")
        return nn.Parameter(meta, t.requires_grad) if isinstance(t, nn.Parameter) else meta

    margs, mkwargs = map_inputs((tuple(args), kwargs), on_meta)
    try:
        with swapped(work, meta_like, keep_changes=True), torch.no_grad():
            work(*margs, **mkwargs)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise UserError(f"{name}: inferring the shapes of its lazy parameters failed: "
                        f"{type(exc).__name__}: {first}") from None
    if is_lazy(work):
        raise UserError(f"{name}: some lazy parameters were not used by forward, so their shapes "
                        "are unknown; run the model once before analysing it")
    return work, [f"{name} has lazy modules: their parameter shapes were inferred from this "
                  "input on a private copy; the model itself is still uninitialised"]


def has_forward(module: nn.Module) -> bool:
    """False for containers that only hold modules or parameters (ModuleList, ParameterDict, a
    module without forward): calling them raises NotImplementedError."""
    if isinstance(module, torch.jit.ScriptModule):
        return True
    return getattr(type(module), "forward", None) is not nn.Module.forward


def needs_arguments(module: nn.Module) -> bool:
    """Whether forward has required parameters (True when its signature cannot be read)."""
    if not has_forward(module):
        return False
    try:
        sig = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return True
    return any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                   p.KEYWORD_ONLY)
               for p in sig.parameters.values())
