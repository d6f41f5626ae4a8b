"""Repeated blocks analysed once: a module call whose *structural key* equals an earlier call's
is not traced again; the earlier call's per-module figures are charged to this call's modules and
fresh fake outputs shaped like the earlier ones are returned.

A 126-block Llama-3.1-405B otherwise dispatches ~15,000 ops through FakeTensorMode, 126 times
the same ones; with reuse it dispatches one block's ops and replays 125 records.

The key of a call is everything the fake run of the module's internals can depend on:

- the module tree (class, parameter and buffer shapes/dtypes/strides/requires_grad, children
  and which of them are the same object, every other attribute: primitives by value, anything
  else by identity, so blocks differing in a flag, an int or a per-instance object never share);
- the train/eval flag of every module in it, grad mode, default dtype, autocast and the
  attention counting in force (``ops.aten.attention_counting``: causal or full, and the mask
  structure masked calls are counted by where the call runs: a sliding-window layer's call never
  replays a global layer's);
- the arguments: tensors by type, shape, stride, storage offset, dtype, device, requires_grad and
  which of them share storage; non-tensor values by value (tuples, lists, dicts of primitives).

Buffer and parameter *values* are not in the key: on fake tensors no op sees a value (an op that
needs one raises, and the analysis falls back to a real run without reuse).

A call is recorded only if it is self-contained, so that replaying it is exact: its ops are all
charged to modules of its own subtree, every output owns a fresh storage of exactly its size made
during the call (no aliasing of inputs, parameters or each other), nothing else it made outlives
it, and nothing alive before it dies in it. Otherwise the key is marked "trace every time".
Replaying a record adds, per module, the same calls, ops, costs, activation bytes and output bytes;
raises the peak of live activation bytes by the call's own peak above its entry; adds the same
op count, uncounted ops and attention-kernel tallies (the report's note on causal attention).
Totals, rows, shapes, coverage and the peak are therefore exactly those of the traced run
(tests/test_capture_reuse.py compares both on several models).

Reuse is off for real-tensor runs (a module's outputs there are values that must be computed), in
training (the skipped calls would build no autograd graph, so their backward would not run) and
with ``functions=True`` (per-function buckets are not recorded). Limits: a forward whose result
depends on Python state outside its module and arguments (a global counter), or that mutates
state seen by later calls, could be replayed wrongly; module-level hooks make a module and its
ancestors untraceable-by-record (they are traced every time).
"""
from __future__ import annotations

import contextlib
import functools
from collections import Counter
from dataclasses import dataclass, fields

import torch
import torch.nn as nn

from layerscope.analysis.capture.records import ModuleStats
from layerscope.core.cost import Cost
from layerscope.ops.aten import current_attention_counting

# nn.Module's own bookkeeping attributes: not behaviour a forward can read, except the hooks,
# which are checked separately.
_INTERNAL = frozenset({
    "training", "_parameters", "_buffers", "_non_persistent_buffers_set", "_modules",
    "_backward_pre_hooks", "_backward_hooks", "_is_full_backward_hook", "_forward_hooks",
    "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs", "_state_dict_hooks", "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks", "call_super_init",
    "_compiled_call_impl",
})
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_PRIMITIVE = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device,
              torch.layout, torch.memory_format)
_COUNTED = ("calls", "ops", "activation_bytes", "output_bytes", "first_output_bytes")


def _value_key(v, seen_tensors: dict | None = None):
    """A hashable stand-in for a non-tensor value (by value for primitives and their
    containers), or None when the value cannot be keyed."""
    if isinstance(v, _PRIMITIVE) and not isinstance(v, float) or (
            isinstance(v, float) and v == v):  # NaN != NaN: never a key
        return (type(v), v)
    if isinstance(v, torch.Tensor):
        if seen_tensors is None:
            return None
        storage = v.untyped_storage()._cdata
        alias = seen_tensors.setdefault(storage, len(seen_tensors))
        return (type(v), tuple(v.shape), v.stride(), v.storage_offset(), v.dtype, v.device,
                v.layout, v.requires_grad, v.is_conj(), v.is_neg(), alias)
    if type(v) in (tuple, list, torch.Size):
        items = tuple(_value_key(x, seen_tensors) for x in v)
        return None if None in items else (type(v), items)
    if type(v) is dict:
        items = tuple((k, _value_key(x, seen_tensors)) for k, x in v.items())
        return None if any(not isinstance(k, _PRIMITIVE) or x is None
                           for k, x in items) else (dict, items)
    return None


