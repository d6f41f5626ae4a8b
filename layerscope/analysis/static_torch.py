"""Static cost of a PyTorch module: capture aten ops under a TorchDispatchMode, attribute them to
modules, and cost them with the handlers of ``layerscope.ops.aten``.

How it works
- The model runs on *fake* copies of its parameters and inputs (``FakeTensorMode``): no
  arithmetic is done and no weight memory is needed. The fakes are swapped into each distinct
  (module, attribute) slot for the call and the very same objects are put back (``_swapped``),
  so shared modules and tied weights are restored exactly.
  Parameters on the meta device are analysed as CPU tensors, so the CPU kernels are chosen.
- Forward ops are attributed to the innermost module running (global forward pre/post hooks,
  removed afterwards). Backward ops (``mode="training"``) are attributed through the autograd
  graph: when a module's forward returns, every autograd node it created is tagged with its name,
  and during backward ``torch._C._current_autograd_node()`` names the node being run.
- Tensor lifetimes come from storage weak references: a storage is live from the op that created
  it until Python frees it, exactly as in eager execution; the peak is taken after every op.
"""
from __future__ import annotations

import contextlib
import copy
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from layerscope.analysis.module_hooks import global_forward_hooks
from layerscope.core.cost import ZERO, Cost
from layerscope.core.report import LayerRow, Totals, UncountedOp
from layerscope.errors import first_line
from layerscope.ops.aten import ATEN
from layerscope.ops.registry import ALLOC, VIEW, T

_TAG = "layerscope.module"

# Bytes of optimizer state per trainable parameter byte (exp_avg + exp_avg_sq for Adam).
OPTIMIZER_STATE_FACTOR = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}


class ModelRunError(Exception):
    """The model itself rejected the inputs (wrong shape, wrong dtype, ...)."""


@dataclass
class InputSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()


@dataclass
class _ModuleStats:
    name: str
    type: str
    depth: int
    children: list[str] = field(default_factory=list)
    calls: int = 0
    input_shapes: list = field(default_factory=list)
    output_shapes: list = field(default_factory=list)
    params: int = 0
    weight_bytes: int = 0
    buffer_bytes: int = 0
    forward: Cost = ZERO
    backward: Cost = ZERO
    activation_bytes: int = 0
    ops: int = 0
    # Output bytes summed over every call (None where hooks do not fire: TorchScript): all
    # output tensors, and torchinfo's per-call figure (the first output tensor only).
    output_bytes: int | None = 0
    first_output_bytes: int | None = 0
    has_params: bool = False  # owns a parameter (torchinfo counts such leaf layers' outputs)


@dataclass
class Capture:
    """Everything one analysis run measured, before it is shaped into rows."""

    modules: dict[str, _ModuleStats]
    order: list[str]
    op_calls: int
    uncounted: Counter
    peak_activation_bytes: int
    input_bytes: int
    output_bytes: int
    training: bool
    warnings: list[str] = field(default_factory=list)  # what the caller should tell the user


def _shapes(obj) -> list[list[int]]:
    return [list(t.shape) for t in pytree.tree_leaves(obj) if isinstance(t, torch.Tensor)]


def _meta(t: torch.Tensor) -> T:
    return T(tuple(int(d) for d in t.shape), str(t.dtype).removeprefix("torch."), t.element_size())


def _tensor_nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


class _Liveness:
    """Live non-parameter storages, their running total and its peak."""

    def __init__(self) -> None:
        self.live: dict[int, tuple[int, StorageWeakRef]] = {}
        self.resident: set[int] = set()  # parameters and buffers: never activations
        self.total = 0
        self.peak = 0

    def purge(self) -> None:
        dead = [k for k, (_, ref) in self.live.items() if ref.expired()]
        for k in dead:
            self.total -= self.live.pop(k)[0]

    def known(self, t: torch.Tensor) -> bool:
        key = _storage_key(t)
        return key in self.live or key in self.resident

    def add(self, t: torch.Tensor) -> int:
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self.live or key in self.resident:
            return 0
        nbytes = storage.nbytes()
        self.live[key] = (nbytes, StorageWeakRef(storage))
        self.total += nbytes
        self.peak = max(self.peak, self.total)
        return nbytes


