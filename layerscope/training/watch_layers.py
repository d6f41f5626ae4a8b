"""The per-layer clock of a watched run (``watch(layers=True)``, ``run --layers``).

Forward time per module from the global module forward hooks (inclusive of the modules inside
it; its own time walks the module tree, never-called containers included), backward time per
module from the autograd nodes its own code made (``analysis.timing.BackwardTimer``, as
``profile --backward`` does), and with ``functions`` a row "MODULE (FUNCTION)" per torch
function a container's own code calls. The step in progress collects its rows here; a closed
step's rows go to the step ledger (``training.step_ledger``) beside its phases, so a layer's
time per step and the phases' are over the same steps.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from layerscope.analysis.capture import tag_graph
from layerscope.analysis.capture.functions import function_name
from layerscope.analysis.timing import BackwardTimer
from layerscope.core import tree
from layerscope.core.stats import kept_samples
from layerscope.training.step_ledger import LayerKey, StepLedger


class LayerClock:
    """Per-layer forward and backward seconds of the step in progress, and the rows of the
    measured steps. ``loading()``: a batch is loading now (a module called then, a transform
    in ``Dataset.__getitem__``, is no layer)."""

    def __init__(self, model: torch.nn.Module | None, clock: Callable[[], float],
                 loading: Callable[[], bool]):
        self.model, self.clock, self.loading = model, clock, loading
        # the step in progress: forward rows (key -> [name, type, calls, s]) and backward
        # seconds (module name -> s)
        self.step_fwd: dict[LayerKey, list[Any]] = {}
        self.step_bwd: dict[str, float] = {}
        # (start, name, module) of the module calls in progress, innermost last
        self.stack: list[tuple[float, str | None, torch.nn.Module]] = []
        self.containers: dict[int, bool] = {}  # id(module) -> it has children
        self.names: dict[int, str] = {}
        # id(module) -> (id(root), its path under that root); id(root) -> every path under it
        # (the never-called containers included): own time walks this tree
        self.paths: dict[LayerKey, tuple[int, str]] = {}
        self.trees: dict[int, list[str]] = {}

    def take_step(self) -> tuple[dict[LayerKey, list[Any]], dict[str, float]]:
        """The rows of the step that just closed; the next step starts with none."""
        out = self.step_fwd, self.step_bwd
        self.step_fwd, self.step_bwd = {}, {}
        return out

    # ---- the hooks ------------------------------------------------------------------
    def pre(self, module: torch.nn.Module, args: Any) -> None:
        stack = self.stack
        if (stack[-1][1] is None if stack else self.loading()):
            stack.append((0.0, None, module))  # a transform loading a batch: no layer
            return
        if not stack and id(module) not in self.names:
            self.name_tree(module)  # an outermost call: name its modules from it
        if stack and torch.is_grad_enabled():
            # nodes not tagged yet were made by the enclosing module's own code
            tag_graph(args, stack[-1][1])
        stack.append((self.clock(), self.names.get(id(module), type(module).__name__), module))

    def post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self.stack:
            return
        t0, name, _ = self.stack.pop()
        t = self.clock() - t0
        if name is None or not torch.is_grad_enabled():
            return  # evaluation, as for the phases
        tag_graph(output, name)  # its backward nodes are charged to it
        row = self.step_fwd.get(id(module))
        if row is None:
            row = self.step_fwd[id(module)] = [name, type(module).__name__, 0, 0.0]
        row[2] += 1
        row[3] += t

    def function_call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``functions``: a torch function call, timed as a row "MODULE (FUNCTION)" when a
        container's own forward code makes it (with gradients on, as for the layers) and it
        returns tensors (``x.size()``, ``x.shape``, ``t.grad_fn`` compute nothing: no row, as
        ``analyze --functions`` has none for them): a child of the module in the tree, so the
        module's own time leaves it out."""
        stack = self.stack
        if (not stack or stack[-1][1] is None or not torch.is_grad_enabled()
                or getattr(func, "__name__", None) == "__get__"):
            return func(*args, **kwargs)
        _, name, module = stack[-1]
        container = self.containers.get(id(module))
        if container is None:
            container = self.containers[id(module)] = next(module.children(), None) is not None
        if not container:
            return func(*args, **kwargs)
        t0 = self.clock()
        out = func(*args, **kwargs)
        t = self.clock() - t0
        if not any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves(out)):
            return out
        fn = function_name(func)
        key = (id(module), fn)
        row = self.step_fwd.get(key)
        if row is None:
            row = self.step_fwd[key] = [f"{name} ({fn})", fn, 0, 0.0]
            if key not in self.paths and id(module) in self.paths:
                root, path = self.paths[id(module)]
                self.paths[key] = (root, tree.function_path(path, fn))
                self.trees[root].append(self.paths[key][1])
        row[2] += 1
        row[3] += t
        return out

    def backward_start(self, outputs: Any, cuda: bool) -> tuple[BackwardTimer, list[Any]]:
        """A backward's node hooks (on this backward's graph only), timing each node for the
        module whose forward made it."""
        timer = BackwardTimer(self.model, cuda=cuda, clock=self.clock)
        handles = timer.instrument([t for t in outputs if isinstance(t, torch.Tensor)])
        timer.start()
        return timer, handles

    def backward_end(self, timer: BackwardTimer, handles: list[Any]) -> None:
        """The backward's hooks removed and its seconds per module added to the step's."""
        for h in handles:
            h.remove()
        for name, seconds in timer.result().items():
            if name:
                self.step_bwd[name] = self.step_bwd.get(name, 0.0) + seconds

    # ---- names and the module tree ----------------------------------------------------
    def name_tree(self, root: torch.nn.Module) -> None:
        """Qualified names of ``root``'s modules (the given model names its own)."""
        if self.model is not None and not self.names:
            self.names.update({id(m): n or type(self.model).__name__
                               for n, m in self.model.named_modules()})
            self.remember_tree(self.model)
        prefix = type(root).__name__
        for n, m in root.named_modules():
            self.names.setdefault(id(m), f"{prefix}.{n}" if n else prefix)
        self.remember_tree(root)

    def remember_tree(self, root: torch.nn.Module) -> None:
        if id(root) in self.trees:
            return
        paths = []
        for n, m in root.named_modules():
            paths.append(n)
            self.paths.setdefault(id(m), (id(root), n))
        self.trees[id(root)] = paths

    def own_seconds(self, fwd: dict[LayerKey, list[Any]]) -> dict[LayerKey, float]:
        """id(module) -> its forward own time in ``fwd`` (``tree.own_time``: inclusive minus
        the nearest descendants that ran, through never-called containers)."""
        inclusive: dict[int, dict[str, float]] = {}  # per root: path -> seconds
        for key, (_, _, _, s) in fwd.items():
            if key in self.paths:
                root, path = self.paths[key]
                inclusive.setdefault(root, {})[path] = s
        kids = {root: tree.children_map(self.trees[root]) for root in inclusive}
        out = {}
        for key in fwd:
            if key in self.paths:
                root, path = self.paths[key]
                out[key] = tree.own_time(path, inclusive[root], kids[root], inclusive[root])
        return out

    def rows(self, ledger: StepLedger) -> list[dict[str, Any]]:
        """Per module: forward calls and seconds (inclusive of the modules inside it), its own
        forward seconds (without the modules it called) and the backward seconds of the
        autograd nodes its own code made, over the ledger's measured steps (the phases' steps:
        warm-up and a step left open are not counted)."""
        measured = ledger.measured()
        steps = max(len(measured), 1)
        fwd, bwd = ledger.layer_totals()
        own = self.own_seconds(fwd)
        # each measured step's forward seconds per module (0 in a step that did not call it):
        # what layerscope diff ranks, as it ranks the phases' per-step seconds
        per_step: dict[LayerKey, list[float]] = {key: [] for key in fwd}
        for step in (ledger.fwd_of[i] for i in measured):
            for key, xs in per_step.items():
                xs.append(step[key][3] if key in step else 0.0)
        rows = [{"name": name, "type": kind, "calls": calls, "forward_s": s,
                 "forward_s_per_step": s / steps,
                 "forward_samples_s": kept_samples(per_step[key]), "own_s": own.get(key, s),
                 "backward_s": bwd.get(name, 0.0)}
                for key, (name, kind, calls, s) in fwd.items()]
        return sorted(rows, key=lambda r: -r["forward_s"])


class FunctionMode(TorchFunctionMode):
    """Sees the outermost torch function calls (``F.relu``, ``Tensor.__add__``, ``torch.cat``;
    while it runs the mode is off, so nested calls are not seen) for
    ``LayerClock.function_call``."""

    def __init__(self, layers: LayerClock):
        super().__init__()
        self.layers = layers

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        return self.layers.function_call(func, args, kwargs or {})
