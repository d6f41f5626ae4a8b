"""Per-rank phase tables of a data-parallel run and the straggler among the ranks.

The additive phases of a distributed step (``core.phases.STEP_PHASES``, all of them) are the
single-process ones with backward split in two, plus the wait at the end-of-step barrier:

    data + h2d + forward + loss + backward + exposed_communication + optimizer (+ trainer)
    + wait + other = the step's wall time

``backward`` is backward's compute; ``exposed_communication`` is the part of the gradient
all-reduce that backward could not hide (the time from backward's last gradient to the last
bucket's completion, measured by the communication recorder). ``communication`` is the whole time
inside collectives; most of it overlaps backward, so it is shown beside the phases, never added.
"""
from __future__ import annotations

import statistics
from typing import Any

from layerscope.core.phases import STEP_PHASES, shown

ADDITIVE = tuple(p.name for p in STEP_PHASES)  # core.phases: every phase is additive
OVERLAPPING = ("communication",)
# a rank is slow because of its own work; waiting for the others and the communication it shares
# with them are where the fast ranks pay for the slow one
NOT_A_CAUSE = ("wait", "exposed_communication", "communication")


def split_step(phases: dict[str, float], wait_s: float, communication_s: float,
               exposed_s: float) -> tuple[dict[str, float], float]:
    """One step's phases (from PhaseTimer) with backward's exposed communication split out and
    the barrier wait and total communication added; returns (phases, the step's wall time)."""
    out = dict(phases)
    backward = out.get("backward", 0.0)
    exposed = min(max(exposed_s, 0.0), backward)
    out["backward"] = backward - exposed
    out["exposed_communication"] = exposed
    out["wait"] = wait_s
    out["communication"] = communication_s
    wall = sum(out.get(p, 0.0) for p in ADDITIVE)
    return {p: out.get(p, 0.0) for p in ADDITIVE + OVERLAPPING}, wall


def rank_entry(rank: int, breakdown: dict[str, Any]) -> dict[str, Any]:
    """One rank's JSON entry from its PhaseTotals.to_dict(): seconds per step, and its
    samples and measured wall time (for the job's throughput)."""
    steps = breakdown["steps"] or 0
    per_step = {p: (s / steps if steps else 0.0) for p, s in breakdown["seconds"].items()}
    wall = breakdown["wall_s"] or 0.0
    samples = breakdown.get("samples") or 0
    return {"rank": rank, "steps": steps,
            "step_s": wall / steps if steps else 0.0,
            "samples": samples, "wall_s": wall,
            "throughput_per_s": samples / wall if wall else None,
            "phases": shown({p: per_step.get(p, 0.0) for p in ADDITIVE + OVERLAPPING})}


def job_throughput(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's throughput: every rank's samples over the job's measured time, the longest
    rank's measured steps (the ranks run at the same time, so the job took at least that
    long). Never above the sum of the ranks' own samples/s, and equal to it when the ranks'
    measured times are equal (data-parallel ranks in step)."""
    samples = sum(e.get("samples") or 0 for e in entries)
    wall = max((e.get("wall_s") or 0.0 for e in entries), default=0.0)
    return {"processes": len(entries), "samples": samples, "wall_s": wall,
            "throughput_per_s": samples / wall if wall else None}


def busy_seconds(entry: dict[str, Any]) -> float:
    """A rank's own work per step: its step without the time it waited for the others."""
    return entry["step_s"] - sum(entry["phases"].get(p, 0.0) for p in NOT_A_CAUSE
                                 if p in ADDITIVE)


def waits_measured(ranks: list[dict[str, Any]]) -> bool:
    """Whether every rank's time waiting for the others (its barrier wait, its exposed
    communication) was measured: only then does the slowest rank's own work say who the
    others waited for."""
    return all(any(p in r["phases"] for p in NOT_A_CAUSE) for r in ranks)


def straggler(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The slowest rank, its excess over the median, and the phase it comes from.

    Data-parallel ranks meet in every step's all-reduce and barrier, so their step times come
    out nearly equal: the fast ranks spend the difference waiting (``wait``, exposed
    communication). The slowest rank is therefore the one with the most *own work* per step
    (``busy_seconds``); its excess is over the median of that, and its phase is the one where
    it exceeds the median of that phase the most.

    None for one rank, and where a rank's wait for the others was not measured (a watched
    script: its steps hold the waits inside backward's all-reduce, so the slowest step is no
    sign of the slowest rank)."""
    if len(ranks) < 2 or not waits_measured(ranks):
        return None
    busy = {r["rank"]: busy_seconds(r) for r in ranks}
    median = statistics.median(busy.values())
    slow = max(ranks, key=lambda r: (busy[r["rank"]], -r["rank"]))
    excess = {p: slow["phases"].get(p, 0.0)
              - statistics.median(r["phases"].get(p, 0.0) for r in ranks)
              for p in ADDITIVE if p not in NOT_A_CAUSE and p in slow["phases"]}
    phase = max(excess, key=lambda p: excess[p])
    mine = busy[slow["rank"]]
    return {"rank": slow["rank"], "step_s": slow["step_s"], "busy_s": mine,
            "median_busy_s": median, "excess_s": mine - median,
            "excess_pct": 100.0 * (mine - median) / median if median else 0.0,
            "phase": phase, "phase_excess_s": excess[phase]}


def merge_rank_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report for every rank of a watched script (``layerscope run --nproc-per-node``):
    rank 0's report (its phase table, its epochs) with every rank's entry and the job's
    throughput. A watched script's waits are not measured: no straggler is named. Processes
    that never formed a process group trained independently, and are reported so."""
    by_rank = sorted(reports, key=lambda d: d.get("rank") or 0)
    merged = dict(by_rank[0])
    entries = [rank_entry(d.get("rank") or 0, d["breakdown"]) for d in by_rank]
    for e, d in zip(entries, by_rank):
        # a watched script's phases: only the ones it measured (no wait, no communication)
        e["phases"] = {p: v for p, v in e["phases"].items() if p in d["breakdown"]["seconds"]}
        mfu = (d.get("efficiency") or {}).get("mfu")
        if mfu is not None:
            e["mfu"] = mfu  # per GPU: each rank's own steps against one device's peak
    n = len(by_rank)
    merged.update(world_size=max(n, merged.get("world_size") or 1), ranks=entries,
                  job=job_throughput(entries))
    s = straggler(entries)
    if s is not None:
        merged["straggler"] = s
    groups = [d["process_group"] for d in by_rank
              if (d.get("process_group") or {}).get("world_size", 1) > 1]
    config = dict(merged.get("config") or {})
    if groups:
        config["strategy"] = f"process group, {groups[0]['backend']}"
        note = (f"{n} processes in one process group: the phase table is rank 0's; every "
                "rank's is in the per-rank table")
    else:
        merged.pop("process_group", None)
        config["strategy"] = "independent"
        note = (f"{n} processes trained independently (none formed a process group: no "
                "gradients were exchanged, so this is no data-parallel run): the phase table "
                "is process 0's; every process's is in the per-process table")
    merged["config"] = config
    merged["notes"] = list(merged.get("notes") or []) + [note]
    return merged
