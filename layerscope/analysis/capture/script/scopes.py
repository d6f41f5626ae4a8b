"""The tracker for TorchScript models: per-op keys during the run, module names after it."""
from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn as nn

from layerscope.analysis.capture.dispatch import CountingMode
from layerscope.analysis.capture.records import ModuleStats
from layerscope.analysis.capture.script.calls import resolve
from layerscope.analysis.capture.script.naming import ScopeNamer
from layerscope.analysis.capture.script.profiler import TraceRecorder
from layerscope.analysis.capture.script.trace import MARK, Event
from layerscope.analysis.capture.tensors import shapes
from layerscope.analysis.capture.tracker import AUTOGRAD_TAG

KEY = "\x00layerscope-op#"  # bucket key of one forward op; never a module name


class OpBuckets(dict):
    """Stats-like dict for ``CountingMode``: any key gets a fresh ``ModuleStats`` bucket."""

    def __missing__(self, key: str) -> ModuleStats:
        bucket = ModuleStats(key, "", 0)
        self[key] = bucket
        return bucket


class ScriptCountingMode(CountingMode):
    """``CountingMode`` that also keeps the output shapes of each op the tracker issued a key for
    (the output shapes of a module call are those of the last op run inside it)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        issued = self.tracker.issued
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if self.tracker.issued != issued:
            self.tracker.note_output(issued, out)
        return out


class ScriptModuleScopes:
    """Tracker for a ``torch.jit.ScriptModule`` with ``ModuleTracker``'s interface: a context
    manager whose ``current()`` is called for each forward op. Names are only known after the run:
    ``current()`` returns a per-op key, and ``attribute(buckets)`` moves the per-op costs to the
    modules and fills ``stats[name].calls / input_shapes / output_shapes``."""

    def __init__(self, model: nn.Module, stats: dict[str, ModuleStats], tag_autograd: bool):
        self.stats = stats
        self.tag_autograd = tag_autograd
        self.namer = ScopeNamer(model, stats)
        for name, typ in self.namer.types.items():
            if name in stats and typ:
                stats[name].type = typ  # "Conv2d", not "RecursiveScriptModule"
        self.warnings: list[str] = []
        self.issued = 0
        self.outputs: dict[int, list] = {}
        self.owners: dict[int, str] = {}
        self._pending_nodes: list[Any] = []
        self._stack: contextlib.ExitStack | None = None
        self._recorder = TraceRecorder(self.warnings)
        self._events: list[Event] | None = None
        self._recording = False

    # -- during the run
    def current(self) -> str:
        i = self.issued
        self.issued += 1
        if self._recording:
            self._recorder.mark(f"{MARK}{i}")
        key = f"{KEY}{i}"
        if self._pending_nodes:
            for node in self._pending_nodes:
                try:
                    node.metadata.setdefault(AUTOGRAD_TAG, key)
                except Exception:
                    pass
            self._pending_nodes = []
        return key

    def note_output(self, index: int, out: Any) -> None:
        try:
            self.outputs[index] = shapes(out)
        except Exception:
            pass

    def _on_node(self, node) -> None:
        # An op's node is created when its dispatch has returned: it belongs to the last op issued.
        # A leaf's AccumulateGrad node is created before the op that first uses the leaf runs: it
        # waits for the next op.
        if self.issued == 0 or "AccumulateGrad" in type(node).__name__:
            self._pending_nodes.append(node)
            return
        try:
            node.metadata.setdefault(AUTOGRAD_TAG, f"{KEY}{self.issued - 1}")
        except Exception:
            pass

    def __enter__(self):
        self._stack = contextlib.ExitStack()
        self._events = None
        # Keep method calls as frames of their own (the optimizing executor inlines them).
        try:
            self._stack.enter_context(torch.jit.optimized_execution(False))
        except Exception:
            pass
        if self.tag_autograd:
            self._hook_node_creation()
        self._recording = self._recorder.start()
        return self

    def _hook_node_creation(self) -> None:
        hook = getattr(torch.autograd.graph, "node_creation_hook", None)
        if hook is None:
            self.warnings.append("TorchScript: this torch has no autograd node creation hook; "
                                 "backward costs stay on the root row")
            return
        try:
            self._stack.enter_context(hook(self._on_node))
        except Exception:
            pass

    def __exit__(self, *exc):
        self._recording = False
        try:
            self._events = self._recorder.stop()
        finally:
            if self._stack is not None:
                self._stack.close()
                self._stack = None
            self._pending_nodes = []
        return False

    # -- after the run
    def attribute(self, buckets: dict[str, ModuleStats]) -> None:
        """Move per-op costs from ``buckets`` to the modules that ran them; fill calls/shapes."""
        try:
            if self._events is not None:
                self.owners = resolve(self._events, self.namer, self.stats, self.outputs,
                                      self.issued, self.warnings)
        except Exception as exc:  # never fail the analysis over attribution
            self.owners = {}
            self.warnings.append("TorchScript: attributing ops to submodules failed "
                                 f"({type(exc).__name__}: {exc}); all costs are on the root row")
        for key, bucket in buckets.items():
            if key.startswith(KEY):
                owner = self.owners.get(int(key[len(KEY):]), "")
            else:
                owner = key if key in self.stats else ""
            target = self.stats[owner]
            target.forward = target.forward + bucket.forward
            target.backward = target.backward + bucket.backward
            target.activation_bytes += bucket.activation_bytes
            target.ops += bucket.ops
        root = self.stats.get("")
        if root is not None and root.calls == 0:
            root.calls = 1