def _attr_key(v):
    """An attribute of a module: by value when it can be keyed, otherwise by identity (equal
    only for the very same object: a shared config, a function)."""
    key = _value_key(v)
    return key if key is not None else ("id", id(v))


def _tensor_slot_key(t: torch.Tensor | None):
    if t is None:
        return None
    return (type(t), tuple(t.shape), t.stride(), t.dtype, t.device, t.requires_grad)


class _Structure:
    """Interned structural keys of modules (None: never reused)."""

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}
        self.memo: dict[int, int | None] = {}
        self._subtrees: dict[int, list[nn.Module]] = {}

    def subtree(self, m: nn.Module) -> list[nn.Module]:
        """``m`` and every module under it in ``named_modules(remove_duplicate=False)`` order
        (pre-order; a shared module once per place), built from the children's lists."""
        found = self._subtrees.get(id(m))
        if found is None:
            found = [m]
            for child in m._modules.values():
                if child is not None:
                    found += self.subtree(child)
            self._subtrees[id(m)] = found
        return found

    def of(self, m: nn.Module) -> int | None:
        if id(m) in self.memo:
            return self.memo[id(m)]
        self.memo[id(m)] = None  # a cycle stays unkeyed
        self.memo[id(m)] = key = self._compute(m)
        return key

    def _compute(self, m: nn.Module) -> int | None:
        if isinstance(m, torch.jit.ScriptModule) or any(getattr(m, h, None) for h in _HOOKS):
            return None
        if getattr(m, "_compiled_call_impl", None) is not None:
            return None
        attrs = tuple(sorted((k, _attr_key(v)) for k, v in vars(m).items()
                             if k not in _INTERNAL and not isinstance(v, torch.Tensor)))
        if any(isinstance(v, torch.Tensor) for k, v in vars(m).items() if k not in _INTERNAL):
            return None  # plain tensor attributes: set per instance, possibly read as values
        children = []
        for name, child in m._modules.items():
            ck = None if child is None else self.of(child)
            if child is not None and ck is None:
                return None
            children.append((name, ck))
        # which modules of the subtree are the same object (a shared child is charged once)
        subs = self.subtree(m)
        first: dict[int, int] = {}
        sharing = tuple(first.setdefault(id(s), i) for i, s in enumerate(subs))
        key = (type(m),
               tuple((k, _tensor_slot_key(t)) for k, t in m._parameters.items()),
               tuple((k, _tensor_slot_key(t)) for k, t in m._buffers.items()),
               attrs, tuple(children), sharing)
        try:
            return self.ids.setdefault(key, len(self.ids))
        except TypeError:  # an unhashable attribute value slipped through
            return None


def _cost_minus(a: Cost, b: Cost) -> Cost:
    return Cost(*(getattr(a, f.name) - getattr(b, f.name) for f in fields(Cost)))


@dataclass
class _Delta:
    """What one call added to one module's figures."""

    index: int  # position of the module in the recorded module's subtree list
    counted: tuple[int, ...]  # the _COUNTED fields
    forward: Cost
    shapes: tuple[list, list] | None  # the module's first-call shapes, if this call was its first


@dataclass
class _Record:
    deltas: list[_Delta]
    op_calls: int
    uncounted: Counter
    inner_peak: int  # the call's peak of live bytes above the total at its entry
    outputs: object  # the output structure, tensors replaced by (shape, stride, dtype, device)
    tallied: tuple[int, ...]  # what the call added to the cost handlers' tallies (_tallies)


_UNCACHEABLE = object()


