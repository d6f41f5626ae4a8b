"""A watched script's model as observed at its first training step (its module, the shapes and
dtypes of its first forward's arguments, the optimizer stepping it, how many forwards each
optimizer step takes), and the MFU/HFU of its measured steps from it (analysis.efficiency).
Only references and shapes are kept: nothing of the model or its batches is copied. The model
is referenced until its step is counted (a script's model is gone from its own frames by the
time the report is made), then let go."""
from __future__ import annotations

from typing import Any

import torch

from layerscope.core.records.efficiency import Efficiency


class ModelSeen:
    """What the watch saw of the model; ``forward`` and ``optimizer_step`` are called from
    its hooks (a reference or a counter each)."""

    def __init__(self) -> None:
        self._module: torch.nn.Module | None = None
        self._counted: tuple[Efficiency | None, str | None] | None = None
        self._inputs: tuple[Any, ...] = ()
        self._optimizer: torch.optim.Optimizer | None = None
        self._kwargs: dict[str, Any] = {}
        self._kwargs_hook: Any = None  # a one-shot hook reading a keyword-only call's kwargs
        self.forwards = 0

    def forward(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        """A training forward of the model (the module whose forwards take the batches)."""
        if self._module is None:
            self._module = module
            self._inputs = tuple(_spec(a) for a in args)
            if not any(i[0] == "tensor" for i in self._inputs):
                # called with keywords only (model(**batch)): a global hook sees no kwargs, so
                # the model's next call is read by a hook of its own, removed once it ran
                self._kwargs_hook = module.register_forward_pre_hook(self._read_kwargs,
                                                                     with_kwargs=True)
        self.forwards += 1

    def _read_kwargs(self, module: torch.nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        if torch.is_grad_enabled():  # a training forward, not an evaluation
            self._kwargs = {k: _spec(v) for k, v in kwargs.items()}
            self.close()

    def close(self) -> None:
        """Remove the one-shot hook if it is still on the model (the watch stops)."""
        if self._kwargs_hook is not None:
            self._kwargs_hook.remove()
            self._kwargs_hook = None

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self._optimizer is None:
            self._optimizer = optimizer

    def efficiency(self, steps: int, step_seconds: list[float], device: str,
                   world_size: int) -> tuple[Efficiency | None, str | None]:
        """The measured steps' efficiency (None before a step was seen), or a note saying why
        it is not given."""
        if self._counted is not None:
            return self._counted
        module = self._module
        if module is None or not step_seconds or not steps:
            return None, None
        self._counted = self._count(module, steps, step_seconds, device, world_size)
        self._module = None  # counted: the model is the script's again
        return self._counted

    def _count(self, module: torch.nn.Module, steps: int, step_seconds: list[float],
               device: str, world_size: int) -> tuple[Efficiency | None, str | None]:
        from layerscope.analysis import efficiency as eff

        if not any(i[0] == "tensor" for i in (*self._inputs, *self._kwargs.values())):
            return None, ("MFU not given: the model's training forward was seen once only, with "
                          "keyword arguments, so there is no input shape to count its FLOPs "
                          "from")

        inner = getattr(module, "module", None)
        if isinstance(inner, torch.nn.Module) and type(module).__name__ in (
                "DistributedDataParallel", "DataParallel"):
            module = inner  # the wrapped model: the same arithmetic per rank
        inputs = tuple(_made(i) for i in self._inputs)
        kwargs = {k: _made(i) for k, i in self._kwargs.items()}
        micro = max(1, round(self.forwards / steps))
        optimizer, self._optimizer = self._optimizer, None
        try:
            flops = eff.step_flops(module, inputs, kwargs=kwargs, optimizer=optimizer,
                                   micro_batches=micro)
            result = eff.of_steps({0: flops}, [0] * len(step_seconds), step_seconds, device,
                                  world_size=world_size)
        except Exception as exc:  # noqa: BLE001 - the script ran; only its count failed
            return None, (f"MFU not given: the model's step could not be counted "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
        result.notes.append(
            f"model FLOPs of the model as observed at its first step ({type(module).__name__} on "
            f"its first forward's argument shapes"
            + (", its keyword arguments from its second call" if kwargs else "")
            + f"), {micro} forward(s) per optimizer step"
            + ("" if optimizer is not None else "; no optimizer step seen: none counted"))
        return result, None


def _spec(value: Any) -> tuple[Any, ...]:
    """A tensor as (kind, shape, dtype, device); another value as it is."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, value.device)
    return ("value", value)


def _made(spec: tuple[Any, ...]) -> Any:
    """Zeros of a spec'd tensor's shape, dtype and device (valid token ids too)."""
    return torch.zeros(spec[1], dtype=spec[2], device=spec[3]) if spec[0] == "tensor" else spec[1]
