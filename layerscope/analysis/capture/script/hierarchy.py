"""The profiler's *module hierarchy* text, parsed into frames:
``TOP(ResNet)::forward.layer1(Sequential)::forward.`` is one ``instance(Class)::method`` per
frame of the interpreter, outermost first."""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Frame:
    """One interpreter frame: what runs there and, for a module, its instance and class name."""

    kind: str  # "top", "module", "self" (a method of the same module), "function", "unknown"
    inst: str
    type: str
    fn: str


_FRAME = re.compile(r"(?P<inst>[^()]*)\((?P<type>[^()]*)\)::(?P<fn>[^()]*)")


def parse_frame(text: str, first: bool) -> Frame:
    if text.startswith("CALL_FUNCTION::") or text.startswith("::"):
        return Frame("function", "", "", text.rsplit("::", 1)[-1])
    m = _FRAME.fullmatch(text)
    if m is None:
        return Frame("unknown", text, "", "")
    inst, typ, fn = m["inst"], m["type"], m["fn"]
    if first:
        return Frame("top" if inst == "TOP" else "unknown", inst, typ, fn)
    if not typ:  # a free function's graph has no ``self`` class
        return Frame("function", inst, typ, fn)
    if inst == "SELF":
        return Frame("self", inst, typ, fn)
    if inst in ("", "TOP", "INSTANCE_NAME_UNKNOWN"):
        return Frame("unknown", inst, typ, fn)
    return Frame("module", inst, typ, fn)


def is_forward(fn: str) -> bool:
    """A call through ``module(...)``: ``forward`` (``forward1``... in traced graphs, one per call
    site). Other methods (``self.sub.helper(x)``) do not count as calls, as in eager mode."""
    return re.fullmatch(r"forward\d*", fn) is not None


def parse_hierarchy(text: str) -> list[Frame]:
    """``TOP(M)::forward.fc(Linear)::forward.`` -> frames (instance, class and method names hold
    no dots)."""
    parts = [p for p in text.split(".") if p]
    return [parse_frame(p, i == 0) for i, p in enumerate(parts)]
