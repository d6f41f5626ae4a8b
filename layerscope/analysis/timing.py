"""Low-overhead timers: per-module forward time and per-module backward time.

Forward: each timed module's forward is wrapped for the instrumented run only; the wrapper only
reads a clock (CPU) or records a pre-allocated CUDA event (GPU, no synchronisation: the events
are read once after the run). Aggregation happens after the run, never inside the wrapper.

Backward: autograd nodes are tagged with the module whose forward created them (as in the static
analysis), and each node gets a hook that closes its time slot; the time is charged to the node's
module. On CUDA the hooks record events, read after the backward pass.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from layerscope.analysis.capture import AUTOGRAD_TAG, ModuleTracker
from layerscope.analysis.capture.functions import function_name
from layerscope.core import tree

Clock = Callable[[], float]


class _EventPool:
    """Pre-allocated CUDA events, handed out in order and reused run after run."""

    def __init__(self) -> None:
        self.events: list = []
        self.used = 0

    def take(self):
        if self.used == len(self.events):
            self.events.append(torch.cuda.Event(enable_timing=True))
        ev = self.events[self.used]
        self.used += 1
        return ev

    def reset(self) -> None:
        self.used = 0


class ForwardTimer:
    """Inclusive forward time per module for one run (seconds, summed over calls), and which
    modules were called (``called``: own time subtracts the nearest called descendants).

    Each timed module's ``forward`` is shadowed by an instance attribute that reads the clock
    around the original call. nn.Module's hook machinery costs ~10 us per module call (it leaves
    the fast path of ``_call_impl``); the shadowing wrapper costs about one Python call. The
    instance attribute is deleted on exit (or the user's own instance ``forward`` put back).

    ``functions``: (module, function) pairs whose calls are timed too, each under
    ``tree.function_path(module, function)`` (a child of the module): the outermost torch
    function calls (``F.relu``, ``torch.cat``, ``Tensor.__add__``...) that the module's own
    code makes, seen by a ``TorchFunctionMode`` while the timer is entered (as the static
    analysis's ``--functions`` sees them). The mode costs every torch call of the run a
    Python call."""

    def __init__(self, modules: list[tuple[str, nn.Module]], cuda: bool = False,
                 clock: Clock = time.perf_counter,
                 functions: list[tuple[str, str]] | None = None):
        self.names = [name for name, _ in modules]
        self.modules = [m for _, m in modules]
        self.cuda = cuda
        self.clock = clock
        self._saved: list[tuple[nn.Module, object]] = []
        self._pool = _EventPool()
        # (module, function) -> its slot, after the modules' slots
        self._slots = {pair: len(self.names) + i for i, pair in enumerate(functions or [])}
        self.names += [tree.function_path(m, fn) for m, fn in functions or []]
        self._running: list[str] = []  # the timed modules whose forward is running, innermost last
        self._mode: _FunctionClock | None = None
        n = len(self.names)
        self._acc = [0.0] * n
        self._calls = [0] * n
        self._pairs: list[list] = [[] for _ in range(n)]

    def _wrap(self, i: int, forward):
        acc, calls, clock = self._acc, self._calls, self.clock
        if self.cuda:
            pairs, pool = self._pairs[i], self._pool

            def timed(*args, **kwargs):
                start = pool.take()
                start.record()
                out = forward(*args, **kwargs)
                end = pool.take()
                end.record()
                pairs.append((start, end))
                return out
        else:
            def timed(*args, **kwargs):
                t0 = clock()
                out = forward(*args, **kwargs)
                acc[i] += clock() - t0
                calls[i] += 1
                return out
        return timed

    def __enter__(self):
        for i in range(len(self._acc)):
            self._acc[i] = 0.0
            self._calls[i] = 0
            self._pairs[i].clear()
        self._pool.reset()
        try:
            for i, m in enumerate(self.modules):
                own = m.__dict__.get("forward", _MISSING)
                self._saved.append((m, own))
                forward = self._named(self.names[i], m.forward) if self._slots else m.forward
                m.forward = self._wrap(i, forward)
            if self._slots:
                self._running.clear()
                self._mode = _FunctionClock(self)
                self._mode.__enter__()
        except BaseException:
            self.__exit__()  # put back the wrappers already installed
            raise
        return self

    def _named(self, name: str, forward):
        running = self._running

        def call(*args, **kwargs):
            running.append(name)
            try:
                return forward(*args, **kwargs)
            finally:
                running.pop()
        return call

    def __exit__(self, *exc):
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)
        for m, own in reversed(self._saved):
            if own is _MISSING:
                del m.forward
            else:
                m.forward = own
        self._saved.clear()
        return False

    def result(self) -> dict[str, float]:
        """Per-module seconds of the last run (call after the run; synchronises once on CUDA)."""
        if self.cuda:
            torch.cuda.synchronize()
            return {name: sum(s.elapsed_time(e) for s, e in pairs) / 1e3
                    for name, pairs in zip(self.names, self._pairs)}
        return dict(zip(self.names, self._acc))

    def called(self) -> set[str]:
        """The timed modules whose ``forward`` ran in the last run (a ``ModuleList`` or
        ``ModuleDict`` never does: its blocks are called from its parent's code)."""
        if self.cuda:
            return {name for name, pairs in zip(self.names, self._pairs) if pairs}
        return {name for name, n in zip(self.names, self._calls) if n}

    def calls(self) -> dict[str, int]:
        """Calls per timed module and function in the last run."""
        if self.cuda:
            return {name: len(pairs) for name, pairs in zip(self.names, self._pairs)}
        return dict(zip(self.names, self._calls))


_MISSING = object()


class _FunctionClock(TorchFunctionMode):
    """Times the torch function calls a ``ForwardTimer`` was asked for: the outermost ones
    (while this runs, the mode is off, so ``F.relu`` calling ``torch.relu`` is one call) made
    while the innermost running timed module is the pair's module."""

    def __init__(self, timer: ForwardTimer):
        super().__init__()
        self.timer = timer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        running = self.timer._running
        slot = self.timer._slots.get((running[-1], function_name(func))) if running else None
        if slot is None:
            return func(*args, **kwargs)
        return self.timer._wrap(slot, func)(*args, **kwargs)


class BackwardTimer:
    """Backward time per module: autograd nodes timed and charged to their module's name."""

    def __init__(self, model: nn.Module, cuda: bool = False, clock: Clock = time.perf_counter):
        self.model = model
        self.cuda = cuda
        self.clock = clock
        self._acc: dict[str, float] = defaultdict(float)
        self._pairs: dict[str, list] = defaultdict(list)
        self._pool = _EventPool()
        self._last: list = [None]

    def tagging(self):
        """A context in which every module's forward tags the autograd nodes it creates."""
        return ModuleTracker(self.model, None, tag_autograd=True)

    # -- backward: time every node of the graph behind ``outputs``
    def instrument(self, outputs: list[torch.Tensor]) -> list:
        """Register timing hooks on every node reachable from ``outputs``; returns handles."""
        self._acc.clear()
        self._pairs.clear()
        self._pool.reset()
        handles, seen = [], set()
        todo = [t.grad_fn for t in outputs if t.grad_fn is not None]
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            name = node.metadata.get(AUTOGRAD_TAG, "")
            handles.append(node.register_hook(self._node_hooks(name)))
            todo.extend(f for f, _ in node.next_functions if f is not None)
        return handles

    def start(self) -> None:
        """Mark the start of the backward pass (the first node's time runs from here)."""
        if self.cuda:
            ev = self._pool.take()
            ev.record()
            self._last[0] = ev
        else:
            self._last[0] = self.clock()

    def _node_hooks(self, name: str):
        # A node's time runs from the end of the previous node to its own end, so the engine's
        # scheduling work is charged to the node it schedules and the nodes tile the pass.
        last = self._last
        if self.cuda:
            pairs, pool = self._pairs[name], self._pool

            def post(grad_inputs, grad_outputs):
                ev = pool.take()
                ev.record()
                pairs.append((last[0], ev))
                last[0] = ev
        else:
            acc, clock = self._acc, self.clock

            def post(grad_inputs, grad_outputs):
                now = clock()
                acc[name] += now - last[0]
                last[0] = now
        return post

    def result(self) -> dict[str, float]:
        if self.cuda:
            torch.cuda.synchronize()
            return {name: sum(s.elapsed_time(e) for s, e in pairs) / 1e3
                    for name, pairs in self._pairs.items()}
        return dict(self._acc)
