"""Which submodule of a TorchScript model ran each aten op.

A ScriptModule runs its submodules inside the TorchScript interpreter, so the nn.Module forward
hooks of ``static_torch._ModuleTracker`` never fire and every op would be charged to the root.
The interpreter does know where it is, though: for every RecordFunction event it starts while the
profiler runs with ``with_modules=True`` it records a *module hierarchy*, the chain of its frames,
e.g. ``TOP(ResNet)::forward.layer1(Sequential)::forward.0(BasicBlock)::forward.conv1(Conv2d)::
forward.`` (one ``instance(Class)::method`` per frame; instance names are the attribute names the
caller used, so joining them gives the qualified name ``named_modules()`` uses). Attribution is
therefore done after the run:

1. ``ScriptModuleScopes.current()`` is called by the counting mode for every forward op. It emits a
   zero-length RecordFunction ``layerscope::op#<i>`` (it runs inside the interpreter's op call, so
   the profiler stamps it with the hierarchy of the op) and returns a per-op key ``KEY + i``; the
   counting mode charges the op to that key in an ``OpBuckets`` dict instead of a module.
2. The model runs with ``torch.jit.optimized_execution(False)``: the graph executor then does not
   inline method calls, so every method/function call of the interpreter is a frame of its own and
   emits a RecordFunction event too. Nesting those call events (by time, per thread) gives exact
   call boundaries: ``calls`` per module, the call's input shapes (``record_shapes``) and, as its
   output shapes, those of the last op run inside it.
3. ``attribute(buckets)`` reads the exported Chrome trace, turns each op marker's hierarchy into a
   qualified module name and merges every per-op bucket into the stats of that module. The
   interpreter names a submodule by the last attribute the caller read (``0`` for
   ``self.blocks[0]``, ``a`` for ``self.heads["a"]``), so the whole attribute path comes from the
   caller's graph (the ``prim::GetAttr`` chain under each ``prim::CallMethod``); every name is
   checked against ``named_modules()`` and the scripted class names.

The hierarchy of the call events themselves is not trusted for naming (the interpreter computes the
caller's instance name from the instruction *before* the CALL, which in traced graphs is often the
previous call's); a call is named through the first op marker inside it, whose hierarchy is exact.
A call with no op inside (nn.Identity, Dropout in eval) is named from its class and from the
static order of the caller's ``prim::CallMethod`` nodes, between the named calls around it; if that
leaves a choice, it is not counted. Only ``forward`` calls (``forward1``... in traced graphs) count
as calls, as in eager mode; other methods (``self.sub.helper(x)``) are scopes for their ops only.

If the interpreter inlined the calls anyway (no call events), calls are inferred from where an op's
chain of frames differs from the previous op's (back-to-back calls of one module merge) and shapes
are left empty; the optimizing executor may also have changed the ops (CSE, fusion).

Backward ops (training) are charged through autograd: an autograd node is created when its op's
dispatch has returned, so a node creation hook tags it (``node.metadata[static_torch._TAG]``) with
the key of the op issued last (a leaf's AccumulateGrad node, made before the op that first uses the
leaf, with the next one); ``_CountingMode`` then charges each backward op to the bucket of the
forward op that caused it, which follows that op to its module.

The model must be a copy whose compiled methods have never run optimized: a ScriptModule's
executors are shared by deep copies and keep their optimized (inlined) plan. ``static_torch``
copies TorchScript models through ``torch.jit.save``/``torch.jit.load`` for that reason.

Nothing here raises: if the profiler cannot be used or a hierarchy cannot be mapped, the ops
concerned stay on the root (or the deepest module that could be named) and a sentence is added to
``ScriptModuleScopes.warnings``.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from layerscope.analysis.static_torch import _TAG, _CountingMode, _ModuleStats, _shapes

MARK = "layerscope::op#"
KEY = "\x00layerscope-op#"  # bucket key of one forward op; never a module name

_NOT_TENSOR = {"", "Scalar", "ScalarList", "GenericList", "String", "None", "Device", "Layout"}


class OpBuckets(dict):
    """Stats-like dict for ``_CountingMode``: any key gets a fresh ``_ModuleStats`` bucket."""

    def __missing__(self, key: str) -> _ModuleStats:
        bucket = _ModuleStats(key, "", 0)
        self[key] = bucket
        return bucket


class ScriptCountingMode(_CountingMode):
    """``_CountingMode`` that also keeps the output shapes of each op the tracker issued a key for
    (the output shapes of a module call are those of the last op run inside it)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        issued = self.tracker.issued
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if self.tracker.issued != issued:
            self.tracker.note_output(issued, out)
        return out


