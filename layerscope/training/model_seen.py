"""A watched script's model as observed at its first training step (its module, the optimizer
stepping it) and the shapes and dtypes of the arguments of every training forward, step by step,
and the MFU/HFU of its measured steps from them (analysis.efficiency): each distinct input is
counted once, and a step's FLOPs are those of the forwards it ran (gradient accumulation, a last
short batch) plus one optimizer step. Only references and shapes are kept: nothing of the
model or its batches is copied. The model is referenced until its steps are counted (a script's
model is gone from its own frames by the time the report is made), then let go."""
from __future__ import annotations

from typing import Any

import torch

from layerscope.core.records.efficiency import Efficiency


class ModelSeen:
    """What the watch saw of the model; ``forward`` and ``optimizer_step`` are called from
    its hooks (a reference or a counter each), ``end_step`` and ``merge_last`` as the watch
    closes and merges its steps."""

    def __init__(self) -> None:
        self._module: torch.nn.Module | None = None
        self._counted: tuple[Efficiency | None, str | None] | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._kwargs_hook: Any = None  # reads keyword-only calls' kwargs
        self._inputs: list[tuple[Any, ...]] = []  # distinct forward arguments (specs)
        self._index: dict[Any, int] = {}  # their hashable keys -> position in _inputs
        self._step: list[int] = []  # the forwards of the step open now
        self._dtype = torch.float32  # what the FLOPs ran in: the peak to take them against
        self._steps: list[tuple[int, ...]] = []  # the forwards of every completed step
        self.forwards = 0

    def forward(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        """A training forward of the model (the module whose forwards take the batches)."""
        if self._module is None:
            self._module = module
            self._dtype = _compute_dtype(module, args)
        spec = tuple(_spec(a) for a in args)
        if not any(i[0] == "tensor" for i in spec) and self._kwargs_hook is None:
            # called with keywords only (model(**batch)): a global hook sees no kwargs, so
            # the model's later calls are read by a hook of its own, removed when the watch
            # stops
            self._kwargs_hook = module.register_forward_pre_hook(self._read_kwargs,
                                                                 with_kwargs=True)
        self._step.append(self._intern((spec, ())))
        self.forwards += 1

    def _intern(self, spec: tuple[Any, ...]) -> int:
        key = _key(spec)
        if key not in self._index:
            self._index[key] = len(self._inputs)
            self._inputs.append(spec)
        return self._index[key]

    def _read_kwargs(self, module: torch.nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        if torch.is_grad_enabled() and self._step:  # a training forward, just recorded
            args_spec = self._inputs[self._step[-1]][0]
            kw = tuple((k, _spec(v)) for k, v in kwargs.items())
            self._step[-1] = self._intern((args_spec, kw))

    def close(self) -> None:
        """Remove the keyword hook if it is still on the model (the watch stops)."""
        if self._kwargs_hook is not None:
            self._kwargs_hook.remove()
            self._kwargs_hook = None

    def end_step(self) -> None:
        """A step completed: the forwards seen since the last one are its."""
        self._steps.append(tuple(self._step))
        self._step = []

    def merge_last(self, k: int) -> None:
        """The last ``k`` completed steps became one (as the watch merged them)."""
        if k >= 2 and len(self._steps) >= k:
            self._steps[-k:] = [tuple(i for step in self._steps[-k:] for i in step)]

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self._optimizer is None:
            self._optimizer = optimizer

    def efficiency(self, warmup: int, step_seconds: list[float], device: str,
                   world_size: int) -> tuple[Efficiency | None, str | None]:
        """The efficiency of the measured steps (those after the ``warmup`` first; None before
        a step was seen), or a note saying why it is not given."""
        if self._counted is not None:
            return self._counted
        module = self._module
        steps = self._steps[warmup:warmup + len(step_seconds)]
        if module is None or not step_seconds or len(steps) != len(step_seconds):
            return None, None
        self._counted = self._count(module, steps, step_seconds, device, world_size)
        self._module = None  # counted: the model is the script's again
        return self._counted

    def _count(self, module: torch.nn.Module, steps: list[tuple[int, ...]],
               step_seconds: list[float], device: str, world_size: int
               ) -> tuple[Efficiency | None, str | None]:
        from layerscope.analysis import efficiency as eff

        # a step whose forwards were not seen (they ran before the watch began) is taken to
        # run what the step before it ran (the first ones: what the first step seen ran)
        seen = [s for s in steps if s]
        if not seen:
            return None, None
        # a keyword-only call made before the keyword hook was on (the model's first call)
        # ran on the keyword arguments read at the next one
        read = next((i for s in seen for i in s if self._inputs[i][1]), None)
        same = {i: read if read is not None and not _has_tensor(self._inputs[i]) else i
                for s in seen for i in s}
        filled, last = [], tuple(same[i] for i in seen[0])
        for s in steps:
            last = tuple(same[i] for i in s) or last
            filled.append(last)
        used = sorted({i for s in filled for i in s})
        if not any(_has_tensor(self._inputs[i]) for i in used):
            return None, ("MFU not given: the model's training forward was seen once only, with "
                          "keyword arguments, so there is no input shape to count its FLOPs "
                          "from")
        inner = getattr(module, "module", None)
        if isinstance(inner, torch.nn.Module) and type(module).__name__ in (
                "DistributedDataParallel", "DataParallel"):
            module = inner  # the wrapped model: the same arithmetic per rank
        optimizer, self._optimizer = self._optimizer, None
        try:
            per_input = {}
            for i in used:
                args, kw = self._inputs[i]
                per_input[i] = eff.step_flops(module, tuple(_made(a) for a in args),
                                              kwargs={k: _made(v) for k, v in kw})
            opt = eff.optimizer_flops(optimizer, sum(p.numel() for p in module.parameters()
                                                     if p.requires_grad))
            by_step = {s: eff.StepFlops(
                forward=sum(per_input[i].forward for i in s),
                backward=sum(per_input[i].backward for i in s), optimizer=opt,
                recompute=sum(per_input[i].recompute for i in s)) for s in set(filled)}
            result = eff.of_steps(by_step, filled, step_seconds, device, self._dtype,
                                  world_size=world_size)
        except Exception as exc:  # noqa: BLE001 - the script ran; only its count failed
            return None, (f"MFU not given: the model's step could not be counted "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
        micro = sorted({len(s) for s in filled})
        shapes = len(used)
        keywords = any(self._inputs[i][1] for i in used)
        result.notes.append(
            f"model FLOPs of the model as observed at its first step ({type(module).__name__}), "
            f"counted on each distinct input of its training forwards "
            f"({shapes} distinct input{'s' if shapes > 1 else ''}"
            + (", keyword arguments read from its second call on" if keywords else "")
            + f"), {'/'.join(map(str, micro))} forward(s) per optimizer step"
            + ("" if optimizer is not None else "; no optimizer step seen: none counted")
            + ("" if self._dtype == torch.float32 else
               f"; against the {str(self._dtype).removeprefix('torch.')} peaks, the dtype its "
               "forward ran in"))
        return result, None


def _compute_dtype(module: torch.nn.Module, args: tuple[Any, ...]) -> torch.dtype:
    """The dtype a training forward's matmuls run in: autocast's where it is on for the
    arguments' device (nanoGPT's bfloat16 on CUDA), else the model's floating parameters'
    (a model cast with ``.to(torch.bfloat16)``), else float32."""
    device = next((a.device.type for a in args if isinstance(a, torch.Tensor)), None)
    param = next((p for p in module.parameters() if p.is_floating_point()), None)
    device = device or (param.device.type if param is not None else "cpu")
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return param.dtype if param is not None else torch.float32


def _has_tensor(call: tuple[Any, ...]) -> bool:
    """Whether a call's (argument specs, keyword specs) hold a tensor anywhere."""
    args, kw = call
    return any(map(_holds_tensor, args)) or any(_holds_tensor(v) for _, v in kw)


def _holds_tensor(spec: tuple[Any, ...]) -> bool:
    kind = spec[0]
    if kind == "seq":
        return any(map(_holds_tensor, spec[2]))
    if kind == "map":
        return any(_holds_tensor(v) for _, v in spec[1])
    return kind == "tensor"


_PLAIN = (str, bytes, bool, type(None), torch.dtype, torch.device)


def _key(call: tuple[Any, ...]) -> Any:
    """A hashable key of a call's (argument specs, keyword specs)."""
    args, kw = call
    return tuple(map(_spec_key, args)), tuple((k, _spec_key(v)) for k, v in kw)


def _spec_key(spec: tuple[Any, ...]) -> Any:
    """Shapes, dtypes, strings, flags and None as they are; a number or another object by its
    type (a step counter or an object per batch must not make every step a new input to
    count: the first one seen is counted)."""
    kind = spec[0]
    if kind == "seq":
        return ("seq", spec[1], tuple(map(_spec_key, spec[2])))
    if kind == "map":
        return ("map", tuple((k, _spec_key(v)) for k, v in spec[1]))
    if kind == "value" and not isinstance(spec[1], _PLAIN):
        return ("object", type(spec[1]).__qualname__)
    return spec


def _spec(value: Any) -> tuple[Any, ...]:
    """A tensor as (kind, shape, dtype, device), lists, tuples and dicts of them item by item
    (a batch of several tensors); another value as it is."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, value.device)
    if type(value) in (list, tuple):
        return ("seq", type(value), tuple(_spec(v) for v in value))
    if type(value) is dict:
        return ("map", tuple((k, _spec(v)) for k, v in value.items()))
    return ("value", value)


def _made(spec: tuple[Any, ...]) -> Any:
    """Zeros of a spec'd tensor's shape, dtype and device (valid token ids too), containers
    rebuilt around them."""
    if spec[0] == "tensor":
        return torch.zeros(spec[1], dtype=spec[2], device=spec[3])
    if spec[0] == "seq":
        return spec[1](_made(v) for v in spec[2])
    if spec[0] == "map":
        return {k: _made(v) for k, v in spec[1]}
    return spec[1]
