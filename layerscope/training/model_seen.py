"""A watched script's model as observed at its first training step (its module, the shapes and
dtypes of its first forward's arguments, the optimizer stepping it, how many forwards each
optimizer step takes), and the MFU/HFU of its measured steps from it (analysis.efficiency).
Only references and shapes are kept: nothing of the model or its batches is copied."""
from __future__ import annotations

import weakref
from typing import Any

import torch

from layerscope.core.records.efficiency import Efficiency


class ModelSeen:
    """What the watch saw of the model; ``forward`` and ``optimizer_step`` are called from
    its hooks (a reference or a counter each)."""

    def __init__(self) -> None:
        self._module: weakref.ref | None = None
        self._inputs: tuple[Any, ...] = ()
        self._optimizer: weakref.ref | None = None
        self.forwards = 0

    def forward(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        """A training forward of the model (the module whose forwards take the batches)."""
        if self._module is None:
            self._module = weakref.ref(module)
            self._inputs = tuple(("tensor", tuple(a.shape), a.dtype, a.device)
                                 if isinstance(a, torch.Tensor) else ("value", a) for a in args)
        self.forwards += 1

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self._optimizer is None:
            self._optimizer = weakref.ref(optimizer)

    def efficiency(self, steps: int, step_seconds: list[float], device: str,
                   world_size: int) -> tuple[Efficiency | None, str | None]:
        """The measured steps' efficiency (None before a step was seen), or a note saying why
        it is not given."""
        module = self._module() if self._module is not None else None
        if module is None or not step_seconds or not steps:
            return None, None
        from layerscope.analysis import efficiency as eff

        if not any(i[0] == "tensor" for i in self._inputs):
            return None, ("MFU not given: the model's first training forward took no positional "
                          "tensor (keyword arguments only), so there is no input shape to count "
                          "its FLOPs from")

        inner = getattr(module, "module", None)
        if isinstance(inner, torch.nn.Module) and type(module).__name__ in (
                "DistributedDataParallel", "DataParallel"):
            module = inner  # the wrapped model: the same arithmetic per rank
        inputs = tuple(torch.zeros(i[1], dtype=i[2], device=i[3]) if i[0] == "tensor" else i[1]
                       for i in self._inputs)
        micro = max(1, round(self.forwards / steps))
        optimizer = self._optimizer() if self._optimizer is not None else None
        try:
            flops = eff.step_flops(module, inputs, optimizer=optimizer, micro_batches=micro)
            result = eff.of_steps({0: flops}, [0] * len(step_seconds), step_seconds, device,
                                  world_size=world_size)
        except Exception as exc:  # noqa: BLE001 - the script ran; only its count failed
            return None, (f"MFU not given: the model's step could not be counted "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
        result.notes.append(
            f"model FLOPs of the model as observed at its first step ({type(module).__name__} on "
            f"its first forward's argument shapes), {micro} forward(s) per optimizer step"
            + ("" if optimizer is not None else "; no optimizer step seen: none counted"))
        return result, None