# ------------------------------------------------------------------------------ hierarchy text
@dataclass(frozen=True)
class _Frame:
    kind: str  # "top", "module", "self" (a method of the same module), "function", "unknown"
    inst: str
    type: str
    fn: str


_FRAME = re.compile(r"(?P<inst>[^()]*)\((?P<type>[^()]*)\)::(?P<fn>[^()]*)")


def _parse_frame(text: str, first: bool) -> _Frame:
    if text.startswith("CALL_FUNCTION::") or text.startswith("::"):
        return _Frame("function", "", "", text.rsplit("::", 1)[-1])
    m = _FRAME.fullmatch(text)
    if m is None:
        return _Frame("unknown", text, "", "")
    inst, typ, fn = m["inst"], m["type"], m["fn"]
    if first:
        return _Frame("top" if inst == "TOP" else "unknown", inst, typ, fn)
    if not typ:  # a free function's graph has no ``self`` class
        return _Frame("function", inst, typ, fn)
    if inst == "SELF":
        return _Frame("self", inst, typ, fn)
    if inst in ("", "TOP", "INSTANCE_NAME_UNKNOWN"):
        return _Frame("unknown", inst, typ, fn)
    return _Frame("module", inst, typ, fn)


def _is_forward(fn: str) -> bool:
    """A call through ``module(...)``: ``forward`` (``forward1``... in traced graphs, one per call
    site). Other methods (``self.sub.helper(x)``) do not count as calls, as in eager mode."""
    return re.fullmatch(r"forward\d*", fn) is not None


def parse_hierarchy(text: str) -> list[_Frame]:
    """``TOP(M)::forward.fc(Linear)::forward.`` -> frames (instance, class and method names hold
    no dots)."""
    parts = [p for p in text.split(".") if p]
    return [_parse_frame(p, i == 0) for i, p in enumerate(parts)]


# ------------------------------------------------------------------------------ trace events
@dataclass(eq=False)
class _Event:
    name: str
    tid: Any
    start: int  # ns
    end: int
    frames: list[_Frame]
    op: int | None = None  # op index for markers, None for call events
    dims: list = field(default_factory=list)
    types: list = field(default_factory=list)
    # filled by _nest
    parent: _Event | None = None
    depth: int = 0
    chain: list[_Event] = field(default_factory=list)  # markers: enclosing calls, outermost first
    markers: list[_Event] = field(default_factory=list)  # calls: first and last marker inside
    # filled when calls are resolved
    frame: _Frame | None = None  # the frame this call opened
    scope: str | None = None  # module whose code runs in this frame
    method: str | None = None  # and the method of it


def _ns(value: Any) -> int:
    """Microseconds as written in the trace (``4448652287766.238``) -> integer nanoseconds; a
    float would lose the last digits, and nesting needs them."""
    text = str(value).strip()
    whole, dot, frac = text.partition(".")
    if "e" in text.lower() or not whole.lstrip("-").isdigit() or (dot and not frac.isdigit()):
        return round(float(text) * 1000)
    sign = -1 if whole.startswith("-") else 1
    return sign * (abs(int(whole)) * 1000 + int((frac + "000")[:3]))


def _read_trace(path: str) -> list[_Event]:
    with open(path, encoding="utf-8") as f:
        data = json.load(f, parse_float=str)  # exact µs with 3 decimals: nesting needs ns
    trace = data.get("traceEvents", []) if isinstance(data, dict) else data
    events = []
    for ev in trace:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        args = ev.get("args") or {}
        hierarchy = args.get("Module Hierarchy")
        name = str(ev.get("name", ""))
        if hierarchy is None:
            continue
        try:
            start = _ns(ev["ts"])
            end = start + _ns(ev.get("dur", 0))
        except Exception:
            continue
        frames = parse_hierarchy(str(hierarchy))
        if name.startswith(MARK):
            try:
                op = int(name[len(MARK):])
            except ValueError:
                continue
            events.append(_Event(name, ev.get("tid"), start, end, frames, op))
        elif frames and frames[-1].fn == name:
            # A method or function call of the interpreter (its own frame is the last one).
            events.append(_Event(name, ev.get("tid"), start, end, frames, None,
                                 args.get("Input Dims") or [], args.get("Input type") or []))
    return events