class _ModuleTracker:
    """Which module is running: global hooks keyed by module identity, removed on exit.

    ``stats`` (optional) receives each module's call count and first-call shapes;
    ``tag_autograd`` tags the autograd nodes each module's forward creates with its name."""

    def __init__(self, model: nn.Module, stats: dict[str, _ModuleStats] | None,
                 tag_autograd: bool):
        self.names = {id(m): name for name, m in model.named_modules()}
        self.stats = stats
        self.stack: list[str] = []
        self.tag_autograd = tag_autograd
        self._hooks = None

    def current(self) -> str:
        return self.stack[-1] if self.stack else ""

    def _pre(self, module, args):
        name = self.names.get(id(module))
        if name is None:
            return
        if self.tag_autograd and self.stack:
            # Autograd nodes not tagged yet were made by the enclosing module's own code.
            _tag_graph(args, self.stack[-1])
        self.stack.append(name)
        if self.stats is not None:
            s = self.stats[name]
            s.calls += 1
            if s.calls == 1:
                s.input_shapes = _shapes(args)

    def _post(self, module, args, output):
        name = self.names.get(id(module))
        if name is None or not self.stack or self.stack[-1] != name:
            return
        if self.tag_autograd:
            _tag_graph(output, name)
        if self.stats is not None:
            s = self.stats[name]
            outs = [t for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor)]
            if s.calls == 1:
                s.output_shapes = [list(t.shape) for t in outs]
            # every call's outputs, an in-place result (ReLU(inplace=True)) counted again
            s.output_bytes += sum(map(_tensor_nbytes, outs))
            s.first_output_bytes += _tensor_nbytes(outs[0]) if outs else 0
        self.stack.pop()

    def __enter__(self):
        self._hooks = global_forward_hooks(self._pre, self._post)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        self.stack.clear()
        return False


