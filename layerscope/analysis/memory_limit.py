"""``--memory-limit``: a memory limit for a whole run (``LimitGuard``, its docstring says what
it counts and when it refuses); the out-of-memory errors it raises are read by
``memory_oom``."""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from layerscope.analysis.capture import AUTOGRAD_TAG, tag_graph
from layerscope.analysis.capture.tensors import storage_key, tensors
from layerscope.analysis.memory_log import Storage
from layerscope.analysis.memory_oom import (
    asked_bytes,
    error_name,
    is_out_of_memory,
    where_failed,
)


def _signature(x: Any) -> Any:
    """What an op's output sizes depend on, of one argument: a tensor's layout, or the value."""
    if isinstance(x, torch.Tensor):
        return (x.shape, x.stride(), x.dtype, x.device.type)
    return x


class LimitGuard(TorchDispatchMode):
    """``--memory-limit``: every tensor storage a whole run (a user's script, a recipe's
    training) creates, counted once while it lives, against ``limit`` bytes. An op whose new
    storages would take the live total above the limit raises ``torch.OutOfMemoryError`` (what
    a CUDA allocation failure raises, a ``RuntimeError``; torch's CPU allocator raises a plain
    ``RuntimeError``), so a script that catches out-of-memory errors behaves as on a GPU,
    before it runs: its new bytes are what the op's meta kernel
    gives for the same arguments (nothing is allocated for them); an op without a meta kernel
    (data-dependent shapes: ``nonzero``) runs, and is refused right after, its outputs dropped.
    Each refusal, and a real out-of-memory error (``post_mortem_of``), leaves a post-mortem:
    the live set at that moment by module and kind (``live_rows``'s rows), the op, module and
    phase that asked, and the bytes asked.

    What is counted: storages made by aten ops while the guard is on (tensors made before it,
    and memory outside torch's tensors, are not). The module is the innermost one whose
    forward is running (global forward hooks; in backward, the module whose forward made the
    autograd node); the phase is ``optimizer`` inside ``optimizer.step()``, ``backward`` in the
    autograd engine, ``forward`` inside a module's forward, else ``other``. Kinds are given at
    the failure: parameters and buffers of the modules called, their gradients, the state of
    the optimizers that stepped, the outermost forward's inputs and outputs, what a forward
    made with gradients on (activations), everything else temporaries."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.live: dict[int, Storage] = {}
        self.total = 0
        self.stack: list[str] = []
        self.names: dict[int, str] = {}
        self.roots: dict[int, Any] = {}  # id -> weakref of each outermost module called
        self.optimizers: list[Any] = []  # weakrefs
        self.inputs: set[int] = set()  # storages of the last outermost forward's inputs
        self.outputs: set[int] = set()
        self.opt_depth = 0
        self.post_mortems: list[dict[str, Any]] = []  # every refusal, in order
        # weak references: an exception holds its traceback's frames, and with them the
        # script's tensors; keeping it would keep them alive after the script caught it
        self._raised: list[tuple[Any, dict[str, Any]]] = []
        self._schemas: dict[Any, bool] = {}
        self._aliases: dict[Any, str] = {}  # op -> "view", "write" or "new" (its schema)
        self._purge_at = 1024  # dead entries are dropped when the table grows past this
        self._predicted: dict[tuple[Any, ...], int | None] = {}  # (op, signature) -> bytes
        self._undo: list[Callable[[], None]] = []

    # ---- install / remove --------------------------------------------------------
    def __enter__(self):
        from torch.nn.modules import module as _module
        from torch.optim import optimizer as _optim

        handles = [_module.register_module_forward_pre_hook(self._pre),
                   _module.register_module_forward_hook(self._post, always_call=True),
                   _optim.register_optimizer_step_pre_hook(self._opt_pre),
                   _optim.register_optimizer_step_post_hook(self._opt_post)]
        self._undo = [h.remove for h in handles]
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            while self._undo:
                self._undo.pop()()
            self.stack.clear()

    # ---- where the run is ----------------------------------------------------------
    def _pre(self, module, args):
        if not self.stack and id(module) not in self.names:
            self.roots[id(module)] = weakref.ref(module)
            for name, m in module.named_modules():
                self.names.setdefault(id(m), name)
        if not self.stack:
            self.inputs = {storage_key(t) for t in tensors(args)}
        self.stack.append(self.names.get(id(module), type(module).__name__))

    def _post(self, module, args, output):
        if not self.stack:
            return
        name = self.stack.pop()
        if torch.is_grad_enabled():
            tag_graph(output, name)
        if not self.stack:
            self.outputs = {storage_key(t) for t in tensors(output)}

    def _opt_pre(self, opt, args, kwargs):
        if not any(r() is opt for r in self.optimizers):
            self.optimizers.append(weakref.ref(opt))
        self.opt_depth += 1

    def _opt_post(self, opt, args, kwargs):
        self.opt_depth = max(self.opt_depth - 1, 0)

    def where(self) -> tuple[str, str]:
        """(phase, module) of the op running now."""
        node = torch._C._current_autograd_node()
        if self.opt_depth:
            return "optimizer", self.stack[-1] if self.stack else "(optimizer)"
        if node is not None:
            return "backward", node.metadata.get(AUTOGRAD_TAG, "")
        if self.stack:
            return "forward", self.stack[-1]
        return "other", ""

    # ---- counting --------------------------------------------------------------------
    def _purge(self) -> None:
        dead = [k for k, s in self.live.items() if s.ref.expired()]
        for k in dead:
            self.total -= self.live.pop(k).nbytes

    def _has_device(self, func) -> bool:
        known = self._schemas.get(func)
        if known is None:
            known = self._schemas[func] = any(a.name == "device"
                                              for a in func._schema.arguments)
        return known

    def _alias(self, func) -> str:
        """"view": every output is a view of an input (no new memory); "write": an output is
        an input written in place (an ``out=`` tensor may grow: checked after the op); "new"."""
        known = self._aliases.get(func)
        if known is None:
            infos = [r.alias_info for r in func._schema.returns]
            known = ("write" if any(i is not None and i.is_write for i in infos) else
                     "view" if infos and all(i is not None for i in infos) else "new")
            self._aliases[func] = known
        return known

    def _predict(self, func, args, kwargs) -> int | None:
        """The bytes of the new storages ``func`` would make (its meta kernel), or None."""
        alias = self._alias(func)
        if alias != "new":
            return 0 if alias == "view" else None
        # a training loop repeats its ops on the same shapes: the meta kernel (often Python
        # reference code) runs once per op and signature
        key = (func, *map(_signature, pytree.tree_leaves((args, kwargs))))
        try:
            return self._predicted[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable argument: no cache
            return self._meta_bytes(func, args, kwargs)
        if len(self._predicted) > 100_000:
            self._predicted.clear()
        found = self._predicted[key] = self._meta_bytes(func, args, kwargs)
        return found

    def _meta_bytes(self, func, args, kwargs) -> int | None:
        sizes: dict[int, int] = {}
        meta_in = False  # an op on the meta device (a model built there): no memory

        def meta(t: torch.Tensor) -> torch.Tensor:
            nonlocal meta_in
            meta_in = meta_in or t.is_meta
            m = t.to("meta")
            sizes[m.untyped_storage()._cdata] = m.untyped_storage().nbytes()
            return m

        try:
            margs, mkwargs = pytree.tree_map_only(torch.Tensor, meta, (args, kwargs))
            if self._has_device(func):
                meta_in = meta_in or str(kwargs.get("device")).startswith("meta")
                mkwargs = {**mkwargs, "device": torch.device("meta")}
            out = func(*margs, **mkwargs)
        except Exception:  # no meta kernel, data-dependent shapes: checked after the op
            return None
        new, seen = 0, set()
        for t in tensors(out) if not meta_in else ():
            s = t.untyped_storage()
            if s._cdata in seen:
                continue
            seen.add(s._cdata)
            new += max(s.nbytes() - sizes[s._cdata], 0) if s._cdata in sizes else s.nbytes()
        return new

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(isinstance(t, FakeTensor) for t in tensors((args, kwargs))):
            # fake tensors (a static count the run makes, such as train's FLOPs of its
            # step) hold no memory; their meta sizes are not asked for (a fake tensor moved
            # to the meta device outside its mode hangs)
            return func(*args, **kwargs)
        # the total counts storages freed since the last purge: exact once purged, so a
        # purge comes before any refusal (and when the table has grown)
        if len(self.live) > self._purge_at:
            self._purge()
            self._purge_at = max(1024, 2 * len(self.live))
        need = self._predict(func, args, kwargs)
        if need and self.total + need > self.limit:
            self._purge()
            if self.total + need > self.limit:
                self._refuse(func, need)
        out = func(*args, **kwargs)
        added = self._count(out)
        if need is None and self.total > self.limit:
            self._purge()
            if self.total > self.limit:
                del out  # the only reference: its storages are freed before the post-mortem
                self._purge()
                self._refuse(func, added)
        return out

    def _count(self, out: Any) -> int:
        """Count ``out``'s new storages; returns their bytes."""
        phase, module = self.where()
        added = 0
        for t in tensors(out):
            if t.is_meta:  # no memory behind it
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            known = self.live.get(key)
            if known is not None and known.nbytes == storage.nbytes() \
                    and not known.ref.expired():
                continue
            if known is not None:  # resized in place, or a freed storage's address reused
                self.total -= known.nbytes
            s = Storage(storage.nbytes(), 0, phase, module, StorageWeakRef(storage),
                        "activations" if phase == "forward" and torch.is_grad_enabled()
                        else None)
            self.live[key] = s
            self.total += s.nbytes
            added += s.nbytes
        return added

    # ---- the post-mortem ----------------------------------------------------------
    def _kinds(self) -> dict[int, tuple[str, str]]:
        """storage key -> (module, kind) of the storages whose kind the run's objects say."""
        found: dict[int, tuple[str, str]] = {}
        owner: dict[int, str] = {}
        for ref in self.roots.values():
            root = ref()
            if root is None:
                continue
            for m in root.modules():
                name = self.names.get(id(m), "")
                for table, kind in ((m._parameters, "parameters"), (m._buffers, "buffers")):
                    for t in table.values():
                        if t is None:
                            continue
                        owner[id(t)] = name
                        found.setdefault(storage_key(t), (name, kind))
                        if kind == "parameters" and t.grad is not None:
                            found.setdefault(storage_key(t.grad), (name, "gradients"))
        for ref in self.optimizers:
            opt = ref()
            if opt is None:
                continue
            for p, state in opt.state.items():
                for v in state.values():
                    if isinstance(v, torch.Tensor) and v.dim():
                        found.setdefault(storage_key(v), (owner.get(id(p), "(optimizer)"),
                                                          "optimizer_state"))
        return found

    def snapshot(self) -> list[tuple[str, str, int]]:
        """(module, kind, bytes) of the live set now, largest first (sums to ``total``)."""
        self._purge()
        kinds = self._kinds()
        rows: dict[tuple[str, str], int] = {}
        for key, s in self.live.items():
            if key in kinds:
                module, kind = kinds[key]
            elif key in self.inputs:
                module, kind = "", "inputs"
            elif key in self.outputs:
                module, kind = s.module, "outputs"
            else:
                module, kind = s.module, s.kind or "temporaries"
            rows[(module, kind)] = rows.get((module, kind), 0) + s.nbytes
        return sorted(((m, k, b) for (m, k), b in rows.items()), key=lambda r: (-r[2], r[0]))

    def _post_mortem(self, op: str | None, asked: int | None, error: str) -> dict[str, Any]:
        phase, module = self.where()
        rows = self.snapshot()
        return {"error": error, "limit_bytes": self.limit, "asked_bytes": asked,
                "op": op, "module": module, "phase": phase,
                "live_bytes": sum(b for _, _, b in rows),
                "by_module_kind": [{"module": m, "kind": k, "bytes": b} for m, k, b in rows]}

    def _refuse(self, func, need: int) -> None:
        op = str(func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else func)
        phase, module = self.where()
        message = (f"layerscope --memory-limit: tried to allocate {need} bytes in "
                   f"{module or 'the top level'} ({op}, {phase}) with {self.total} bytes live; "
                   f"the limit is {self.limit} bytes")
        pm = self._post_mortem(op, need, "torch.OutOfMemoryError")
        exc = torch.OutOfMemoryError(message)
        self.post_mortems.append(pm)
        self._raised.append((weakref.ref(exc), pm))
        try:
            raise exc
        finally:  # no cycle exception -> traceback -> this frame -> exception: the script's
            del exc  # tensors in the traceback's frames go when the script drops the error

    def post_mortem_of(self, exc: BaseException | None) -> dict[str, Any] | None:
        """The post-mortem of the error a run ended with: the guard's own refusal (found in
        the exception's cause/context chain too), or a real out-of-memory error (the live set
        now; the bytes asked read from its message); None for any other end."""
        seen = 0
        e = exc
        while e is not None and seen < 32:
            for mine, pm in self._raised:
                if e is mine():
                    return pm
            if is_out_of_memory(e):
                pm = self._post_mortem(None, asked_bytes(str(e)), error_name(e))
                pm["phase"], pm["module"] = where_failed(e)
                return pm
            e = e.__cause__ or e.__context__
            seen += 1
        return None

    def caught(self, final: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The refusals the run caught and went on from (every one but the one it ended
        with)."""
        return [pm for pm in self.post_mortems if pm is not final]