def _nest(events: list[_Event]) -> None:
    by_tid: dict[Any, list[_Event]] = defaultdict(list)
    for e in events:
        by_tid[e.tid].append(e)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e.start, -e.end, e.op is not None))
        stack: list[_Event] = []
        for e in evs:
            while stack and e.end > stack[-1].end:
                stack.pop()
            if e.op is None:
                e.parent = stack[-1] if stack else None
                e.depth = len(stack)
                stack.append(e)
            else:
                e.chain = list(stack)
                for call in stack:
                    if not call.markers:
                        call.markers = [e, e]
                    else:
                        call.markers[1] = e


def _input_shapes(dims: list, types: list) -> list[list[int]]:
    """Tensor shapes among a method call's recorded inputs, ``self`` (the first) left out."""
    out: list[list[int]] = []
    for d, t in list(zip(dims, types))[1:]:
        t = str(t)
        if t == "TensorList" and isinstance(d, list):
            out.extend([int(x) for x in s] for s in d if isinstance(s, list))
        elif t not in _NOT_TENSOR and isinstance(d, list) and all(isinstance(x, int) for x in d):
            out.append([int(x) for x in d])
    return out


# ------------------------------------------------------------------------------ helpers
@contextlib.contextmanager
def _quiet_stderr():
    """Kineto writes status lines (``profiler_start``, device probing) straight to fd 2."""
    saved = None
    try:
        sys.stderr.flush()
        saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)
        finally:
            os.close(devnull)
    except Exception:
        pass  # then fd 2 is left as it is
    try:
        yield
    finally:
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)


def _marker_context():
    fast = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", None)
    if fast is not None:
        return fast
    return torch.autograd.profiler.record_function


def _script_type(module: nn.Module) -> str | None:
    name = getattr(module, "original_name", None)
    return name if isinstance(name, str) and name else None


def _walk(nodes):
    for node in nodes:
        yield node
        for block in node.blocks():
            yield from _walk(block.nodes())


@dataclass(frozen=True)
class _Site:
    """A ``prim::CallMethod`` on a submodule of ``self`` (or on ``self``: ``path`` is "")."""

    last: str  # the last attribute of the GetAttr chain: the instance name the interpreter reports
    path: str  # the whole chain, relative to self: ``blocks.0``
    method: str


def _graph_call_sites(module: nn.Module, method: str) -> list[_Site]:
    """The calls ``method`` of ``module`` makes on its submodules, in the graph's (static) order."""
    graph = module._c._get_method(method).graph
    self_value = next(iter(graph.inputs())).unique()
    sites = []
    for node in _walk(graph.nodes()):
        if node.kind() != "prim::CallMethod":
            continue
        chain = []
        value = node.inputsAt(0)
        while value.node().kind() == "prim::GetAttr":
            chain.append(value.node().s("name"))
            value = value.node().inputsAt(0)
        if value.unique() == self_value:
            path = ".".join(reversed(chain))
            sites.append(_Site(chain[0] if chain else "", path, node.s("name")))
    return sites