def _tag_graph(obj, name: str) -> None:
    """Tag every untagged autograd node reachable from ``obj``'s tensors with ``name``."""
    todo = [t.grad_fn for t in pytree.tree_leaves(obj)
            if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while todo:
        node = todo.pop()
        meta = node.metadata
        if _TAG in meta:
            continue
        meta[_TAG] = name
        todo.extend(f for f, _ in node.next_functions if f is not None)


class _CountingMode(TorchDispatchMode):
    """Costs every aten op and charges it to the module (forward) or autograd node (backward)."""

    def __init__(self, tracker: _ModuleTracker, stats: dict[str, _ModuleStats],
                 liveness: _Liveness):
        super().__init__()
        self.tracker = tracker
        self.stats = stats
        self.liveness = liveness
        self.uncounted: Counter = Counter()
        self.op_calls = 0
        self.paused = False
        self._entries: dict = {}

    def _entry(self, func):
        """Handler lookup, memoised per OpOverload (the overload first, then its packet)."""
        try:
            return self._entries[func]
        except KeyError:
            entry = ATEN.lookup(str(func), str(func.overloadpacket))
            kind = entry.kind if entry else (VIEW if func.is_view else None)
            self._entries[func] = (entry, kind, str(func.overloadpacket))
            return self._entries[func]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.paused:
            return out
        self.op_calls += 1
        node = torch._C._current_autograd_node()
        backward = node is not None
        owner = node.metadata.get(_TAG, "") if backward else self.tracker.current()
        stats = self.stats[owner]
        stats.ops += 1

        entry, kind, packet = self._entry(func)
        self.liveness.purge()
        out_tensors = _tensors(out)
        created = sum(self.liveness.add(t) for t in out_tensors)
        if not backward:
            stats.activation_bytes += created
        if kind is None:
            self.uncounted[packet] += 1
            return out
        if kind == VIEW or kind == ALLOC:
            return out
        op = entry.handler(_described(args), _described(kwargs), _described(out))
        cost = Cost(op.macs, op.flops, sum(map(_tensor_nbytes, _tensors((args, kwargs)))),
                    sum(map(_tensor_nbytes, out_tensors)))
        if backward:
            stats.backward = stats.backward + cost
        else:
            stats.forward = stats.forward + cost
        return out


def _tensors(obj, found: list | None = None) -> list[torch.Tensor]:
    """Tensors in nested tuples/lists/dicts (aten arguments nest no deeper); faster than pytree."""
    found = [] if found is None else found
    if isinstance(obj, torch.Tensor):
        found.append(obj)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _tensors(v, found)
    elif isinstance(obj, dict):
        for v in obj.values():
            _tensors(v, found)
    return found


def _described(obj):
    """The same structure with every tensor replaced by its T description (what handlers see)."""
    if isinstance(obj, torch.Tensor):
        return _meta(obj)
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        return type(obj)(_described(v) for v in obj) if type(obj) in (list, tuple) else \
            tuple(_described(v) for v in obj)
    if isinstance(obj, dict):
        return {k: _described(v) for k, v in obj.items()}
    return obj


def _fake_like(t: torch.Tensor, dtype: torch.dtype | None, requires_grad: bool,
               fake_mode=None) -> torch.Tensor:
    """A fake tensor shaped like ``t`` (meta becomes CPU).

    With ``fake_mode`` the FakeTensor is built directly around a meta tensor, about 4x cheaper
    than allocating through the mode (it matters: resnet50 has 320 parameters and buffers);
    without it, call inside FakeTensorMode."""
    device = torch.device("cpu") if t.device.type == "meta" else t.device
    target = dtype if (dtype is not None and t.is_floating_point()) else t.dtype
    shape, stride = tuple(t.shape), tuple(t.stride())
    if fake_mode is not None:
        from torch._subclasses.fake_tensor import FakeTensor

        meta = torch.empty_strided(shape, stride, dtype=target, device="meta")
        fake = FakeTensor(fake_mode, meta, device)
    else:
        fake = torch.empty_strided(shape, stride, dtype=target, device=device)
    if requires_grad and fake.is_floating_point():
        fake.requires_grad_(True)
    return fake


def _model_device(model: nn.Module) -> torch.device:
    for t in list(model.parameters()) + list(model.buffers()):
        return torch.device("cpu") if t.device.type == "meta" else t.device
    return torch.device("cpu")


def _flags(model: nn.Module) -> list[tuple[nn.Module, bool]]:
    # frozen TorchScript modules (torch.jit.freeze) have no ``training`` attribute
    return [(m, m.training) for m in model.modules() if hasattr(m, "training")]


def _module_table(model: nn.Module) -> tuple[dict[str, _ModuleStats], list[str]]:
    """One entry per distinct module, parameters charged to the first module that owns them."""
    stats: dict[str, _ModuleStats] = {}
    order: list[str] = []
    seen: set[int] = set()
    for name, module in model.named_modules():
        depth = 0 if name == "" else name.count(".") + 1
        s = _ModuleStats(name, type(module).__name__, depth)
        s.has_params = any(p is not None and p.numel() > 0 for p in module._parameters.values())
        for p in module._parameters.values():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                s.params += p.numel()
                s.weight_bytes += _tensor_nbytes(p)
        for b in module._buffers.values():
            if b is not None and id(b) not in seen:
                seen.add(id(b))
                s.buffer_bytes += _tensor_nbytes(b)
        stats[name] = s
        order.append(name)
        if name:
            parent = name.rsplit(".", 1)[0] if "." in name else ""
            stats[parent].children.append(name)
    return stats, order


def capture(model: nn.Module, inputs: Sequence[Any], *, kwargs: dict[str, Any] | None = None,
            training: bool = False, dtype: torch.dtype | None = None,
            fake: bool = True, owned: bool = False) -> Capture:
    """Run ``model`` once (fake by default) and record what every module costs.

    ``inputs`` are forward's positional arguments and ``kwargs`` its keyword arguments: tensors,
    ``InputSpec`` shapes, or any other Python value (passed as is; tensors nested in lists,
    tuples and dicts are made fake too). ``owned``: the model is the analysis' own, just loaded
    from a file and never run, so a TorchScript model needs no fresh copy (the copy through
    ``torch.jit.save``/``load`` is most of the time a TorchScript analysis takes: AlexNet ~4 s of
    ~6.5 s)."""
    kwargs = dict(kwargs or {})
    stats, order = _module_table(model)
    flags = _flags(model)
    try:
        model.train(training)
        if fake:
            return _capture_fake(model, list(inputs), kwargs, stats, order, training, dtype)
        return _capture_real(model, list(inputs), kwargs, stats, order, training, dtype, owned)
    finally:
        for m, flag in flags:
            m.training = flag


def parameters_only(model: nn.Module, training: bool = False) -> Capture:
    """A capture with no forward run (the model has none): parameters and buffers per module."""
    stats, order = _module_table(model)
    return Capture(stats, order, 0, Counter(), 0, 0, 0, training)


def _run(model_call, tracker, mode, liveness, training) -> tuple[int, int]:
    """Run forward (and backward) under the tracker and mode; returns output bytes."""
    with tracker, mode, torch.set_grad_enabled(training):
        out = model_call()
        outs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        if training:
            diff = [t for t in outs if t.requires_grad]
            if diff:
                mode.paused = True
                grads = [torch.ones_like(t) for t in diff]
                mode.paused = False
                torch.autograd.backward(diff, grads)
    return sum(map(_tensor_nbytes, outs))


def _wrap_model_error(exc: Exception) -> ModelRunError:
    return ModelRunError(first_line(exc, with_type=True))


def _slots(model: nn.Module) -> list[tuple[dict, str, torch.Tensor]]:
    """Every (module, attribute) that holds a parameter or buffer, each exactly once.

    ``model.modules()`` yields a module once however many names reach it (the same layer twice
    in a Sequential, ``self.a = self.b = lin``), so swapping these slots and putting the same
    objects back restores the model exactly; a tensor held by two slots (tied weights) is
    swapped in both, for the same replacement. Uninitialized (lazy) parameters are left alone."""
    from torch.nn.parameter import UninitializedTensorMixin

    out = []
    for m in model.modules():
        for table in (m._parameters, m._buffers):
            for key, t in table.items():
                if t is not None and not isinstance(t, UninitializedTensorMixin):
                    out.append((table, key, t))
    return out


@contextlib.contextmanager
def _swapped(model: nn.Module, replace):
    """Within the block every parameter/buffer ``t`` of ``model`` is ``replace(t)`` (called once
    per distinct tensor); afterwards the very same objects are back in their slots."""
    slots = _slots(model)
    memo: dict[int, torch.Tensor] = {}
    for _, _, t in slots:
        if id(t) not in memo:
            memo[id(t)] = replace(t)
    # Plain tensor attributes too: hooks such as torch.nn.utils.weight_norm / spectral_norm set
    # ``module.weight`` from the swapped parameters during forward.
    plain = [(m, _tensor_attrs(m)) for m in model.modules()]
    try:
        for table, key, t in slots:
            table[key] = memo[id(t)]
        yield memo
    finally:
        for table, key, t in slots:
            table[key] = t
        for m, before in plain:
            for key in _tensor_attrs(m).keys() - before.keys():
                del m.__dict__[key]
            m.__dict__.update(before)


def _tensor_attrs(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v for k, v in vars(m).items() if isinstance(v, torch.Tensor)}


def _map_inputs(obj, leaf):
    """``obj`` (forward's arguments) with every tensor and InputSpec passed through ``leaf``."""
    return pytree.tree_map(lambda x: leaf(x) if isinstance(x, (torch.Tensor, InputSpec)) else x,
                           obj, is_leaf=lambda x: isinstance(x, InputSpec))


def _input_tensors(args, kwargs) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]


