"""Module calls from the trace: which interpreter call events are ``forward`` calls of which
module, with their input and output shapes.

The hierarchy of the call events themselves is not trusted for naming (the interpreter computes
the caller's instance name from the instruction *before* the CALL, which in traced graphs is
often the previous call's); a call is named through the first op marker inside it, whose
hierarchy is exact. A call with no op inside (nn.Identity, Dropout in eval) is named from its
class and from the static order of the caller's ``prim::CallMethod`` nodes, between the named
calls around it; if that leaves a choice, it is not counted."""
from __future__ import annotations

from collections import defaultdict

from layerscope.analysis.capture.records import ModuleStats
from layerscope.analysis.capture.script.hierarchy import Frame, is_forward
from layerscope.analysis.capture.script.naming import ScopeNamer, joined
from layerscope.analysis.capture.script.trace import Event, input_shapes, nest
from layerscope.core import tree


def resolve(events: list[Event], namer: ScopeNamer, stats: dict[str, ModuleStats],
            outputs: dict[int, list], issued: int, warnings: list[str]) -> dict[int, str]:
    """The module that ran each op (op index -> qualified name), from the trace's ``events``;
    counts module calls and their shapes in ``stats`` on the way. ``issued`` ops were run;
    what could not be attributed is explained in ``warnings``."""
    nest(events)
    markers = [e for e in events if e.op is not None]
    calls = sorted((e for e in events if e.op is None), key=lambda e: (e.start, -e.end))
    owners: dict[int, str] = {}
    problems: dict[str, int] = defaultdict(int)
    for m in markers:
        name, _, problem = namer.name(m.frames)
        owners[m.op] = name
        if problem:
            problems[problem] += 1
    if issued and not markers:
        warnings.append("TorchScript: the profiler recorded no module hierarchy, so ops could not "
                        "be attributed to submodules; all costs are on the root row")
        return owners
    missing = issued - len(markers)
    if missing > 0:
        problems["op seen outside the profiler"] += missing
    if problems:
        worst = sorted(problems.items(), key=lambda x: -x[1])[:3]
        shown = "; ".join(f"{p} ({n} ops)" for p, n in worst)
        warnings.append("TorchScript: some ops could not be attributed to their innermost "
                        f"submodule and were charged to an enclosing one: {shown}")
    if any(c.depth > 0 for c in calls):
        count_calls(namer, stats, outputs, calls)
    else:
        count_transitions(namer, stats, markers)
    return owners


def count_calls(namer: ScopeNamer, stats: dict[str, ModuleStats], outputs: dict[int, list],
                calls: list[Event]) -> None:
    """Name every call event and count the ``forward`` ones in ``stats`` (first-call shapes:
    inputs as recorded, outputs those of the last op run inside, from ``outputs``)."""
    # A call with an op inside is named by that op's frames (exact).
    for c in calls:
        c.frame, c.scope, c.method = _from_ops(namer, c)
        if c.frame is None and c.parent is None and c.frames and c.frames[-1].kind == "top":
            c.frame, c.scope, c.method = c.frames[-1], "", c.frames[-1].fn
    # A call without one is named from its own event's class and the caller's graph, between the
    # calls around it. Parents come first in start order.
    kids: dict[int, list[Event]] = defaultdict(list)
    for c in calls:
        if c.parent is not None:
            kids[id(c.parent)].append(c)
    for c in calls:
        if c.scope is not None and any(k.frame is None for k in kids[id(c)]):
            name_silent_calls(namer, c, kids[id(c)])
    for c in calls:
        if c.frame is None or c.frame.kind not in ("top", "module") or c.scope is None:
            continue
        if not is_forward(c.frame.fn):
            continue
        s = stats[c.scope]
        s.calls += 1
        if s.calls == 1:
            s.input_shapes = input_shapes(c.dims, c.types)
            if c.markers:  # multi-output ops (batch norm, max pool) return the first
                s.output_shapes = outputs.get(c.markers[1].op, [])[:1]
            else:  # no op ran: it can only return what it was given (Identity, Dropout)
                s.output_shapes = [list(x) for x in s.input_shapes]


