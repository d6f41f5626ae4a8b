"""The counting TorchDispatchMode: every aten op is costed by the handlers of
``layerscope.ops.aten`` and charged to the module running it (forward) or to the module whose
forward created the autograd node running it (backward)."""
from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from layerscope.analysis.capture.liveness import Liveness
from layerscope.analysis.capture.records import ModuleStats
from layerscope.analysis.capture.tensors import described, tensor_nbytes, tensors
from layerscope.analysis.capture.tracker import AUTOGRAD_TAG
from layerscope.core.cost import Cost
from layerscope.ops.aten import ATEN
from layerscope.ops.registry import ALLOC, VIEW


class CountingMode(TorchDispatchMode):
    """Costs every aten op and charges it to the module (forward) or autograd node (backward).

    ``tracker`` is anything with ``current()`` naming the owner of a forward op (a
    ``ModuleTracker``, or TorchScript's per-op keys); ``stats`` maps owners to ``ModuleStats``.
    Ops without a handler are counted in ``uncounted``; ``paused`` skips the ops run meanwhile
    (the ones-like gradients of the backward pass)."""

    def __init__(self, tracker, stats: dict[str, ModuleStats], liveness: Liveness):
        super().__init__()
        self.tracker = tracker
        self.stats = stats
        self.liveness = liveness
        self.uncounted: Counter = Counter()
        self.op_calls = 0
        self.paused = False
        self.functions = None  # a FunctionTracker (--functions): own ops charged per function too
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
        owner = node.metadata.get(AUTOGRAD_TAG, "") if backward else self.tracker.current()
        stats = self.stats[owner]
        stats.ops += 1
        bucket = None
        if self.functions is not None:
            bucket = self.functions.backward_bucket(node, stats) if backward else \
                self.functions.bucket(owner, stats)
        if bucket is not None:
            bucket.ops += 1

        entry, kind, packet = self._entry(func)
        self.liveness.purge()
        out_tensors = tensors(out)
        created = sum(self.liveness.add(t) for t in out_tensors)
        if not backward:
            stats.activation_bytes += created
            if bucket is not None:
                bucket.activation_bytes += created
        if kind is None:
            self.uncounted[packet] += 1
            return out
        if kind == VIEW or kind == ALLOC:
            return out
        op = entry.handler(described(args), described(kwargs), described(out))
        cost = Cost(op.macs, op.flops, sum(map(tensor_nbytes, tensors((args, kwargs)))),
                    sum(map(tensor_nbytes, out_tensors)))
        if backward:
            stats.backward = stats.backward + cost
            if torch.is_grad_enabled():  # a checkpointed segment's forward, recomputed
                stats.recompute_flops += op.flops
            else:  # a backward kernel's own recomputation (the attention scores)
                stats.recompute_flops += op.recompute
            if bucket is not None:
                bucket.backward = bucket.backward + cost
        else:
            stats.forward = stats.forward + cost
            if bucket is not None:
                bucket.forward = bucket.forward + cost
        return out
