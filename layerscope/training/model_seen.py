"""A watched script's model as observed at its first training step (its module, the optimizer
stepping it) and the shapes and dtypes of the arguments of every training forward, step by step,
and the MFU/HFU of its measured steps from them (analysis.efficiency): each distinct input is
counted once, and a step's FLOPs are those of the forwards it ran (gradient accumulation, a last
short batch) plus one optimizer step. Only references and shapes are kept: nothing of the
model or its batches is copied. The model is referenced until its steps are counted (a script's
model is gone from its own frames by the time the report is made), then let go.

The model is the module that owns the stepping optimizers' parameters (``choose_model``): the
first module called outermost in a training forward, unless it holds none of them (a
preprocessing module called before the model; a script that calls ``self.forward(x)``
directly, so that only a module inside the real model, a ``ReLU``, is ever called as a module).
Then it is the module called outermost that holds the most of them; when no module called
holds any, there is no model to count: no MFU, and a note names the smallest module that owns
them (found among the modules the code stepping the optimizer holds, ``owner_in_frames``) and
says that its forward ran outside module calls."""
from __future__ import annotations

from types import FrameType
from typing import Any

import torch

from layerscope.core.records.efficiency import Efficiency


class ModelSeen:
    """What the watch saw of the model; ``forward`` and ``optimizer_step`` are called from
    its hooks (a reference or a counter each), ``end_step`` and ``merge_last`` as the watch
    closes and merges its steps."""

    def __init__(self) -> None:
        self._module: torch.nn.Module | None = None  # the first module called outermost
        # every module called outermost in a training forward (id -> module, in call order)
        # and the dtype its first call ran in
        self._modules: dict[int, torch.nn.Module] = {}
        self._dtypes: dict[int, torch.dtype] = {}
        self._counted: tuple[Efficiency | None, str | None] | None = None
        # the optimizers in first-step order, and per optimizer the smallest module owning
        # its parameters among those the stepping code held (looked for only where the first
        # module called holds none of them)
        self._optimizers: list[torch.optim.Optimizer] = []
        self._owners: dict[int, torch.nn.Module | None] = {}
        self._kwargs_hooks: dict[int, Any] = {}  # read keyword-only calls' kwargs, per module
        self._inputs: list[tuple[Any, ...]] = []  # distinct forward arguments (specs)
        self._index: dict[Any, int] = {}  # their hashable keys -> position in _inputs
        # the forwards of the step open now: (id(module), input index)
        self._step: list[tuple[int, int]] = []
        self._steps: list[tuple[tuple[int, int], ...]] = []  # those of every completed step
        self.forwards = 0
        # the model as last chosen (``model``): chosen again once a new module or optimizer
        # is seen, so a step's end does not walk the parameters
        self._chosen: torch.nn.Module | None = None
        self._stale = True

    def forward(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        """An outermost training forward of a module (the model's, or another module's the
        script calls outermost: which one is the model is decided when counting)."""
        key = id(module)
        if key not in self._modules:
            self._modules[key] = module
            self._stale = True
            self._dtypes[key] = _compute_dtype(module, args)
            if self._module is None:
                self._module = module
        spec = tuple(_spec(a) for a in args)
        if not any(i[0] == "tensor" for i in spec) and key not in self._kwargs_hooks:
            # called with keywords only (model(**batch)): a global hook sees no kwargs, so
            # the module's later calls are read by a hook of its own, removed when the watch
            # stops
            self._kwargs_hooks[key] = module.register_forward_pre_hook(self._read_kwargs,
                                                                       with_kwargs=True)
        self._step.append((key, self._intern((spec, ()))))
        self.forwards += 1

    def _intern(self, spec: tuple[Any, ...]) -> int:
        key = _key(spec)
        if key not in self._index:
            self._index[key] = len(self._inputs)
            self._inputs.append(spec)
        return self._index[key]

    def _read_kwargs(self, module: torch.nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        if torch.is_grad_enabled() and self._step and self._step[-1][0] == id(module):
            key, last = self._step[-1]  # its training forward, just recorded
            kw = tuple((k, _spec(v)) for k, v in kwargs.items())
            self._step[-1] = (key, self._intern((self._inputs[last][0], kw)))

    def close(self) -> None:
        """Remove the keyword hooks still on the modules (the watch stops)."""
        for handle in self._kwargs_hooks.values():
            handle.remove()
        self._kwargs_hooks.clear()

    def end_step(self) -> None:
        """A step completed: the forwards seen since the last one are its."""
        self._steps.append(tuple(self._step))
        self._step = []

    def merge_last(self, k: int) -> None:
        """The last ``k`` completed steps became one (as the watch merged them)."""
        if k >= 2 and len(self._steps) >= k:
            self._steps[-k:] = [tuple(i for step in self._steps[-k:] for i in step)]

    def drop_last(self, k: int) -> None:
        """The last ``k`` completed steps were parts of a step that never ended."""
        if k > 0:
            del self._steps[-k:]

    def optimizer_step(self, optimizer: torch.optim.Optimizer,
                       frame: FrameType | None = None) -> None:
        """An optimizer steps (``frame``: the script's code that called ``step()``). On its
        first step, where the first module called holds none of its parameters, the smallest
        module owning them among those that code holds is remembered, to name it."""
        if any(o is optimizer for o in self._optimizers):
            return
        self._optimizers.append(optimizer)
        self._stale = True
        first = self._module
        stepped = _param_ids([optimizer])
        if first is not None and _held(first, stepped):
            return
        self._owners[id(optimizer)] = owner_in_frames(stepped, frame)

    def model(self) -> torch.nn.Module | None:
        """The model as chosen now (``choose_model``), or None before any forward."""
        if self._module is None:
            return None
        if self._stale:
            self._chosen = choose_model(self._module, list(self._modules.values()),
                                        _param_ids(self._optimizers))
            self._stale = False
        return self._chosen

    def efficiency(self, indices: list[int], step_seconds: list[float], device: str,
                   world_size: int, outside: str = "") -> tuple[Efficiency | None, str | None]:
        """The efficiency of the measured steps (the completed steps at ``indices``, timed
        ``step_seconds``; None before a step was seen), or a note saying why it is not given
        (``outside``: where time that ran outside module calls went, for that note)."""
        if self._counted is not None:
            return self._counted
        steps = [self._steps[i] for i in indices if i < len(self._steps)]
        if not step_seconds or len(steps) != len(step_seconds):
            return None, None
        module = self.model()
        if module is None:
            self._counted = None, self._no_model(outside)
        else:
            self._counted = self._count(module, steps, step_seconds, device, world_size)
        self._module = self._chosen = None  # counted: the model is the script's again
        self._modules, self._owners = {}, {}
        return self._counted

    def _no_model(self, outside: str) -> str:
        """Why no MFU is given where no module that was called holds the parameters stepped."""
        where = f" (that time is in {outside})" if outside else ""
        called = sorted({type(m).__name__ for m in self._modules.values()})
        owner = next((m for m in self._owners.values() if m is not None), None)
        if not called:
            return ("MFU not given: no module's training forward was seen: the step's compute "
                    "ran outside module calls (functional code, or a forward() called directly)"
                    f"{where}, so there is no model to count FLOPs from")
        held = (f"they belong to {type(owner).__name__} ({_size(owner)}), whose forward was "
                "never called as a module: code that calls forward() directly (self.forward(x)) "
                "runs outside module calls" if owner is not None else
                "no module the stepping code holds owns them all")
        return (f"MFU not given: the modules called ({', '.join(called)}) hold none of the "
                f"parameters the optimizer steps; {held}{where}, so its FLOPs cannot be counted "
                "from module calls")

    def _count(self, module: torch.nn.Module, all_steps: list[tuple[tuple[int, int], ...]],
               step_seconds: list[float], device: str, world_size: int
               ) -> tuple[Efficiency | None, str | None]:
        from layerscope.analysis import efficiency as eff

        key = id(module)
        steps = [tuple(i for k, i in s if k == key) for s in all_steps]
        first = self._module
        dtype = self._dtypes.get(key, torch.float32)
        # a step whose forwards were not seen (they ran before the watch began) is taken to
        # run what the step before it ran (the first ones: what the first step seen ran)
        seen = [s for s in steps if s]
        if not seen:
            return None, (f"MFU not given: no measured step ran a training forward of the model "
                          f"({type(module).__name__})")
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
        chosen = module
        for _ in range(3):  # (torch.compile of DDP, DDP of a compiled model)
            inner = getattr(module, "_orig_mod", None)
            if isinstance(inner, torch.nn.Module) and type(module).__name__ == "OptimizedModule":
                module = inner  # torch.compile's wrapper: the FLOPs are its model's
                continue
            inner = getattr(module, "module", None)
            if isinstance(inner, torch.nn.Module) and type(module).__name__ in (
                    "DistributedDataParallel", "DataParallel"):
                module = inner  # the wrapped model: the same arithmetic per rank
                continue
            break
        optimizer = _optimizer_of(module, self._optimizers)
        self._optimizers = []
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
            result = eff.of_steps(by_step, filled, step_seconds, device, dtype,
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
            + ("" if dtype == torch.float32 else
               f"; against the {str(dtype).removeprefix('torch.')} peaks, the dtype its "
               "forward ran in"))
        if chosen is not first and first is not None:
            result.notes.append(
                f"the model is {type(chosen).__name__}, the module called that holds the "
                f"parameters the optimizer steps; {type(first).__name__}, called first, holds "
                "none of them and is not counted")
        return result, None


def _param_ids(optimizers: list[torch.optim.Optimizer]) -> set[int]:
    return {id(p) for o in optimizers for g in o.param_groups for p in g["params"]}


def _held(module: torch.nn.Module, params: set[int]) -> int:
    """How many of ``params`` ``module`` holds."""
    return sum(1 for p in module.parameters() if id(p) in params)


def _size(module: torch.nn.Module) -> str:
    n = sum(p.numel() for p in module.parameters())
    return f"{n:,} parameters"


def choose_model(first: torch.nn.Module, called: list[torch.nn.Module],
                 stepped: set[int]) -> torch.nn.Module | None:
    """The model among the modules ``called`` outermost in training forwards (``first``
    among them): ``first`` when it holds one of the ``stepped`` parameters or nothing was
    stepped (manual updates); else the module called that holds the most of them (the
    smaller on a tie); else None: no module called owns what the optimizers step."""
    if not stepped or _held(first, stepped):
        return first
    best: tuple[int, int] | None = None
    chosen = None
    for module in called:
        held = _held(module, stepped)
        if not held:
            continue
        rank = (-held, sum(p.numel() for p in module.parameters()))
        if best is None or rank < best:
            best, chosen = rank, module
    return chosen


def _optimizer_of(module: torch.nn.Module, optimizers: list[torch.optim.Optimizer]
                  ) -> torch.optim.Optimizer | None:
    """The optimizer that steps the most of ``module``'s parameters (the first one when none
    does)."""
    own = {id(p) for p in module.parameters()}
    best = max(optimizers, key=lambda o: len(_param_ids([o]) & own), default=None)
    if best is not None and not _param_ids([best]) & own:
        return optimizers[0]
    return best


def owner_in_frames(stepped: set[int], frame: FrameType | None,
                    depth: int = 8) -> torch.nn.Module | None:
    """The smallest module holding every parameter in ``stepped`` among the modules (and their
    submodules) that ``frame`` and its callers hold in their locals (``self`` of a method
    included) or in their modules' globals; None when none does. Runs once per optimizer."""
    roots: dict[int, torch.nn.Module] = {}
    for _ in range(depth):
        if frame is None:
            break
        for scope in (frame.f_locals, frame.f_globals):
            for value in list(scope.values()):
                if isinstance(value, torch.nn.Module):
                    roots.setdefault(id(value), value)
        frame = frame.f_back
    best: tuple[int, torch.nn.Module] | None = None
    seen: set[int] = set()
    for root in roots.values():
        for module in root.modules():
            if id(module) in seen:
                continue
            seen.add(id(module))
            own = {id(p) for p in module.parameters()}
            if stepped and stepped <= own:
                size = sum(p.numel() for p in module.parameters())
                if best is None or size < best[0]:
                    best = (size, module)
    return best[1] if best is not None else None


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
