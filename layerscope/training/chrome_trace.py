"""Chrome/Perfetto traces of training steps, in one track layout for every path: a process per
rank (or per watched script), and in it a row of steps, a row of their phases and, where
collectives were measured, a row of communication, so what overlaps backward is visible.

``train`` on several processes merges every rank's steps into one trace (``merged_trace``);
``layerscope run --trace`` and ``Watch.chrome_trace`` draw a watched script's steps
(``trace``). Both reach the events through ``process_events``.

Input of ``merged_trace``, one dict per rank (from the rank's own measurements;
JSON-serialisable)::

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

STEP_TID = 0  # thread row of the steps
PHASE_TID = 1  # thread row of the phases
COMM_TID = 2  # thread row of the collectives
US = 1e6

# A span: (name, start, duration, args or None), seconds after the trace's origin.
Span = tuple[str, float, float, "dict[str, Any] | None"]


def _meta(pid: int, name: str, value: str, tid: int | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "M", "pid": pid, "name": name, "args": {"name": value}}
    if tid is not None:
        event["tid"] = tid
    return event


def _span(pid: int, tid: int, cat: str, span: Span) -> dict[str, Any]:
    name, start, dur, args = span
    event: dict[str, Any] = {"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": cat,
                             "ts": start * US, "dur": dur * US}
    if args is not None:
        event["args"] = args
    return event


def process_events(pid: int, name: str, steps: list[Span], phases: list[Span],
                   collectives: list[Span] | None = None) -> list[dict[str, Any]]:
    """One process's rows: its name and sort position, then its steps, their phases and (when
    ``collectives`` is given, even empty) its collectives, each on its own row."""
    rows = [(STEP_TID, "steps"), (PHASE_TID, "phases")]
    if collectives is not None:
        rows.append((COMM_TID, "communication"))
    events = [_meta(pid, "process_name", name),
              {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": pid}}]
    events += [_meta(pid, "thread_name", row, tid) for tid, row in rows]
    events += [_span(pid, STEP_TID, "step", s) for s in steps]
    events += [_span(pid, PHASE_TID, "phase", s) for s in phases]
    events += [_span(pid, COMM_TID, "communication", s) for s in collectives or []]
    return events


def trace(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The trace file's object around ``events`` (``process_events``' output, of every process)."""
    return {"traceEvents": events, "displayTimeUnit": "ms"}


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


def merged_trace(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """The merged trace (see the module docstring for ``per_rank``)."""
    starts = [s["t0"] for r in per_rank for s in r.get("steps", [])]
    origin = min(starts) if starts else 0.0
    events: list[dict[str, Any]] = []
    for r in sorted(per_rank, key=lambda r: r["rank"]):
        steps: list[Span] = []
        phases: list[Span] = []
        collectives: list[Span] = []
        for i, step in enumerate(r.get("steps", [])):
            base = step["t0"] - origin
            spans = _phase_spans(step.get("phases", {}))
            total = max((start + dur for _, start, dur in spans), default=0.0)
            steps.append((f"step {i}", base, total, {"step": i}))
            phases += [(name, base + start, dur, {"step": i}) for name, start, dur in spans]
            collectives += [(f"{b.get('op', 'all_reduce')} bucket {j}", base + b["start"],
                             b.get("seconds", b.get("dur", 0.0)),
                             {"step": i, "bucket": j, "bytes": b["bytes"]})
                            for j, b in enumerate(step.get("buckets", []))]
        pid = int(r["rank"])
        events += process_events(pid, f"rank {pid}", steps, phases, collectives)
    return trace(events)


def write_trace(path: str, per_rank: list[dict[str, Any]]) -> None:
    """Write the merged trace to ``path`` through core.io (atomic; devices written through)."""
    if not per_rank:
        raise UserError(f"--trace {path}: no rank reported any step; nothing to trace")
    write_file(path, json.dumps(merged_trace(per_rank)))