def _from_ops(namer: ScopeNamer, c: Event) -> tuple[Frame | None, str | None, str | None]:
    """The frame a call opened, named through the first op marker inside it, the module whose
    code runs in that frame and the method."""
    for m in c.markers[:1]:
        if len(m.frames) == len(m.chain) and c.depth < len(m.chain) and m.chain[c.depth] is c:
            frames = m.frames[: c.depth + 1]
            name, method, problem = namer.name(frames)
            if frames[-1].kind in ("top", "module") and problem:
                return Frame("unknown", "", "", ""), None, None  # not named, not guessed
            return frames[-1], name, method
    return None, None, None


def _site_index(full: list[tuple[str, str]], k: Event, lo: int) -> int | None:
    """The caller's call site of named call ``k``: the first after ``lo`` (a loop starts over)."""
    hits = [j for j, (n, fn) in enumerate(full) if n == k.scope and fn == k.frame.fn]
    after = [j for j in hits if j > lo]
    return after[0] if after else (hits[0] if hits else None)


def name_silent_calls(namer: ScopeNamer, parent: Event, kids: list[Event]) -> None:
    """Name the calls without ops among ``kids`` (the calls ``parent`` made, in order). The
    event's own frame has the right class but maybe the previous call's instance name, so it
    is matched against the caller's call sites of that class, after the site of the previous
    named call and before that of the next one (the static order of ``prim::CallMethod``)."""
    sites = namer.call_sites(parent.scope, parent.method or "")
    full = [(joined(parent.scope, x.path), x.method) for x in sites or []]
    lo = -1
    for i, k in enumerate(kids):
        if k.frame is not None:
            if k.frame.kind == "module" and k.scope is not None:
                j = _site_index(full, k, lo)
                lo = j if j is not None else lo
            continue
        own = k.frames[-1] if k.frames else None
        if own is None:
            continue
        if own.kind in ("function", "self"):  # code of the caller's own module
            k.frame, k.scope = own, parent.scope
            k.method = parent.method if own.kind == "function" else own.fn
            continue
        if own.kind not in ("module", "unknown") or not own.type:
            continue
        if sites is not None:
            names, lo = _names_between(namer, own, kids[i + 1:], full, lo)
        else:
            names = {n for n in namer.children.get(parent.scope, []) if namer.fits(n, own.fn, own)}
        if len(names) == 1:
            name = names.pop()
            k.frame = Frame("module", tree.leaf(name), own.type, own.fn)
            k.scope, k.method = name, own.fn


def _names_between(namer: ScopeNamer, own: Frame, later: list[Event],
                   full: list[tuple[str, str]], lo: int) -> tuple[set[str], int]:
    """Modules that fit frame ``own`` among the call sites after ``lo`` and before the site of
    the next named call in ``later`` (with the new ``lo``); failing one, among all sites."""
    hi = len(full)
    for k2 in later:
        if k2.frame is not None and k2.frame.kind == "module" and k2.scope is not None:
            j2 = _site_index(full, k2, lo)
            hi = j2 if j2 is not None and j2 > lo else hi
            break
    window = [j for j in range(lo + 1, hi) if namer.fits(*full[j], own)]
    names = {full[j][0] for j in window}
    if len(names) == 1:
        return names, window[0]
    return {n for n, fn in full if namer.fits(n, fn, own)}, lo


def count_transitions(namer: ScopeNamer, stats: dict[str, ModuleStats],
                      markers: list[Event]) -> None:
    """No call events (the interpreter inlined every call): a module call starts where an op's
    chain of frames stops matching the previous op's. Back-to-back calls of one module with no
    op of another module in between are counted once; shapes are left empty."""
    prev: list[Frame] = []
    for m in sorted(markers, key=lambda e: (e.start, e.op)):
        same = 0
        while same < min(len(prev), len(m.frames)) and prev[same] == m.frames[same]:
            same += 1
        for depth in range(max(same, 1), len(m.frames)):
            if m.frames[depth].kind != "module" or not is_forward(m.frames[depth].fn):
                continue
            name, _, problem = namer.name(m.frames[: depth + 1])
            if problem:
                break
            stats[name].calls += 1
        prev = m.frames