def _capture_fake(model, inputs, kwargs, stats, order, training, dtype) -> Capture:
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake_mode = FakeTensorMode()
    liveness = _Liveness()
    device = _model_device(model)

    def fake_param(t):
        # Wrapped outside the mode: their meta storage must be a plain meta tensor.
        return _fake_like(t, dtype, training and isinstance(t, nn.Parameter) and t.requires_grad,
                          fake_mode)

    def fake_input(x):
        if isinstance(x, InputSpec):
            x_dtype = dtype if (dtype is not None and x.dtype.is_floating_point) else x.dtype
            return torch.zeros(x.shape, dtype=x_dtype, device=device)
        return _fake_like(x, dtype, False)

    with fake_mode:
        fake_args, fake_kwargs = _map_inputs((tuple(inputs), kwargs), fake_input)
    tracker = _ModuleTracker(model, stats, tag_autograd=training)
    mode = _CountingMode(tracker, stats, liveness)
    in_tensors = _input_tensors(fake_args, fake_kwargs)
    try:
        with _swapped(model, fake_param) as memo:
            for t in memo.values():
                liveness.resident.add(_storage_key(t))
            for x in in_tensors:
                liveness.add(x)
            with fake_mode:
                output_bytes = _run(lambda: model(*fake_args, **fake_kwargs), tracker, mode,
                                    liveness, training)
    except (torch._subclasses.fake_tensor.UnsupportedOperatorException,
            torch._subclasses.fake_tensor.DynamicOutputShapeException,
            torch._subclasses.fake_tensor.DataDependentOutputException) as exc:
        # The model needs real values (data-dependent shapes); run it for real.
        if device.type == "meta" or any(t.device.type == "meta" for t in model.parameters()):
            raise ModelRunError(f"{type(exc).__name__}: the model needs real values "
                                "(data-dependent shapes) but its weights are on the meta device"
                                ) from exc
        fresh, _ = _module_table(model)
        stats.clear()
        stats.update(fresh)
        return _capture_real(model, inputs, kwargs, stats, order, training, dtype)
    except Exception as exc:  # the model's own error: shape mismatch and the like
        raise _wrap_model_error(exc) from exc
    return Capture(stats, order, mode.op_calls, mode.uncounted, liveness.peak,
                   sum(map(_tensor_nbytes, in_tensors)), output_bytes, training)