class BlockReuse:
    """Installs a recording/replaying ``forward`` on every non-leaf submodule for a fake run."""

    def __init__(self, model: nn.Module, tracker, mode, liveness) -> None:
        self.model = model
        self.tracker = tracker
        self.mode = mode
        self.liveness = liveness
        self.structure = _Structure()
        self.records: dict[tuple, object] = {}
        self.replayed = 0

    @contextlib.contextmanager
    def installed(self):
        """Within the block, repeated calls are replayed; afterwards every module's ``forward``
        is what it was (an instance attribute put back, the class's otherwise)."""
        patched = []
        for m in self.model.modules():
            if (m is self.model or not m._modules or self.structure.of(m) is None
                    or type(m).forward is nn.Module.forward):  # a container never called
                continue
            patched.append((m, m.__dict__.get("forward")))
        try:
            for m, _ in patched:
                m.__dict__["forward"] = self._wrapper(m)
            yield self
        finally:
            for m, before in patched:
                if before is None:
                    del m.__dict__["forward"]
                else:
                    m.__dict__["forward"] = before

    def _wrapper(self, m: nn.Module):
        forward = m.__dict__.get("forward") or type(m).forward.__get__(m)
        subs = self.structure.subtree(m)
        static = self.structure.of(m)

        @functools.wraps(forward)  # inspect.signature(module.forward) still reads forward's
        def reusing_forward(*args, **kwargs):
            return self._call(m, static, subs, forward, args, kwargs)

        return reusing_forward

    def _key(self, static, subs, args, kwargs):
        seen: dict = {}
        arg_key = _value_key((args, kwargs), seen)
        if arg_key is None:
            return None
        try:
            autocast = torch.is_autocast_enabled("cpu")
        except TypeError:  # older torch: no device argument
            autocast = torch.is_autocast_enabled()
        counting = current_attention_counting()
        return (static, tuple(s.training for s in subs), torch.is_grad_enabled(),
                torch.get_default_dtype(), autocast, counting and counting.reuse_key(), arg_key)

    def _call(self, m, static, subs, forward, args, kwargs):
        name = self.tracker.names.get(id(m))
        if name is None or self.mode.paused or self.tracker.current() != name:
            return forward(*args, **kwargs)  # not called through __call__, or not tracked
        key = self._key(static, subs, args, kwargs)
        if key is None:
            return forward(*args, **kwargs)
        rec = self.records.get(key)
        if rec is _UNCACHEABLE:
            return forward(*args, **kwargs)
        if rec is not None:
            assert isinstance(rec, _Record)
            if self._replayable(rec, subs):
                return self._replay(rec, subs)
            return forward(*args, **kwargs)
        out, rec = self._record(subs, forward, args, kwargs)
        self.records[key] = rec if rec is not None else _UNCACHEABLE
        return out

    # ------------------------------------------------------------------ recording
    def _owners(self, subs) -> list[tuple[int, str]]:
        """(index in the subtree, stats key) of each distinct module of the subtree."""
        seen, out = set(), []
        for i, s in enumerate(subs):
            owner = self.tracker.names.get(id(s))
            if owner is not None and owner not in seen:
                seen.add(owner)
                out.append((i, owner))
        return out

    def _record(self, subs, forward, args, kwargs):
        live, stats = self.liveness, self.tracker.stats
        owners = self._owners(subs)
        before = {o: _snapshot(stats[o]) for _, o in owners}
        live.purge()
        entry = set(live.live)
        base, saved_peak = live.total, live.peak
        live.peak = base
        op_calls, uncounted = self.mode.op_calls, Counter(self.mode.uncounted)
        tallies = _tallies()
        try:
            out = forward(*args, **kwargs)
        finally:
            inner_peak = live.peak - base
            live.peak = max(saved_peak, live.peak)
        live.purge()
        outputs = _output_layout(out, set(live.live) - entry, live)
        if outputs is None or not entry.issubset(live.live):
            return out, None
        deltas = _deltas(owners, before, stats)
        calls = self.mode.op_calls - op_calls
        if sum(d.counted[1] for d in deltas) != calls:  # an op charged outside the subtree
            return out, None
        extra = Counter(self.mode.uncounted)
        extra.subtract(uncounted)
        tallied = tuple(a - b for a, b in zip(_tallies(), tallies, strict=True))
        return out, _Record(deltas, calls, +extra, inner_peak, outputs, tallied)

    # ------------------------------------------------------------------ replaying
    def _replayable(self, rec: _Record, subs) -> bool:
        """False when a module first called here has no recorded first-call shapes (it had been
        called before the recorded call): trace this call instead."""
        stats, names = self.tracker.stats, self.tracker.names
        return all(d.shapes is not None or d.counted[0] == 0
                   or stats[names[id(subs[d.index])]].calls > 0 for d in rec.deltas)

    def _replay(self, rec: _Record, subs):
        stats, names, live = self.tracker.stats, self.tracker.names, self.liveness
        for d in rec.deltas:
            s = stats[names[id(subs[d.index])]]
            if s.calls == 0 and d.counted[0] > 0 and d.shapes is not None:
                s.input_shapes, s.output_shapes = d.shapes
            for f, c in zip(_COUNTED, d.counted, strict=True):
                setattr(s, f, getattr(s, f) + c)
            s.forward = s.forward + d.forward
        self.mode.op_calls += rec.op_calls
        self.mode.uncounted.update(rec.uncounted)
        _add_tallies(rec.tallied)
        live.purge()
        live.peak = max(live.peak, live.total + rec.inner_peak)
        paused, self.mode.paused = self.mode.paused, True  # making outputs is no op of the model
        try:
            out = _rebuild(rec.outputs)
        finally:
            self.mode.paused = paused
        for t in _tensors_of(out):
            live.add(t)
        self.replayed += 1
        return out


