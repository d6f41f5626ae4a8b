"""Which torch-level function is running (``--functions``): a ``TorchFunctionMode`` sees every
``torch.add``, ``F.relu``, ``Tensor.__add__``, ``torch.flatten``... call, so the aten ops a
container's own forward dispatches can be charged to (module, function) instead of one
"(own ops)" lump. Only the outermost call counts: while a mode's ``__torch_function__`` runs, the
mode is off, so ``F.relu`` calling ``torch.relu`` is seen once, as ``relu``."""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from layerscope.analysis.capture.records import ModuleStats
from layerscope.analysis.capture.tensors import shapes
from layerscope.analysis.capture.tracker import AUTOGRAD_TAG

# Key in ``node.metadata`` under which, in training, an autograd node made by a module's own
# code holds the function that made it, so its backward ops are split like the forward ones.
FUNCTION_TAG = "layerscope.function"


def tag_function(out, fn: str) -> None:
    """Tag the autograd nodes a function call just made (reachable from ``out``, tagged neither
    with a module, which a child module or the caller's arguments would be, nor with an earlier
    function) with ``fn``."""
    todo = [t.grad_fn for t in pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while todo:
        node = todo.pop()
        meta = node.metadata
        if AUTOGRAD_TAG in meta or FUNCTION_TAG in meta:
            continue
        meta[FUNCTION_TAG] = fn
        todo.extend(f for f, _ in node.next_functions if f is not None)


def function_name(func) -> str:
    """A short name for a torch function: ``Tensor.__add__`` -> ``add``, ``F.relu`` -> ``relu``,
    ``Tensor.__matmul__`` -> ``matmul``; in-place and reflected dunders keep their letter
    (``iadd``, ``radd``) and in-place methods their underscore (``add_``), so that they stay
    distinct from the plain call."""
    name = getattr(func, "__name__", None) or type(func).__name__
    return name[2:-2] if len(name) > 4 and name[:2] == name[-2:] == "__" else name


class FunctionTracker(TorchFunctionMode):
    """Names the outermost torch function running in each module's own code.

    ``current(module)`` is the function the module now running (per ``tracker``) called, or None
    when the op comes from elsewhere (a child module, or code outside any torch function). Each
    call opens a new ``call`` number, so that ``charge`` counts calls that dispatched ops."""

    def __init__(self, tracker):
        super().__init__()
        self.tracker = tracker
        self.running: tuple[str, str, int] | None = None
        self.calls = 0
        self._first: tuple | None = None  # (args, kwargs) of the call running, for shapes
        self._bucket: ModuleStats | None = None  # where the running call's ops went

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.running is not None:  # nested inside a call we already track
            return func(*args, **kwargs)
        self.calls += 1
        self.running = (self.tracker.current(), function_name(func), self.calls)
        self._first = (args, kwargs)
        try:
            out = func(*args, **kwargs)
        finally:
            bucket, self._bucket = self._bucket, None
            self.running = None
        if bucket is not None:
            if bucket.calls == 1 and not bucket.output_shapes:
                bucket.output_shapes = shapes(out)
            if self.tracker.tag_autograd:
                tag_function(out, bucket.type)
        return out

    def bucket(self, owner: str, stats: ModuleStats) -> ModuleStats | None:
        """The (module, function) bucket a forward op of ``owner`` is charged to, or None; the
        first op of a call counts the call (and records its input shapes)."""
        if self.running is None:
            return None
        module, fn, call = self.running
        if module != owner:
            return None
        b = stats.functions.get(fn)
        if b is None:
            b = stats.functions[fn] = ModuleStats(stats.name, fn, stats.depth)
        if self._bucket is None:
            self._bucket = b
            b.calls += 1
            if b.calls == 1:
                b.input_shapes = shapes(self._first)
        return b

    @staticmethod
    def backward_bucket(node, stats: ModuleStats) -> ModuleStats | None:
        """The bucket a backward op of autograd ``node`` (charged to ``stats``) goes to."""
        fn = node.metadata.get(FUNCTION_TAG)
        return None if fn is None else stats.functions.get(fn)
