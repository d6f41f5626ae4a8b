"""Qualified module names from interpreter frames. The interpreter names a submodule by the last
attribute the caller read (``0`` for ``self.blocks[0]``, ``a`` for ``self.heads["a"]``), so the
whole attribute path comes from the caller's graph (the ``prim::GetAttr`` chain under each
``prim::CallMethod``); every name is checked against ``named_modules()`` and the scripted class
names."""
from __future__ import annotations

from collections import defaultdict

import torch.nn as nn

from layerscope.analysis.capture.script.graph import Site, graph_call_sites, script_type
from layerscope.analysis.capture.script.hierarchy import Frame
from layerscope.core import tree


def joined(parent: str, path: str) -> str:
    """``parent.path`` as a qualified name (either may be the root, "")."""
    return f"{parent}.{path}" if parent and path else (path or parent)


class ScopeNamer:
    """Names the modules of one scripted model from frames; ``known`` holds the names that count
    (those of the stats table)."""

    def __init__(self, model: nn.Module, known):
        self.known = known
        self.modules: dict[str, nn.Module] = {}
        self.types: dict[str, str | None] = {}
        self.children: dict[str, list[str]] = defaultdict(list)
        for name, module in model.named_modules():
            self.modules[name] = module
            self.types[name] = script_type(module)
            if name:
                self.children[tree.parent(name)].append(name)
        self._sites: dict[tuple[str, str], list[Site] | None] = {}

    def name(self, frames: list[Frame]) -> tuple[str, str, str | None]:
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

    def _child(self, parent: str, method: str, f: Frame) -> tuple[str, str | None]:
        """The submodule a frame names. The interpreter gives only the last attribute of the
        ``prim::GetAttr`` chain the caller used (``0`` for ``self.blocks[0]``); the caller's graph
        gives the whole chain."""
        direct = f"{parent}.{f.inst}" if parent else f.inst
        sites = self.call_sites(parent, method) or []
        paths = {x.path for x in sites if x.last == f.inst and x.method == f.fn}
        if (not paths and direct not in self.known and self.types.get(parent) == f.type
                and any(x.path == "" and x.method == f.fn for x in sites)):
            # An inlined call of a method of self is named after the caller's own instance.
            return parent, None
        candidates = sorted(joined(parent, p) for p in paths) if paths else [direct]
        known = [c for c in candidates if c in self.known]
        if not known:
            return parent, f"no submodule named {direct!r}"
        typed = [c for c in known if not f.type or not self.types.get(c) or self.types[c] == f.type]
        if not typed:
            return parent, (f"{known[0]!r} is a {self.types.get(known[0])}, "
                            f"the interpreter ran a {f.type}")
        if len(typed) > 1:
            return parent, f"ambiguous call of {f.inst!r}: {', '.join(typed)}"
        return typed[0], None

    def call_sites(self, parent: str, method: str) -> list[Site] | None:
        """The calls ``method`` of module ``parent`` makes (None if its graph cannot be read)."""
        key = (parent, method)
        if key not in self._sites:
            try:
                self._sites[key] = graph_call_sites(self.modules[parent], method)
            except Exception:
                self._sites[key] = None
        return self._sites[key]

    def fits(self, name: str, fn: str, own: Frame) -> bool:
        """Whether module ``name``'s method ``fn`` could be the call that opened frame ``own``."""
        return fn == own.fn and name in self.known and self.types.get(name) == own.type