def _deltas(owners, before, stats: dict[str, ModuleStats]) -> list[_Delta]:
    """What a call added to each module of its subtree (``before``: ``_snapshot``s)."""
    deltas = []
    for index, owner in owners:
        s, (counted0, fwd0) = stats[owner], before[owner]
        counted = tuple(getattr(s, f) - c for f, c in zip(_COUNTED, counted0, strict=True))
        if not any(counted) and s.forward == fwd0:
            continue
        first = counted0[0] == 0 and counted[0] > 0
        deltas.append(_Delta(index, counted, _cost_minus(s.forward, fwd0),
                             (s.input_shapes, s.output_shapes) if first else None))
    return deltas


def _tallies() -> tuple[int, ...]:
    """The counts cost handlers keep beside the module figures (the attention kernels an
    ``attention_counting`` met), so that a replayed call adds them too."""
    counting = current_attention_counting()
    if counting is None:
        return ()
    return tuple(getattr(counting, f.name) for f in fields(counting)
                 if isinstance(getattr(counting, f.name), int))


def _add_tallies(added: tuple[int, ...]) -> None:
    counting = current_attention_counting()
    if counting is None or not added:
        return
    names = [f.name for f in fields(counting) if isinstance(getattr(counting, f.name), int)]
    for name, n in zip(names, added, strict=True):
        setattr(counting, name, getattr(counting, name) + n)


def _snapshot(s: ModuleStats) -> tuple[tuple[int, ...], Cost]:
    return tuple(getattr(s, f) for f in _COUNTED), s.forward


class _Out:
    """An output tensor's layout in a record."""

    __slots__ = ("shape", "stride", "dtype", "device")

    def __init__(self, t: torch.Tensor) -> None:
        self.shape, self.stride = tuple(t.shape), t.stride()
        self.dtype, self.device = t.dtype, t.device


def _output_layout(out, created: set[int], live):
    """The output with tensors replaced by ``_Out``, or None when replaying it would not be
    exact: an output that is not a fresh, exactly-sized storage of its own made in the call,
    or anything else made in the call still alive."""
    owned: set[int] = set()

    def walk(v):
        if isinstance(v, torch.Tensor):
            storage = v.untyped_storage()
            key = storage._cdata
            if (key not in created or key in owned or v.requires_grad
                    or v.storage_offset() != 0 or v.layout != torch.strided):
                raise _NotReplayable
            need = (1 + sum((n - 1) * st for n, st in zip(v.shape, v.stride(), strict=True))
                    if v.numel() else 0) * v.element_size()
            if storage.nbytes() != need:
                raise _NotReplayable
            owned.add(key)
            return _Out(v)
        if type(v) in (tuple, list):
            return type(v)(walk(x) for x in v)
        if type(v) is dict:
            return {k: walk(x) for k, x in v.items()}
        if _value_key(v) is None:
            raise _NotReplayable
        return v

    try:
        layout = walk(out)
    except _NotReplayable:
        return None
    return layout if owned == created else None


class _NotReplayable(Exception):
    pass


def _rebuild(layout):
    if isinstance(layout, _Out):
        return torch.empty_strided(layout.shape, layout.stride, dtype=layout.dtype,
                                   device=layout.device)
    if type(layout) in (tuple, list):
        return type(layout)(_rebuild(x) for x in layout)
    if type(layout) is dict:
        return {k: _rebuild(x) for k, x in layout.items()}
    return layout


def _tensors_of(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for x in out for t in _tensors_of(x)]
    if isinstance(out, dict):
        return [t for x in out.values() for t in _tensors_of(x)]
    return []