# The real-tensor fallback (models with data-dependent shapes, TorchScript) allocates its inputs
# and a private copy of the weights for real; above these bounds it refuses instead (README).
REAL_INPUT_LIMIT = 256 * 10**6
REAL_WEIGHT_LIMIT = 4 * 10**9


class TooLargeForRealRun(Exception):
    """The real-tensor fallback would allocate more than the bounds above."""


def _spec_nbytes(x, dtype) -> int:
    if isinstance(x, InputSpec):
        d = dtype if (dtype is not None and x.dtype.is_floating_point) else x.dtype
        return math.prod(x.shape) * torch.empty((), dtype=d).element_size()
    return _tensor_nbytes(x)


def _check_real_size(model, inputs, kwargs, dtype) -> None:
    leaves = pytree.tree_leaves((inputs, kwargs), is_leaf=lambda x: isinstance(x, InputSpec))
    need = sum(_spec_nbytes(x, dtype) for x in leaves if isinstance(x, (torch.Tensor, InputSpec)))
    weights = sum(_tensor_nbytes(t) for _, _, t in _slots(model))
    if need > REAL_INPUT_LIMIT or weights > REAL_WEIGHT_LIMIT:
        from layerscope.core.units import megabytes as mb

        raise TooLargeForRealRun(
            f"this model needs real tensors (data-dependent shapes or TorchScript), and a real "
            f"run would allocate {mb(need)} MB of inputs and a {mb(weights)} MB copy of the "
            f"weights (limits {mb(REAL_INPUT_LIMIT)} MB and {mb(REAL_WEIGHT_LIMIT)} MB); "
            "analyse it with a smaller input")


