"""Activation memory of a graph run in a fixed topological order: lifetimes, live-set peak and a
packed arena.

- Steps are the nodes in order (0 .. n-1). A tensor lives from its producer's step to its last
  consumer's step (both inclusive: a node's inputs and outputs coexist while it runs); graph
  inputs from step 0, graph outputs to the last step, and an output nobody reads only for its
  producer's step. A view (Reshape, ...) shares its root's buffer and extends its life.
- Live-set peak = max over steps of the bytes of live tensors, by a difference array over the
  steps (O(nodes + tensors)). Weights are resident and reported apart, not here.
- Arena: a static planner's buffer. Tensors are placed largest first, each at the smallest gap
  of address space free during its whole lifetime (best fit); the arena is the highest address
  used. Every tensor live at the peak step needs its own addresses, so arena >= peak and
  fragmentation = arena / peak >= 1 (1.0 = perfect packing). No alignment padding is added.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Buffer:
    name: str
    nbytes: int
    start: int  # first step it is live
    end: int  # last step it is live (inclusive)


def lifetimes(steps: Sequence[tuple[Sequence[str], Sequence[str]]], sizes: Mapping[str, int],
              graph_inputs: Sequence[str], graph_outputs: Sequence[str],
              alias: Mapping[str, str] | None = None) -> list[Buffer]:
    """``steps[i]`` = (names read, names written) by step i. ``sizes``: bytes of every activation
    buffer (roots only; names absent from it, such as weights, are not activations). ``alias``:
    view name -> the name whose buffer it shares."""
    alias = dict(alias or {})

    def root(name: str) -> str:
        seen = set()
        while name in alias and name not in seen:
            seen.add(name)
            name = alias[name]
        return name

    last = len(steps) - 1
    start: dict[str, int] = {}
    end: dict[str, int] = {}
    for name in graph_inputs:
        r = root(name)
        if r in sizes:
            start.setdefault(r, 0)
            end[r] = max(end.get(r, 0), 0)
    for i, (reads, writes) in enumerate(steps):
        for name in writes:
            r = root(name)
            if r in sizes and r not in start:
                start[r] = i
                end[r] = i
        for name in reads:
            r = root(name)
            if r in start:
                end[r] = max(end[r], i)
    for name in graph_outputs:
        r = root(name)
        if r in start:
            end[r] = max(last, start[r])
    return [Buffer(name, sizes[name], start[name], end[name]) for name in start]


def live_set_peak(buffers: Sequence[Buffer], n_steps: int) -> tuple[int, int, list[int]]:
    """(peak bytes, first step at the peak, live bytes per step), by a difference array."""
    n = max(n_steps, 1)
    diff = [0] * (n + 1)
    for b in buffers:
        diff[b.start] += b.nbytes
        diff[min(b.end, n - 1) + 1] -= b.nbytes
    live, total = [], 0
    for i in range(n):
        total += diff[i]
        live.append(total)
    peak = max(live)
    return peak, live.index(peak), live


def pack_arena(buffers: Sequence[Buffer]) -> tuple[int, dict[str, int]]:
    """(arena bytes, offset of each buffer): largest first, best-fitting gap in time x address."""
    placed: list[tuple[int, int, int, int]] = []  # offset, size, start, end
    offsets: dict[str, int] = {}
    for b in sorted(buffers, key=lambda b: (-b.nbytes, b.start, b.name)):
        if b.nbytes <= 0:
            offsets[b.name] = 0
            continue
        busy = sorted((o, o + s) for o, s, st, en in placed if st <= b.end and b.start <= en)
        best: tuple[int, int] | None = None  # (gap size, offset)
        cursor = 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= b.nbytes and (best is None or gap < best[0]):
                best = (gap, cursor)
            cursor = max(cursor, hi)
        offset = best[1] if best else cursor
        offsets[b.name] = offset
        placed.append((offset, b.nbytes, b.start, b.end))
    arena = max((o + s for o, s, _, _ in placed), default=0)
    return arena, offsets


def summarize(buffers: Sequence[Buffer], step_names: Sequence[str],
              graph_inputs: Sequence[str] = (), top: int = 5) -> dict:
    """Activation sum (tensors the steps create: graph inputs are live but not created),
    live-set peak (where, and its largest tensors), arena and fragmentation."""
    peak, step, _ = live_set_peak(buffers, len(step_names))
    arena, _ = pack_arena(buffers)
    at_peak = sorted((b for b in buffers if b.start <= step <= b.end),
                     key=lambda b: (-b.nbytes, b.name))
    return {
        "activation_bytes": sum(b.nbytes for b in buffers if b.name not in set(graph_inputs)),
        "peak_activation_bytes": peak,
        "peak_step": step,
        "peak_node": step_names[step] if step_names else None,
        "live_at_peak": [{"tensor": b.name, "bytes": b.nbytes} for b in at_peak[:top]],
        "live_tensors_at_peak": len(at_peak),
        "arena_bytes": arena,
        "fragmentation": arena / peak if peak else None,
    }
