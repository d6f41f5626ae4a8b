"""The events of the exported Chrome trace that matter for attribution: op markers
(``layerscope::op#<i>``) and the interpreter's method/function calls, nested by time per thread."""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from layerscope.analysis.capture.script.hierarchy import Frame, parse_hierarchy

MARK = "layerscope::op#"  # name of the zero-length RecordFunction emitted for op <i>

_NOT_TENSOR = {"", "Scalar", "ScalarList", "GenericList", "String", "None", "Device", "Layout"}


@dataclass(eq=False)
class Event:
    """An op marker (``op`` set) or an interpreter call (``op`` None) of the trace."""

    name: str
    tid: Any
    start: int  # ns
    end: int
    frames: list[Frame]
    op: int | None = None  # op index for markers, None for call events
    dims: list = field(default_factory=list)
    types: list = field(default_factory=list)
    # filled by nest
    parent: Event | None = None
    depth: int = 0
    chain: list[Event] = field(default_factory=list)  # markers: enclosing calls, outermost first
    markers: list[Event] = field(default_factory=list)  # calls: first and last marker inside
    # filled when calls are resolved
    frame: Frame | None = None  # the frame this call opened
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


def _event(ev: dict, parsed: dict[str, list[Frame]]) -> Event | None:
    """The marker or call event of one trace entry, or None for anything else (``parsed``:
    frames of the hierarchy texts seen so far; a model's ops share a few hundred texts)."""
    if not isinstance(ev, dict) or ev.get("ph") != "X":
        return None
    args = ev.get("args") or {}
    hierarchy = args.get("Module Hierarchy")
    name = str(ev.get("name", ""))
    if hierarchy is None:
        return None
    try:
        start = _ns(ev["ts"])
        end = start + _ns(ev.get("dur", 0))
    except Exception:
        return None
    text = str(hierarchy)
    frames = parsed.get(text)
    if frames is None:
        frames = parsed[text] = parse_hierarchy(text)
    if name.startswith(MARK):
        try:
            op = int(name[len(MARK):])
        except ValueError:
            return None
        return Event(name, ev.get("tid"), start, end, frames, op)
    if frames and frames[-1].fn == name:
        # A method or function call of the interpreter (its own frame is the last one).
        return Event(name, ev.get("tid"), start, end, frames, None,
                     args.get("Input Dims") or [], args.get("Input type") or [])
    return None


def read_trace(path: str) -> list[Event]:
    with open(path, encoding="utf-8") as f:
        data = json.load(f, parse_float=str)  # exact µs with 3 decimals: nesting needs ns
    trace = data.get("traceEvents", []) if isinstance(data, dict) else data
    parsed: dict[str, list[Frame]] = {}
    return [e for e in (_event(ev, parsed) for ev in trace) if e is not None]


def nest(events: list[Event]) -> None:
    """Fill ``parent``/``depth`` of calls, ``chain`` of markers and ``markers`` of calls."""
    by_tid: dict[Any, list[Event]] = defaultdict(list)
    for e in events:
        by_tid[e.tid].append(e)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e.start, -e.end, e.op is not None))
        stack: list[Event] = []
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


def input_shapes(dims: list, types: list) -> list[list[int]]:
    """Tensor shapes among a method call's recorded inputs, ``self`` (the first) left out."""
    out: list[list[int]] = []
    for d, t in list(zip(dims, types))[1:]:
        t = str(t)
        if t == "TensorList" and isinstance(d, list):
            out.extend([int(x) for x in s] for s in d if isinstance(s, list))
        elif t not in _NOT_TENSOR and isinstance(d, list) and all(isinstance(x, int) for x in d):
            out.append([int(x) for x in d])
    return out