def _capture_real(model, inputs, kwargs, stats, order, training, dtype,
                  owned: bool = False) -> Capture:
    """Fallback with real tensors. The caller's model runs with private copies of its parameters
    and buffers swapped in (never a deep copy of the model: that fails on attributes such as
    locks), so its own tensors, gradients and running statistics are untouched (an ``owned``
    TorchScript model, never run, is used as it is)."""
    _check_real_size(model, inputs, kwargs, dtype)
    script = isinstance(model, torch.jit.ScriptModule)
    device = _model_device(model)

    def real_input(x):
        if isinstance(x, InputSpec):
            x_dtype = dtype if (dtype is not None and x.dtype.is_floating_point) else x.dtype
            return torch.zeros(x.shape, dtype=x_dtype, device=device)
        return x.detach().clone()

    def real_param(t):
        copy_ = t.detach().clone()
        if dtype is not None and copy_.is_floating_point():
            copy_ = copy_.to(dtype)
        if isinstance(t, nn.Parameter):
            return nn.Parameter(copy_, requires_grad=t.requires_grad)
        return copy_

    real_args, real_kwargs = _map_inputs((tuple(inputs), kwargs), real_input)
    in_tensors = _input_tensors(real_args, real_kwargs)
    liveness = _Liveness()
    for x in in_tensors:
        liveness.add(x)
    if script:
        work = _script_copy(model)
        if dtype is not None:
            work = work.to(dtype)
        for t in list(work.parameters()) + list(work.buffers()):
            liveness.resident.add(_storage_key(t))
        return _capture_script(work, real_args, real_kwargs, stats, order, training, liveness)
    tracker = _ModuleTracker(model, stats, tag_autograd=training)
    mode = _CountingMode(tracker, stats, liveness)
    try:
        with _swapped(model, real_param) as memo:
            for t in memo.values():
                liveness.resident.add(_storage_key(t))
            output_bytes = _run(lambda: model(*real_args, **real_kwargs), tracker, mode,
                                liveness, training)
    except Exception as exc:
        raise _wrap_model_error(exc) from exc
    return Capture(stats, order, mode.op_calls, mode.uncounted, liveness.peak,
                   sum(map(_tensor_nbytes, in_tensors)), output_bytes, training)


def _script_copy(model: torch.jit.ScriptModule) -> torch.jit.ScriptModule:
    """A copy with compiled methods of its own: a deep copy shares them with ``model``, and their
    executors keep the optimized (inlined) plan once ``model`` has run, hiding submodule calls."""
    import io
    import warnings

    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit.save/load are deprecated
            torch.jit.save(model, buffer)
            buffer.seek(0)
            return torch.jit.load(buffer)
    except Exception:
        return copy.deepcopy(model)


def _capture_script(work, real_args, real_kwargs, stats, order, training, liveness) -> Capture:
    """TorchScript: submodules run inside the interpreter, where module hooks never fire. Each op
    is charged to a bucket of its own and moved to its module after the run, from the module
    hierarchy the profiler records (``torchscript_scopes``). What could not be attributed stays on
    the root and is explained in ``capture.warnings`` (a list of sentences)."""
    from layerscope.analysis import torchscript_scopes as ts

    scopes = ts.ScriptModuleScopes(work, stats, tag_autograd=training)
    buckets = ts.OpBuckets()
    mode = ts.ScriptCountingMode(scopes, buckets, liveness)
    try:
        output_bytes = _run(lambda: work(*real_args, **real_kwargs), scopes, mode, liveness,
                            training)
    except Exception as exc:
        raise _wrap_model_error(exc) from exc
    scopes.attribute(buckets)
    cap = Capture(stats, order, mode.op_calls, mode.uncounted, liveness.peak,
                  sum(map(_tensor_nbytes, _input_tensors(real_args, real_kwargs))), output_bytes,
                  training)
    for s in stats.values():  # module hooks never fire inside the interpreter
        s.output_bytes = s.first_output_bytes = None
    cap.warnings = list(scopes.warnings)
    return cap


# ---------------------------------------------------------------- shaping rows
def _subtree(cap: Capture, name: str) -> list[_ModuleStats]:
    out, todo = [], [name]
    while todo:
        n = todo.pop()
        out.append(cap.modules[n])
        todo.extend(cap.modules[n].children)
    return out