# ------------------------------------------------------------------------------ the tracker
class ScriptModuleScopes:
    """Tracker for a ``torch.jit.ScriptModule`` with ``_ModuleTracker``'s interface: a context
    manager whose ``current()`` is called for each forward op. Names are only known after the run:
    ``current()`` returns a per-op key, and ``attribute(buckets)`` moves the per-op costs to the
    modules and fills ``stats[name].calls / input_shapes / output_shapes``."""

    def __init__(self, model: nn.Module, stats: dict[str, _ModuleStats], tag_autograd: bool):
        self.stats = stats
        self.tag_autograd = tag_autograd
        self.modules: dict[str, nn.Module] = {}
        self.types: dict[str, str | None] = {}
        self.children: dict[str, list[str]] = defaultdict(list)
        for name, module in model.named_modules():
            self.modules[name] = module
            self.types[name] = _script_type(module)
            if name:
                self.children[name.rpartition(".")[0]].append(name)
            if name in stats and self.types[name]:
                stats[name].type = self.types[name]  # "Conv2d", not "RecursiveScriptModule"
        self.warnings: list[str] = []
        self.issued = 0
        self.outputs: dict[int, list] = {}
        self.owners: dict[int, str] = {}
        self._marker = _marker_context()
        self._pending_nodes: list[Any] = []
        self._stack: contextlib.ExitStack | None = None
        self._prof = None
        self._events: list[_Event] | None = None
        self._recording = False
        self._sites: dict[tuple[str, str], list[_Site] | None] = {}

    # -- during the run
    def current(self) -> str:
        i = self.issued
        self.issued += 1
        if self._recording:
            with self._marker(f"{MARK}{i}"):
                pass
        key = f"{KEY}{i}"
        if self._pending_nodes:
            for node in self._pending_nodes:
                try:
                    node.metadata.setdefault(_TAG, key)
                except Exception:
                    pass
            self._pending_nodes = []
        return key

    def note_output(self, index: int, out: Any) -> None:
        try:
            self.outputs[index] = _shapes(out)
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
            node.metadata.setdefault(_TAG, f"{KEY}{self.issued - 1}")
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
            hook = getattr(torch.autograd.graph, "node_creation_hook", None)
            if hook is not None:
                try:
                    self._stack.enter_context(hook(self._on_node))
                except Exception:
                    pass
            else:
                self.warnings.append("TorchScript: this torch has no autograd node creation hook; "
                                     "backward costs stay on the root row")
        self._start_profiler()
        return self

    def _start_profiler(self) -> None:
        try:
            if torch.autograd._profiler_enabled():
                self.warnings.append("TorchScript: another profiler is running, so ops could not "
                                     "be attributed to submodules; all costs are on the root row")
                return
            from torch.profiler import ProfilerActivity, profile

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                               with_modules=True)
                with _quiet_stderr():
                    prof.start()
            self._prof = prof
            self._recording = True
        except Exception as exc:
            self._prof = None
            self.warnings.append("TorchScript: the profiler could not be started "
                                 f"({type(exc).__name__}: {exc}); all costs are on the root row")

    def __exit__(self, *exc):
        self._recording = False
        try:
            self._stop_profiler()
        finally:
            if self._stack is not None:
                self._stack.close()
                self._stack = None
            self._pending_nodes = []
        return False

    def _stop_profiler(self) -> None:
        prof, self._prof = self._prof, None
        if prof is None:
            return
        path = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with _quiet_stderr():
                    prof.stop()
                fd, path = tempfile.mkstemp(prefix="layerscope-ts-", suffix=".json")
                os.close(fd)
                with _quiet_stderr():
                    prof.export_chrome_trace(path)
            self._events = _read_trace(path)
        except Exception as exc:
            self._events = None
            self.warnings.append("TorchScript: reading the profiler trace failed "
                                 f"({type(exc).__name__}: {exc}); all costs are on the root row")
        finally:
            if path is not None:
                try:
                    os.unlink(path)
                except OSError:
                    pass

    # -- after the run
    def attribute(self, buckets: dict[str, _ModuleStats]) -> None:
        """Move per-op costs from ``buckets`` to the modules that ran them; fill calls/shapes."""
        try:
            if self._events is not None:
                self._resolve(self._events)
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

    def _name(self, frames: list[_Frame]) -> tuple[str, str, str | None]:
        """Qualified name of the innermost module in ``frames``, the method running in it, and a
        problem, if any (then the name is that of the deepest module that could be named)."""
        if not frames or frames[0].kind != "top":
            return "", "", "no TorchScript frame"
        if self.types.get("") and frames[0].type and frames[0].type != self.types[""]:
            return "", "", f"root class {frames[0].type}, expected {self.types['']}"
        name, method = "", frames[0].fn
        for f in frames[1:]:
            if f.kind == "function":
                continue
            if f.kind == "self":
                method = f.fn
                continue
            if f.kind != "module":
                return name, method, f"unnamed module instance {f.inst or '?'}({f.type})"
            child, problem = self._child(name, method, f)
            if problem:
                return name, method, problem
            name, method = child, f.fn
        return name, method, None

    def _child(self, parent: str, method: str, f: _Frame) -> tuple[str, str | None]:
        """The submodule a frame names. The interpreter gives only the last attribute of the
        ``prim::GetAttr`` chain the caller used (``0`` for ``self.blocks[0]``); the caller's graph
        gives the whole chain."""
        direct = f"{parent}.{f.inst}" if parent else f.inst
        sites = self._call_sites(parent, method) or []
        paths = {x.path for x in sites if x.last == f.inst and x.method == f.fn}
        if (not paths and direct not in self.stats and self.types.get(parent) == f.type
                and any(x.path == "" and x.method == f.fn for x in sites)):
            # An inlined call of a method of self is named after the caller's own instance.
            return parent, None
        candidates = sorted(self._full(parent, p) for p in paths) if paths else [direct]
        known = [c for c in candidates if c in self.stats]
        if not known:
            return parent, f"no submodule named {direct!r}"
        typed = [c for c in known if not f.type or not self.types.get(c) or self.types[c] == f.type]
        if not typed:
            return parent, (f"{known[0]!r} is a {self.types.get(known[0])}, "
                            f"the interpreter ran a {f.type}")
        if len(typed) > 1:
            return parent, f"ambiguous call of {f.inst!r}: {', '.join(typed)}"
        return typed[0], None

    @staticmethod
    def _full(parent: str, path: str) -> str:
        return f"{parent}.{path}" if parent and path else (path or parent)

    def _call_sites(self, parent: str, method: str) -> list[_Site] | None:
        key = (parent, method)
        if key not in self._sites:
            try:
                self._sites[key] = _graph_call_sites(self.modules[parent], method)
            except Exception:
                self._sites[key] = None
        return self._sites[key]

    def _resolve(self, events: list[_Event]) -> None:
        _nest(events)
        markers = [e for e in events if e.op is not None]
        calls = sorted((e for e in events if e.op is None), key=lambda e: (e.start, -e.end))
        problems: dict[str, int] = defaultdict(int)
        for m in markers:
            name, _, problem = self._name(m.frames)
            self.owners[m.op] = name
            if problem:
                problems[problem] += 1
        missing = self.issued - len(markers)
        if self.issued and not markers:
            self.warnings.append("TorchScript: the profiler recorded no module hierarchy, so ops "
                                 "could not be attributed to submodules; all costs are on the "
                                 "root row")
            return
        if missing > 0:
            problems["op seen outside the profiler"] += missing
        if problems:
            worst = sorted(problems.items(), key=lambda x: -x[1])[:3]
            shown = "; ".join(f"{p} ({n} ops)" for p, n in worst)
            self.warnings.append("TorchScript: some ops could not be attributed to their innermost "
                                 f"submodule and were charged to an enclosing one: {shown}")
        if any(c.depth > 0 for c in calls):
            self._count_calls(calls)
        else:
            self._count_transitions(markers)

    def _count_calls(self, calls: list[_Event]) -> None:
        # A call with an op inside is named by that op's frames (exact).
        for c in calls:
            c.frame, c.scope, c.method = self._from_ops(c)
            if c.frame is None and c.parent is None and c.frames and c.frames[-1].kind == "top":
                c.frame, c.scope, c.method = c.frames[-1], "", c.frames[-1].fn
        # A call without one (nn.Identity, Dropout in eval) is named from its own event's class and
        # the caller's graph, between the calls around it. Parents come first in start order.
        kids: dict[int, list[_Event]] = defaultdict(list)
        for c in calls:
            if c.parent is not None:
                kids[id(c.parent)].append(c)
        for c in calls:
            if c.scope is not None and any(k.frame is None for k in kids[id(c)]):
                self._name_silent_calls(c, kids[id(c)])
        for c in calls:
            if c.frame is None or c.frame.kind not in ("top", "module") or c.scope is None:
                continue
            if not _is_forward(c.frame.fn):
                continue
            s = self.stats[c.scope]
            s.calls += 1
            if s.calls == 1:
                s.input_shapes = _input_shapes(c.dims, c.types)
                if c.markers:  # multi-output ops (batch norm, max pool) return the first
                    s.output_shapes = self.outputs.get(c.markers[1].op, [])[:1]
                else:  # no op ran: it can only return what it was given (Identity, Dropout)
                    s.output_shapes = [list(x) for x in s.input_shapes]

    def _from_ops(self, c: _Event) -> tuple[_Frame | None, str | None, str | None]:
        """The frame a call opened, named through the first op marker inside it, the module whose
        code runs in that frame and the method."""
        for m in c.markers[:1]:
            if len(m.frames) == len(m.chain) and c.depth < len(m.chain) and m.chain[c.depth] is c:
                frames = m.frames[: c.depth + 1]
                name, method, problem = self._name(frames)
                if frames[-1].kind in ("top", "module") and problem:
                    return _Frame("unknown", "", "", ""), None, None  # not named, not guessed
                return frames[-1], name, method
        return None, None, None

    def _name_silent_calls(self, parent: _Event, kids: list[_Event]) -> None:
        """Name the calls without ops among ``kids`` (the calls ``parent`` made, in order). The
        event's own frame has the right class but maybe the previous call's instance name, so it
        is matched against the caller's call sites of that class, after the site of the previous
        named call and before that of the next one (the static order of ``prim::CallMethod``)."""
        sites = self._call_sites(parent.scope, parent.method or "")
        full = [(self._full(parent.scope, x.path), x.method) for x in sites or []]

        def site_of(k: _Event, lo: int) -> int | None:
            hits = [j for j, (n, fn) in enumerate(full) if n == k.scope and fn == k.frame.fn]
            after = [j for j in hits if j > lo]
            return after[0] if after else (hits[0] if hits else None)  # a loop starts over

        lo = -1
        for i, k in enumerate(kids):
            if k.frame is not None:
                if k.frame.kind == "module" and k.scope is not None:
                    j = site_of(k, lo)
                    lo = j if j is not None else lo
                continue
            own = k.frames[-1] if k.frames else None
            if own is None:
                continue
            if own.kind == "function":
                k.frame, k.scope, k.method = own, parent.scope, parent.method
                continue
            if own.kind == "self":
                k.frame, k.scope, k.method = own, parent.scope, own.fn
                continue
            if own.kind not in ("module", "unknown") or not own.type:
                continue

            def fits(n: str, fn: str, own: _Frame = own) -> bool:
                return fn == own.fn and n in self.stats and self.types.get(n) == own.type

            names: set[str] = set()
            if sites is not None:
                hi = len(full)
                for k2 in kids[i + 1:]:
                    if k2.frame is not None and k2.frame.kind == "module" and k2.scope is not None:
                        j2 = site_of(k2, lo)
                        hi = j2 if j2 is not None and j2 > lo else hi
                        break
                window = [j for j in range(lo + 1, hi) if fits(*full[j])]
                names = {full[j][0] for j in window}
                if len(names) == 1:
                    lo = window[0]
                else:
                    names = {n for n, fn in full if fits(n, fn)}
            else:
                names = {n for n in self.children.get(parent.scope, []) if fits(n, own.fn)}
            if len(names) == 1:
                name = names.pop()
                k.frame = _Frame("module", name.rpartition(".")[2], own.type, own.fn)
                k.scope, k.method = name, own.fn

    def _count_transitions(self, markers: list[_Event]) -> None:
        """No call events (the interpreter inlined every call): a module call starts where an op's
        chain of frames stops matching the previous op's. Back-to-back calls of one module with no
        op of another module in between are counted once; shapes are left empty."""
        prev: list[_Frame] = []
        for m in sorted(markers, key=lambda e: (e.start, e.op)):
            same = 0
            while same < min(len(prev), len(m.frames)) and prev[same] == m.frames[same]:
                same += 1
            for depth in range(max(same, 1), len(m.frames)):
                if m.frames[depth].kind != "module" or not _is_forward(m.frames[depth].fn):
                    continue
                name, _, problem = self._name(m.frames[: depth + 1])
                if problem:
                    break
                self.stats[name].calls += 1
            prev = m.frames
