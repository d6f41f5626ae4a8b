"""One Chrome/Perfetto trace for every rank of a distributed run: a process per rank, the step's
phases on one thread row and each collective on a second, so what overlaps backward is visible.

Input, one dict per rank (from the rank's own measurements; JSON-serialisable)::

    {"rank": 0,
     "steps": [{"t0": 1732384000.125,                # step start, seconds on a clock the ranks
                                                     # share (time.time(); CommRecorder gives it)
                "phases": {"data": 0.001, "forward": 0.004, ...},   # seconds, laid end to end
                                                     # from t0 in this order (PhaseTimer's output)
                    # or {"forward": [start, dur], ...}: start in seconds after t0
                "buckets": [{"start": 0.009, "seconds": 0.002, "bytes": 784,
                             "op": "all_reduce"}]}]}  # start after t0 (CommRecorder.step_end's)

``"dur"`` is accepted for a bucket's ``"seconds"``. Times become microseconds after the earliest
``t0`` of all ranks. Ranks on different machines are only as aligned as their clocks (NTP).

Format: the Trace Event Format's JSON object form (``{"traceEvents": [...]}``), complete events
(``"ph": "X"``, ``ts``/``dur`` in microseconds) and metadata events naming processes and threads
(https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU), which Perfetto
and chrome://tracing both open.
"""
from __future__ import annotations

import json
from typing import Any

from layerscope.core.errors import UserError
from layerscope.core.io import write_file

PHASE_TID = 0  # thread row of the phases
COMM_TID = 1  # thread row of the collectives
US = 1e6


def _phase_spans(phases: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(name, start after t0, duration) for each phase; durations alone are laid end to end."""
    spans = []
    cursor = 0.0
    for name, value in phases.items():
        if isinstance(value, (list, tuple)):
            start, dur = float(value[0]), float(value[1])
        else:
            start, dur = cursor, float(value)
        spans.append((name, start, dur))
        cursor = start + dur
    return spans


def _meta(pid: int, name: str, value: str, tid: int | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "M", "pid": pid, "name": name, "args": {"name": value}}
    if tid is not None:
        event["tid"] = tid
    return event


def merged_trace(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """The merged trace (see the module docstring for ``per_rank``)."""
    starts = [s["t0"] for r in per_rank for s in r.get("steps", [])]
    origin = min(starts) if starts else 0.0
    events: list[dict[str, Any]] = []
    for r in sorted(per_rank, key=lambda r: r["rank"]):
        pid = int(r["rank"])
        events += [_meta(pid, "process_name", f"rank {pid}"),
                   {"ph": "M", "pid": pid, "name": "process_sort_index",
                    "args": {"sort_index": pid}},
                   _meta(pid, "thread_name", "phases", PHASE_TID),
                   _meta(pid, "thread_name", "communication", COMM_TID)]
        for i, step in enumerate(r.get("steps", [])):
            base = (step["t0"] - origin) * US
            spans = _phase_spans(step.get("phases", {}))
            total = max((start + dur for _, start, dur in spans), default=0.0)
            events.append({"ph": "X", "pid": pid, "tid": PHASE_TID, "name": f"step {i}",
                           "cat": "step", "ts": base, "dur": total * US, "args": {"step": i}})
            events += [{"ph": "X", "pid": pid, "tid": PHASE_TID, "name": name, "cat": "phase",
                        "ts": base + start * US, "dur": dur * US, "args": {"step": i}}
                       for name, start, dur in spans]
            for j, b in enumerate(step.get("buckets", [])):
                dur = b.get("seconds", b.get("dur", 0.0))
                events.append({"ph": "X", "pid": pid, "tid": COMM_TID,
                               "name": f"{b.get('op', 'all_reduce')} bucket {j}",
                               "cat": "communication", "ts": base + b["start"] * US,
                               "dur": dur * US,
                               "args": {"step": i, "bucket": j, "bytes": b["bytes"]}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(path: str, per_rank: list[dict[str, Any]]) -> None:
    """Write the merged trace to ``path`` through core.io (atomic; devices written through)."""
    if not per_rank:
        raise UserError(f"--trace {path}: no rank reported any step; nothing to trace")
    write_file(path, json.dumps(merged_trace(per_rank)))