def _summed(stats: list[_ModuleStats], training: bool) -> dict[str, int]:
    """The additive columns shared by a row and the totals, summed over ``stats``."""
    fwd = sum((s.forward for s in stats), ZERO)
    out = {"params": sum(s.params for s in stats),
           "weight_bytes": sum(s.weight_bytes for s in stats),
           "buffer_bytes": sum(s.buffer_bytes for s in stats),
           "macs": fwd.macs, "flops": fwd.flops, "bytes_read": fwd.bytes_read,
           "bytes_written": fwd.bytes_written,
           "activation_bytes": sum(s.activation_bytes for s in stats)}
    if training:
        bwd = sum((s.backward for s in stats), ZERO)
        out |= {"backward_macs": bwd.macs, "backward_flops": bwd.flops,
                "backward_bytes_read": bwd.bytes_read, "backward_bytes_written": bwd.bytes_written}
    return out


def _row(stats: list[_ModuleStats], head: _ModuleStats, self_only: bool,
         training: bool) -> LayerRow:
    return LayerRow(name=head.name or "(root)", type=head.type, depth=head.depth,
                    calls=head.calls, input_shapes=head.input_shapes,
                    output_shapes=head.output_shapes, self_only=self_only,
                    **_summed(stats, training))


def _has_own(s: _ModuleStats) -> bool:
    return s.ops > 0 or s.params > 0 or s.buffer_bytes > 0


def layer_rows(cap: Capture, depth: int | None = None) -> list[LayerRow]:
    """Rows at ``depth`` (None: leaf modules). A container above the cut-off gets a
    ``self_only`` row for its own ops and parameters, so rows always sum to the totals."""
    rows = []
    for name in cap.order:
        s = cap.modules[name]
        if depth is not None and s.depth > depth:
            continue
        leaf = not s.children
        if leaf or (depth is not None and s.depth == depth):
            rows.append(_row(_subtree(cap, name), s, False, cap.training))
        elif _has_own(s):
            rows.append(_row([s], s, True, cap.training))
    return rows


def totals(cap: Capture, model: nn.Module, optimizer: str = "adam") -> Totals:
    distinct = {id(p): p for p in model.parameters()}.values()
    trainable = [p for p in distinct if p.requires_grad]
    tot = Totals(trainable_params=sum(p.numel() for p in trainable),
                 peak_activation_bytes=cap.peak_activation_bytes, input_bytes=cap.input_bytes,
                 output_bytes=cap.output_bytes,
                 **_summed(list(cap.modules.values()), cap.training))
    tot.layer_output_bytes, tot.torchinfo_pass_bytes = _layer_outputs(cap)
    if cap.training:
        tot.gradient_bytes = sum(_tensor_nbytes(p) for p in trainable)
        tot.optimizer_state_bytes = OPTIMIZER_STATE_FACTOR[optimizer] * tot.gradient_bytes
    return tot


def _layer_outputs(cap: Capture) -> tuple[int | None, int | None]:
    """(sum of layer outputs, torchinfo's forward/backward pass size), in bytes.

    Sum of layer outputs: the output bytes of every call of every leaf module, in-place results
    counted again (how people add up a summary's output shapes: AlexNet 4,392,864 B).
    torchinfo 1.8 (``ModelStatistics``): for every call of a leaf module that has parameters,
    2 x the bytes of its (first) output tensor, "x2 for gradients". Neither is the memory a
    forward pass needs; see activation_bytes and peak_activation_bytes for that."""
    leaves = [s for s in cap.modules.values() if not s.children]
    if any(s.output_bytes is None for s in leaves):
        return None, None
    return (sum(s.output_bytes for s in leaves),
            2 * sum(s.first_output_bytes for s in leaves if s.has_params))


def uncounted(cap: Capture) -> tuple[list[UncountedOp], float]:
    ops = [UncountedOp(op, n) for op, n in cap.uncounted.most_common()]
    missing = sum(cap.uncounted.values())
    coverage = 1.0 if cap.op_calls == 0 else (cap.op_calls - missing) / cap.op_calls
    return ops, coverage
